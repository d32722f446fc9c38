// Command lease acquires a lease, watches for yield notices while "working", and releases.
//
//	gpud --simulate 2x16GiB --socket /tmp/gpud.sock &
//	GPUD_SOCKET=/tmp/gpud.sock go run ./examples/lease 4GiB 2s
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	gpud "github.com/gpud/gpud/client/go"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lease:", err)
		os.Exit(1)
	}
}

func run() error {
	size, work := "1GiB", "1s"
	if len(os.Args) > 1 {
		size = os.Args[1]
	}
	if len(os.Args) > 2 {
		work = os.Args[2]
	}
	vram, err := gpud.ParseSize(size)
	if err != nil {
		return err
	}
	duration, err := time.ParseDuration(work)
	if err != nil {
		return err
	}
	// Ctrl-C while waiting withdraws the request.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	client, err := gpud.Dial(ctx, "")
	if err != nil {
		return err
	}
	defer client.Close()
	started := time.Now()
	lease, err := client.Acquire(ctx, gpud.Request{VRAM: vram, Compute: true, Label: "example"})
	if err != nil {
		return err
	}
	fmt.Printf("lease %d granted after %v: %s of device %d (CUDA_VISIBLE_DEVICES=%s)\n",
		lease.ID(), time.Since(started).Round(time.Millisecond), gpud.FormatSize(lease.VRAM()),
		lease.DeviceIndex(), lease.CUDAVisibleDevices())
	// The "GPU phase": a safe point every 50 ms.
	deadline := time.After(duration)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
work:
	for {
		select {
		case <-deadline:
			break work
		case n, ok := <-lease.Yield():
			if !ok {
				return fmt.Errorf("lease %d lost: %s", lease.ID(), lease.RevokeReason())
			}
			fmt.Printf("asked to yield (%s): releasing early\n", n.Reason)
			break work
		case <-ctx.Done():
			break work
		case <-tick.C:
		}
	}
	if err := lease.Release(); err != nil {
		return err
	}
	fmt.Println("released")
	return nil
}
