package gpud

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// acquireAsync starts an acquire in a goroutine; its outcome arrives on the channel.
type outcomeOf struct {
	lease *Lease
	err   error
}

func acquireAsync(ctx context.Context, c *Client, req Request) <-chan outcomeOf {
	ch := make(chan outcomeOf, 1)
	go func() {
		l, err := c.Acquire(ctx, req)
		ch <- outcomeOf{l, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan outcomeOf, limit time.Duration) outcomeOf {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(limit):
		t.Fatalf("acquire not answered within %v", limit)
	}
	return outcomeOf{}
}

func notYet(t *testing.T, ch <-chan outcomeOf, d time.Duration) {
	t.Helper()
	select {
	case o := <-ch:
		t.Fatalf("acquire answered while it should wait: %+v", o)
	case <-time.After(d):
	}
}

func waiters(t *testing.T, c *Client, n int) func() bool {
	return func() bool { return len(status(t, c).Waiters) == n }
}

func TestAcquireRelease(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	c := dial(t, d)
	if c.Session() == 0 || !strings.HasPrefix(c.Daemon(), "gpud ") {
		t.Fatalf("welcome: session %d, daemon %q", c.Session(), c.Daemon())
	}
	l, err := c.Acquire(timeout(t, 5*time.Second), Request{VRAM: 4 * gib, Compute: true, Label: "go test"})
	if err != nil {
		t.Fatal(err)
	}
	info := l.Info()
	if l.ID() == 0 || !strings.HasPrefix(l.DeviceUUID(), "GPU-") || l.DeviceIndex() != 0 ||
		l.CUDAVisibleDevices() != l.DeviceUUID() || l.VRAM() != 4*gib || !l.Compute() ||
		l.Class() != Normal || l.DeviceName() == "" || info.Token == "" || info.VRAM != 4*gib {
		t.Fatalf("lease info: %+v", info)
	}
	if l.Lost() || l.YieldRequested() || l.String() == "" {
		t.Fatalf("fresh lease: lost %v, yield %v", l.Lost(), l.YieldRequested())
	}
	s := status(t, c)
	if s.Daemon.Backend != "simulated" || len(s.Devices) != 1 || len(s.Leases) != 1 || len(s.Waiters) != 0 {
		t.Fatalf("status: %+v", s)
	}
	ls, dev := s.Leases[0], s.Devices[0]
	if ls.ID != l.ID() || ls.PID != uint32(os.Getpid()) || ls.Label != "go test" || ls.Session != c.Session() ||
		ls.VRAMBytes != 4*gib || !ls.Compute || ls.Device != l.DeviceUUID() {
		t.Fatalf("lease in status: %+v", ls)
	}
	if dev.TotalBytes != 16*gib || dev.ReservedBytes != 4*gib || dev.FreeBytes != 12*gib ||
		dev.ComputeHolder == nil || dev.ComputeHolder.Lease != l.ID() || dev.UUID != l.DeviceUUID() {
		t.Fatalf("device in status: %+v", dev)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-l.Yield(); open {
		t.Fatal("the yield channel of a released lease is open")
	}
	select {
	case <-l.Revoked():
		t.Fatal("a released lease reports revoked")
	default:
	}
	s = status(t, c)
	if len(s.Leases) != 0 || s.Devices[0].ReservedBytes != 0 || s.Devices[0].ComputeHolder != nil {
		t.Fatalf("status after release: %+v", s)
	}
	mustCode(t, l.Release(), CodeUnknownLease)
	if err := c.Ping(timeout(t, time.Second)); err != nil {
		t.Fatal(err)
	}
	m, err := c.Metrics(timeout(t, time.Second))
	if err != nil || !strings.Contains(m, "gpud_sessions") {
		t.Fatalf("metrics: %v %q", err, m)
	}
}

// Two processes that ask 10 GiB each of a 16 GiB device are served one after the other.
func TestTwoProcessesAreSerialized(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	c := dial(t, d)
	env := []string{"GPUD_SOCKET=" + d.Socket, "HELPER_VRAM=" + strconv.Itoa(10*gib)}
	a := startHelper(t, selfExe(t), "hold", nil, env...)
	a.expect("connected", 10*time.Second)
	a.expect("granted", 5*time.Second)
	b := startHelper(t, selfExe(t), "hold", nil, env...)
	b.expect("connected", 10*time.Second)
	eventually(t, 5*time.Second, "the second process waits", waiters(t, c, 1))
	b.quiet(300 * time.Millisecond)
	s := status(t, c)
	if len(s.Leases) != 1 || s.Waiters[0].VRAMBytes != 10*gib || s.Waiters[0].PID != uint32(b.cmd.Process.Pid) {
		t.Fatalf("status while the first holds: %+v", s)
	}
	a.say("release")
	aReleased, _ := strconv.ParseInt(a.expect("released", 5*time.Second), 10, 64)
	bGranted, _ := strconv.ParseInt(b.expect("granted", 5*time.Second), 10, 64)
	if bGranted < aReleased {
		t.Fatalf("the second grant (%d) came before the first release (%d)", bGranted, aReleased)
	}
	b.say("release")
	b.expect("released", 5*time.Second)
	eventually(t, 5*time.Second, "both leases are gone", func() bool { return len(status(t, c).Leases) == 0 })
}

// kill -9 of a holder frees its lease for the waiter.
func TestKilledHolderFreesItsLease(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	c := dial(t, d)
	a := startHelper(t, selfExe(t), "hold", nil, "GPUD_SOCKET="+d.Socket, "HELPER_VRAM="+strconv.Itoa(10*gib))
	a.expect("connected", 10*time.Second)
	a.expect("granted", 5*time.Second)
	ch := acquireAsync(timeout(t, 10*time.Second), c, Request{VRAM: 10 * gib})
	eventually(t, 5*time.Second, "the waiter is queued", waiters(t, c, 1))
	notYet(t, ch, 200*time.Millisecond)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o := await(t, ch, 2*time.Second)
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.lease.VRAM() != 10*gib {
		t.Fatalf("grant: %v", o.lease)
	}
	o.lease.Release()
}

// A critical request makes the compute holder see a yield notice.
func TestCriticalRequestAsksTheHolderToYield(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	holder, critical := dial(t, d), dial(t, d)
	l, err := holder.Acquire(timeout(t, 5*time.Second), Request{VRAM: gib, Compute: true})
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(timeout(t, 10*time.Second), critical, Request{Compute: true, Class: Critical})
	select {
	case n := <-l.Yield():
		// By default an ignored notice to a compute lease is revoked 30 s later.
		if n.Lease != l.ID() || n.Reason != YieldCriticalWaiting || !n.Revokes || n.RevokeIn <= 0 || n.RevokeIn > 30*time.Second {
			t.Fatalf("notice: %+v", n)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no yield notice within 2 s")
	}
	if !l.YieldRequested() {
		t.Fatal("YieldRequested is false after a notice")
	}
	s := status(t, holder)
	if len(s.Leases) != 1 || !s.Leases[0].YieldRequested || s.Devices[0].Queued.Critical != 1 {
		t.Fatalf("status: %+v", s)
	}
	notYet(t, ch, 100*time.Millisecond)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	o := await(t, ch, 2*time.Second)
	if o.err != nil || o.lease.Class() != Critical || !o.lease.Compute() {
		t.Fatalf("critical grant: %+v", o)
	}
}

// With revoke_after_yield, an ignored notice says when, and the lease is revoked.
func TestIgnoredYieldIsRevoked(t *testing.T) {
	d := startDaemon(t, "1x16GiB", `scheduler.revoke_after_yield = "300ms"`)
	holder, critical := dial(t, d), dial(t, d)
	l, err := holder.Acquire(timeout(t, 5*time.Second), Request{Compute: true})
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(timeout(t, 10*time.Second), critical, Request{Compute: true, Class: Critical})
	n := <-l.Yield()
	if !n.Revokes || n.RevokeIn <= 0 || n.RevokeIn > 300*time.Millisecond {
		t.Fatalf("notice: %+v", n)
	}
	select {
	case <-l.Revoked():
	case <-time.After(3 * time.Second):
		t.Fatal("not revoked")
	}
	if l.RevokeReason() != RevokedYieldIgnored || !l.Lost() {
		t.Fatalf("reason %q", l.RevokeReason())
	}
	if o := await(t, ch, 2*time.Second); o.err != nil {
		t.Fatal(o.err)
	}
	mustCode(t, l.Release(), CodeUnknownLease)
}

// A lease over its class's max_hold is asked to yield.
func TestMaxHoldAsksToYield(t *testing.T) {
	d := startDaemon(t, "1x16GiB", `scheduler.max_hold.normal = "200ms"`)
	c := dial(t, d)
	l, err := c.Acquire(timeout(t, 5*time.Second), Request{Compute: true})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-l.Yield():
		if n.Reason != YieldMaxHold {
			t.Fatalf("notice: %+v", n)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no max_hold notice")
	}
}

// A grow waits for the memory; a shrink frees memory at once (and lets the grow through).
func TestResizeGrowWaitsAndShrinkFrees(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	c := dial(t, d)
	ctx := timeout(t, 10*time.Second)
	a, err := c.Acquire(ctx, Request{VRAM: 8 * gib})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, Request{VRAM: 6 * gib})
	if err != nil {
		t.Fatal(err)
	}
	grown := make(chan error, 1)
	go func() { grown <- a.Resize(ctx, 12*gib) }()
	eventually(t, 5*time.Second, "the grow waits", waiters(t, c, 1))
	w := status(t, c).Waiters[0]
	if w.GrowsLease == nil || *w.GrowsLease != a.ID() || w.VRAMBytes != 4*gib {
		t.Fatalf("waiter: %+v", w)
	}
	select {
	case err := <-grown:
		t.Fatalf("the grow did not wait: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if a.VRAM() != 8*gib {
		t.Fatalf("a waiting grow changed the size: %d", a.VRAM())
	}
	if err := b.Resize(ctx, 2*gib); err != nil {
		t.Fatal(err)
	}
	if b.VRAM() != 2*gib {
		t.Fatalf("after shrink: %d", b.VRAM())
	}
	select {
	case err := <-grown:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the shrink did not let the grow through")
	}
	if a.VRAM() != 12*gib {
		t.Fatalf("after grow: %d", a.VRAM())
	}
	if dev := status(t, c).Devices[0]; dev.ReservedBytes != 14*gib || dev.FreeBytes != 2*gib {
		t.Fatalf("device: %+v", dev)
	}
	if err := a.Resize(ctx, 4*gib); err != nil {
		t.Fatal(err)
	}
	if dev := status(t, c).Devices[0]; dev.ReservedBytes != 6*gib || dev.FreeBytes != 10*gib {
		t.Fatalf("after shrink: %+v", dev)
	}
	mustCode(t, a.ResizeTimeout(ctx, 16*gib, 100*time.Millisecond), CodeTimedOut)
	if a.VRAM() != 4*gib {
		t.Fatalf("a timed-out grow changed the size: %d", a.VRAM())
	}
	mustCode(t, a.Resize(ctx, 17*gib), CodeNeverFits)
}

// A context that ends withdraws a waiting acquire (and a waiting grow) on the daemon.
func TestContextCancelWithdrawsAWaitingAcquire(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	holder, c := dial(t, d), dial(t, d)
	full, err := holder.Acquire(timeout(t, 5*time.Second), Request{VRAM: 16 * gib})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Not t: this is not the test's goroutine.
		for i := 0; i < 500; i++ {
			s, err := holder.Status(context.Background())
			if err == nil && len(s.Waiters) == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	start := time.Now()
	l, err := c.Acquire(ctx, Request{VRAM: gib})
	if l != nil || !errors.Is(err, context.Canceled) || !errors.Is(err, ErrCancelled) {
		t.Fatalf("cancelled acquire: %v, %v", l, err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("the cancel took too long")
	}
	// The daemon confirmed the withdrawal before Acquire returned.
	if s := status(t, c); len(s.Waiters) != 0 {
		t.Fatalf("waiters after cancel: %+v", s.Waiters)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	_, err = c.Acquire(dctx, Request{VRAM: gib})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrCancelled) {
		t.Fatalf("deadline: %v", err)
	}
	if s := status(t, c); len(s.Waiters) != 0 {
		t.Fatalf("waiters after the deadline: %+v", s.Waiters)
	}
	// A context that is already done sends nothing.
	_, err = c.Acquire(ctx, Request{VRAM: gib})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("done context: %v", err)
	}
	// A withdrawn grow leaves the lease as it was.
	if err := full.Resize(timeout(t, time.Second), 8*gib); err != nil {
		t.Fatal(err)
	}
	other, err := c.Acquire(timeout(t, time.Second), Request{VRAM: 8 * gib})
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer gcancel()
	err = other.Resize(gctx, 12*gib)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrCancelled) || other.VRAM() != 8*gib {
		t.Fatalf("withdrawn grow: %v, size %d", err, other.VRAM())
	}
	// Nothing was granted behind the client's back.
	if err := full.Release(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if s := status(t, c); len(s.Leases) != 1 || len(s.Waiters) != 0 || s.Leases[0].ID != other.ID() {
		t.Fatalf("status after the holder left: %+v", s)
	}
}

// One connection carries many leases and requests at once; events go to their own lease.
func TestOneConnectionManyLeases(t *testing.T) {
	d := startDaemon(t, "2x16GiB")
	c := dial(t, d)
	ctx := timeout(t, 10*time.Second)
	const n = 16
	leases := make([]*Lease, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, err := c.Acquire(ctx, Request{VRAM: gib, Device: DeviceIndex(uint32(i % 2)), Label: "many-" + strconv.Itoa(i)})
			leases[i] = l
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s := status(t, c)
	if len(s.Leases) != n || s.Devices[0].ReservedBytes != 8*gib || s.Devices[1].ReservedBytes != 8*gib {
		t.Fatalf("status: %d leases, %+v", len(s.Leases), s.Devices)
	}
	// A big request waits on the same connection while the others are released concurrently.
	big := acquireAsync(ctx, c, Request{VRAM: 16 * gib, Device: "0"})
	eventually(t, 5*time.Second, "the big request waits", waiters(t, c, 1))
	// Revoking one lease reaches that lease only.
	if err := c.Revoke(ctx, leases[0].ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leases[0].Revoked():
	case <-time.After(2 * time.Second):
		t.Fatal("no revoked event")
	}
	if leases[0].RevokeReason() != RevokedAdmin {
		t.Fatalf("reason %q", leases[0].RevokeReason())
	}
	for _, l := range leases[1:] {
		if l.Lost() {
			t.Fatalf("%v lost with another lease", l)
		}
	}
	errs = make(chan error, n)
	for _, l := range leases[1:] {
		wg.Add(1)
		go func(l *Lease) {
			defer wg.Done()
			errs <- l.Release()
		}(l)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	o := await(t, big, 2*time.Second)
	if o.err != nil || o.lease.DeviceIndex() != 0 {
		t.Fatalf("big: %+v", o)
	}
}

// Drain stops grants on a device; undrain lets the waiter through.
func TestDrainUndrain(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	c := dial(t, d)
	ctx := timeout(t, 10*time.Second)
	if err := c.Drain(ctx, "0"); err != nil {
		t.Fatal(err)
	}
	if !status(t, c).Devices[0].Drained {
		t.Fatal("not drained")
	}
	ch := acquireAsync(ctx, c, Request{VRAM: gib})
	notYet(t, ch, 200*time.Millisecond)
	uuid := status(t, c).Devices[0].UUID
	if err := c.Undrain(ctx, uuid); err != nil {
		t.Fatal(err)
	}
	if o := await(t, ch, 2*time.Second); o.err != nil {
		t.Fatal(o.err)
	}
	mustCode(t, c.Drain(ctx, "any"), CodeUnknownDevice)
	mustCode(t, c.Drain(ctx, "3"), CodeUnknownDevice)
	mustCode(t, c.Undrain(ctx, "../etc"), CodeInvalidRequest)
	mustCode(t, c.Revoke(ctx, 999999), CodeUnknownLease)
}

// Bad arguments give clean errors, and no request leaves the client.
func TestBadArguments(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	c := dial(t, d)
	ctx := timeout(t, 10*time.Second)
	for _, req := range []Request{
		{},                                    // nothing asked
		{VRAM: 0, Compute: false, Label: "x"}, // still nothing
		{VRAM: gib, Class: "urgent"},
		{VRAM: gib, Class: "CRITICAL"}, // the wire's names only (ParseClass reads others)
		{VRAM: gib, Device: "../etc"},
		{VRAM: gib, Device: "99999999999"},
		{VRAM: gib, Device: "ab"},
		{VRAM: gib, Label: strings.Repeat("x", 257)},
		{VRAM: gib, Label: "a\nb"},
		{VRAM: gib, Label: "\xff"},
		{VRAM: gib, Timeout: -time.Second},
		{VRAM: gib, Timeout: 366 * 24 * time.Hour},
	} {
		l, err := c.Acquire(ctx, req)
		if l != nil {
			t.Fatalf("%+v granted", req)
		}
		mustCode(t, err, CodeInvalidRequest)
		if !strings.HasPrefix(err.Error(), "gpud: invalid_request: ") {
			t.Fatalf("message %q", err)
		}
	}
	_, err := c.TryAcquire(ctx, Request{VRAM: gib}, -time.Millisecond)
	mustCode(t, err, CodeInvalidRequest)
	l, err := c.Acquire(ctx, Request{VRAM: gib, Device: " 0 ", Class: Background, Label: strings.Repeat("y", 256)})
	if err != nil {
		t.Fatalf("good arguments: %v", err)
	}
	mustCode(t, l.ResizeTimeout(ctx, 2*gib, -time.Second), CodeInvalidRequest)
	if s := status(t, c); len(s.Leases) != 1 || len(s.Waiters) != 0 || s.Daemon.Sessions != 1 {
		t.Fatalf("the session suffered: %+v", s)
	}
	// A socket where nothing listens.
	_, err = Dial(ctx, d.Dir+"/nothing.sock")
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nothing.sock") {
		t.Fatalf("dial nowhere: %v", err)
	}
	// A context that is already done.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Dial(done, d.Socket); !errors.Is(err, context.Canceled) {
		t.Fatalf("dial with a done context: %v", err)
	}
	// A closed client.
	c.Close()
	c.Close()
	if _, err := c.Acquire(ctx, Request{VRAM: gib}); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
	if _, err := c.Status(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("status after close: %v", err)
	}
	if !errors.Is(l.Release(), ErrClosed) || !errors.Is(c.Err(), ErrClosed) || l.RevokeReason() != RevokedLost {
		t.Fatalf("lease after close: %v, %q", l.Release(), l.RevokeReason())
	}
}

// $GPUD_SOCKET names the socket when Dial gets no path.
func TestDialUsesGPUDSocket(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	t.Setenv("GPUD_SOCKET", d.Socket)
	if DefaultSocketPath() != d.Socket {
		t.Fatalf("DefaultSocketPath %q", DefaultSocketPath())
	}
	c, err := Dial(timeout(t, 5*time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Path() != d.Socket {
		t.Fatalf("path %q", c.Path())
	}
	t.Setenv("GPUD_SOCKET", "")
	if DefaultSocketPath() != DefaultSocket || DefaultSocket != "/run/gpud/gpud.sock" {
		t.Fatalf("default %q", DefaultSocketPath())
	}
}
