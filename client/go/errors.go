package gpud

import (
	"errors"
	"fmt"
)

// Code is one of the protocol's error codes, as the daemon names them on the wire
// (docs/PROTOCOL.md, "Error codes"). Codes are stable across protocol versions; a daemon
// newer than this package may send codes that have no constant here, and they are kept as
// they came.
type Code string

// The protocol's error codes.
const (
	// CodeBadFrame: a frame is not valid JSON of a known message (the session is closed).
	CodeBadFrame Code = "bad_frame"
	// CodeFrameTooLarge: a frame's length prefix exceeds the daemon's limit (the session is
	// closed).
	CodeFrameTooLarge Code = "frame_too_large"
	// CodeUnsupportedVersion: the hello's version is not spoken by the daemon (the session is
	// closed).
	CodeUnsupportedVersion Code = "unsupported_version"
	// CodeHelloRequired: a request came before the hello, or no hello came in time (the
	// session is closed).
	CodeHelloRequired Code = "hello_required"
	// CodeNotAllowed: the peer may not connect, or may not ask for the critical class.
	CodeNotAllowed Code = "not_allowed"
	// CodePermissionDenied: an admin operation without admin rights.
	CodePermissionDenied Code = "permission_denied"
	// CodeInvalidRequest: a value makes no sense (nothing asked, a label too long, an unknown
	// class, a timeout over a year, shrinking a memory-only lease to 0).
	CodeInvalidRequest Code = "invalid_request"
	// CodeUnknownDevice: no such device index or UUID.
	CodeUnknownDevice Code = "unknown_device"
	// CodeNeverFits: larger than any matching device's capacity.
	CodeNeverFits Code = "never_fits"
	// CodeUnknownLease: no such lease in this session (or at all, for revoke).
	CodeUnknownLease Code = "unknown_lease"
	// CodeUnknownRequest: a cancel of a request that is not waiting.
	CodeUnknownRequest Code = "unknown_request"
	// CodeDuplicateRequest: the request id is in use by a waiting request.
	CodeDuplicateRequest Code = "duplicate_request"
	// CodeResizePending: the lease already has a grow waiting.
	CodeResizePending Code = "resize_pending"
	// CodeTimedOut: the wait exceeded the request's timeout.
	CodeTimedOut Code = "timed_out"
	// CodeCancelled: the request was cancelled by the client, or the lease of a waiting
	// resize ended.
	CodeCancelled Code = "cancelled"
	// CodeLimitExceeded: a session limit was reached.
	CodeLimitExceeded Code = "limit_exceeded"
	// CodeShuttingDown: the daemon is stopping.
	CodeShuttingDown Code = "shutting_down"
	// CodeGrowDeadlock: a waiting resize failed because its lease and others each waited to
	// grow into memory only the others hold; the lease keeps its size.
	CodeGrowDeadlock Code = "grow_deadlock"
	// CodeNoSuchProcess: `attach` of a pid no process has.
	CodeNoSuchProcess Code = "no_such_process"
	// CodeNotProcessOwner: `attach` of another user's process by a caller that is not root.
	CodeNotProcessOwner Code = "not_process_owner"
	// CodeNotDescendant: `attach` of a process that is neither the caller nor its descendant.
	CodeNotDescendant Code = "not_descendant"
	// CodeInternal: a bug in the daemon.
	CodeInternal Code = "internal"
)

// Codes lists every error code this package knows, in the order docs/PROTOCOL.md gives them.
var Codes = []Code{
	CodeBadFrame, CodeFrameTooLarge, CodeUnsupportedVersion, CodeHelloRequired,
	CodeNotAllowed, CodePermissionDenied, CodeInvalidRequest, CodeUnknownDevice,
	CodeNeverFits, CodeUnknownLease, CodeUnknownRequest, CodeDuplicateRequest,
	CodeResizePending, CodeTimedOut, CodeCancelled, CodeLimitExceeded, CodeShuttingDown,
	CodeInternal, CodeGrowDeadlock, CodeNoSuchProcess, CodeNotProcessOwner, CodeNotDescendant,
}

// Error is an error the daemon answered with (a reply's error outcome, or a session error
// frame before the daemon closed the connection), or one this package reports with the code
// the daemon would give (arguments it refuses before sending).
//
// Compare with the sentinel values: errors.Is(err, gpud.ErrNeverFits) is true for any
// *Error whose Code is CodeNeverFits, whatever its message.
type Error struct {
	// Code is the machine-readable code.
	Code Code
	// Message is the explanation, for people.
	Message string
}

// Error returns "gpud: CODE: MESSAGE".
func (e *Error) Error() string {
	if e.Message == "" {
		return "gpud: " + string(e.Code)
	}
	return fmt.Sprintf("gpud: %s: %s", e.Code, e.Message)
}

