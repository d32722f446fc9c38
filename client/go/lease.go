package gpud

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// LeaseInfo is what the daemon says about a granted lease.
type LeaseInfo struct {
	// ID is the lease's id.
	ID uint64 `json:"lease"`
	// DeviceUUID is the leased device's UUID.
	DeviceUUID string `json:"device_uuid"`
	// DeviceIndex is the device's gpud index.
	DeviceIndex uint32 `json:"device_index"`
	// DeviceName is the device's product name.
	DeviceName string `json:"device_name"`
	// VRAM is the number of bytes reserved.
	VRAM uint64 `json:"vram_bytes"`
	// Compute is true when the lease holds the device's compute slot.
	Compute bool `json:"compute"`
	// Class is the class the lease was granted in.
	Class Class `json:"class"`
	// CUDAVisibleDevices is the value to give CUDA_VISIBLE_DEVICES so that CUDA sees exactly
	// the leased device (for a lease of several devices, all of them in the parts' order).
	CUDAVisibleDevices string `json:"cuda_visible_devices"`
	// Token is the secret that re-adopts the lease after a daemon restart; keep it private.
	Token string `json:"token"`
	// Parts lists, for a lease of several devices, every part in the order asked (the first
	// is this lease); it is empty for a lease of one device.
	Parts []LeasePart `json:"parts,omitempty"`
	// Host is the host resources granted with the lease; nil when it asked for none. A lease
	// of the host alone has them and no device (DeviceUUID, DeviceName and
	// CUDAVisibleDevices are empty).
	Host *HostGrant `json:"host,omitempty"`
}

// LeasePart is one granted part of a lease of several devices.
type LeasePart struct {
	// Lease is the part's own lease id (events about the part name it).
	Lease uint64 `json:"lease"`
	// DeviceIndex is the part's device's gpud index.
	DeviceIndex uint32 `json:"device_index"`
	// DeviceUUID is the part's device's UUID.
	DeviceUUID string `json:"device_uuid"`
	// VRAM is the number of bytes reserved there.
	VRAM uint64 `json:"vram_bytes"`
	// Compute is true when the part holds a compute slot there.
	Compute bool `json:"compute"`
}

// YieldReason says why the daemon asks a holder to yield its compute slot.
type YieldReason string

// Yield reasons.
const (
	// YieldCriticalWaiting: a critical request waits for the slot.
	YieldCriticalWaiting YieldReason = "critical_waiting"
	// YieldMaxHold: the lease held the slot longer than its class allows.
	YieldMaxHold YieldReason = "max_hold"
)

// YieldNotice asks the holder to release its lease at the next safe point (CUDA kernels
// cannot be preempted) so that the compute slot passes on.
type YieldNotice struct {
	// Lease is the lease asked to yield.
	Lease uint64
	// Reason says why.
	Reason YieldReason
	// RevokeIn is when the daemon revokes the lease if it is still held; meaningful only
	// when Revokes is true (scheduler.revoke_after_yield).
	RevokeIn time.Duration
	// Revokes is true when the daemon revokes ignored notices.
	Revokes bool
}

// RevokeReason says why a lease was taken away.
type RevokeReason string

// Revoke reasons.
const (
	// RevokedAdmin: an administrator revoked it.
	RevokedAdmin RevokeReason = "admin"
	// RevokedYieldIgnored: the holder did not yield within the grace period.
	RevokedYieldIgnored RevokeReason = "yield_ignored"
	// RevokedOverUse: the holder's processes used more device memory than it reserved.
	RevokedOverUse RevokeReason = "over_use"
	// RevokedBudgetEnded: the budget it was leased from ended (its job ended).
	RevokedBudgetEnded RevokeReason = "budget_ended"
	// RevokedReclaimed: an evictable lease kept memory it was asked to give back past the
	// deadline.
	RevokedReclaimed RevokeReason = "reclaimed"
	// RevokedHolderStopped: the holder's process was stopped (SIGSTOP, a debugger, a suspended
	// job) when a waiting request needed the lease, or when it reached its maximum hold.
	RevokedHolderStopped RevokeReason = "holder_stopped"
	// RevokedLost: the connection ended (the daemon stopped, or the client was closed), and
	// with it the lease (client side only).
	RevokedLost RevokeReason = "lost"
)

// Lease is a granted lease. It protects its memory and compute slot until it is released,
// revoked, or its client's connection ends. Its methods may be called from any goroutine.
type Lease struct {
	c    *Client
	info LeaseInfo // VRAM is kept in vram, Host.MemBytes in hostMem

	mu             sync.Mutex
	vram           uint64
	hostMem        uint64
	yieldRequested bool
	ended          bool
	reason         RevokeReason
	yields         chan YieldNotice
	revoked        chan struct{}
}

