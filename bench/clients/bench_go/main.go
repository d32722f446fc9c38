// Command bench_go is the Go client's driver for gpud-bench-clients
// (bench/src/bin/gpud-bench-clients.rs, which builds and runs it; the Rust, C and Python
// drivers measure the same two things).
//
//	bench_go SOCKET round-trip N   N acquire (1 GiB, no compute) + release round trips
//	bench_go SOCKET handoff N      N handoffs of the compute slot between two connections
//
// After N/10 not counted, it prints one JSON line:
// {"client":"go","phase":"...","samples_ns":[...]}
//
// Handoff: two goroutines, each with its own connection, ask for the compute slot in turn.
// The holder waits until the daemon's status shows the other's acquire waiting, takes a
// timestamp and releases; the other's Acquire returns and it takes a timestamp; the
// difference is one sample. Then it holds, and the roles are swapped.
//
// Build offline: GOFLAGS=-mod=mod GOPROXY=off go build .
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gpud "github.com/gpud/gpud/client/go"
)

// queueWait is how long a holder waits for the other connection's acquire to show.
const queueWait = 10 * time.Second

var epoch = time.Now()

// now is nanoseconds since epoch, on the monotonic clock.
func now() int64 { return int64(time.Since(epoch)) }

func roundTrip(ctx context.Context, socket string, n int) ([]int64, error) {
	client, err := gpud.Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	request := gpud.Request{VRAM: 1 << 30}
	warmup := n / 10
	samples := make([]int64, 0, n)
	for i := 0; i < n+warmup; i++ {
		t := now()
		lease, err := client.Acquire(ctx, request)
		if err != nil {
			return nil, err
		}
		if err := lease.Release(); err != nil {
			return nil, err
		}
		if i >= warmup {
			samples = append(samples, now()-t)
		}
	}
	return samples, nil
}

func handoff(ctx context.Context, socket string, m int) ([]int64, error) {
	warmup := int64(m / 10)
	last := warmup + int64(m)
	var (
		lastRelease atomic.Int64
		grants      atomic.Int64
		done        atomic.Bool
		mu          sync.Mutex
		samples     = make([]int64, 0, m)
	)
	request := gpud.Request{Compute: true}
	worker := func(client *gpud.Client) error {
		var local []int64
		defer func() {
			mu.Lock()
			samples = append(samples, local...)
			mu.Unlock()
		}()
		for {
			lease, err := client.Acquire(ctx, request)
			if err != nil {
				return err
			}
			t := now()
			if done.Load() {
				return lease.Release()
			}
			// The first grant follows no release; then warmup not counted.
			n := grants.Add(1) - 1
			if n > warmup {
				local = append(local, t-lastRelease.Load())
			}
			if n == last {
				done.Store(true)
				return lease.Release()
			}
			// Release only once the other connection waits for the slot.
			since := time.Now()
			for {
				status, err := client.Status(ctx)
				if err != nil {
					return err
				}
				if len(status.Waiters) > 0 {
					break
				}
				if time.Since(since) > queueWait {
					return errors.New("the other connection's acquire never showed in the queue")
				}
			}
			lastRelease.Store(now())
			if err := lease.Release(); err != nil {
				return err
			}
		}
	}
	var clients [2]*gpud.Client
	for i := range clients {
		c, err := gpud.Dial(ctx, socket)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients[i] = c
	}
	errs := make(chan error, 2)
	for _, c := range clients {
		go func(c *gpud.Client) { errs <- worker(c) }(c)
	}
	for range clients {
		if err := <-errs; err != nil {
			// The other goroutine may wait for a slot this one holds: give up at once.
			return nil, err
		}
	}
	return samples, nil
}

func main() {
	if len(os.Args) != 4 || (os.Args[2] != "round-trip" && os.Args[2] != "handoff") {
		fmt.Fprintln(os.Stderr, "usage: bench_go SOCKET round-trip|handoff COUNT")
		os.Exit(2)
	}
	socket, phase := os.Args[1], os.Args[2]
	count, err := strconv.Atoi(os.Args[3])
	if err != nil || count < 1 {
		fmt.Fprintln(os.Stderr, "bench_go: bad count", os.Args[3])
		os.Exit(2)
	}
	ctx := context.Background()
	var samples []int64
	if phase == "round-trip" {
		samples, err = roundTrip(ctx, socket, count)
	} else {
		samples, err = handoff(ctx, socket, count)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench_go:", err)
		os.Exit(1)
	}
	out, err := json.Marshal(map[string]interface{}{
		"client": "go", "phase": phase, "samples_ns": samples,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench_go:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
