package gpud

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// DefaultSocket is where gpud listens unless told otherwise.
const DefaultSocket = "/run/gpud/gpud.sock"

// DefaultSocketPath returns the socket path every gpud tool uses: $GPUD_SOCKET when it is set
// and not empty, else DefaultSocket.
func DefaultSocketPath() string {
	if p := os.Getenv("GPUD_SOCKET"); p != "" {
		return p
	}
	return DefaultSocket
}

// maxLabel is the longest label the daemon keeps, in bytes.
const maxLabel = 256

// maxTimeout is the longest wait a request may ask for (a year).
const maxTimeout = 365 * 24 * time.Hour

// handshakeLimit bounds the hello when the context has no deadline.
const handshakeLimit = 10 * time.Second

// cancelGrace is how long a wait whose context ended waits for the daemon to confirm that the
// request was withdrawn, before it returns anyway.
const cancelGrace = time.Second

// Request is what an acquire asks for: memory and/or the compute slot of one device, host
// resources (host memory, page-locked memory, CPUs of one NUMA node), or both, granted together
// or not at all. A request with host resources and no device part (no VRAM, no compute slot)
// is a lease of the host alone.
type Request struct {
	// VRAM is the number of bytes of device memory to reserve (ParseSize reads "12GiB").
	VRAM uint64
	// Compute asks for the device's compute slot. A request must ask for memory, the compute
	// slot, or both.
	Compute bool
	// Device selects the device: "" or "any" (gpud chooses), an index ("0", DeviceIndex(0)),
	// or a UUID.
	Device string
	// Class is the priority class; "" means Normal.
	Class Class
	// Timeout makes the daemon give up waiting after this long (ErrTimedOut); 0 waits until
	// granted or until the context ends. It is sent in whole milliseconds, rounded up, and may
	// be at most a year.
	Timeout time.Duration
	// Label is a note shown in status (a job name): at most 256 bytes of printable text.
	Label string

	// HostMemory is the number of bytes of host memory to reserve (what the lease's processes
	// keep resident; gpud books at least Pinned here). Host resources need a daemon whose
	// welcome lists FeatureHost (Client.Speaks); docs/HOST.md describes how they are booked.
	HostMemory uint64
	// Pinned is the number of bytes of page-locked host memory to reserve (CUDA staging
	// buffers, registered bases).
	Pinned uint64
	// CPUs is the number of CPUs to take, all of one NUMA node; the grant names them
	// (Lease.CPUs).
	CPUs uint32
	// NUMA says which node the CPUs come from: "" or NUMAAny (any node with room), NUMANear
	// (the node of the lease's device), or NUMANode(n).
	NUMA string
}

// wire checks the request and returns its wire form; timeoutMS, when set, replaces Timeout.
func (r Request) wire(timeoutMS *uint64) (acquireArgs, error) {
	class := r.Class
	if class == "" {
		class = Normal
	}
	if !class.Valid() {
		return acquireArgs{}, invalid("unknown class %q (expected critical, high, normal or background)", string(r.Class))
	}
	device, err := normalizeDevice(r.Device)
	if err != nil {
		return acquireArgs{}, err
	}
	host, err := r.host()
	if err != nil {
		return acquireArgs{}, err
	}
	if r.VRAM == 0 && !r.Compute && host == nil {
		return acquireArgs{}, invalid("a lease must reserve memory, the compute slot, or both")
	}
	args := acquireArgs{Device: device, VRAMBytes: r.VRAM, Compute: r.Compute, Class: class, Host: host}
	// Inside a scheduler's job with a gpud budget, leases come from the budget.
	if handle := os.Getenv("GPUD_BUDGET"); handle != "" {
		args.Budget = &handle
	}
	switch {
	case timeoutMS != nil:
		args.TimeoutMS = timeoutMS
	case r.Timeout != 0:
		ms, err := millis(r.Timeout)
		if err != nil {
			return acquireArgs{}, err
		}
		args.TimeoutMS = &ms
	}
	if r.Label != "" {
		if err := checkLabel(r.Label); err != nil {
			return acquireArgs{}, err
		}
		label := r.Label
		args.Label = &label
	}
	return args, nil
}

