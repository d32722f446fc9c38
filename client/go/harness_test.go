package gpud

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/client/go/internal/daemon"
)

// The repository root, from this package's directory (client/go).
const repoRoot = "../.."

const gib = 1 << 30

func TestMain(m *testing.M) {
	if mode := os.Getenv("GPUD_GO_HELPER"); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// startDaemon starts gpud on simulated devices for one test, or skips the test when there is
// no gpud binary.
func startDaemon(t *testing.T, simulate string, config ...string) *daemon.Daemon {
	t.Helper()
	bin, err := daemon.Binary(repoRoot)
	if err != nil {
		t.Skipf("skipped, no daemon to test against: %v", err)
	}
	dir, err := daemon.MkdirTemp("gpud-go-")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(bin, dir, simulate, daemon.ConfigText(config))
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("gpud log:\n%s", d.Log())
		}
		os.RemoveAll(dir)
	})
	return d
}

// dial opens a session that the test closes at its end.
func dial(t *testing.T, d *daemon.Daemon) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, d.Socket)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// timeout is a context for one step of a test.
func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func status(t *testing.T, c *Client) *Status {
	t.Helper()
	s, err := c.Status(timeout(t, 5*time.Second))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return s
}

// eventually polls check every 10 ms for up to limit.
func eventually(t *testing.T, limit time.Duration, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mustCode fails unless err carries code (through errors.Is on the sentinel, and CodeOf).
func mustCode(t *testing.T, err error, code Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	if CodeOf(err) != code || !errors.Is(err, &Error{Code: code}) {
		t.Fatalf("error %q has code %q, want %s", err, CodeOf(err), code)
	}
}

// helperProc is a test helper process: this test binary run again in a helper mode.
type helperProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan error
	t     *testing.T
}

// startHelper runs the test binary at exe in mode with env; cred, when set, runs it as
// another user.
func startHelper(t *testing.T, exe, mode string, cred *syscall.Credential, env ...string) *helperProc {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), append([]string{"GPUD_GO_HELPER=" + mode}, env...)...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	h := &helperProc{cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan error, 1), t: t}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			h.lines <- s.Text()
		}
		close(h.lines)
		h.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
	})
	return h
}

// say writes a line to the helper's stdin.
func (h *helperProc) say(line string) {
	if _, err := io.WriteString(h.stdin, line+"\n"); err != nil {
		h.t.Fatalf("tell helper: %v", err)
	}
}

// quiet fails if the helper says anything within d.
func (h *helperProc) quiet(d time.Duration) {
	h.t.Helper()
	select {
	case line := <-h.lines:
		h.t.Fatalf("helper said %q, want nothing yet", line)
	case <-time.After(d):
	}
}

// expect reads the helper's next line, which must start with prefix; returns the rest.
func (h *helperProc) expect(prefix string, limit time.Duration) string {
	h.t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			h.t.Fatalf("helper ended before saying %q", prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			h.t.Fatalf("helper said %q, want %q…", line, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(line, prefix))
	case <-time.After(limit):
		h.t.Fatalf("helper did not say %q within %v", prefix, limit)
	}
	return ""
}

// selfExe is this test binary.
func selfExe(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// publicExe copies this test binary where any user may run it.
func publicExe(t *testing.T) string {
	dir, err := daemon.MkdirTemp("gpud-go-exe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src, err := os.Open(selfExe(t))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "gpud-go-helper")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// helper runs a helper mode; its stdout lines are read by the test.
//
//	hold:   GPUD_SOCKET, HELPER_VRAM (bytes); holds the lease until a line (or the end) on
//	        stdin. Prints "connected", "granted UNIXNANO", "released UNIXNANO".
//	codes:  GPUD_SOCKET. Prints "drain CODE", "critical CODE", "normal CODE".
//	dial:   GPUD_SOCKET. Prints "dial CODE" ("ok" when welcomed).
func helper(mode string) int {
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", mode, err)
		return 1
	}
	code := func(err error) string {
		if err == nil {
			return "ok"
		}
		if c := CodeOf(err); c != "" {
			return string(c)
		}
		return "error:" + err.Error()
	}
	switch mode {
	case "hold":
		vram, _ := strconv.ParseUint(os.Getenv("HELPER_VRAM"), 10, 64)
		c, err := Dial(ctx, "")
		if err != nil {
			return fail(err)
		}
		fmt.Println("connected")
		l, err := c.Acquire(ctx, Request{VRAM: vram})
		if err != nil {
			return fail(err)
		}
		fmt.Println("granted", time.Now().UnixNano())
		bufio.NewReader(os.Stdin).ReadString('\n')
		released := time.Now().UnixNano()
		if err := l.Release(); err != nil {
			return fail(err)
		}
		fmt.Println("released", released)
		return 0
	case "codes":
		c, err := Dial(ctx, "")
		if err != nil {
			return fail(err)
		}
		fmt.Println("drain", code(c.Drain(ctx, "0")))
		_, err = c.Acquire(ctx, Request{Compute: true, Class: Critical})
		fmt.Println("critical", code(err))
		l, err := c.Acquire(ctx, Request{Compute: true})
		fmt.Println("normal", code(err))
		if err == nil {
			l.Release()
		}
		return 0
	case "dial":
		c, err := Dial(ctx, "")
		fmt.Println("dial", code(err))
		if err == nil {
			c.Close()
		}
		return 0
	}
	return fail(fmt.Errorf("unknown helper mode"))
}
