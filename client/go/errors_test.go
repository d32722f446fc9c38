package gpud

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
)

// Every sentinel, by code.
var sentinels = map[Code]*Error{
	CodeBadFrame: ErrBadFrame, CodeFrameTooLarge: ErrFrameTooLarge,
	CodeUnsupportedVersion: ErrUnsupportedVersion, CodeHelloRequired: ErrHelloRequired,
	CodeNotAllowed: ErrNotAllowed, CodePermissionDenied: ErrPermissionDenied,
	CodeInvalidRequest: ErrInvalidRequest, CodeUnknownDevice: ErrUnknownDevice,
	CodeNeverFits: ErrNeverFits, CodeUnknownLease: ErrUnknownLease,
	CodeUnknownRequest: ErrUnknownRequest, CodeDuplicateRequest: ErrDuplicateRequest,
	CodeResizePending: ErrResizePending, CodeTimedOut: ErrTimedOut, CodeCancelled: ErrCancelled,
	CodeLimitExceeded: ErrLimitExceeded, CodeShuttingDown: ErrShuttingDown, CodeInternal: ErrInternal,
	CodeGrowDeadlock:    ErrGrowDeadlock,
	CodeNoSuchProcess:   ErrNoSuchProcess,
	CodeNotProcessOwner: ErrNotProcessOwner,
	CodeNotDescendant:   ErrNotDescendant,
}