// millis converts a timeout to the wire's milliseconds, rounding up.
func millis(d time.Duration) (uint64, error) {
	if d < 0 {
		return 0, invalid("timeout %v is negative", d)
	}
	if d > maxTimeout {
		return 0, invalid("timeout %v is over a year; use no timeout to wait without one", d)
	}
	return uint64((d + time.Millisecond - 1) / time.Millisecond), nil
}

func checkLabel(label string) error {
	if len(label) > maxLabel || !utf8.ValidString(label) {
		return invalid("label must be at most %d bytes of printable text", maxLabel)
	}
	for _, r := range label {
		if unicode.IsControl(r) {
			return invalid("label must be at most %d bytes of printable text", maxLabel)
		}
	}
	return nil
}

// Options change how DialWith opens a session.
type Options struct {
	// Name is the client name given in the hello, shown in the daemon's logs; default: the
	// program's name.
	Name string

	// version replaces ProtocolVersion in the hello (tests).
	version uint32
}

// OverUse is the daemon's notice that this session's processes use more memory on a device
// than its leases there reserve (NVML audit).
type OverUse struct {
	// DeviceIndex is the device.
	DeviceIndex uint32
	// UsedBytes is the memory the session's processes use there.
	UsedBytes uint64
	// ReservedBytes is the memory its leases reserve there.
	ReservedBytes uint64
	// RevokeIn is when the daemon revokes the session's leases there if the use does not
	// drop; meaningful only when Revokes is true.
	RevokeIn time.Duration
	// Revokes is true under the "revoke" audit policy.
	Revokes bool
}

// Client is one session with gpud: one Unix socket connection that carries any number of
// leases and concurrent requests. Its methods may be called from any goroutine. A reader
// goroutine routes the daemon's replies to their callers and its events to their leases.
//
// When the connection ends, whatever the reason, the daemon frees every lease of the session
// and withdraws every waiting request; the client then reports its leases lost (Lease.Revoked)
// and its calls fail with an error that matches ErrDisconnected (or ErrClosed after Close).
type Client struct {
	path     string
	conn     net.Conn
	session  uint64
	daemon   string
	features []string
	nextID   uint64 // atomic

	wmu sync.Mutex // one frame at a time on the socket

	mu      sync.Mutex
	pending map[uint64]*call // nil once the connection ended
	leases  map[uint64]*Lease
	closed  bool  // Close was called
	cause   error // why the daemon ended the session, when it said
	err     error // set when done is closed
	done    chan struct{}
	overUse chan OverUse
}

// call is one request waiting for its reply.
type call struct {
	kind      string
	lease     *Lease
	ch        chan result // buffered: the reader never blocks on it
	abandoned bool        // nobody waits any more (guarded by Client.mu)
}

// result is a reply as the reader hands it to its caller.
type result struct {
	name  string
	body  json.RawMessage
	lease *Lease
	err   error
}

// Dial connects to gpud at path and says hello. An empty path means DefaultSocketPath(). The
// context bounds the connection and the hello (10 s when it has no deadline); it does not
// bound the session.
//
// A daemon that refuses the session returns an *Error (CodeNotAllowed, CodeLimitExceeded,
// CodeUnsupportedVersion), wrapped with the socket's path.
func Dial(ctx context.Context, path string) (*Client, error) {
	return DialWith(ctx, path, Options{})
}

