package gpud

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// hostConfig makes the test daemon book 16 GiB of host memory with no headroom (page-locked:
// half of it) and the machine's own NUMA nodes and CPUs.
var hostConfig = []string{"[host]", `memory = "16GiB"`, `memory_headroom = "0"`}

func hostStatus(t *testing.T, c *Client) *HostStatus {
	t.Helper()
	s := status(t, c)
	if s.Host == nil {
		t.Fatal("the daemon reports no host section")
	}
	return s.Host
}

func TestAHostOnlyLeaseNamesItsCPUs(t *testing.T) {
	d := startDaemon(t, "1x16GiB", hostConfig...)
	c := dial(t, d)
	if !c.Speaks(FeatureHost) {
		t.Fatalf("the welcome does not list %q: %v", FeatureHost, c.Features())
	}
	l, err := c.Acquire(timeout(t, 5*time.Second), Request{HostMemory: 4 * gib, CPUs: 1, Label: "synthesis"})
	if err != nil {
		t.Fatal(err)
	}
	if l.HostMemory() != 4*gib || l.Pinned() != 0 || len(l.CPUs()) != 1 {
		t.Fatalf("grant: %v %+v", l, l.Host())
	}
	n, ok := l.NUMANode()
	if !ok {
		t.Fatalf("CPUs without a NUMA node: %+v", l.Host())
	}
	var node *NUMAStatus
	nodes := hostStatus(t, c).NUMA
	for i := range nodes {
		if nodes[i].Node == n {
			node = &nodes[i]
		}
	}
	if node == nil || !containsAll(node.CPUs, l.CPUs()) || !equalCPUs(node.Granted, l.CPUs()) {
		t.Fatalf("CPUs %v are not node %d's (%+v)", l.CPUs(), n, node)
	}
	if l.DeviceUUID() != "" || l.CUDAVisibleDevices() != "" || l.VRAM() != 0 || l.Compute() {
		t.Fatalf("a host-only lease has a device: %+v", l.Info())
	}
	s := status(t, c)
	rows := map[Resource]LeaseStatus{}
	for _, r := range s.Leases {
		rows[r.Resource] = r
	}
	if len(rows) != 2 || rows[ResourceHostMemory].Host == nil || rows[ResourceHostMemory].Host.MemBytes != 4*gib ||
		rows[ResourceCPUs].Host == nil || !equalCPUs(rows[ResourceCPUs].Host.CPUs, l.CPUs()) {
		t.Fatalf("status rows: %+v", s.Leases)
	}
	if rows[ResourceHostMemory].Label != "synthesis" || rows[ResourceHostMemory].IsDevice() {
		t.Fatalf("host memory row: %+v", rows[ResourceHostMemory])
	}
	if s.Host.Memory.ReservedBytes != 4*gib {
		t.Fatalf("host status: %+v", s.Host)
	}
	if !strings.Contains(l.String(), "1 CPUs of NUMA node") {
		t.Fatalf("description: %s", l)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	h := hostStatus(t, c)
	for _, node := range h.NUMA {
		if len(node.Granted) != 0 {
			t.Fatalf("CPUs not freed: %+v", h.NUMA)
		}
	}
	if h.Memory.ReservedBytes != 0 {
		t.Fatalf("memory not freed: %+v", h.Memory)
	}
}

func TestALeaseCombinesADeviceWithHostAndPinnedMemory(t *testing.T) {
	d := startDaemon(t, "1x16GiB", hostConfig...)
	c := dial(t, d)
	l, err := c.Acquire(timeout(t, 5*time.Second), Request{VRAM: 2 * gib, Compute: true, HostMemory: 3 * gib, Pinned: gib})
	if err != nil {
		t.Fatal(err)
	}
	if l.VRAM() != 2*gib || !l.Compute() || l.DeviceUUID() == "" || l.HostMemory() != 3*gib || l.Pinned() != gib {
		t.Fatalf("grant: %+v", l.Info())
	}
	if _, ok := l.NUMANode(); ok || len(l.CPUs()) != 0 {
		t.Fatalf("CPUs nobody asked for: %+v", l.Host())
	}
	s := status(t, c)
	kinds := map[Resource]int{}
	for _, r := range s.Leases {
		kinds[r.Resource]++
	}
	if len(s.Leases) != 3 || kinds[""] != 1 || kinds[ResourceHostMemory] != 1 || kinds[ResourcePinned] != 1 {
		t.Fatalf("rows: %+v", s.Leases)
	}
	if s.Host.Memory.ReservedBytes != 3*gib || s.Host.Pinned.ReservedBytes != gib || s.Devices[0].ReservedBytes != 2*gib {
		t.Fatalf("books: %+v %+v", s.Host, s.Devices[0])
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	s = status(t, c)
	if len(s.Leases) != 0 || s.Host.Memory.ReservedBytes != 0 || s.Host.Pinned.ReservedBytes != 0 {
		t.Fatalf("not all freed: %+v %+v", s.Leases, s.Host)
	}
}

func TestHostRefusalsSayWhatWasWrong(t *testing.T) {
	d := startDaemon(t, "1x16GiB", hostConfig...)
	c := dial(t, d)
	ctx := timeout(t, 5*time.Second)
	_, err := c.Acquire(ctx, Request{CPUs: 1, NUMA: NUMANear})
	mustCode(t, err, CodeInvalidRequest)
	if !strings.Contains(err.Error(), "near") {
		t.Fatalf("the refusal does not say why: %v", err)
	}
	_, err = c.Acquire(ctx, Request{HostMemory: 32 * gib})
	mustCode(t, err, CodeNeverFits)
	plain, err := c.Acquire(ctx, Request{VRAM: gib})
	if err != nil {
		t.Fatal(err)
	}
	err = plain.ResizeHostMemory(ctx, gib)
	mustCode(t, err, CodeInvalidRequest)
	if !strings.Contains(err.Error(), "host memory") {
		t.Fatalf("the refusal does not say why: %v", err)
	}
	if s := status(t, c); len(s.Leases) != 1 || s.Leases[0].ID != plain.ID() {
		t.Fatalf("refusals changed the books: %+v", s.Leases)
	}
}

func TestHostLeasesThatDoNotFitTogetherAreSerialized(t *testing.T) {
	d := startDaemon(t, "1x16GiB", hostConfig...)
	a, b := dial(t, d), dial(t, d)
	first, err := a.Acquire(timeout(t, 5*time.Second), Request{HostMemory: 10 * gib})
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *Lease, 1)
	go func() {
		l, err := b.Acquire(timeout(t, 10*time.Second), Request{HostMemory: 10 * gib})
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	eventually(t, 5*time.Second, "the second request waits", func() bool { return len(status(t, a).Waiters) == 1 })
	w := status(t, a).Waiters[0]
	if w.Host == nil || w.Host.MemBytes != 10*gib || hostStatus(t, a).Memory.Queued.Total() != 1 {
		t.Fatalf("waiter: %+v", w)
	}
	select {
	case <-granted:
		t.Fatal("both were admitted")
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-granted:
		if l == nil || l.HostMemory() != 10*gib {
			t.Fatalf("second grant: %v", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not granted after the release")
	}
}

func TestResizeOfHostMemoryGrowsWaitsAndShrinks(t *testing.T) {
	d := startDaemon(t, "1x16GiB", hostConfig...)
	a, b := dial(t, d), dial(t, d)
	ctx := timeout(t, 10*time.Second)
	l, err := a.Acquire(ctx, Request{HostMemory: 4 * gib, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ResizeHostMemory(ctx, 8*gib); err != nil {
		t.Fatal(err)
	}
	if l.HostMemory() != 8*gib || l.VRAM() != 0 || len(l.CPUs()) != 1 || l.Info().Host.MemBytes != 8*gib {
		t.Fatalf("after the grow: %+v", l.Info())
	}
	other, err := b.Acquire(ctx, Request{HostMemory: 6 * gib})
	if err != nil {
		t.Fatal(err)
	}
	// 12 + 6 > 16: the grow times out and the lease keeps its size.
	mustCode(t, l.ResizeHostMemoryTimeout(ctx, 12*gib, 300*time.Millisecond), CodeTimedOut)
	if l.HostMemory() != 8*gib {
		t.Fatalf("a grow that timed out changed the size: %d", l.HostMemory())
	}
	grew := make(chan error, 1)
	go func() { grew <- l.ResizeHostMemory(ctx, 12*gib) }()
	eventually(t, 5*time.Second, "the grow waits", func() bool { return len(status(t, b).Waiters) == 1 })
	w := status(t, b).Waiters[0]
	if w.GrowsLease == nil || *w.GrowsLease != l.ID() || w.Host == nil || w.Host.MemBytes != 4*gib {
		t.Fatalf("waiting grow: %+v", w)
	}
	// A shrink is immediate, and makes room for the grow.
	if err := other.ResizeHostMemory(ctx, 2*gib); err != nil {
		t.Fatal(err)
	}
	if other.HostMemory() != 2*gib {
		t.Fatalf("after the shrink: %d", other.HostMemory())
	}
	select {
	case err := <-grew:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the grow did not happen after the shrink")
	}
	if l.HostMemory() != 12*gib || hostStatus(t, a).Memory.ReservedBytes != 14*gib {
		t.Fatalf("after both: %d, %+v", l.HostMemory(), hostStatus(t, a).Memory)
	}
	// A resize that the context ends is withdrawn and leaves the size.
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = l.ResizeHostMemory(short, 15*gib)
	if !errors.Is(err, ErrCancelled) {
		t.Fatalf("a grow whose context ended: %v", err)
	}
	if l.HostMemory() != 12*gib {
		t.Fatalf("a withdrawn grow changed the size: %d", l.HostMemory())
	}
}

func TestADaemonThatBooksNoHostResourcesIsNotAsked(t *testing.T) {
	d := startDaemon(t, "1x16GiB", "[host]", "enabled = false")
	c := dial(t, d)
	if c.Speaks(FeatureHost) {
		t.Fatalf("features: %v", c.Features())
	}
	_, err := c.Acquire(timeout(t, 5*time.Second), Request{VRAM: gib, HostMemory: gib})
	mustCode(t, err, CodeInvalidRequest)
	if s := status(t, c); s.Host != nil || len(s.Leases) != 0 {
		t.Fatalf("status: %+v", s)
	}
}

func containsAll(set, sub []uint32) bool {
	in := map[uint32]bool{}
	for _, c := range set {
		in[c] = true
	}
	for _, c := range sub {
		if !in[c] {
			return false
		}
	}
	return true
}

func equalCPUs(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
