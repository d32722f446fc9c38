package gpud

import "encoding/json"

// Status is the daemon's state as the status request returns it (and `gpudctl status --json`
// prints it).
type Status struct {
	// Daemon describes the daemon itself.
	Daemon DaemonInfo `json:"daemon"`
	// Devices lists every device, by index.
	Devices []DeviceStatus `json:"devices"`
	// Leases lists every granted lease, of every session.
	Leases []LeaseStatus `json:"leases"`
	// Waiters lists every waiting request, in the order they would be served.
	Waiters []WaiterStatus `json:"waiters"`
	// Host is the host's own resources (memory, page-locked memory, CPUs by NUMA node); nil
	// from daemons that do not book them (no FeatureHost).
	Host *HostStatus `json:"host,omitempty"`
}

// statusPage is a status reply that may be one page of several.
type statusPage struct {
	Status
	// More is the cursor of the next page; absent on the last.
	More json.RawMessage `json:"more,omitempty"`
}

// DaemonInfo describes the daemon.
type DaemonInfo struct {
	// Version is the daemon's version.
	Version string `json:"version"`
	// PID is the daemon's process id.
	PID uint32 `json:"pid"`
	// UptimeMS is the time since it started, in milliseconds.
	UptimeMS uint64 `json:"uptime_ms"`
	// Sessions counts the connected sessions.
	Sessions uint32 `json:"sessions"`
	// Backend is "nvml" or "simulated".
	Backend string `json:"backend"`
}

// DeviceStatus describes one device.
type DeviceStatus struct {
	// Index is gpud's index of the device.
	Index uint32 `json:"index"`
	// UUID is the device's UUID.
	UUID string `json:"uuid"`
	// Name is the product name.
	Name string `json:"name"`
	// TotalBytes is the device's memory.
	TotalBytes uint64 `json:"total_bytes"`
	// HeadroomBytes is the memory kept back from leases.
	HeadroomBytes uint64 `json:"headroom_bytes"`
	// UnmanagedBytes is the memory used by processes that hold no lease.
	UnmanagedBytes uint64 `json:"unmanaged_bytes"`
	// CapacityBytes is what leases may reserve: total − headroom − unmanaged.
	CapacityBytes uint64 `json:"capacity_bytes"`
	// ReservedBytes is the memory reserved by leases.
	ReservedBytes uint64 `json:"reserved_bytes"`
	// FreeBytes is capacity − reserved (0 when over-committed).
	FreeBytes uint64 `json:"free_bytes"`
	// Drained is true while the device takes no new grants.
	Drained bool `json:"drained"`
	// ComputeSlots is how many leases may hold compute at once.
	ComputeSlots uint32 `json:"compute_slots"`
	// CriticalSlots is the further compute slots only critical leases may take.
	CriticalSlots uint32 `json:"critical_slots"`
	// ComputeHolder is the (first) compute holder, nil when there is none.
	ComputeHolder *ComputeHolder `json:"compute_holder"`
	// ComputeHolders lists every compute holder.
	ComputeHolders []ComputeHolder `json:"compute_holders"`
	// Queued counts, per class, the waiters that could be granted on the device.
	Queued QueueCounts `json:"queued"`
	// Processes lists the processes using memory on the device, as NVML last saw them.
	Processes []ProcessStatus `json:"processes"`
}

// ComputeHolder is a lease holding a compute slot.
type ComputeHolder struct {
	// Lease is the lease's id.
	Lease uint64 `json:"lease"`
	// PID is the holder's process id.
	PID uint32 `json:"pid"`
	// Process is the holder's process name.
	Process string `json:"process"`
	// Class is the lease's class.
	Class Class `json:"class"`
	// HeldMS is how long it has held the slot, in milliseconds.
	HeldMS uint64 `json:"held_ms"`
}