// DialWith is Dial with options.
func DialWith(ctx context.Context, path string, opts Options) (*Client, error) {
	if path == "" {
		path = DefaultSocketPath()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("gpud: cannot connect to gpud at %s: %w", path, ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("gpud: cannot connect to gpud at %s: %w (is gpud running? the socket is chosen with GPUD_SOCKET)", path, err)
	}
	c := &Client{
		path:    path,
		conn:    conn,
		pending: map[uint64]*call{},
		leases:  map[uint64]*Lease{},
		done:    make(chan struct{}),
		overUse: make(chan OverUse, 16),
	}
	reader := bufio.NewReaderSize(conn, 64<<10)
	if err := c.hello(ctx, reader, opts); err != nil {
		conn.Close()
		return nil, err
	}
	go c.read(reader)
	return c, nil
}

// hello sends the hello and reads the welcome, within the context.
func (c *Client) hello(ctx context.Context, reader *bufio.Reader, opts Options) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(handshakeLimit)
	}
	c.conn.SetDeadline(deadline)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			c.conn.SetDeadline(time.Unix(1, 0))
		case <-stop:
		}
	}()
	defer func() {
		close(stop)
		<-stopped
		c.conn.SetDeadline(time.Time{})
	}()
	name := opts.Name
	if name == "" && len(os.Args) > 0 {
		name = filepath.Base(os.Args[0])
	}
	version := opts.version
	if version == 0 {
		version = ProtocolVersion
	}
	payload, _ := json.Marshal(helloFrame{Type: "hello", Version: version, Client: name})
	// A daemon that refuses the session answers and closes without reading the hello: a
	// failed write is not the end, the refusal may be waiting to be read.
	werr := writeFrame(c.conn, payload)
	answer, rerr := readFrame(reader, MaxServerFrame)
	if rerr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("gpud: hello to %s: %w", c.path, ctx.Err())
		}
		if werr != nil {
			rerr = werr
		}
		return fmt.Errorf("gpud: %s closed the connection before welcoming it: %w", c.path, rerr)
	}
	var f serverFrame
	if err := json.Unmarshal(answer, &f); err != nil {
		return fmt.Errorf("gpud: %s answered the hello with a frame that is not JSON: %v", c.path, err)
	}
	switch {
	case f.Type == "welcome":
		c.session, c.daemon, c.features = f.Session, f.Daemon, f.Features
		return nil
	case f.Type == "error" && f.Error != nil:
		return fmt.Errorf("gpud at %s refused the session: %w", c.path, f.Error.err())
	}
	return fmt.Errorf("gpud: %s answered the hello with a %q frame", c.path, f.Type)
}

// Session returns the daemon's id for this session, as status shows it.
func (c *Client) Session() uint64 { return c.session }

// Daemon returns the daemon's name and version from its welcome ("gpud 0.1.0").
func (c *Client) Daemon() string { return c.daemon }

// Features returns the optional protocol additions the daemon's welcome lists (such as
// FeatureHost); empty for older daemons.
func (c *Client) Features() []string { return append([]string(nil), c.features...) }

// Speaks reports whether the daemon's welcome lists feature.
func (c *Client) Speaks(feature string) bool {
	for _, f := range c.features {
		if f == feature {
			return true
		}
	}
	return false
}

// Path returns the socket path the client connected to.
func (c *Client) Path() string { return c.path }

// Done returns a channel that is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection is up; after it ended, the error its calls fail with
// (ErrClosed after Close; otherwise an error matching ErrDisconnected, and the daemon's code
// when it said why, such as ErrShuttingDown).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// OverUse returns the channel the daemon's over-use notices arrive on. Notices that find it
// full are dropped.
func (c *Client) OverUse() <-chan OverUse { return c.overUse }

// Close ends the session: the daemon frees every lease it holds (they report
// RevokedLost) and withdraws every waiting request (they fail with ErrClosed). Close waits
// until the reader goroutine has finished; calling it again does nothing.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.conn.Close()
	<-c.done
	return nil
}

// read is the reader goroutine: it dispatches every frame until the connection ends.
func (c *Client) read(r *bufio.Reader) {
	var err error
	for {
		payload, e := readFrame(r, MaxServerFrame)
		if e != nil {
			err = e
			break
		}
		var f serverFrame
		if e := json.Unmarshal(payload, &f); e != nil {
			err = fmt.Errorf("gpud sent a frame that is not JSON: %v", e)
			break
		}
		c.dispatch(&f)
	}
	c.teardown(err)
}

// dispatch routes one frame: replies to their callers, events to their leases.
func (c *Client) dispatch(f *serverFrame) {
	switch f.Type {
	case "reply":
		c.reply(f.ID, f.Outcome)
	case "event":
		c.event(f.Event)
	case "error":
		if f.Error != nil {
			c.mu.Lock()
			c.cause = f.Error.err()
			c.mu.Unlock()
		}
	}
}

