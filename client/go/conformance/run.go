package conformance

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	gpud "github.com/gpud/gpud/client/go"
	"github.com/gpud/gpud/client/go/internal/daemon"
)

// Time limits of the format.
const (
	stepLimit    = 10 * time.Second       // any wait of a step
	pendingPause = 200 * time.Millisecond // pending: still waiting this much later
	noticeLimit  = 2 * time.Second        // yield yes, revoked yes
	quietPause   = 300 * time.Millisecond // yield no
	rawLimit     = 5 * time.Second        // raw, rawfirst: the error arrives within this
	rawHello     = `{"type":"hello","version":1,"client":"gpud-conformance-raw"}`
)

// Options say how scenarios run.
type Options struct {
	// Gpud is the gpud binary.
	Gpud string
	// Logf, when set, gets a line per step.
	Logf func(format string, args ...interface{})
}

// StepError is a failed step: where, what was expected, what was seen.
type StepError struct {
	// Scenario is the scenario's name.
	Scenario string
	// Line is the step's line.
	Line int
	// Text is the step as written.
	Text string
	// Expected says what the step expected.
	Expected string
	// Seen says what happened.
	Seen string
	// Log is the end of gpud's log.
	Log string
}

// Error names the scenario, the line, and what was expected and seen.
func (e *StepError) Error() string {
	msg := fmt.Sprintf("scenario %s, line %d (%s): expected %s, saw %s", e.Scenario, e.Line, e.Text, e.Expected, e.Seen)
	if e.Log != "" {
		msg += "\n--- end of gpud's log ---\n" + e.Log
	}
	return msg
}

// begun is an acquire started by begin.
type begun struct {
	done  chan struct{}
	lease *gpud.Lease
	err   error
}

type runner struct {
	sc      Scenario
	opts    Options
	d       *daemon.Daemon
	ctx     context.Context
	clients map[string]*gpud.Client
	leases  map[string]*gpud.Lease
	begun   map[string]*begun
}

// Run runs one scenario on a fresh gpud and stops it at the end.
func Run(ctx context.Context, sc Scenario, opts Options) (err error) {
	dir, err := daemon.MkdirTemp("gpud-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d, err := daemon.Start(opts.Gpud, dir, sc.Simulate, daemon.ConfigText(sc.Config))
	if err != nil {
		return fmt.Errorf("scenario %s, line %d: %v", sc.Name, sc.Line, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &runner{sc: sc, opts: opts, d: d, ctx: ctx, clients: map[string]*gpud.Client{},
		leases: map[string]*gpud.Lease{}, begun: map[string]*begun{}}
	defer func() {
		cancel()
		for _, c := range r.clients {
			c.Close()
		}
		d.Stop()
		var se *StepError
		if errors.As(err, &se) {
			se.Log = tail(d.Log(), 40)
		}
	}()
	for _, st := range sc.Steps {
		if opts.Logf != nil {
			opts.Logf("%s:%d: %s", sc.Name, st.Line, st.Text)
		}
		expected, seen, ok := r.step(st)
		if !ok {
			return &StepError{Scenario: sc.Name, Line: st.Line, Text: st.Text, Expected: expected, Seen: seen}
		}
	}
	return nil
}

// RunFile parses a corpus and runs every scenario whose name keep accepts (nil: all),
// reporting each scenario's outcome to report.
func RunFile(ctx context.Context, path string, opts Options, keep func(name string) bool, report func(name string, err error)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	scenarios, err := Parse(f, path)
	if err != nil {
		return err
	}
	failed := 0
	for _, sc := range scenarios {
		if keep != nil && !keep(sc.Name) {
			continue
		}
		err := Run(ctx, sc, opts)
		if err != nil {
			failed++
		}
		report(sc.Name, err)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d scenarios failed", failed, len(scenarios))
	}
	return nil
}

func tail(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// seen names an outcome as the format does: "granted"/"ok", or the error's code.
func seen(err error, success string) string {
	if err == nil {
		return success
	}
	if c := gpud.CodeOf(err); c != "" {
		return string(c)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within 10 s"
	}
	return "error: " + err.Error()
}

func (r *runner) client(name string) (*gpud.Client, error) {
	if c, ok := r.clients[name]; ok {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, stepLimit)
	defer cancel()
	c, err := gpud.Dial(ctx, r.d.Socket)
	if err != nil {
		return nil, err
	}
	r.clients[name] = c
	return c, nil
}

func (r *runner) lease(name string) (*gpud.Lease, error) {
	l, ok := r.leases[name]
	if !ok {
		return nil, fmt.Errorf("no lease named %s was granted", name)
	}
	return l, nil
}

// request reads the acquire arguments of a step; wait is set when timeout= is given.
func request(args map[string]string) (gpud.Request, *time.Duration, error) {
	var req gpud.Request
	var wait *time.Duration
	if v, ok := args["vram"]; ok {
		n, err := size(v)
		if err != nil {
			return req, nil, err
		}
		req.VRAM = n
	}
	if v, ok := args["compute"]; ok {
		b, err := yesNo(v)
		if err != nil {
			return req, nil, err
		}
		req.Compute = b
	}
	req.Device = args["device"]
	req.Class = gpud.Class(args["class"])
	req.Label = args["label"]
	for key, to := range map[string]*uint64{"host_mem": &req.HostMemory, "pinned": &req.Pinned} {
		if v, ok := args[key]; ok {
			n, err := size(v)
			if err != nil {
				return req, nil, err
			}
			*to = n
		}
	}
	if v, ok := args["cpus"]; ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return req, nil, fmt.Errorf("cpus takes a number, not %q", v)
		}
		req.CPUs = uint32(n)
	}
	req.NUMA = args["numa"]
	if v, ok := args["timeout"]; ok {
		ms, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			return req, nil, fmt.Errorf("timeout takes milliseconds, not %q", v)
		}
		d := time.Duration(ms) * time.Millisecond
		if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
			d = time.Duration(math.MaxInt64)
		}
		wait = &d
	}
	return req, wait, nil
}

