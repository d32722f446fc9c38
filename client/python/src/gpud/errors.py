"""Exceptions: one class per protocol error code, under :class:`gpud.Error`.

Every error the daemon sends carries a snake_case code (docs/PROTOCOL.md, "Error codes");
:func:`error_from_body` turns it into an instance of the class for that code, whose ``code``
attribute is the code. A code this version does not know becomes a plain :class:`Error` with
that code, so newer daemons never break older clients.

Arguments the client refuses before sending (a size it cannot read, an unknown class) raise
:class:`InvalidRequest`, the code the daemon gives for values that make no sense; it is also a
:class:`ValueError`.

A few conditions are the client's own, not the daemon's: :class:`ConnectError` (nothing
answers on the socket), :class:`ConnectionLost` (the connection ended) and
:class:`ProtocolError` (the daemon sent something this client does not understand). Their
codes (``connect``, ``disconnected``, ``protocol``) never appear on the wire.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "Error",
    "BadFrame",
    "FrameTooLarge",
    "UnsupportedVersion",
    "HelloRequired",
    "NotAllowed",
    "PermissionDenied",
    "InvalidRequest",
    "UnknownDevice",
    "NeverFits",
    "UnknownLease",
    "UnknownRequest",
    "DuplicateRequest",
    "ResizePending",
    "TimedOut",
    "Cancelled",
    "LimitExceeded",
    "ShuttingDown",
    "Internal",
    "GrowDeadlock",
    "NoSuchProcess",
    "NotProcessOwner",
    "NotDescendant",
    "ConnectError",
    "ConnectionLost",
    "ProtocolError",
    "ERRORS",
    "error_from_body",
]


class Error(Exception):
    """Base class of every gpud error. ``code`` is the protocol's snake_case error code."""

    code: str = "error"

    def __init__(self, message: str = "", code: Optional[str] = None) -> None:
        super().__init__(message or (code or self.code))
        if code is not None:
            self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class BadFrame(Error):
    """A frame was not valid JSON of a known message (the daemon closed the session)."""

    code = "bad_frame"


class FrameTooLarge(Error):
    """A frame was larger than the daemon's ``limits.max_frame_bytes`` (session closed)."""

    code = "frame_too_large"


class UnsupportedVersion(Error):
    """The daemon does not speak this client's protocol version (session closed)."""

    code = "unsupported_version"


class HelloRequired(Error):
    """A request came before the hello, or the hello came too late (session closed)."""

    code = "hello_required"


class NotAllowed(Error):
    """The peer may not connect, or may not ask for the critical class."""

    code = "not_allowed"


class PermissionDenied(Error):
    """An admin operation (drain, undrain, revoke) without admin rights."""

    code = "permission_denied"


class InvalidRequest(Error, ValueError):
    """A value makes no sense: nothing asked, a bad size, class or device, a label too long."""

    code = "invalid_request"


class UnknownDevice(Error):
    """No device has that index or UUID."""

    code = "unknown_device"


class NeverFits(Error):
    """Larger than any matching device's capacity: it could never be granted."""

    code = "never_fits"


class UnknownLease(Error):
    """No such lease in this session (or at all, for revoke)."""

    code = "unknown_lease"


class UnknownRequest(Error):
    """A cancel named a request that is not waiting."""

    code = "unknown_request"


class DuplicateRequest(Error):
    """A request id was already in use by a waiting request."""

    code = "duplicate_request"


class ResizePending(Error):
    """The lease already has a grow waiting."""

    code = "resize_pending"


class TimedOut(Error):
    """The request waited longer than its timeout (a resize leaves the lease as it was)."""

    code = "timed_out"


class Cancelled(Error):
    """The request was cancelled, or the lease of a waiting resize ended."""

    code = "cancelled"


class LimitExceeded(Error):
    """A session or per-uid limit was reached."""

    code = "limit_exceeded"


class ShuttingDown(Error):
    """The daemon is stopping."""

    code = "shutting_down"


class Internal(Error):
    """A bug in the daemon."""

    code = "internal"


class GrowDeadlock(Error):
    """A waiting resize failed: its lease and others each waited to grow into memory only the
    others hold, and its lease was the youngest (it keeps its size)."""

    code = "grow_deadlock"


class NoSuchProcess(Error):
    """`attach` of a pid no process has."""

    code = "no_such_process"


class NotProcessOwner(Error):
    """`attach` of another user's process by a caller that is not root."""

    code = "not_process_owner"


class NotDescendant(Error):
    """`attach` of a process that is neither the caller nor its descendant."""

    code = "not_descendant"


class ConnectError(Error, ConnectionError):
    """Nothing answers on the socket (client side; is gpud running? which socket?)."""

    code = "connect"


class ConnectionLost(Error, ConnectionError):
    """The connection to gpud ended (client side)."""

    code = "disconnected"


class ProtocolError(Error):
    """The daemon sent something this client does not understand (client side)."""

    code = "protocol"


#: The daemon's error codes and their classes.
ERRORS: Dict[str, Type[Error]] = {
    cls.code: cls
    for cls in (
        BadFrame,
        FrameTooLarge,
        UnsupportedVersion,
        HelloRequired,
        NotAllowed,
        PermissionDenied,
        InvalidRequest,
        UnknownDevice,
        NeverFits,
        UnknownLease,
        UnknownRequest,
        DuplicateRequest,
        ResizePending,
        TimedOut,
        Cancelled,
        LimitExceeded,
        ShuttingDown,
        Internal,
        GrowDeadlock,
        NoSuchProcess,
        NotProcessOwner,
        NotDescendant,
    )
}


def error_from_body(body: Mapping[str, Any]) -> Error:
    """The exception for an error body ``{"code": ..., "message": ...}`` from the daemon."""
    code = str(body.get("code", "internal"))
    message = str(body.get("message", ""))
    cls = ERRORS.get(code)
    if cls is None:
        return Error(message, code=code)
    return cls(message)