func (c *Client) reply(id uint64, raw json.RawMessage) {
	name, body, derr, perr := outcome(raw)
	res := result{name: name, body: body}
	switch {
	case perr != nil:
		res.err = fmt.Errorf("gpud: cannot read the reply to request %d: %v", id, perr)
	case derr != nil:
		res.err = derr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.pending[id]
	delete(c.pending, id)
	if res.err == nil {
		switch name {
		case "granted":
			var info LeaseInfo
			if err := json.Unmarshal(body, &info); err != nil {
				res.err = fmt.Errorf("gpud: cannot read a grant: %v", err)
				break
			}
			l := newLease(c, info)
			c.leases[info.ID] = l
			res.lease = l
		case "resized":
			var r struct {
				Lease     uint64 `json:"lease"`
				VRAMBytes uint64 `json:"vram_bytes"`
			}
			if err := json.Unmarshal(body, &r); err == nil {
				if l := c.leases[r.Lease]; l != nil {
					// A resize of host memory answers with the host memory's size.
					if cl != nil && cl.kind == "resize_host" {
						l.setHostMem(r.VRAMBytes)
					} else {
						l.setVRAM(r.VRAMBytes)
					}
				}
			}
		case "released":
			var r leaseArg
			if err := json.Unmarshal(body, &r); err == nil {
				if l := c.leases[r.Lease]; l != nil {
					delete(c.leases, r.Lease)
					l.end("")
				}
			}
		}
	}
	if cl == nil || cl.abandoned {
		// Nobody waits: a grant goes straight back.
		if res.lease != nil {
			delete(c.leases, res.lease.info.ID)
			res.lease.end(RevokedLost)
			go c.fire(leaseOp("release", res.lease.info.ID))
		}
		return
	}
	cl.ch <- res
}

func (c *Client) event(raw json.RawMessage) {
	name, body, err := variant(raw)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch name {
	case "yield_requested":
		var e yieldEvent
		if json.Unmarshal(body, &e) != nil {
			return
		}
		if l := c.leases[e.Lease]; l != nil {
			n := YieldNotice{Lease: e.Lease, Reason: YieldReason(e.Reason)}
			if e.RevokeInMS != nil {
				n.Revokes = true
				n.RevokeIn = time.Duration(*e.RevokeInMS) * time.Millisecond
			}
			l.notify(n)
		}
	case "revoked":
		var e revokedEvent
		if json.Unmarshal(body, &e) != nil {
			return
		}
		if l := c.leases[e.Lease]; l != nil {
			delete(c.leases, e.Lease)
			reason := RevokeReason(e.Reason)
			if reason == "" {
				reason = RevokedAdmin
			}
			l.end(reason)
		}
	case "over_use":
		var e overUseEvent
		if json.Unmarshal(body, &e) != nil {
			return
		}
		n := OverUse{DeviceIndex: e.DeviceIndex, UsedBytes: e.UsedBytes, ReservedBytes: e.ReservedBytes}
		if e.RevokeInMS != nil {
			n.Revokes = true
			n.RevokeIn = time.Duration(*e.RevokeInMS) * time.Millisecond
		}
		select {
		case c.overUse <- n:
		default:
		}
	case "shutting_down":
		c.cause = &Error{Code: CodeShuttingDown, Message: "gpud is stopping"}
	}
}

// teardown ends the session on the client's side: every waiting call fails, every lease is
// lost.
func (c *Client) teardown(readErr error) {
	c.conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		c.err = ErrClosed
	case c.cause != nil:
		c.err = &disconnected{cause: c.cause}
	case readErr == nil || errors.Is(readErr, io.EOF):
		c.err = &disconnected{cause: errors.New("gpud closed the connection")}
	default:
		c.err = &disconnected{cause: readErr}
	}
	for _, cl := range c.pending {
		if !cl.abandoned {
			cl.ch <- result{err: c.err}
		}
	}
	for _, l := range c.leases {
		l.end(RevokedLost)
	}
	c.pending, c.leases = nil, nil
	close(c.done)
}