func size(v string) (uint64, error) {
	if v == "max" {
		return math.MaxUint64, nil
	}
	return gpud.ParseSize(v)
}

func yesNo(v string) (bool, error) {
	switch v {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	}
	return false, fmt.Errorf("expected yes or no, not %q", v)
}

// acquire runs an acquire: TryAcquire when the step gives a timeout (its "not in time" is
// timed_out), Acquire otherwise.
func acquire(ctx context.Context, c *gpud.Client, req gpud.Request, wait *time.Duration) (*gpud.Lease, error) {
	if wait == nil {
		return c.Acquire(ctx, req)
	}
	l, err := c.TryAcquire(ctx, req, *wait)
	if l == nil && err == nil {
		return nil, &gpud.Error{Code: gpud.CodeTimedOut, Message: "not granted within the timeout"}
	}
	return l, err
}

// step runs one step: what it expected, what it saw, and whether they agree.
func (r *runner) step(st Step) (string, string, bool) {
	bad := func(err error) (string, string, bool) { return "a valid step", err.Error(), false }
	switch st.Verb {
	case "sleep":
		time.Sleep(time.Duration(st.Millis) * time.Millisecond)
		return "", "", true
	case "raw", "rawfirst":
		got := r.raw(st.Verb == "raw", st.Frame)
		return "error " + st.Code, got, got == st.Code
	}
	if st.Verb == "drop" {
		if c, ok := r.clients[st.Client]; ok {
			c.Close()
			delete(r.clients, st.Client)
		}
		return "", "", true
	}
	c, err := r.client(st.Client)
	if err != nil {
		return "a session", seen(err, ""), false
	}
	ctx, cancel := context.WithTimeout(r.ctx, stepLimit)
	defer cancel()
	switch st.Verb {
	case "acquire":
		req, wait, err := request(st.Args)
		if err != nil {
			return bad(err)
		}
		l, err := acquire(ctx, c, req, wait)
		if l != nil {
			r.leases[st.Lease] = l
		}
		got := seen(err, "granted")
		return st.Expect, got, got == st.Expect
	case "begin":
		req, wait, err := request(st.Args)
		if err != nil {
			return bad(err)
		}
		if _, dup := r.begun[st.Lease]; dup {
			return bad(fmt.Errorf("%s was begun before", st.Lease))
		}
		b := &begun{done: make(chan struct{})}
		r.begun[st.Lease] = b
		go func() {
			defer close(b.done)
			b.lease, b.err = acquire(r.ctx, c, req, wait)
		}()
		return "", "", true
	case "pending":
		b, ok := r.begun[st.Lease]
		if !ok {
			return bad(fmt.Errorf("%s was not begun", st.Lease))
		}
		select {
		case <-b.done:
			return "still waiting", seen(b.err, "granted"), false
		case <-time.After(pendingPause):
			return "", "", true
		}
	case "await":
		b, ok := r.begun[st.Lease]
		if !ok {
			return bad(fmt.Errorf("%s was not begun", st.Lease))
		}
		select {
		case <-b.done:
		case <-time.After(stepLimit):
			return st.Expect, "no answer within 10 s", false
		}
		if b.lease != nil {
			r.leases[st.Lease] = b.lease
		}
		got := seen(b.err, "granted")
		return st.Expect, got, got == st.Expect
	case "release":
		l, err := r.lease(st.Lease)
		if err != nil {
			return bad(err)
		}
		got := seen(l.Release(), "ok")
		return st.Expect, got, got == st.Expect
	case "resize":
		l, err := r.lease(st.Lease)
		if err != nil {
			return bad(err)
		}
		host, ok := st.Args["host_mem"]
		v := st.Args["vram"]
		if ok {
			v = host
		}
		n, err := size(v)
		if err != nil {
			return bad(err)
		}
		if v, ok := st.Args["timeout"]; ok {
			ms, perr := strconv.ParseUint(v, 10, 31)
			if perr != nil {
				return bad(fmt.Errorf("timeout takes milliseconds, not %q", v))
			}
			if host != "" {
				err = l.ResizeHostMemoryTimeout(ctx, n, time.Duration(ms)*time.Millisecond)
			} else {
				err = l.ResizeTimeout(ctx, n, time.Duration(ms)*time.Millisecond)
			}
		} else if host != "" {
			err = l.ResizeHostMemory(ctx, n)
		} else {
			err = l.Resize(ctx, n)
		}
		got := seen(err, "ok")
		return st.Expect, got, got == st.Expect
	case "check":
		l, err := r.lease(st.Lease)
		if err != nil {
			return bad(err)
		}
		return check(l, st.Args)
	case "yield":
		l, err := r.lease(st.Lease)
		if err != nil {
			return bad(err)
		}
		return yield(l, st.Expect)
	case "revoked":
		l, err := r.lease(st.Lease)
		if err != nil {
			return bad(err)
		}
		return revoked(l, st.Expect)
	case "status":
		s, err := c.Status(ctx)
		if err != nil {
			return "a status", seen(err, ""), false
		}
		return counts(s, st.Args)
	case "drain", "undrain":
		if st.Verb == "drain" {
			err = c.Drain(ctx, st.Args["device"])
		} else {
			err = c.Undrain(ctx, st.Args["device"])
		}
		got := seen(err, "ok")
		return st.Expect, got, got == st.Expect
	case "revoke":
		id, err := r.leaseID(st.Lease)
		if err != nil {
			return bad(err)
		}
		got := seen(c.Revoke(ctx, id), "ok")
		return st.Expect, got, got == st.Expect
	}
	return bad(fmt.Errorf("verb %s is not run here", st.Verb))
}

