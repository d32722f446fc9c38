package gpud

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// ProtocolVersion is the version of the socket protocol this package speaks; it must equal
// the daemon's (gpud_proto::PROTOCOL_VERSION). A daemon that speaks another version refuses
// the session with CodeUnsupportedVersion.
const ProtocolVersion = 1

// MaxRequestFrame is the daemon's default limit on a frame a client sends (limits.max_frame_bytes).
const MaxRequestFrame = 64 << 10

// MaxServerFrame is the largest frame this package accepts from the daemon.
const MaxServerFrame = 64 << 20

// writeFrame writes one frame: a 4-byte big-endian length, then the payload.
func writeFrame(w io.Writer, payload []byte) error {
	buf := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))
	copy(buf[4:], payload)
	_, err := w.Write(buf)
	return err
}

// readFrame reads one frame's payload, refusing payloads over limit.
func readFrame(r *bufio.Reader, limit int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("gpud sent a frame of %d bytes, over the limit of %d", n, limit)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, err
	}
	return payload, nil
}

// helloFrame is the first frame of a session.
type helloFrame struct {
	Type    string `json:"type"`
	Version uint32 `json:"version"`
	Client  string `json:"client,omitempty"`
}

// requestFrame is every later frame.
type requestFrame struct {
	Type string      `json:"type"`
	ID   uint64      `json:"id"`
	Op   interface{} `json:"op"`
}

// acquireArgs is the wire form of an acquire.
type acquireArgs struct {
	Device    string  `json:"device"`
	VRAMBytes uint64  `json:"vram_bytes"`
	Compute   bool    `json:"compute"`
	Class     Class   `json:"class"`
	TimeoutMS *uint64 `json:"timeout_ms,omitempty"`
	Label     *string `json:"label,omitempty"`
	// Budget is the handle of the job's budget (GPUD_BUDGET), when there is one.
	Budget *string `json:"budget,omitempty"`
	// Host is the host resources asked for; left out when none (older daemons refuse it).
	Host *hostArgs `json:"host,omitempty"`
}

type resizeArgs struct {
	Lease     uint64  `json:"lease"`
	VRAMBytes uint64  `json:"vram_bytes"`
	TimeoutMS *uint64 `json:"timeout_ms,omitempty"`
	// HostMemBytes resizes the lease's host memory instead of its VRAM.
	HostMemBytes *uint64 `json:"host_mem_bytes,omitempty"`
}

type leaseArg struct {
	Lease uint64 `json:"lease"`
}

type cancelArg struct {
	Request uint64 `json:"request"`
}

type deviceArg struct {
	Device string `json:"device"`
}

// serverFrame is any frame the daemon sends; Type says which fields are set.
type serverFrame struct {
	Type string `json:"type"`
	// welcome
	Version uint32 `json:"version"`
	Session uint64 `json:"session"`
	Daemon  string `json:"daemon"`
	// Features lists the optional protocol additions the daemon speaks.
	Features []string `json:"features"`
	// reply
	ID      uint64          `json:"id"`
	Outcome json.RawMessage `json:"outcome"`
	// event
	Event json.RawMessage `json:"event"`
	// error
	Error *wireError `json:"error"`
}

type wireError struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (w *wireError) err() *Error { return &Error{Code: w.Code, Message: w.Message} }

// variant splits an externally tagged enum value: "name" or {"name": body}.
func variant(raw json.RawMessage) (string, json.RawMessage, error) {
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		return name, nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", nil, fmt.Errorf("not a tagged value: %s", raw)
	}
	if len(m) != 1 {
		return "", nil, fmt.Errorf("a tagged value has %d tags: %s", len(m), raw)
	}
	for k, v := range m {
		return k, v, nil
	}
	return "", nil, nil
}

// outcome reads a reply's outcome: the reply's name and body, or the daemon's error.
func outcome(raw json.RawMessage) (string, json.RawMessage, *Error, error) {
	tag, body, err := variant(raw)
	if err != nil {
		return "", nil, nil, err
	}
	switch tag {
	case "ok":
		name, reply, err := variant(body)
		return name, reply, nil, err
	case "error":
		var w wireError
		if err := json.Unmarshal(body, &w); err != nil {
			return "", nil, nil, fmt.Errorf("bad error outcome: %v", err)
		}
		return "", nil, w.err(), nil
	}
	return "", nil, nil, fmt.Errorf("unknown outcome %q", tag)
}

// The bodies of events.
type yieldEvent struct {
	Lease      uint64  `json:"lease"`
	Reason     string  `json:"reason"`
	RevokeInMS *uint64 `json:"revoke_in_ms"`
}

type revokedEvent struct {
	Lease  uint64 `json:"lease"`
	Reason string `json:"reason"`
}

type overUseEvent struct {
	DeviceIndex   uint32  `json:"device_index"`
	UsedBytes     uint64  `json:"used_bytes"`
	ReservedBytes uint64  `json:"reserved_bytes"`
	RevokeInMS    *uint64 `json:"revoke_in_ms"`
}