// start registers a request and sends it.
func (c *Client) start(op interface{}, kind string, lease *Lease) (uint64, *call, error) {
	id := atomic.AddUint64(&c.nextID, 1)
	payload, err := json.Marshal(requestFrame{Type: "request", ID: id, Op: op})
	if err != nil {
		return 0, nil, fmt.Errorf("gpud: cannot encode a request: %v", err)
	}
	cl := &call{kind: kind, lease: lease, ch: make(chan result, 1)}
	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.pending[id] = cl
	c.mu.Unlock()
	c.wmu.Lock()
	err = writeFrame(c.conn, payload)
	c.wmu.Unlock()
	if err != nil {
		// The reader sees the end too and fails every waiting call, this one included.
		c.conn.Close()
	}
	return id, cl, nil
}

// fire sends a request whose answer nobody needs.
func (c *Client) fire(op interface{}) {
	id, cl, err := c.start(op, "fire", nil)
	if err == nil {
		c.abandon(id, cl)
	}
}

// abandon stops waiting for a call; a grant that already came (or comes later) is given back.
func (c *Client) abandon(id uint64, cl *call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != nil && c.pending[id] == cl {
		cl.abandoned = true
		return
	}
	select {
	case r := <-cl.ch:
		c.giveBack(r)
	default:
	}
}

// giveBack releases a grant that its caller no longer wants (called with c.mu held).
func (c *Client) giveBack(r result) {
	if r.lease == nil {
		return
	}
	if c.leases != nil {
		delete(c.leases, r.lease.info.ID)
	}
	r.lease.end(RevokedLost)
	go c.fire(leaseOp("release", r.lease.info.ID))
}

// wait waits for a call's reply. When the context ends first, a waiting acquire or resize
// (withdraw set) is cancelled on the daemon and the wait returns an error matching both the
// context's error and ErrCancelled; other calls are abandoned with the context's error.
func (c *Client) wait(ctx context.Context, id uint64, cl *call, what string, withdraw bool) (result, error) {
	select {
	case r := <-cl.ch:
		return r, r.err
	case <-ctx.Done():
	}
	if !withdraw {
		c.abandon(id, cl)
		return result{}, ctx.Err()
	}
	c.fire(map[string]cancelArg{"cancel": {Request: id}})
	timer := time.NewTimer(cancelGrace)
	defer timer.Stop()
	select {
	case r := <-cl.ch:
		switch {
		case r.err == nil && r.lease != nil:
			// Granted before the cancel arrived: give it back.
			c.mu.Lock()
			c.giveBack(r)
			c.mu.Unlock()
		case r.err == nil:
			// A resize that took effect before the cancel: it stands.
			return r, nil
		case !errors.Is(r.err, ErrCancelled):
			return r, r.err
		}
	case <-timer.C:
		c.abandon(id, cl)
	}
	return result{}, &withdrawn{what: what, ctx: ctx.Err()}
}

// request sends op and waits for its reply, which must be named want (any name when want
// is "").
func (c *Client) request(ctx context.Context, op interface{}, kind, want string) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	id, cl, err := c.start(op, kind, nil)
	if err != nil {
		return result{}, err
	}
	r, err := c.wait(ctx, id, cl, kind, false)
	if err != nil {
		return r, err
	}
	if want != "" && r.name != want {
		return r, fmt.Errorf("gpud: %s answered with %q", kind, r.name)
	}
	return r, nil
}

func leaseOp(name string, lease uint64) map[string]leaseArg {
	return map[string]leaseArg{name: {Lease: lease}}
}

// Acquire asks for a lease and waits until it is granted, refused (an *Error), timed out
// (ErrTimedOut, when req.Timeout is set) or until ctx ends. When ctx ends first, the waiting
// request is cancelled on the daemon, and Acquire returns an error that matches both ctx's
// error and ErrCancelled; a grant that crossed the cancel is released.
//
// Arguments the daemon would refuse (an unknown class or device selector, nothing asked, a
// bad label or timeout) are refused before sending, with CodeInvalidRequest.
func (c *Client) Acquire(ctx context.Context, req Request) (*Lease, error) {
	return c.acquire(ctx, req, nil)
}