// leaseID is a named lease's id; a name that is a number and names no lease is taken as an
// id (to revoke a lease that does not exist).
func (r *runner) leaseID(name string) (uint64, error) {
	if l, ok := r.leases[name]; ok {
		return l.ID(), nil
	}
	if id, err := strconv.ParseUint(name, 10, 64); err == nil {
		return id, nil
	}
	return 0, fmt.Errorf("no lease named %s was granted", name)
}

func check(l *gpud.Lease, args map[string]string) (string, string, bool) {
	var want, got []string
	if v, ok := args["vram"]; ok {
		n, err := size(v)
		if err != nil {
			return "a valid step", err.Error(), false
		}
		want = append(want, "vram="+strconv.FormatUint(n, 10))
		got = append(got, "vram="+strconv.FormatUint(l.VRAM(), 10))
	}
	if v, ok := args["compute"]; ok {
		b, err := yesNo(v)
		if err != nil {
			return "a valid step", err.Error(), false
		}
		want = append(want, "compute="+yn(b))
		got = append(got, "compute="+yn(l.Compute()))
	}
	if v, ok := args["device"]; ok {
		want = append(want, "device="+v)
		if _, err := strconv.ParseUint(v, 10, 32); err == nil {
			got = append(got, "device="+strconv.FormatUint(uint64(l.DeviceIndex()), 10))
		} else {
			got = append(got, "device="+l.DeviceUUID())
		}
	}
	for _, key := range []string{"host_mem", "pinned"} {
		v, ok := args[key]
		if !ok {
			continue
		}
		n, err := size(v)
		if err != nil {
			return "a valid step", err.Error(), false
		}
		has := l.HostMemory()
		if key == "pinned" {
			has = l.Pinned()
		}
		want = append(want, key+"="+strconv.FormatUint(n, 10))
		got = append(got, key+"="+strconv.FormatUint(has, 10))
	}
	if v, ok := args["cpus"]; ok {
		want = append(want, "cpus="+v)
		got = append(got, "cpus="+strconv.Itoa(len(l.CPUs())))
	}
	if v, ok := args["numa_node"]; ok {
		want = append(want, "numa_node="+v)
		if n, held := l.NUMANode(); held {
			got = append(got, "numa_node="+strconv.FormatUint(uint64(n), 10))
		} else {
			got = append(got, "numa_node=none")
		}
	}
	w, g := strings.Join(want, " "), strings.Join(got, " ")
	return w, g, w == g
}