func newLease(c *Client, info LeaseInfo) *Lease {
	l := &Lease{
		c:       c,
		info:    info,
		vram:    info.VRAM,
		yields:  make(chan YieldNotice, 8),
		revoked: make(chan struct{}),
	}
	if info.Host != nil {
		l.hostMem = info.Host.MemBytes
	}
	return l
}

// ID returns the lease's id.
func (l *Lease) ID() uint64 { return l.info.ID }

// Info returns what the daemon said about the lease, with its current sizes.
func (l *Lease) Info() LeaseInfo {
	info := l.info
	info.VRAM = l.VRAM()
	if l.info.Host != nil {
		host := l.Host()
		info.Host = &host
	}
	return info
}

// DeviceUUID returns the leased device's UUID.
func (l *Lease) DeviceUUID() string { return l.info.DeviceUUID }

// DeviceIndex returns the leased device's gpud index.
func (l *Lease) DeviceIndex() uint32 { return l.info.DeviceIndex }

// DeviceName returns the leased device's product name.
func (l *Lease) DeviceName() string { return l.info.DeviceName }

// CUDAVisibleDevices returns the value for CUDA_VISIBLE_DEVICES that shows CUDA exactly the
// leased device.
func (l *Lease) CUDAVisibleDevices() string { return l.info.CUDAVisibleDevices }

// VRAM returns the number of bytes reserved now (after any resize).
func (l *Lease) VRAM() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.vram
}

// Host returns the host resources granted with the lease (their memory as of the last
// resize); the zero HostGrant when it asked for none.
func (l *Lease) Host() HostGrant {
	if l.info.Host == nil {
		return HostGrant{}
	}
	h := *l.info.Host
	h.CPUs = append([]uint32(nil), h.CPUs...)
	h.Parts = append([]uint64(nil), h.Parts...)
	if h.NUMANode != nil {
		n := *h.NUMANode
		h.NUMANode = &n
	}
	l.mu.Lock()
	h.MemBytes = l.hostMem
	l.mu.Unlock()
	return h
}

// HostMemory returns the bytes of host memory the lease reserves now (after any resize).
func (l *Lease) HostMemory() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hostMem
}

// Pinned returns the bytes of page-locked host memory the lease reserves.
func (l *Lease) Pinned() uint64 {
	if l.info.Host == nil {
		return 0
	}
	return l.info.Host.PinnedBytes
}

// CPUs returns the CPUs granted (kernel numbers, ascending), empty when the lease asked for
// none: pin the lease's threads to them (sched_setaffinity, taskset).
func (l *Lease) CPUs() []uint32 {
	if l.info.Host == nil {
		return nil
	}
	return append([]uint32(nil), l.info.Host.CPUs...)
}

// NUMANode returns the NUMA node of the lease's CPUs; false when it holds no CPUs.
func (l *Lease) NUMANode() (uint32, bool) {
	if l.info.Host == nil || l.info.Host.NUMANode == nil {
		return 0, false
	}
	return *l.info.Host.NUMANode, true
}

// Compute reports whether the lease holds its device's compute slot.
func (l *Lease) Compute() bool { return l.info.Compute }

// Class returns the class the lease was granted in.
func (l *Lease) Class() Class { return l.info.Class }

// Yield returns the channel the daemon's yield notices for this lease arrive on. It is
// closed when the lease ends (released, revoked or lost): a receive that reports a closed
// channel means the lease is gone. Notices that find the channel full (8 unread) are dropped;
// YieldRequested still reports them.
func (l *Lease) Yield() <-chan YieldNotice { return l.yields }

// YieldRequested reports whether the daemon has asked this lease to yield.
func (l *Lease) YieldRequested() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.yieldRequested
}

// Revoked returns a channel that is closed when the lease is taken away: revoked by the
// daemon, or lost with the connection. It stays open after Release.
func (l *Lease) Revoked() <-chan struct{} { return l.revoked }

// RevokeReason returns why the lease was taken away, or "" while it is held (or after
// Release).
func (l *Lease) RevokeReason() RevokeReason {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reason
}

// Lost reports whether the lease was revoked or lost: it protects nothing any more.
func (l *Lease) Lost() bool { return l.RevokeReason() != "" }

// Release gives the lease back and waits until the daemon has freed it. Releasing a lease
// that is no longer held (released before, or revoked) gives ErrUnknownLease, as the daemon
// answers; after the connection ended, the connection's error.
func (l *Lease) Release() error {
	id, cl, err := l.c.start(leaseOp("release", l.info.ID), "release", l)
	if err != nil {
		return err
	}
	r, err := l.c.wait(context.Background(), id, cl, "release", false)
	if err != nil {
		return err
	}
	if r.name != "released" {
		return fmt.Errorf("gpud: release answered with %q", r.name)
	}
	return nil
}

