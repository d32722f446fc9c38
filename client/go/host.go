package gpud

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// FeatureHost is the welcome's feature name of host resources: Request's HostMemory, Pinned,
// CPUs and NUMA, the grant's host section, ResizeHostMemory and the status's host section.
const FeatureHost = "host"

// NUMA placements for Request.NUMA: which NUMA node a lease's CPUs come from.
const (
	// NUMAAny takes the CPUs of any node with room (the default, also "").
	NUMAAny = "any"
	// NUMANear takes them from the node of the lease's device; the request must ask for a
	// device part (VRAM or the compute slot), else the daemon refuses it with
	// ErrInvalidRequest.
	NUMANear = "near"
)

// NUMANode returns the NUMA placement of node n ("0", "1", …).
func NUMANode(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// numaWire checks a NUMA placement ("", "any", "near" or a node number; names in any case)
// and returns its wire form: nil for any (left out), "near", or {"node": n}.
func numaWire(s string) (interface{}, error) {
	t := strings.TrimSpace(s)
	switch {
	case t == "" || strings.EqualFold(t, NUMAAny):
		return nil, nil
	case strings.EqualFold(t, NUMANear):
		return NUMANear, nil
	}
	n, err := strconv.ParseUint(t, 10, 32)
	if err != nil {
		return nil, invalid("NUMA placement %q: give any, near, or a node number", s)
	}
	return map[string]uint32{"node": uint32(n)}, nil
}

// hostArgs is the wire form of a request's host resources.
type hostArgs struct {
	MemBytes    uint64      `json:"mem_bytes"`
	PinnedBytes uint64      `json:"pinned_bytes"`
	CPUs        uint32      `json:"cpus"`
	NUMA        interface{} `json:"numa,omitempty"`
}

// host returns the wire form of the request's host resources; nil when it asks for none.
func (r Request) host() (*hostArgs, error) {
	numa, err := numaWire(r.NUMA)
	if err != nil {
		return nil, err
	}
	if r.HostMemory == 0 && r.Pinned == 0 && r.CPUs == 0 && numa == nil {
		return nil, nil
	}
	return &hostArgs{MemBytes: r.HostMemory, PinnedBytes: r.Pinned, CPUs: r.CPUs, NUMA: numa}, nil
}

// HostGrant is the host resources a lease holds (docs/HOST.md).
type HostGrant struct {
	// MemBytes is the host memory reserved, in bytes (page-locked memory included).
	MemBytes uint64 `json:"mem_bytes"`
	// PinnedBytes is the page-locked host memory reserved, in bytes.
	PinnedBytes uint64 `json:"pinned_bytes"`
	// CPUs lists the CPUs granted, as the kernel numbers them, ascending: what
	// sched_setaffinity (or taskset) pins the lease's threads to.
	CPUs []uint32 `json:"cpus,omitempty"`
	// NUMANode is the CPUs' NUMA node; nil without CPUs.
	NUMANode *uint32 `json:"numa_node,omitempty"`
	// Parts lists the lease ids of the host parts (events about a part name its id; ending
	// one ends the whole lease).
	Parts []uint64 `json:"parts,omitempty"`
}

// HostStatus is the host's resources as gpud books them.
type HostStatus struct {
	// Memory is the host memory pool.
	Memory HostPoolStatus `json:"memory"`
	// Pinned is the page-locked memory pool.
	Pinned HostPoolStatus `json:"pinned"`
	// NUMA lists the CPUs of every NUMA node.
	NUMA []NUMAStatus `json:"numa"`
}

// HostPoolStatus is a host pool of bytes, counted like a device's memory.
type HostPoolStatus struct {
	// TotalBytes is what the host has (memory: MemTotal, or the configured size).
	TotalBytes uint64 `json:"total_bytes"`
	// HeadroomBytes is never handed out.
	HeadroomBytes uint64 `json:"headroom_bytes"`
	// UnmanagedBytes is used by processes that hold no host lease (memory only).
	UnmanagedBytes uint64 `json:"unmanaged_bytes"`
	// CapacityBytes is what leases may reserve: total − headroom − unmanaged.
	CapacityBytes uint64 `json:"capacity_bytes"`
	// ReservedBytes is reserved by leases.
	ReservedBytes uint64 `json:"reserved_bytes"`
	// Queued counts, per class, the requests waiting for the pool.
	Queued QueueCounts `json:"queued"`
}

// NUMAStatus is one NUMA node's CPUs.
type NUMAStatus struct {
	// Node is the node's number.
	Node uint32 `json:"node"`
	// CPUs lists its CPUs that gpud hands out (kernel numbers, ascending).
	CPUs []uint32 `json:"cpus"`
	// Granted lists those granted now.
	Granted []uint32 `json:"granted"`
	// Queued counts, per class, the requests waiting for its CPUs.
	Queued QueueCounts `json:"queued"`
}

// Resource says what a status row reserves.
type Resource string

// What status rows reserve.
const (
	// ResourceDevice: device memory and/or a compute slot (the wire leaves it out).
	ResourceDevice Resource = "device"
	// ResourceHostMemory: host memory.
	ResourceHostMemory Resource = "host_memory"
	// ResourcePinned: page-locked host memory.
	ResourcePinned Resource = "pinned"
	// ResourceCPUs: CPUs of one NUMA node.
	ResourceCPUs Resource = "cpus"
)

// HostRequest is the host resources a waiting request asks for (for a resize of host
// memory: the extra bytes).
type HostRequest struct {
	// MemBytes is the host memory asked for, in bytes.
	MemBytes uint64 `json:"mem_bytes"`
	// PinnedBytes is the page-locked memory asked for, in bytes.
	PinnedBytes uint64 `json:"pinned_bytes"`
	// CPUs is the number of CPUs asked for.
	CPUs uint32 `json:"cpus"`
	// NUMA is where they come from: "any", "near", or a node number (NUMANode).
	NUMA string `json:"-"`
}

// UnmarshalJSON reads the wire form, whose numa is "any", "near" or {"node": N}.
func (h *HostRequest) UnmarshalJSON(b []byte) error {
	var w struct {
		MemBytes    uint64          `json:"mem_bytes"`
		PinnedBytes uint64          `json:"pinned_bytes"`
		CPUs        uint32          `json:"cpus"`
		NUMA        json.RawMessage `json:"numa"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*h = HostRequest{MemBytes: w.MemBytes, PinnedBytes: w.PinnedBytes, CPUs: w.CPUs, NUMA: NUMAAny}
	if len(w.NUMA) == 0 || string(w.NUMA) == "null" {
		return nil
	}
	name, body, err := variant(w.NUMA)
	if err != nil {
		return fmt.Errorf("host numa: %v", err)
	}
	switch name {
	case NUMAAny, NUMANear:
		h.NUMA = name
	case "node":
		var n uint32
		if err := json.Unmarshal(body, &n); err != nil {
			return fmt.Errorf("host numa node: %v", err)
		}
		h.NUMA = NUMANode(n)
	default:
		return fmt.Errorf("unknown NUMA placement %q", name)
	}
	return nil
}