func snake(camel string) string {
	var b strings.Builder
	for i, r := range camel {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// The codes, the protocol version and the default socket are the Rust protocol crate's.
func TestVocabularyMatchesTheProtocolCrate(t *testing.T) {
	src, err := os.ReadFile(repoRoot + "/proto/src/message.rs")
	if err != nil {
		t.Skipf("skipped, no protocol crate here: %v", err)
	}
	text := string(src)
	enum := regexp.MustCompile(`(?s)pub enum ErrorCode \{(.*?)\n\}`).FindStringSubmatch(text)
	if enum == nil {
		t.Fatal("no ErrorCode enum in message.rs")
	}
	var rust []Code
	for _, m := range regexp.MustCompile(`(?m)^\s+([A-Z][A-Za-z]+),$`).FindAllStringSubmatch(enum[1], -1) {
		rust = append(rust, Code(snake(m[1])))
	}
	if len(rust) != len(Codes) {
		t.Fatalf("the protocol has codes %v, this package %v", rust, Codes)
	}
	for i := range rust {
		if rust[i] != Codes[i] {
			t.Fatalf("code %d: protocol %q, here %q", i, rust[i], Codes[i])
		}
	}
	v := regexp.MustCompile(`PROTOCOL_VERSION: u32 = (\d+);`).FindStringSubmatch(text)
	if v == nil || v[1] != "1" || ProtocolVersion != 1 {
		t.Fatalf("protocol version: crate %v, here %d", v, ProtocolVersion)
	}
	lib, err := os.ReadFile(repoRoot + "/proto/src/lib.rs")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lib), `DEFAULT_SOCKET: &str = "`+DefaultSocket+`"`) {
		t.Fatalf("DEFAULT_SOCKET is not %q in proto/src/lib.rs", DefaultSocket)
	}
	for _, class := range Classes {
		if !strings.Contains(string(mustRead(t, repoRoot+"/proto/src/class.rs")), `=> "`+string(class)+`"`) {
			t.Fatalf("class %q is not in class.rs", class)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every code a reply or an error frame carries becomes an *Error that matches its sentinel
// and no other.
func TestEveryCodeMapsToItsSentinel(t *testing.T) {
	if len(sentinels) != len(Codes) {
		t.Fatalf("%d sentinels for %d codes", len(sentinels), len(Codes))
	}
	for _, code := range Codes {
		reply := `{"ok":"pong"}`
		_, _, e, err := outcome(json.RawMessage(`{"error":{"code":"` + string(code) + `","message":"why"}}`))
		if err != nil || e == nil {
			t.Fatalf("%s: %v", code, err)
		}
		var f serverFrame
		json.Unmarshal([]byte(`{"type":"error","error":{"code":"`+string(code)+`","message":"why"}}`), &f)
		for _, got := range []error{e, f.Error.err(), &disconnected{cause: e}} {
			if CodeOf(got) != code || !strings.Contains(got.Error(), string(code)) {
				t.Fatalf("%s: %v", code, got)
			}
			for other, s := range sentinels {
				if errors.Is(got, s) != (other == code) {
					t.Fatalf("errors.Is(%v, %v) = %v", got, s, !(other == code))
				}
			}
		}
		if name, _, e, _ := outcome(json.RawMessage(reply)); name != "pong" || e != nil {
			t.Fatal("pong")
		}
	}
	// A code from a newer daemon is kept as it came.
	_, _, e, _ := outcome(json.RawMessage(`{"error":{"code":"brand_new","message":"m"}}`))
	if e.Code != "brand_new" || e.Error() != "gpud: brand_new: m" {
		t.Fatalf("unknown code: %v", e)
	}
	for _, s := range sentinels {
		if errors.Is(e, s) {
			t.Fatalf("an unknown code matches %v", s)
		}
	}
	// Connection errors match ErrDisconnected; withdrawn waits match ErrCancelled and the
	// context's error.
	d := &disconnected{cause: &Error{Code: CodeShuttingDown}}
	if !errors.Is(d, ErrDisconnected) || !errors.Is(d, ErrShuttingDown) || errors.Is(d, ErrClosed) {
		t.Fatal("disconnected")
	}
	w := &withdrawn{what: "acquire", ctx: context.Canceled}
	if !errors.Is(w, ErrCancelled) || !errors.Is(w, context.Canceled) || CodeOf(w) != "" {
		t.Fatal("withdrawn")
	}
	if !errors.Is(&SizeError{Input: "x", Why: "no number"}, ErrInvalidRequest) {
		t.Fatal("size errors are invalid requests")
	}
}

// rawSession is a connection that speaks frames by hand.
type rawSession struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func raw(t *testing.T, socket string, hello bool) *rawSession {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &rawSession{t: t, conn: conn, r: bufio.NewReader(conn)}
	if hello {
		s.send(`{"type":"hello","version":1}`)
		if f := s.next(); f.Type != "welcome" {
			t.Fatalf("no welcome: %+v", f)
		}
	}
	return s
}

func (s *rawSession) send(text string) {
	if err := writeFrame(s.conn, []byte(text)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *rawSession) next() serverFrame {
	s.t.Helper()
	s.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	payload, err := readFrame(s.r, MaxServerFrame)
	if err != nil {
		s.t.Fatalf("read: %v", err)
	}
	var f serverFrame
	if err := json.Unmarshal(payload, &f); err != nil {
		s.t.Fatal(err)
	}
	return f
}

// errorOf reads frames until an error (a reply's or the session's), mapped as the client
// maps it.
func (s *rawSession) errorOf() *Error {
	s.t.Helper()
	for {
		f := s.next()
		switch f.Type {
		case "error":
			return f.Error.err()
		case "reply":
			if _, _, e, _ := outcome(f.Outcome); e != nil {
				return e
			}
		}
	}
}

// Every error code that a client can meet, produced by a real daemon and mapped.
func TestEveryReachableCodeFromTheDaemon(t *testing.T) {
	d := startDaemon(t, "1x16GiB")
	c, other := dial(t, d), dial(t, d)
	ctx := timeout(t, 30*time.Second)
	seen := map[Code]bool{}
	must := func(err error, code Code) {
		t.Helper()
		mustCode(t, err, code)
		seen[code] = true
	}
	// Bypassing the client's own checks: the daemon's answer.
	direct := func(op interface{}) error {
		id, cl, err := c.start(op, "direct", nil)
		if err != nil {
			return err
		}
		_, err = c.wait(ctx, id, cl, "direct", false)
		return err
	}
	must(direct(map[string]acquireArgs{"acquire": {Device: "any", Class: Normal}}), CodeInvalidRequest)
	year := uint64(366 * 24 * 3600 * 1000)
	must(direct(map[string]acquireArgs{"acquire": {Device: "any", Class: Normal, Compute: true, TimeoutMS: &year}}), CodeInvalidRequest)
	must(direct(map[string]cancelArg{"cancel": {Request: 4242}}), CodeUnknownRequest)

	_, err := c.Acquire(ctx, Request{VRAM: gib, Device: "7"})
	must(err, CodeUnknownDevice)
	_, err = c.Acquire(ctx, Request{VRAM: gib, Device: "GPU-00000000-0000-0000-0000-000000000000"})
	must(err, CodeUnknownDevice)
	_, err = c.Acquire(ctx, Request{VRAM: 16*gib + 1})
	must(err, CodeNeverFits)

	a, err := c.Acquire(ctx, Request{VRAM: 8 * gib})
	if err != nil {
		t.Fatal(err)
	}
	must(a.Resize(ctx, 0), CodeInvalidRequest) // a memory-only lease cannot shrink to nothing
	// attach (by hand: the Go client does not supervise programs): a pid that has exited, and
	// a process that is not the caller's descendant (init).
	attach := func(pid int) error {
		return direct(map[string]interface{}{"attach": map[string]interface{}{
			"lease": a.ID(), "pid": pid, "enforced_by": "supervised", "end_with_session": false,
		}})
	}
	gone, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Wait(); err != nil {
		t.Fatal(err)
	}
	must(attach(gone.Pid), CodeNoSuchProcess)
	if os.Geteuid() == 0 {
		must(attach(1), CodeNotDescendant)
	} else {
		must(attach(1), CodeNotProcessOwner)
	}
	b, err := other.Acquire(ctx, Request{VRAM: 8 * gib})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, Request{VRAM: gib, Timeout: 50 * time.Millisecond})
	must(err, CodeTimedOut)
	if l, err := c.TryAcquire(ctx, Request{VRAM: gib}, 0); l != nil || err != nil {
		t.Fatalf("TryAcquire on a full device: %v, %v", l, err)
	}

	// A second grow while one waits; the waiting grow ends when its lease does.
	grow := make(chan error, 1)
	go func() { grow <- a.Resize(ctx, 12*gib) }()
	eventually(t, 5*time.Second, "the grow waits", waiters(t, c, 1))
	must(a.Resize(ctx, 13*gib), CodeResizePending)
	// The other lease grows too, into memory only the first holds: the younger grow fails.
	must(b.Resize(ctx, 12*gib), CodeGrowDeadlock)
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-grow:
		must(err, CodeCancelled)
		if errors.Is(err, context.Canceled) {
			t.Fatal("the daemon's cancel is not the context's")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the grow of a released lease is still waiting")
	}
	must(a.Release(), CodeUnknownLease)
	must(c.Revoke(ctx, 999999), CodeUnknownLease)

	// Limits: two leases per session, one waiting request.
	dl := startDaemon(t, "1x16GiB", "limits.max_leases_per_session = 2", "limits.max_outstanding_requests = 1")
	cl := dial(t, dl)
	l1, err := cl.Acquire(ctx, Request{VRAM: 8 * gib})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := cl.Acquire(ctx, Request{VRAM: 8 * gib})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Acquire(ctx, Request{Compute: true})
	must(err, CodeLimitExceeded)
	l2.Release()
	queued := acquireAsync(ctx, cl, Request{VRAM: 16 * gib})
	eventually(t, 5*time.Second, "one request waits", waiters(t, cl, 1))
	_, err = cl.Acquire(ctx, Request{VRAM: 9 * gib})
	must(err, CodeLimitExceeded)
	l1.Release()
	if o := await(t, queued, 2*time.Second); o.err != nil {
		t.Fatal(o.err)
	}

	// A request id in use by a waiting request (the client never reuses ids: by hand).
	r := raw(t, d.Socket, true)
	r.send(`{"type":"request","id":1,"op":{"acquire":{"vram_bytes":16000000000}}}`)
	r.send(`{"type":"request","id":1,"op":{"acquire":{"vram_bytes":16000000000}}}`)
	must(r.errorOf(), CodeDuplicateRequest)
	r.conn.Close()
	eventually(t, 5*time.Second, "the raw session's request is gone", waiters(t, c, 0))

	// Session errors: the daemon closes the session after them.
	cases := []struct {
		hello bool
		frame []byte
		code  Code
	}{
		{true, []byte("not json"), CodeBadFrame},
		{true, []byte(`{"type":"request","id":1,"op":{"acquire":{"vram":1}}}`), CodeBadFrame},
		{true, []byte(`{"type":"hello","version":1}`), CodeBadFrame},
		{false, []byte(`{"type":"request","id":1,"op":"ping"}`), CodeHelloRequired},
		{false, []byte(`{"type":"hello","version":2}`), CodeUnsupportedVersion},
	}
	for _, k := range cases {
		r := raw(t, d.Socket, k.hello)
		r.send(string(k.frame))
		got := r.errorOf()
		if got.Code != k.code {
			t.Fatalf("%s: %v, want %s", k.frame, got, k.code)
		}
		seen[got.Code] = true
	}
	big := raw(t, d.Socket, true)
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], 1<<20)
	big.conn.Write(head[:])
	must(big.errorOf(), CodeFrameTooLarge)

	// Through the client: a hello of another version, and a session error frame on a live
	// connection, which fails what waits and loses what is held.
	_, err = DialWith(ctx, d.Socket, Options{version: 2})
	must(err, CodeUnsupportedVersion)
	victim := dial(t, d)
	held, err := victim.Acquire(ctx, Request{Compute: true})
	if err != nil {
		t.Fatal(err)
	}
	waiting := acquireAsync(ctx, victim, Request{VRAM: 16 * gib})
	eventually(t, 5*time.Second, "the victim waits", waiters(t, c, 1))
	victim.wmu.Lock()
	writeFrame(victim.conn, []byte("garbage"))
	victim.wmu.Unlock()
	o := await(t, waiting, 5*time.Second)
	must(o.err, CodeBadFrame)
	if !errors.Is(o.err, ErrDisconnected) || !errors.Is(victim.Err(), ErrBadFrame) {
		t.Fatalf("session error: %v / %v", o.err, victim.Err())
	}
	select {
	case <-held.Revoked():
	case <-time.After(2 * time.Second):
		t.Fatal("the held lease is not lost")
	}
	if held.RevokeReason() != RevokedLost {
		t.Fatalf("reason %q", held.RevokeReason())
	}
	b.Release()

	// A daemon that stops: shutting_down.
	d2 := startDaemon(t, "1x16GiB")
	c2 := dial(t, d2)
	h2, err := c2.Acquire(ctx, Request{VRAM: 16 * gib})
	if err != nil {
		t.Fatal(err)
	}
	w2 := acquireAsync(ctx, c2, Request{VRAM: gib})
	eventually(t, 5*time.Second, "the waiter waits", waiters(t, c2, 1))
	if err := d2.Terminate(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	o = await(t, w2, 5*time.Second)
	must(o.err, CodeShuttingDown)
	if !errors.Is(o.err, ErrDisconnected) || !errors.Is(c2.Err(), ErrShuttingDown) {
		t.Fatalf("shutdown: %v / %v", o.err, c2.Err())
	}
	<-h2.Revoked()
	if _, err := c2.Status(ctx); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("status after shutdown: %v", err)
	}

	// Codes that need a peer that is not root.
	if os.Geteuid() == 0 {
		exe := publicExe(t)
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: false}
		closed := startDaemon(t, "1x16GiB", `socket_mode = "0666"`)
		h := startHelper(t, exe, "dial", nobody, "GPUD_SOCKET="+closed.Socket)
		if got := h.expect("dial", 10*time.Second); got != string(CodeNotAllowed) {
			t.Fatalf("a uid outside the allow list: %s", got)
		}
		seen[CodeNotAllowed] = true
		open := startDaemon(t, "1x16GiB", `socket_mode = "0666"`, "access.allowed_uids = [65534]")
		h = startHelper(t, exe, "codes", nobody, "GPUD_SOCKET="+open.Socket)
		if got := h.expect("drain", 10*time.Second); got != string(CodePermissionDenied) {
			t.Fatalf("drain by a user: %s", got)
		}
		if got := h.expect("critical", 5*time.Second); got != string(CodeNotAllowed) {
			t.Fatalf("critical by a user: %s", got)
		}
		if got := h.expect("normal", 5*time.Second); got != "ok" {
			t.Fatalf("normal by a user: %s", got)
		}
		seen[CodePermissionDenied] = true
	} else {
		t.Log("not root: not_allowed and permission_denied need a second uid and are not checked")
	}

	for _, code := range Codes {
		// Root may attach any user's process, so not_process_owner needs a caller that is not
		// root (checked then, above), and not_descendant one that is.
		byRoot := code != CodeNotProcessOwner
		if os.Geteuid() != 0 {
			byRoot = code != CodeNotAllowed && code != CodePermissionDenied && code != CodeNotDescendant
		}
		if !seen[code] && code != CodeInternal && byRoot {
			t.Errorf("code %s was not produced", code)
		}
	}
}
