package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// PreparedClaim is what the driver records for a claim it prepared: one JSON file per claim UID in its
// claims directory (<plugin data dir>/claims/<uid>.json on the node), removed when the claim is
// unprepared. It is the stand-in's whole "device setup": no device node, no CDI spec.
type PreparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	UID       types.UID        `json:"uid"`
	Devices   []PreparedDevice `json:"devices"`
}

// PreparedDevice is one allocation result of a prepared claim: the request it serves, the pool and
// device (as the scheduler allocated them) and the device's `uuid` attribute when it has one.
type PreparedDevice struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	UUID    string `json:"uuid,omitempty"`
}

// Driver is the stand-in's kubeletplugin.DRAPlugin: it prepares claims allocated from the devices it
// publishes for its node, refusing a device another claim holds (the driver is the last line of
// defence against double use, as the DRAPlugin contract asks), and records them under ClaimsDir.
type Driver struct {
	Name      string                        // the driver name, e.g. gpu.nvidia.com
	Node      string                        // the node name = the pool name it publishes
	Devices   map[string]resourceapi.Device // by device name
	ClaimsDir string
	// Fatal is called for a background error that retrying cannot fix (the helper's gRPC servers).
	Fatal func(error)

	mu sync.Mutex
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: per claim, every allocation result of this
// driver must name this node's pool and a published device that no other prepared claim holds; the
// claim is then recorded (idempotent: preparing it again rewrites the same record).
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	logger := klog.FromContext(ctx)
	held, err := d.prepared()
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		record, devices, err := d.prepareOne(claim, held)
		if err != nil {
			logger.Info("prepare refused", "claim", klog.KObj(claim), "uid", claim.UID, "err", err.Error())
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		if err := d.write(record); err != nil {
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		for _, dev := range record.Devices {
			held[dev.Device] = record
		}
		logger.Info("prepared", "claim", klog.KObj(claim), "uid", claim.UID, "devices", record.Devices)
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices}
	}
	return out, nil
}

func (d *Driver) prepareOne(claim *resourceapi.ResourceClaim, held map[string]PreparedClaim) (PreparedClaim, []kubeletplugin.Device, error) {
	record := PreparedClaim{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	if claim.Status.Allocation == nil {
		return record, nil, fmt.Errorf("ResourceClaim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	var devices []kubeletplugin.Device
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != d.Name {
			continue
		}
		if result.Pool != d.Node {
			return record, nil, fmt.Errorf("ResourceClaim %s/%s: request %q is allocated device %s/%s, not from this node's pool %q",
				claim.Namespace, claim.Name, result.Request, result.Pool, result.Device, d.Node)
		}
		device, ok := d.Devices[result.Device]
		if !ok {
			return record, nil, fmt.Errorf("ResourceClaim %s/%s: request %q is allocated device %q, which driver %s does not publish on node %s",
				claim.Namespace, claim.Name, result.Request, result.Device, d.Name, d.Node)
		}
		if other, busy := held[result.Device]; busy && other.UID != claim.UID {
			return record, nil, fmt.Errorf("ResourceClaim %s/%s: device %q is already prepared for ResourceClaim %s/%s (uid %s)",
				claim.Namespace, claim.Name, result.Device, other.Namespace, other.Name, other.UID)
		}
		prepared := PreparedDevice{Request: result.Request, Pool: result.Pool, Device: result.Device}
		if uuid := device.Attributes["uuid"].StringValue; uuid != nil {
			prepared.UUID = *uuid
		}
		record.Devices = append(record.Devices, prepared)
		devices = append(devices, kubeletplugin.Device{Requests: []string{result.Request}, PoolName: result.Pool, DeviceName: result.Device})
	}
	if len(record.Devices) == 0 {
		return record, nil, fmt.Errorf("ResourceClaim %s/%s has no device of driver %s", claim.Namespace, claim.Name, d.Name)
	}
	return record, devices, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: the claims' records are removed; a claim
// with no record (never prepared here, or unprepared already) is not an error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := os.Remove(d.recordPath(claim.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		if err == nil {
			klog.FromContext(ctx).Info("unprepared", "claim", claim.String())
		}
		out[claim.UID] = err
	}
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: every error is logged; one the helper does not mark
// recoverable (its gRPC servers failing) ends the driver through Fatal.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.Fatal != nil {
		d.Fatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: the stand-in has no device health to report.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (d *Driver) recordPath(uid types.UID) string {
	return filepath.Join(d.ClaimsDir, string(uid)+".json")
}

func (d *Driver) write(record PreparedClaim) error {
	data, err := json.MarshalIndent(record, "", "  ")
	if err != nil {
		return err
	}
	tmp := d.recordPath(record.UID) + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, d.recordPath(record.UID))
}

// prepared reads the records of the claims prepared now: device name -> the claim holding it.
func (d *Driver) prepared() (map[string]PreparedClaim, error) {
	entries, err := os.ReadDir(d.ClaimsDir)
	if err != nil {
		return nil, err
	}
	held := map[string]PreparedClaim{}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(d.ClaimsDir, name))
		if err != nil {
			return nil, err
		}
		var record PreparedClaim
		if err := json.Unmarshal(data, &record); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(d.ClaimsDir, name), err)
		}
		for _, dev := range record.Devices {
			held[dev.Device] = record
		}
	}
	return held, nil
}
