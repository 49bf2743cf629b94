// Command kind-dra-plugin is the DRA driver stand-in of accelpolicy's kind walkthrough (docs/tasks/e2e.md "The offline kind cluster").
//
// It is test machinery, not part of the product. On one kind node it publishes, under a real driver
// name (gpu.nvidia.com by default), the devices of a per-node file as that node's ResourceSlices, through
// the resourceslice controller of k8s.io/dynamic-resource-allocation's kubeletplugin helper; it registers
// with the node's kubelet (plugins_registry) and serves the DRA gRPC API there, so the kubelet asks it to
// prepare the ResourceClaims that the scheduler allocated from those devices. Preparing a claim records it
// in <plugin dir>/claims/<claim uid>.json; nothing reaches the container (no device node, no CDI spec:
// the node's containerd 1.6 has no CDI anyway).
//
//	kind-dra-plugin --devices FILE [--driver-name gpu.nvidia.com] [--node-name NODE] [--kubeconfig PATH]
//	kind-dra-plugin --devices FILE --print   # the ResourceSlice spec it would publish (JSON), and exit
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kind-dra-plugin:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("kind-dra-plugin", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kind-dra-plugin --devices FILE [flags]\n\n"+
			"The DRA driver stand-in of accelpolicy's kind walkthrough: publishes the devices of FILE (ResourceSlice\n"+
			"YAML; only spec.devices of the slices of --driver-name is used) as NODE's ResourceSlices and prepares\n"+
			"the claims allocated from them (recorded in <plugin dir>/claims/<uid>.json; no real device).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	devicesFile := fs.String("devices", "", "the node's devices: a ResourceSlice (resource.k8s.io/v1) YAML file or List (required)")
	driverName := fs.String("driver-name", "gpu.nvidia.com", "the DRA driver name to publish and serve")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME): the ResourceSlices' nodeName and pool")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: the in-cluster service account)")
	registrarDir := fs.String("registrar-dir", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	pluginDir := fs.String("plugin-dir", "", "the driver's data directory with dra.sock (default /var/lib/kubelet/plugins/<driver name>)")
	printOnly := fs.Bool("print", false, "print the ResourceSlice spec that would be published (JSON) and exit")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *devicesFile == "" {
		return errors.New("--devices is required (see --help)")
	}
	devices, err := LoadDevices(*devicesFile, *driverName)
	if err != nil {
		return err
	}
	if *nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if *printOnly {
		spec := resourceapi.ResourceSliceSpec{Driver: *driverName, NodeName: nodeName,
			Pool: resourceapi.ResourcePool{Name: *nodeName, ResourceSliceCount: 1}, Devices: devices}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(spec)
	}
	if *pluginDir == "" {
		*pluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, *driverName)
	}

	config, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	logger := klog.LoggerWithValues(klog.Background(), "driver", *driverName, "node", *nodeName)
	ctx = klog.NewContext(ctx, logger)

	claimsDir := filepath.Join(*pluginDir, "claims")
	if err := os.MkdirAll(claimsDir, 0o755); err != nil {
		return err
	}
	byName := make(map[string]resourceapi.Device, len(devices))
	for _, d := range devices {
		byName[d.Name] = d
	}
	driver := &Driver{Name: *driverName, Node: *nodeName, Devices: byName, ClaimsDir: claimsDir,
		Fatal: func(err error) { cancel(err) }}
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(*driverName),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(*registrarDir),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return fmt.Errorf("start the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		*nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		return fmt.Errorf("publish ResourceSlices: %w", err)
	}
	names := make([]string, 0, len(devices))
	for _, d := range devices {
		names = append(names, d.Name)
	}
	logger.Info("serving", "devices", names, "pluginDir", *pluginDir, "registrarDir", *registrarDir)
	go logRegistration(ctx, helper)
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	logger.Info("stopping")
	return nil
}

// logRegistration logs the kubelet's answer to the plugin's registration once it has come (the tests wait
// for the line "registered with the kubelet").
func logRegistration(ctx context.Context, helper *kubeletplugin.Helper) {
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		if status := helper.RegistrationStatus(); status != nil {
			if status.PluginRegistered {
				klog.FromContext(ctx).Info("registered with the kubelet")
			} else {
				klog.FromContext(ctx).Info("the kubelet refused the registration", "error", status.Error)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