func yn(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func yield(l *gpud.Lease, expect string) (string, string, bool) {
	switch expect {
	case "yes":
		select {
		case _, ok := <-l.Yield():
			if !ok {
				return "a yield notice within 2 s", "the lease ended (" + endReason(l) + ")", false
			}
			return "yes", "yes", true
		case <-time.After(noticeLimit):
			return "a yield notice within 2 s", "none", false
		}
	case "no":
		select {
		case _, ok := <-l.Yield():
			if !ok {
				return "no yield notice within 300 ms", "the lease ended (" + endReason(l) + ")", false
			}
			return "no yield notice within 300 ms", "a notice", false
		case <-time.After(quietPause):
			return "no", "no", true
		}
	}
	return "yes or no", expect, false
}

func endReason(l *gpud.Lease) string {
	if r := l.RevokeReason(); r != "" {
		return "revoked: " + string(r)
	}
	return "released"
}

func revoked(l *gpud.Lease, expect string) (string, string, bool) {
	switch expect {
	case "yes":
		select {
		case <-l.Revoked():
			return "yes", "yes", true
		case <-time.After(noticeLimit):
			return "revoked within 2 s", "still held", false
		}
	case "no":
		select {
		case <-l.Revoked():
			return "not revoked within 300 ms", "revoked: " + string(l.RevokeReason()), false
		case <-time.After(quietPause):
			return "no", "no", true
		}
	}
	return "yes or no", expect, false
}

func counts(s *gpud.Status, args map[string]string) (string, string, bool) {
	var want, got []string
	for _, k := range []string{"leases", "waiters", "devices"} {
		v, ok := args[k]
		if !ok {
			continue
		}
		n := map[string]int{"leases": len(s.Leases), "waiters": len(s.Waiters), "devices": len(s.Devices)}[k]
		want = append(want, k+"="+v)
		got = append(got, k+"="+strconv.Itoa(n))
	}
	w, g := strings.Join(want, " "), strings.Join(got, " ")
	return w, g, w == g
}

// raw opens a fresh connection, says hello when asked to, sends frame verbatim as one frame,
// and returns the code of the first error that comes back (a reply's, or the session's).
func (r *runner) raw(hello bool, frame string) string {
	conn, err := net.Dial("unix", r.d.Socket)
	if err != nil {
		return "no connection: " + err.Error()
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(rawLimit))
	reader := bufio.NewReader(conn)
	if hello {
		if err := send(conn, rawHello); err != nil {
			return "hello not sent: " + err.Error()
		}
		f, err := next(reader)
		if err != nil {
			return "no welcome: " + err.Error()
		}
		if f.Type != "welcome" {
			if code := f.code(); code != "" {
				return code
			}
			return "a " + f.Type + " frame instead of the welcome"
		}
	}
	// The daemon may close before reading all of it (a frame over its limit): what it said
	// counts, not the failed write.
	send(conn, frame)
	last := "nothing"
	for {
		f, err := next(reader)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return last + ", then the connection closed"
			}
			return last + ", then " + err.Error()
		}
		if code := f.code(); code != "" {
			return code
		}
		last = "a " + f.Type + " frame without an error"
	}
}

type rawFrame struct {
	Type    string          `json:"type"`
	Outcome json.RawMessage `json:"outcome"`
	Error   *struct {
		Code string `json:"code"`
	} `json:"error"`
}

func (f rawFrame) code() string {
	if f.Type == "error" && f.Error != nil {
		return f.Error.Code
	}
	if f.Type == "reply" {
		var o struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(f.Outcome, &o) == nil && o.Error != nil {
			return o.Error.Code
		}
	}
	return ""
}

func send(conn net.Conn, text string) error {
	buf := make([]byte, 4+len(text))
	binary.BigEndian.PutUint32(buf, uint32(len(text)))
	copy(buf[4:], text)
	_, err := conn.Write(buf)
	return err
}

func next(r *bufio.Reader) (rawFrame, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return rawFrame{}, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > gpud.MaxServerFrame {
		return rawFrame{}, fmt.Errorf("a frame of %d bytes", n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return rawFrame{}, err
	}
	var f rawFrame
	if err := json.Unmarshal(payload, &f); err != nil {
		return rawFrame{}, fmt.Errorf("a frame that is not JSON: %v", err)
	}
	return f, nil
}
