package gpud

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// wireJSON is the acquire a request sends, as JSON text.
func wireJSON(t *testing.T, r Request) string {
	t.Helper()
	args, err := r.wire(nil)
	if err != nil {
		t.Fatalf("wire %+v: %v", r, err)
	}
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHostResourcesGoOnTheWireOnlyWhenAsked(t *testing.T) {
	t.Setenv("GPUD_BUDGET", "")
	if got := wireJSON(t, Request{VRAM: gib}); strings.Contains(got, "host") {
		t.Fatalf("a device request sends host resources: %s", got)
	}
	got := wireJSON(t, Request{HostMemory: 8 * gib, Pinned: gib, CPUs: 4})
	if !strings.Contains(got, `"host":{"mem_bytes":8589934592,"pinned_bytes":1073741824,"cpus":4}`) {
		t.Fatalf("host-only request: %s", got)
	}
	cases := map[string]string{
		"":      `"cpus":2}`,
		"any":   `"cpus":2}`,
		" ANY ": `"cpus":2}`,
		"near":  `"cpus":2,"numa":"near"}`,
		"Near":  `"cpus":2,"numa":"near"}`,
		"1":     `"cpus":2,"numa":{"node":1}}`,
		"0":     `"cpus":2,"numa":{"node":0}}`,
	}
	for numa, want := range cases {
		got := wireJSON(t, Request{VRAM: gib, CPUs: 2, NUMA: numa})
		if !strings.Contains(got, want) {
			t.Errorf("numa %q: %s, want …%s", numa, got, want)
		}
	}
	if got := wireJSON(t, Request{Compute: true, NUMA: NUMANode(3)}); !strings.Contains(got, `"numa":{"node":3}`) {
		t.Errorf("a NUMA placement alone is still sent (the daemon judges it): %s", got)
	}
}

func TestHostRequestArgumentsAreChecked(t *testing.T) {
	for _, numa := range []string{"far", "-1", "4294967296", "node1", "1.5"} {
		_, err := Request{CPUs: 1, NUMA: numa}.wire(nil)
		mustCode(t, err, CodeInvalidRequest)
		if !strings.Contains(err.Error(), "NUMA placement") {
			t.Errorf("numa %q: the error does not name what was wrong: %v", numa, err)
		}
	}
	// Host resources alone are a request; nothing at all is not.
	for _, r := range []Request{{HostMemory: 1}, {Pinned: 1}, {CPUs: 1}} {
		if _, err := r.wire(nil); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	_, err := Request{}.wire(nil)
	mustCode(t, err, CodeInvalidRequest)
}

// A daemon that does not list the host feature would not understand the field: the client
// refuses before sending anything.
func TestHostResourcesNeedTheHostFeature(t *testing.T) {
	c := &Client{}
	_, err := c.Acquire(context.Background(), Request{HostMemory: gib})
	mustCode(t, err, CodeInvalidRequest)
	if !strings.Contains(err.Error(), `"host"`) {
		t.Fatalf("the error does not say what the daemon lacks: %v", err)
	}
	l := newLease(c, LeaseInfo{ID: 3, Host: &HostGrant{MemBytes: gib}})
	mustCode(t, l.ResizeHostMemory(context.Background(), 2*gib), CodeInvalidRequest)
	if l.HostMemory() != gib {
		t.Fatalf("a refused resize changed the size: %d", l.HostMemory())
	}
	c.features = []string{"queued", FeatureHost}
	if !c.Speaks(FeatureHost) || c.Speaks("mps") {
		t.Fatalf("Speaks: %v", c.Features())
	}
}

func TestHostResizeWireForm(t *testing.T) {
	bytes := uint64(3 * gib)
	b, err := json.Marshal(map[string]resizeArgs{"resize": {Lease: 7, HostMemBytes: &bytes}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"resize":{"lease":7,"vram_bytes":0,"host_mem_bytes":3221225472}}`; string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	b, _ = json.Marshal(map[string]resizeArgs{"resize": {Lease: 7, VRAMBytes: 5}})
	if strings.Contains(string(b), "host") {
		t.Fatalf("a VRAM resize names host memory: %s", b)
	}
}

func TestHostGrantsAreRead(t *testing.T) {
	var info LeaseInfo
	text := `{"lease":9,"device_uuid":"","device_index":0,"device_name":"","vram_bytes":0,
		"compute":false,"class":"normal","cuda_visible_devices":"","token":"x",
		"host":{"mem_bytes":4096,"pinned_bytes":1024,"cpus":[2,3],"numa_node":1,"parts":[9,10,11]}}`
	if err := json.Unmarshal([]byte(text), &info); err != nil {
		t.Fatal(err)
	}
	l := newLease(&Client{}, info)
	if l.HostMemory() != 4096 || l.Pinned() != 1024 || !reflect.DeepEqual(l.CPUs(), []uint32{2, 3}) {
		t.Fatalf("host grant: mem %d pinned %d cpus %v", l.HostMemory(), l.Pinned(), l.CPUs())
	}
	if n, ok := l.NUMANode(); !ok || n != 1 {
		t.Fatalf("NUMA node %d %v", n, ok)
	}
	if h := l.Host(); !reflect.DeepEqual(h.Parts, []uint64{9, 10, 11}) {
		t.Fatalf("parts %v", h.Parts)
	}
	// What Host and CPUs return are copies, and Info has the size of the last resize.
	l.CPUs()[0] = 99
	l.Host().CPUs[1] = 99
	l.setHostMem(8192)
	if got := l.Info().Host; got.MemBytes != 8192 || !reflect.DeepEqual(got.CPUs, []uint32{2, 3}) {
		t.Fatalf("info after a resize: %+v", got)
	}
	if s := l.String(); !strings.Contains(s, "host 8.0 KiB (1.0 KiB pinned), 2 CPUs of NUMA node 1") || strings.Contains(s, "GPU") {
		t.Fatalf("a host lease's description: %q", s)
	}
	// A lease without host resources has none.
	plain := newLease(&Client{}, LeaseInfo{ID: 1, DeviceUUID: "GPU-a", VRAM: gib})
	if plain.HostMemory() != 0 || plain.CPUs() != nil || plain.Info().Host != nil {
		t.Fatalf("a device lease has host resources: %+v", plain.Info())
	}
	if _, ok := plain.NUMANode(); ok {
		t.Fatal("a lease without CPUs has a NUMA node")
	}
	if s := plain.String(); s != "lease 1: 1.0 GiB on GPU 0 (GPU-a), " {
		t.Fatalf("a device lease's description changed: %q", s)
	}
}

func TestStatusReadsTheHostSection(t *testing.T) {
	text := `{"daemon":{"version":"0.1.0","pid":1,"uptime_ms":1,"sessions":1,"backend":"simulated"},
		"devices":[],
		"leases":[{"id":4,"device":"host","device_index":0,"vram_bytes":0,"compute":false,"class":"normal",
			"pid":1,"uid":0,"process":"p","session":1,"held_ms":1,"yield_requested":false,
			"resource":"host_memory","host":{"mem_bytes":4096,"pinned_bytes":0}},
			{"id":5,"device":"numa0","device_index":0,"vram_bytes":0,"compute":false,"class":"normal",
			"pid":1,"uid":0,"process":"p","session":1,"held_ms":1,"yield_requested":false,
			"resource":"cpus","host":{"mem_bytes":0,"pinned_bytes":0,"cpus":[0,1],"numa_node":0}},
			{"id":6,"device":"GPU-a","device_index":0,"vram_bytes":1,"compute":false,"class":"normal",
			"pid":1,"uid":0,"process":"p","session":1,"held_ms":1,"yield_requested":false}],
		"waiters":[{"session":2,"request":1,"pid":2,"class":"high","device":"any","vram_bytes":0,
			"compute":false,"grows_lease":null,"waited_ms":5,"host":{"mem_bytes":1,"pinned_bytes":0,"cpus":2,"numa":{"node":1}}},
			{"session":2,"request":2,"pid":2,"class":"high","device":"any","vram_bytes":0,
			"compute":false,"grows_lease":null,"waited_ms":5,"host":{"cpus":1,"numa":"near"}}],
		"host":{"memory":{"total_bytes":100,"headroom_bytes":10,"unmanaged_bytes":5,"capacity_bytes":85,
			"reserved_bytes":4096,"queued":{"high":1}},
			"pinned":{"total_bytes":50,"headroom_bytes":0,"unmanaged_bytes":0,"capacity_bytes":50,"reserved_bytes":0},
			"numa":[{"node":0,"cpus":[0,1,2,3],"granted":[0,1],"queued":{}}]}}`
	var s Status
	if err := json.Unmarshal([]byte(text), &s); err != nil {
		t.Fatal(err)
	}
	if s.Host == nil || s.Host.Memory.CapacityBytes != 85 || s.Host.Memory.Queued.High != 1 ||
		s.Host.Pinned.TotalBytes != 50 || len(s.Host.NUMA) != 1 ||
		!reflect.DeepEqual(s.Host.NUMA[0].Granted, []uint32{0, 1}) {
		t.Fatalf("host status: %+v", s.Host)
	}
	if s.Leases[0].Resource != ResourceHostMemory || s.Leases[0].IsDevice() || s.Leases[0].Host.MemBytes != 4096 {
		t.Fatalf("host memory row: %+v", s.Leases[0])
	}
	if s.Leases[1].Resource != ResourceCPUs || *s.Leases[1].Host.NUMANode != 0 || len(s.Leases[1].Host.CPUs) != 2 {
		t.Fatalf("cpus row: %+v", s.Leases[1])
	}
	if !s.Leases[2].IsDevice() || s.Leases[2].Host != nil {
		t.Fatalf("device row: %+v", s.Leases[2])
	}
	if w := s.Waiters[0].Host; w == nil || w.MemBytes != 1 || w.CPUs != 2 || w.NUMA != "1" {
		t.Fatalf("waiter host: %+v", w)
	}
	if w := s.Waiters[1].Host; w == nil || w.NUMA != NUMANear {
		t.Fatalf("waiter host: %+v", w)
	}
	var old Status
	if err := json.Unmarshal([]byte(`{"daemon":{},"devices":[],"leases":[],"waiters":[]}`), &old); err != nil || old.Host != nil {
		t.Fatalf("an older daemon's status: %+v %v", old.Host, err)
	}
	var bad HostRequest
	if err := json.Unmarshal([]byte(`{"numa":"far"}`), &bad); err == nil {
		t.Fatal("an unknown NUMA placement is read")
	}
}