// Is reports whether target is an *Error with the same code (the sentinels are such errors).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinel errors, one per code, for errors.Is.
var (
	// ErrBadFrame matches errors with CodeBadFrame.
	ErrBadFrame = &Error{Code: CodeBadFrame}
	// ErrFrameTooLarge matches errors with CodeFrameTooLarge.
	ErrFrameTooLarge = &Error{Code: CodeFrameTooLarge}
	// ErrUnsupportedVersion matches errors with CodeUnsupportedVersion.
	ErrUnsupportedVersion = &Error{Code: CodeUnsupportedVersion}
	// ErrHelloRequired matches errors with CodeHelloRequired.
	ErrHelloRequired = &Error{Code: CodeHelloRequired}
	// ErrNotAllowed matches errors with CodeNotAllowed.
	ErrNotAllowed = &Error{Code: CodeNotAllowed}
	// ErrPermissionDenied matches errors with CodePermissionDenied.
	ErrPermissionDenied = &Error{Code: CodePermissionDenied}
	// ErrInvalidRequest matches errors with CodeInvalidRequest.
	ErrInvalidRequest = &Error{Code: CodeInvalidRequest}
	// ErrUnknownDevice matches errors with CodeUnknownDevice.
	ErrUnknownDevice = &Error{Code: CodeUnknownDevice}
	// ErrNeverFits matches errors with CodeNeverFits.
	ErrNeverFits = &Error{Code: CodeNeverFits}
	// ErrUnknownLease matches errors with CodeUnknownLease.
	ErrUnknownLease = &Error{Code: CodeUnknownLease}
	// ErrUnknownRequest matches errors with CodeUnknownRequest.
	ErrUnknownRequest = &Error{Code: CodeUnknownRequest}
	// ErrDuplicateRequest matches errors with CodeDuplicateRequest.
	ErrDuplicateRequest = &Error{Code: CodeDuplicateRequest}
	// ErrResizePending matches errors with CodeResizePending.
	ErrResizePending = &Error{Code: CodeResizePending}
	// ErrTimedOut matches errors with CodeTimedOut.
	ErrTimedOut = &Error{Code: CodeTimedOut}
	// ErrCancelled matches errors with CodeCancelled, and the errors Acquire and Resize
	// return when their context ends while they wait.
	ErrCancelled = &Error{Code: CodeCancelled}
	// ErrLimitExceeded matches errors with CodeLimitExceeded.
	ErrLimitExceeded = &Error{Code: CodeLimitExceeded}
	// ErrShuttingDown matches errors with CodeShuttingDown.
	ErrShuttingDown = &Error{Code: CodeShuttingDown}
	// ErrGrowDeadlock matches errors with CodeGrowDeadlock.
	ErrGrowDeadlock = &Error{Code: CodeGrowDeadlock}
	// ErrNoSuchProcess matches errors with CodeNoSuchProcess.
	ErrNoSuchProcess = &Error{Code: CodeNoSuchProcess}
	// ErrNotProcessOwner matches errors with CodeNotProcessOwner.
	ErrNotProcessOwner = &Error{Code: CodeNotProcessOwner}
	// ErrNotDescendant matches errors with CodeNotDescendant.
	ErrNotDescendant = &Error{Code: CodeNotDescendant}
	// ErrInternal matches errors with CodeInternal.
	ErrInternal = &Error{Code: CodeInternal}
)

// Errors that are not the daemon's.
var (
	// ErrClosed is returned by calls on a Client after Close.
	ErrClosed = errors.New("gpud: client closed")
	// ErrDisconnected matches every error caused by the end of the connection (the daemon
	// stopped or closed the session). When the daemon said why, the error also matches that
	// code: errors.Is(err, gpud.ErrShuttingDown).
	ErrDisconnected = errors.New("gpud: connection to gpud lost")
)

// CodeOf returns the protocol error code carried by err (through wrapping), or "" when err
// carries none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// disconnected is the error of every call that the end of the connection interrupted.
type disconnected struct {
	cause error
}

func (d *disconnected) Error() string {
	if d.cause == nil {
		return ErrDisconnected.Error()
	}
	return ErrDisconnected.Error() + ": " + d.cause.Error()
}

func (d *disconnected) Is(target error) bool { return target == ErrDisconnected }

func (d *disconnected) Unwrap() error { return d.cause }

// withdrawn is the error of a wait whose context ended: it matches the context's error and
// ErrCancelled.
type withdrawn struct {
	what string
	ctx  error
}

func (w *withdrawn) Error() string {
	return fmt.Sprintf("gpud: %s withdrawn: %v", w.what, w.ctx)
}

func (w *withdrawn) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == CodeCancelled
}

func (w *withdrawn) Unwrap() error { return w.ctx }

// invalid is an argument error found before sending, with the code the daemon would give.
func invalid(format string, args ...interface{}) *Error {
	return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}
