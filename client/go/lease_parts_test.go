package gpud

import (
	"encoding/json"
	"testing"
)

// A grant of one device keeps its shape; a grant of several lists its parts.
func TestGrantsListTheirParts(t *testing.T) {
	var one LeaseInfo
	if err := json.Unmarshal([]byte(`{"lease":4,"device_uuid":"GPU-a","device_index":0,"cuda_visible_devices":"GPU-a"}`), &one); err != nil {
		t.Fatal(err)
	}
	if len(one.Parts) != 0 {
		t.Fatalf("a lease of one device has parts: %+v", one.Parts)
	}
	var two LeaseInfo
	text := `{"lease":4,"device_uuid":"GPU-a","device_index":0,"cuda_visible_devices":"GPU-a,GPU-b",
		"parts":[{"lease":4,"device_index":0,"device_uuid":"GPU-a","vram_bytes":1,"compute":false},
		{"lease":5,"device_index":1,"device_uuid":"GPU-b","vram_bytes":1,"compute":true}]}`
	if err := json.Unmarshal([]byte(text), &two); err != nil {
		t.Fatal(err)
	}
	if len(two.Parts) != 2 || two.Parts[1].Lease != 5 || two.Parts[1].DeviceUUID != "GPU-b" || !two.Parts[1].Compute {
		t.Fatalf("parts: %+v", two.Parts)
	}
}
