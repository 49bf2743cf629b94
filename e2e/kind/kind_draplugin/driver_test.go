package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

const nvidia = "gpu.nvidia.com"

func TestKindNodeFile(t *testing.T) {
	devices, err := LoadDevices("nodes/node-a10g-dra.yaml", nvidia)
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 1 || devices[0].Name != "gpu-0" {
		t.Fatalf("devices: %+v", devices)
	}
	attrs := devices[0].Attributes
	for name, want := range map[resourceapi.QualifiedName]string{"type": "gpu", "productName": "NVIDIA A10G",
		"uuid": "GPU-5b2f7c1e-8a3d-4e6b-b1f0-2d9c4a7e6f13"} {
		if got := attrs[name].StringValue; got == nil || *got != want {
			t.Errorf("attribute %s: got %v, want %q", name, got, want)
		}
	}
	if got := attrs["cudaComputeCapability"].VersionValue; got == nil || *got != "8.6.0" {
		t.Errorf("cudaComputeCapability: %v", got)
	}
	memory := devices[0].Capacity["memory"].Value
	if want := resource.MustParse("23028Mi"); memory.Cmp(want) != 0 {
		t.Errorf("memory: %s", memory.String())
	}
}

func TestParseDevicesShapes(t *testing.T) {
	list := `apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: other}
  spec: {driver: gpu.amd.com, nodeName: n, pool: {name: n, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}]}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: ours}
  spec: {driver: gpu.nvidia.com, nodeName: n, pool: {name: n, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}, {name: gpu-1}]}
---
# a second document
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: more}
spec: {driver: gpu.nvidia.com, nodeName: n, pool: {name: n, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-2}]}
`
	devices, err := ParseDevices("list.yaml", []byte(list), nvidia)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devices {
		names = append(names, d.Name)
	}
	if !reflect.DeepEqual(names, []string{"gpu-0", "gpu-1", "gpu-2"}) {
		t.Fatalf("names: %v (the AMD slice must be skipped)", names)
	}
}

func TestParseDevicesErrors(t *testing.T) {
	slice := func(devices string) string {
		return "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec:\n  driver: gpu.nvidia.com\n  devices: " + devices + "\n"
	}
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown field": {slice("[{name: gpu-0, atributes: {}}]"), `unknown field "atributes"`},
		"duplicate":     {slice("[{name: gpu-0}, {name: gpu-0}]"), `device "gpu-0": Duplicate value`},
		"bad name":      {slice("[{name: GPU_0}]"), `device "GPU_0": name:`},
		"no device":     {slice("[]"), `no device of driver "gpu.nvidia.com"`},
		"other kind":    {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", `document 1: kind "ConfigMap" (apiVersion "v1") is not ResourceSlice`},
		"old version":   {strings.Replace(slice("[{name: gpu-0}]"), "resource.k8s.io/v1", "resource.k8s.io/v1beta1", 1), `apiVersion "resource.k8s.io/v1beta1" is not resource.k8s.io/v1`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseDevices("f.yaml", []byte(tc.doc), nvidia)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "f.yaml: ") {
				t.Fatalf("error %v; want one starting f.yaml: and containing %q", err, tc.want)
			}
		})
	}
}

func testDriver(t *testing.T) *Driver {
	devices, err := LoadDevices("nodes/node-a10g-dra.yaml", nvidia)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]resourceapi.Device{}
	for _, d := range devices {
		byName[d.Name] = d
	}
	return &Driver{Name: nvidia, Node: "kind-worker4", Devices: byName, ClaimsDir: t.TempDir()}
}

func claim(name string, uid types.UID, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid}}
	if results != nil {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	}
	return c
}

func result(pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: nvidia, Pool: pool, Device: device}
}

func TestPrepareRecordsAndRefuses(t *testing.T) {
	d := testDriver(t)
	ctx := context.Background()
	a := claim("a", "uid-a", result("kind-worker4", "gpu-0"))
	got, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{a})
	if err != nil {
		t.Fatal(err)
	}
	want := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{{Requests: []string{"gpu"}, PoolName: "kind-worker4", DeviceName: "gpu-0"}}}
	if !reflect.DeepEqual(got["uid-a"], want) {
		t.Fatalf("prepare a: %+v", got)
	}
	var record PreparedClaim
	data, err := os.ReadFile(filepath.Join(d.ClaimsDir, "uid-a.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &record); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(record, PreparedClaim{Namespace: "default", Name: "a", UID: "uid-a", Devices: []PreparedDevice{
		{Request: "gpu", Pool: "kind-worker4", Device: "gpu-0", UUID: "GPU-5b2f7c1e-8a3d-4e6b-b1f0-2d9c4a7e6f13"}}}) {
		t.Fatalf("record: %+v", record)
	}
	// idempotent: the kubelet may ask again
	if again, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{a}); again["uid-a"].Err != nil {
		t.Fatalf("prepare a again: %v", again["uid-a"].Err)
	}

	for name, tc := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		"busy":        {claim("b", "uid-b", result("kind-worker4", "gpu-0")), `device "gpu-0" is already prepared for ResourceClaim default/a (uid uid-a)`},
		"other pool":  {claim("c", "uid-c", result("kind-worker", "gpu-0")), `allocated device kind-worker/gpu-0, not from this node's pool "kind-worker4"`},
		"unknown":     {claim("e", "uid-e", result("kind-worker4", "gpu-7")), `allocated device "gpu-7", which driver gpu.nvidia.com does not publish on node kind-worker4`},
		"unallocated": {claim("f", "uid-f"), "ResourceClaim default/f is not allocated"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{tc.claim})
			if err != nil {
				t.Fatal(err)
			}
			if e := got[tc.claim.UID].Err; e == nil || !strings.Contains(e.Error(), tc.want) {
				t.Fatalf("error %v, want %q", e, tc.want)
			}
			if _, err := os.Stat(filepath.Join(d.ClaimsDir, string(tc.claim.UID)+".json")); !os.IsNotExist(err) {
				t.Fatalf("a refused claim was recorded: %v", err)
			}
		})
	}

	// unprepare frees the device; unpreparing again (or a claim never prepared) is not an error
	for i := 0; i < 2; i++ {
		out, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "default", Name: "a"}, UID: "uid-a"}})
		if err != nil || out["uid-a"] != nil {
			t.Fatalf("unprepare %d: %v %v", i, err, out)
		}
	}
	b := claim("b", "uid-b", result("kind-worker4", "gpu-0"))
	if got, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{b}); got["uid-b"].Err != nil {
		t.Fatalf("prepare b after a was unprepared: %v", got["uid-b"].Err)
	}
}