// QueueCounts counts waiting requests per class.
type QueueCounts struct {
	// Critical counts the waiting critical requests.
	Critical uint32 `json:"critical"`
	// High counts the waiting high requests.
	High uint32 `json:"high"`
	// Normal counts the waiting normal requests.
	Normal uint32 `json:"normal"`
	// Background counts the waiting background requests.
	Background uint32 `json:"background"`
}

// Total is the number of waiters of every class.
func (q QueueCounts) Total() uint32 { return q.Critical + q.High + q.Normal + q.Background }

// ProcessStatus is a process using device memory.
type ProcessStatus struct {
	// PID is its process id.
	PID uint32 `json:"pid"`
	// Process is its name.
	Process string `json:"process"`
	// UsedBytes is the memory it uses on the device.
	UsedBytes uint64 `json:"used_bytes"`
	// OwnerPID is the lease holder it belongs to (itself or an ancestor); nil for unmanaged
	// processes.
	OwnerPID *uint32 `json:"owner_pid"`
	// OverUse is true when its owner uses more than it reserved on this device.
	OverUse bool `json:"over_use"`
}

// LeaseStatus is one granted lease.
type LeaseStatus struct {
	// ID is the lease's id.
	ID uint64 `json:"id"`
	// Device is the device's UUID.
	Device string `json:"device"`
	// DeviceIndex is the device's index.
	DeviceIndex uint32 `json:"device_index"`
	// VRAMBytes is the memory reserved.
	VRAMBytes uint64 `json:"vram_bytes"`
	// Compute is true when the lease holds the compute slot.
	Compute bool `json:"compute"`
	// Class is the lease's class.
	Class Class `json:"class"`
	// PID is the holder's process id.
	PID uint32 `json:"pid"`
	// UID is the holder's user id.
	UID uint32 `json:"uid"`
	// Process is the holder's process name.
	Process string `json:"process"`
	// Session is the holder's session.
	Session uint64 `json:"session"`
	// HeldMS is the time since the grant, in milliseconds.
	HeldMS uint64 `json:"held_ms"`
	// YieldRequested is true while a yield notice is outstanding.
	YieldRequested bool `json:"yield_requested"`
	// Label is the client's label ("" when none).
	Label string `json:"label"`
	// Resource is what the row reserves: "" (a device, which the wire leaves out) or a host
	// part (ResourceHostMemory, ResourcePinned, ResourceCPUs). A host part's row has Device
	// "host" (memory) or "numa<N>" (CPUs), no VRAM and no compute; its amount is in Host.
	Resource Resource `json:"resource,omitempty"`
	// Host is a host part's amount: MemBytes, PinnedBytes, or CPUs with NUMANode.
	Host *HostGrant `json:"host,omitempty"`
}

// IsDevice reports whether the row reserves a device (memory and/or compute), not a host part.
func (s LeaseStatus) IsDevice() bool { return s.Resource == "" || s.Resource == ResourceDevice }

// WaiterStatus is one waiting request.
type WaiterStatus struct {
	// Session is the waiter's session.
	Session uint64 `json:"session"`
	// Request is the client's request id.
	Request uint64 `json:"request"`
	// PID is the waiter's process id.
	PID uint32 `json:"pid"`
	// Class is the request's class.
	Class Class `json:"class"`
	// Device is the requested device selector ("any", an index, or a UUID).
	Device string `json:"device"`
	// VRAMBytes is the memory asked for (for a resize: the extra bytes).
	VRAMBytes uint64 `json:"vram_bytes"`
	// Compute is true when the request wants the compute slot.
	Compute bool `json:"compute"`
	// GrowsLease is, for a resize, the lease growing; nil for an acquire.
	GrowsLease *uint64 `json:"grows_lease"`
	// WaitedMS is how long it has waited, in milliseconds.
	WaitedMS uint64 `json:"waited_ms"`
	// Label is the client's label ("" when none).
	Label string `json:"label"`
	// Host is the host resources it asks for (for a resize of host memory: the extra bytes);
	// nil when none.
	Host *HostRequest `json:"host,omitempty"`
}