// Resize changes the lease's reserved memory to bytes. Shrinking is immediate; growing waits
// like an acquire of the lease's class, until granted or until ctx ends (then the grow is
// cancelled and the lease keeps its size; the error matches ctx's error and ErrCancelled).
// A grow larger than the device gives ErrNeverFits; a second grow while one waits,
// ErrResizePending; a grow whose lease is released meanwhile, ErrCancelled.
func (l *Lease) Resize(ctx context.Context, bytes uint64) error {
	return l.resize(ctx, bytes, nil)
}

// ResizeTimeout is Resize with the daemon giving up a grow after timeout: ErrTimedOut, and
// the lease keeps its size.
func (l *Lease) ResizeTimeout(ctx context.Context, bytes uint64, timeout time.Duration) error {
	ms, err := millis(timeout)
	if err != nil {
		return err
	}
	return l.resize(ctx, bytes, &ms)
}

// ResizeHostMemory changes the lease's reserved host memory to bytes, as Resize does its VRAM:
// shrinking is immediate, growing waits until granted or until ctx ends. It needs a daemon
// whose welcome lists FeatureHost (ErrInvalidRequest otherwise, before sending).
func (l *Lease) ResizeHostMemory(ctx context.Context, bytes uint64) error {
	return l.resizeHost(ctx, bytes, nil)
}

// ResizeHostMemoryTimeout is ResizeHostMemory with the daemon giving up a grow after timeout:
// ErrTimedOut, and the lease keeps its size.
func (l *Lease) ResizeHostMemoryTimeout(ctx context.Context, bytes uint64, timeout time.Duration) error {
	ms, err := millis(timeout)
	if err != nil {
		return err
	}
	return l.resizeHost(ctx, bytes, &ms)
}

func (l *Lease) resizeHost(ctx context.Context, bytes uint64, timeoutMS *uint64) error {
	if !l.c.Speaks(FeatureHost) {
		return invalid("this gpud books no host memory (its welcome does not list %q: it is older than this client)", FeatureHost)
	}
	args := resizeArgs{Lease: l.info.ID, TimeoutMS: timeoutMS, HostMemBytes: &bytes}
	return l.send(ctx, args, "resize_host")
}

func (l *Lease) resize(ctx context.Context, bytes uint64, timeoutMS *uint64) error {
	return l.send(ctx, resizeArgs{Lease: l.info.ID, VRAMBytes: bytes, TimeoutMS: timeoutMS}, "resize")
}

// send sends a resize (kind "resize" or "resize_host") and waits for it.
func (l *Lease) send(ctx context.Context, args resizeArgs, kind string) error {
	if err := ctx.Err(); err != nil {
		return &withdrawn{what: "resize", ctx: err}
	}
	op := map[string]resizeArgs{"resize": args}
	id, cl, err := l.c.start(op, kind, l)
	if err != nil {
		return err
	}
	r, err := l.c.wait(ctx, id, cl, "resize", true)
	if err != nil {
		return err
	}
	if r.name != "resized" {
		return fmt.Errorf("gpud: resize answered with %q", r.name)
	}
	return nil
}

// String describes the lease for logs.
func (l *Lease) String() string {
	var what []string
	if l.info.DeviceUUID != "" {
		device := FormatSize(l.VRAM())
		if l.info.Compute {
			device += " + compute"
		}
		what = append(what, fmt.Sprintf("%s on GPU %d (%s)", device, l.info.DeviceIndex, l.info.DeviceUUID))
	}
	if h := l.info.Host; h != nil {
		host := "host " + FormatSize(l.HostMemory())
		if h.PinnedBytes > 0 {
			host += fmt.Sprintf(" (%s pinned)", FormatSize(h.PinnedBytes))
		}
		if len(h.CPUs) > 0 && h.NUMANode != nil {
			host += fmt.Sprintf(", %d CPUs of NUMA node %d", len(h.CPUs), *h.NUMANode)
		}
		what = append(what, host)
	}
	return fmt.Sprintf("lease %d: %s, %s", l.info.ID, strings.Join(what, " + "), l.info.Class)
}

func (l *Lease) setVRAM(v uint64) {
	l.mu.Lock()
	l.vram = v
	l.mu.Unlock()
}

func (l *Lease) setHostMem(v uint64) {
	l.mu.Lock()
	l.hostMem = v
	l.mu.Unlock()
}

// notify delivers a yield notice without ever blocking the reader.
func (l *Lease) notify(n YieldNotice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.yieldRequested = true
	select {
	case l.yields <- n:
	default:
	}
}

// end marks the lease over: released (reason "") or taken away.
func (l *Lease) end(reason RevokeReason) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended = true
	l.reason = reason
	close(l.yields)
	if reason != "" {
		close(l.revoked)
	}
}