// TryAcquire is Acquire with the daemon's timeout set to wait (0: only if it can be granted
// at once). It returns a nil lease and a nil error when the lease was not granted in time;
// other refusals are errors as with Acquire.
func (c *Client) TryAcquire(ctx context.Context, req Request, wait time.Duration) (*Lease, error) {
	ms, err := millis(wait)
	if err != nil {
		return nil, err
	}
	l, err := c.acquire(ctx, req, &ms)
	if err != nil && CodeOf(err) == CodeTimedOut && !errors.Is(err, ErrDisconnected) {
		return nil, nil
	}
	return l, err
}

func (c *Client) acquire(ctx context.Context, req Request, timeoutMS *uint64) (*Lease, error) {
	args, err := req.wire(timeoutMS)
	if err != nil {
		return nil, err
	}
	if args.Host != nil && !c.Speaks(FeatureHost) {
		return nil, invalid("this gpud books no host resources (its welcome does not list %q: it is older than this client)", FeatureHost)
	}
	if err := ctx.Err(); err != nil {
		return nil, &withdrawn{what: "acquire", ctx: err}
	}
	id, cl, err := c.start(map[string]acquireArgs{"acquire": args}, "acquire", nil)
	if err != nil {
		return nil, err
	}
	r, err := c.wait(ctx, id, cl, "acquire", true)
	if err != nil {
		return nil, err
	}
	if r.lease == nil {
		return nil, fmt.Errorf("gpud: acquire answered with %q", r.name)
	}
	return r.lease, nil
}

// Status returns the daemon's devices, leases and queues. When the daemon pages its answer
// (a reply with a "more" cursor), Status asks for the following pages and returns the
// leases and waiters of all of them.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	r, err := c.request(ctx, "status", "status", "status")
	if err != nil {
		return nil, err
	}
	var page statusPage
	if err := json.Unmarshal(r.body, &page); err != nil {
		return nil, fmt.Errorf("gpud: cannot read the status: %v", err)
	}
	status := page.Status
	more := page.More
	for pages := 1; hasCursor(more); pages++ {
		if pages > 1<<20 {
			return nil, errors.New("gpud: the status has more than 2^20 pages")
		}
		r, err := c.request(ctx, map[string]json.RawMessage{"status_page": more}, "status_page", "")
		if err != nil {
			return nil, err
		}
		if r.name != "status" && r.name != "status_page" {
			return nil, fmt.Errorf("gpud: status_page answered with %q", r.name)
		}
		var next statusPage
		if err := json.Unmarshal(r.body, &next); err != nil {
			return nil, fmt.Errorf("gpud: cannot read a status page: %v", err)
		}
		status.Leases = append(status.Leases, next.Leases...)
		status.Waiters = append(status.Waiters, next.Waiters...)
		more = next.More
	}
	return &status, nil
}

func hasCursor(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// Ping makes a round trip with no effect.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.request(ctx, "ping", "ping", "pong")
	return err
}

// Metrics returns the daemon's metrics in the Prometheus text format (docs/METRICS.md).
func (c *Client) Metrics(ctx context.Context) (string, error) {
	r, err := c.request(ctx, "metrics", "metrics", "metrics")
	if err != nil {
		return "", err
	}
	var m struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil {
		return "", fmt.Errorf("gpud: cannot read the metrics: %v", err)
	}
	return m.Text, nil
}

// Drain stops new grants on a device (an index such as "0", or a UUID; "any" names no
// device: ErrUnknownDevice); leases there stay. Admin only (ErrPermissionDenied otherwise).
func (c *Client) Drain(ctx context.Context, device string) error {
	return c.admin(ctx, "drain", device)
}

// Undrain lets a drained device grant again. Admin only.
func (c *Client) Undrain(ctx context.Context, device string) error {
	return c.admin(ctx, "undrain", device)
}

func (c *Client) admin(ctx context.Context, op, device string) error {
	d, err := normalizeDevice(device)
	if err != nil {
		return err
	}
	_, err = c.request(ctx, map[string]deviceArg{op: {Device: d}}, op, "done")
	return err
}

// Revoke takes a lease (of any session) away from its holder, who gets a revoked notice.
// Admin only; ErrUnknownLease when no such lease exists.
func (c *Client) Revoke(ctx context.Context, lease uint64) error {
	_, err := c.request(ctx, leaseOp("revoke", lease), "revoke", "done")
	return err
}
