package gpud

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDaemon accepts one session on a socket and answers each request with answer(op).
func fakeDaemon(t *testing.T, answer func(op json.RawMessage) string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		if _, err := readFrame(r, MaxServerFrame); err != nil {
			return
		}
		writeFrame(conn, []byte(`{"type":"welcome","version":1,"session":9,"daemon":"fake"}`))
		for {
			payload, err := readFrame(r, MaxServerFrame)
			if err != nil {
				return
			}
			var req struct {
				ID uint64          `json:"id"`
				Op json.RawMessage `json:"op"`
			}
			if json.Unmarshal(payload, &req) != nil {
				return
			}
			reply := `{"type":"reply","id":` + jsonNumber(req.ID) + `,"outcome":` + answer(req.Op) + `}`
			writeFrame(conn, []byte(reply))
		}
	}()
	return path
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func lease(id int) string {
	return `{"id":` + jsonNumber(uint64(id)) + `,"device":"GPU-x","device_index":0,"vram_bytes":1,"compute":false,"class":"normal","pid":1,"uid":0,"process":"p","session":1,"held_ms":0,"yield_requested":false,"label":null}`
}

func waiter(request int) string {
	return `{"session":1,"request":` + jsonNumber(uint64(request)) + `,"pid":1,"class":"high","device":"any","vram_bytes":5,"compute":true,"grows_lease":null,"waited_ms":3,"label":"w"}`
}

// A status that comes in pages is asked for page by page, with the daemon's cursor, and put
// together.
func TestStatusFollowsPages(t *testing.T) {
	var mu sync.Mutex
	var cursors []string
	path := fakeDaemon(t, func(op json.RawMessage) string {
		var name string
		if json.Unmarshal(op, &name) == nil && name == "status" {
			return `{"ok":{"status":{"daemon":{"version":"9","pid":1,"uptime_ms":1,"sessions":1,"backend":"simulated"},` +
				`"devices":[{"index":0,"uuid":"GPU-x","name":"n","total_bytes":10,"headroom_bytes":0,"unmanaged_bytes":0,"capacity_bytes":10,"reserved_bytes":3,"free_bytes":7,"drained":false,"compute_slots":1,"critical_slots":0,"compute_holder":null,"compute_holders":[],"queued":{"critical":0,"high":1,"normal":0,"background":0},"processes":[]}],` +
				`"leases":[` + lease(1) + `],"waiters":[],"more":{"after":1,"epoch":"e"}}}}`
		}
		var page struct {
			Cursor json.RawMessage `json:"status_page"`
		}
		if json.Unmarshal(op, &page) != nil || page.Cursor == nil {
			return `{"error":{"code":"bad_frame","message":"unexpected op"}}`
		}
		mu.Lock()
		defer mu.Unlock()
		cursors = append(cursors, string(page.Cursor))
		switch len(cursors) {
		case 1:
			return `{"ok":{"status":{"daemon":{"version":"9","pid":1,"uptime_ms":1,"sessions":1,"backend":"simulated"},"devices":[],` +
				`"leases":[` + lease(2) + `,` + lease(3) + `],"waiters":[` + waiter(7) + `],"more":{"after":3,"epoch":"e"}}}}`
		default:
			// A page may also come as its own reply.
			return `{"ok":{"status_page":{"daemon":{"version":"9","pid":1,"uptime_ms":1,"sessions":1,"backend":"simulated"},"devices":[],` +
				`"leases":[],"waiters":[` + waiter(8) + `]}}}`
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Session() != 9 || c.Daemon() != "fake" {
		t.Fatalf("welcome: %d %q", c.Session(), c.Daemon())
	}
	s, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(cursors) != 2 || cursors[0] != `{"after":1,"epoch":"e"}` || cursors[1] != `{"after":3,"epoch":"e"}` {
		t.Fatalf("cursors sent: %q", cursors)
	}
	if len(s.Leases) != 3 || s.Leases[0].ID != 1 || s.Leases[1].ID != 2 || s.Leases[2].ID != 3 {
		t.Fatalf("leases: %+v", s.Leases)
	}
	if len(s.Waiters) != 2 || s.Waiters[0].Request != 7 || s.Waiters[1].Request != 8 || s.Waiters[0].Class != High ||
		s.Waiters[0].GrowsLease != nil || s.Waiters[0].Label != "w" {
		t.Fatalf("waiters: %+v", s.Waiters)
	}
	if len(s.Devices) != 1 || s.Devices[0].Queued.Total() != 1 || s.Devices[0].FreeBytes != 7 || s.Daemon.Version != "9" {
		t.Fatalf("first page's devices and daemon: %+v", s)
	}
}

// A status without "more" is one page (the daemon of today).
func TestStatusWithoutPages(t *testing.T) {
	var asked int32
	path := fakeDaemon(t, func(op json.RawMessage) string {
		atomic.AddInt32(&asked, 1)
		return `{"ok":{"status":{"daemon":{"version":"9","pid":1,"uptime_ms":1,"sessions":1,"backend":"nvml"},"devices":[],"leases":[` + lease(4) + `],"waiters":[],"more":null}}}`
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Status(ctx)
	if err != nil || len(s.Leases) != 1 || atomic.LoadInt32(&asked) != 1 {
		t.Fatalf("status: %+v, %v, asked %d", s, err, asked)
	}
}

// TestStatusPagesFromARealDaemon holds more leases than one status page shows (4096) and
// checks that Status follows the daemon's pages to every lease, each once, in id order.
func TestStatusPagesFromARealDaemon(t *testing.T) {
	d := startDaemon(t, "1x16GiB",
		"[limits]", "max_leases_per_session = 5000", "max_entries_per_uid = 5000",
		"requests_per_second = 1000000")
	c := dial(t, d)
	const n = 4200
	for i := 0; i < n; i++ {
		if _, err := c.Acquire(timeout(t, 5*time.Second), Request{VRAM: 1 << 20, Label: fmt.Sprintf("job-%d", i)}); err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
	}
	s, err := c.Status(timeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Leases) != n {
		t.Fatalf("status shows %d leases, want %d", len(s.Leases), n)
	}
	for i := 1; i < len(s.Leases); i++ {
		if s.Leases[i-1].ID >= s.Leases[i].ID {
			t.Fatalf("leases out of order or repeated at %d: %d then %d", i, s.Leases[i-1].ID, s.Leases[i].ID)
		}
	}
}
