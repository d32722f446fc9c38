package gpud_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"time"

	gpud "github.com/gpud/gpud/client/go"
)

// A GPU phase in a child process that sees only the leased device.
func ExampleClient_Acquire() {
	ctx := context.Background()
	client, err := gpud.Dial(ctx, "") // $GPUD_SOCKET, else /run/gpud/gpud.sock
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Acquire(ctx, gpud.Request{VRAM: 12 << 30, Compute: true, Class: gpud.High, Label: "proof 42"})
	if errors.Is(err, gpud.ErrNeverFits) {
		log.Fatal("no device here is large enough")
	} else if err != nil {
		log.Fatal(err)
	}
	defer lease.Release()
	cmd := exec.CommandContext(ctx, "./gpu-phase")
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+lease.CUDAVisibleDevices())
	if err := cmd.Run(); err != nil {
		log.Fatal(err)
	}
}

// Waiting at most 30 s, or not at all.
func ExampleClient_TryAcquire() {
	ctx := context.Background()
	client, err := gpud.Dial(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.TryAcquire(ctx, gpud.Request{VRAM: 4 << 30}, 30*time.Second)
	switch {
	case err != nil:
		log.Fatal(err)
	case lease == nil:
		fmt.Println("busy: try later")
	default:
		defer lease.Release()
		fmt.Println("granted on", lease.DeviceUUID())
	}
}

// Safe points: a critical request asks the holder to yield its compute slot.
func ExampleLease_Yield() {
	ctx := context.Background()
	client, err := gpud.Dial(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	req := gpud.Request{VRAM: 8 << 30, Compute: true}
	lease, err := client.Acquire(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	for batch := 0; batch < 100; batch++ {
		select {
		case _, held := <-lease.Yield():
			if !held {
				log.Fatalf("lease lost: %s", lease.RevokeReason())
			}
			// Between kernels: let the critical request through, then queue again.
			lease.Release()
			if lease, err = client.Acquire(ctx, req); err != nil {
				log.Fatal(err)
			}
		default:
		}
		// ... one batch of kernels on lease.DeviceIndex() ...
	}
	lease.Release()
}

func ExampleParseSize() {
	n, _ := gpud.ParseSize("1.5GiB")
	fmt.Println(n, gpud.FormatSize(n))
	_, err := gpud.ParseSize("12 parsecs")
	fmt.Println(err)
	// Output:
	// 1610612736 1.5 GiB
	// invalid size "12 parsecs": unknown unit (examples: 12GiB, 512MiB, 1.5GiB, 4096)
}
