// Package gpud is the Go client of gpud, the per-host GPU lease daemon.
//
// A process asks gpud for a lease (VRAM bytes and/or the compute slot of one device) over a
// Unix socket, and holds it while it uses the device. Requests are queued by priority class
// (Critical > High > Normal > Background) and granted all at once; a lease is freed when
// released, when the daemon revokes it, or when the connection ends (also when the process
// dies, even by kill -9).
//
//	client, err := gpud.Dial(ctx, "") // $GPUD_SOCKET, else /run/gpud/gpud.sock
//	if err != nil { ... }
//	defer client.Close()
//	lease, err := client.Acquire(ctx, gpud.Request{VRAM: 12 << 30, Compute: true, Class: gpud.High})
//	if errors.Is(err, gpud.ErrNeverFits) { ... }
//	cmd := exec.CommandContext(ctx, "./gpu-phase")
//	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+lease.CUDAVisibleDevices())
//	...
//	select {
//	case <-lease.Yield():   // a critical request waits for the slot: stop at a safe point
//	case <-lease.Revoked(): // taken away: stop using the device
//	}
//	lease.Release()
//
// A request may also ask for host resources (docs/HOST.md in the gpud repository): host
// memory, page-locked memory and CPUs of one NUMA node (Request's HostMemory, Pinned, CPUs and
// NUMA), alone or with the device part, granted together. The grant names the CPUs
// (Lease.CPUs) to pin the work to; Lease.ResizeHostMemory resizes the host memory. A daemon
// that does not list FeatureHost in its welcome (Client.Speaks) is never sent them.
//
// One Client carries any number of leases and concurrent requests; a reader goroutine
// dispatches the daemon's replies by request id and its events by lease. Contexts cancel
// waits: a cancelled Acquire or growing Resize is withdrawn on the daemon with the
// protocol's cancel.
//
// Errors the daemon answers with are *Error values carrying the protocol's code; compare
// them with the sentinels (errors.Is(err, gpud.ErrTimedOut)) or read the code with CodeOf.
// docs/PROTOCOL.md in the gpud repository describes the wire protocol this package speaks
// (ProtocolVersion).
package gpud
