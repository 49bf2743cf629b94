package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// LoadDevices reads the per-node devices file at path and returns the devices of driverName, in file order.
//
// The file is YAML or JSON with one or more documents, each a resource.k8s.io/v1 ResourceSlice or a List
// of them (kind List or ResourceSliceList, `items`): the shape `kubectl get resourceslices -o yaml` prints
// and the offline snapshots of accelpolicy read. Only spec.devices is taken from a slice whose spec.driver
// is driverName (a slice of another driver is skipped); spec.nodeName and spec.pool are the live node's,
// set by the driver when it publishes. Fields are decoded strictly: an unknown field is an error naming it.
//
// Errors name the file and, where there is one, the document, slice and device: a document of another
// kind, a device name that is not a DNS label, a device name given twice, no device for driverName.
func LoadDevices(path, driverName string) ([]resourceapi.Device, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseDevices(path, data, driverName)
}

// ParseDevices is LoadDevices on the file's content (source names it in errors).
func ParseDevices(source string, data []byte, driverName string) ([]resourceapi.Device, error) {
	var slices []resourceapi.ResourceSlice
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || isOnlyComments(raw) {
			continue
		}
		got, err := decodeDocument(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		slices = append(slices, got...)
	}
	var devices []resourceapi.Device
	seen := map[string]string{}
	for i, slice := range slices {
		where := slice.Name
		if where == "" {
			where = fmt.Sprintf("slice %d", i+1)
		}
		if slice.Spec.Driver != driverName {
			continue
		}
		for _, device := range slice.Spec.Devices {
			if errs := validation.IsDNS1123Label(device.Name); len(errs) > 0 {
				return nil, fmt.Errorf("%s: %s: device %q: name: %v", source, where, device.Name, errs)
			}
			if first, dup := seen[device.Name]; dup {
				return nil, fmt.Errorf("%s: %s: device %q: Duplicate value: already given in %s", source, where, device.Name, first)
			}
			seen[device.Name] = where
			devices = append(devices, device)
		}
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("%s: no device of driver %q (spec.driver of its ResourceSlices)", source, driverName)
	}
	return devices, nil
}

func isOnlyComments(raw []byte) bool {
	for _, line := range bytes.Split(raw, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// decodeDocument: one YAML document, a ResourceSlice or a List of them.
func decodeDocument(raw []byte) ([]resourceapi.ResourceSlice, error) {
	var meta typeMeta
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		return nil, err
	}
	switch meta.Kind {
	case "ResourceSlice":
		slice, err := decodeSlice(raw)
		if err != nil {
			return nil, err
		}
		return []resourceapi.ResourceSlice{slice}, nil
	case "List", "ResourceSliceList":
		var list struct {
			typeMeta `json:",inline"`
			Metadata json.RawMessage   `json:"metadata,omitempty"`
			Items    []json.RawMessage `json:"items"`
		}
		if err := yaml.UnmarshalStrict(raw, &list); err != nil {
			return nil, err
		}
		var out []resourceapi.ResourceSlice
		for i, item := range list.Items {
			var itemMeta typeMeta
			if err := json.Unmarshal(item, &itemMeta); err != nil {
				return nil, fmt.Errorf("items[%d]: %w", i, err)
			}
			if itemMeta.Kind != "" && itemMeta.Kind != "ResourceSlice" {
				return nil, fmt.Errorf("items[%d]: kind %q is not ResourceSlice", i, itemMeta.Kind)
			}
			slice, err := decodeSlice(item)
			if err != nil {
				return nil, fmt.Errorf("items[%d]: %w", i, err)
			}
			out = append(out, slice)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("kind %q (apiVersion %q) is not ResourceSlice or a List of them", meta.Kind, meta.APIVersion)
	}
}

func decodeSlice(raw []byte) (resourceapi.ResourceSlice, error) {
	var slice resourceapi.ResourceSlice
	if err := yaml.UnmarshalStrict(raw, &slice); err != nil {
		return slice, err
	}
	if slice.APIVersion != "" && slice.APIVersion != resourceapi.SchemeGroupVersion.String() {
		return slice, fmt.Errorf("ResourceSlice %q: apiVersion %q is not %s", slice.Name, slice.APIVersion,
			resourceapi.SchemeGroupVersion.String())
	}
	return slice, nil
}
