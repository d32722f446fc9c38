"""The wire protocol (docs/PROTOCOL.md), without I/O: frames, the hello, request operations
with their arguments checked, and the reading of replies.

Every message is a frame: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
The blocking and the asyncio clients both speak through this module.
"""

from __future__ import annotations

import enum
import json
import math
import os
import struct
from typing import Any, Dict, List, Optional, Tuple, Union

from .errors import InvalidRequest, ProtocolError
from .sizes import U64_MAX, Size, to_bytes

__all__ = [
    "PROTOCOL_VERSION",
    "DEFAULT_SOCKET",
    "MAX_SERVER_FRAME",
    "Class",
    "Device",
    "socket_path",
    "encode",
    "FrameReader",
    "hello",
    "FEATURE_HOST",
    "Numa",
    "acquire_op",
    "host_args",
    "numa_placement",
    "require_features",
    "resize_op",
    "resize_host_op",
    "placement",
    "parse_class",
    "split_reply",
    "StatusPages",
]

#: The protocol version this package speaks; the package's major version is the same number.
PROTOCOL_VERSION = 1
#: Where gpud listens unless told otherwise (``gpud_proto::DEFAULT_SOCKET``).
DEFAULT_SOCKET = "/run/gpud/gpud.sock"
#: The largest frame this client accepts from the daemon (status replies of a busy daemon).
MAX_SERVER_FRAME = 64 * 1024 * 1024

_LENGTH = struct.Struct(">I")
_U32_MAX = (1 << 32) - 1
_MAX_UUID = 96


class Class(str, enum.Enum):
    """Priority classes, highest first. ``critical`` waiters make compute holders yield."""

    CRITICAL = "critical"
    HIGH = "high"
    NORMAL = "normal"
    BACKGROUND = "background"

    def __str__(self) -> str:
        return self.value


#: A device selector: ``"any"``, an index (``0`` or ``"0"``), or a UUID (``"GPU-…"``).
Device = Union[int, str]

#: Where a lease's CPUs come from: ``"any"`` (a node with room), ``"near"`` (the node of the
#: lease's device), or a NUMA node's number (``1`` or ``"1"``).
Numa = Union[int, str]

#: The welcome's feature name of host resources (docs/HOST.md): acquire's ``host``, resize's
#: ``host_mem_bytes``, the grant's and status's ``host``.
FEATURE_HOST = "host"


def socket_path(socket: Union[str, "os.PathLike[str]", None] = None) -> str:
    """The socket to use: ``socket`` when given, else ``$GPUD_SOCKET`` when set and not empty,
    else :data:`DEFAULT_SOCKET`."""
    if socket is not None:
        return os.fspath(socket)
    env = os.environ.get("GPUD_SOCKET")
    return env if env else DEFAULT_SOCKET


def encode(message: Dict[str, Any]) -> bytes:
    """One frame: the length prefix and the JSON payload."""
    payload = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return _LENGTH.pack(len(payload)) + payload


class FrameReader:
    """Splits a byte stream into frames and parses each as a JSON object."""

    def __init__(self, max_frame: int = MAX_SERVER_FRAME) -> None:
        self._buffer = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> List[Dict[str, Any]]:
        """Adds bytes; returns the frames they complete."""
        self._buffer.extend(data)
        frames: List[Dict[str, Any]] = []
        while len(self._buffer) >= 4:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > self._max:
                raise ProtocolError(
                    f"the daemon sent a frame of {length} bytes (limit {self._max})"
                )
            if len(self._buffer) < 4 + length:
                break
            payload = bytes(self._buffer[4 : 4 + length])
            del self._buffer[: 4 + length]
            try:
                frame = json.loads(payload.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise ProtocolError(f"the daemon sent a frame that is not JSON: {e}") from None
            if not isinstance(frame, dict):
                raise ProtocolError(f"the daemon sent a frame that is not an object: {frame!r}")
            frames.append(frame)
        return frames


def hello(name: Optional[str]) -> bytes:
    """The first frame of every session."""
    message: Dict[str, Any] = {"type": "hello", "version": PROTOCOL_VERSION}
    if name:
        message["client"] = name
    return encode(message)


def request(request_id: int, op: Union[str, Dict[str, Any]]) -> bytes:
    """A request frame."""
    return encode({"type": "request", "id": request_id, "op": op})


def parse_class(cls: Union[str, Class]) -> str:
    """The wire name of a class: one of the four, case-insensitive (as gpud reads it)."""
    if isinstance(cls, Class):
        return cls.value
    if isinstance(cls, str):
        name = cls.strip().lower()
        if name in {c.value for c in Class}:
            return name
    raise InvalidRequest(f"unknown class {cls!r} (expected critical, high, normal or background)")


def placement(device: Device) -> str:
    """The wire form of a device selector, checked as gpud checks it (``Placement``)."""

    def fail() -> InvalidRequest:
        return InvalidRequest(
            f"invalid device {device!r} (expected 'any', an index such as 0, or a UUID such as GPU-…)"
        )

    if isinstance(device, bool):
        raise fail()
    if isinstance(device, int):
        if 0 <= device <= _U32_MAX:
            return str(device)
        raise fail()
    if not isinstance(device, str):
        raise fail()
    t = device.strip()
    if t.lower() == "any":
        return "any"
    if t and all(c in "0123456789" for c in t):
        index = int(t)
        if index > _U32_MAX:
            raise fail()
        return str(index)
    if 4 <= len(t) <= _MAX_UUID and all(c.isascii() and (c.isalnum() or c in "-_") for c in t):
        return t
    raise fail()


def timeout_ms(timeout: Optional[float], what: str = "timeout") -> Optional[int]:
    """Seconds (int or float, at least 0) as whole milliseconds; ``None`` waits for ever."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidRequest(f"{what} must be seconds (a number) or None, not {timeout!r}")
    if math.isnan(timeout) or timeout < 0 or math.isinf(timeout):
        raise InvalidRequest(
            f"{what} must be a finite number of seconds, at least 0, not {timeout!r}"
        )
    ms = round(timeout * 1000)
    if ms > U64_MAX:
        raise InvalidRequest(f"{what} {timeout!r} is out of range")
    return ms


def numa_placement(numa: Numa) -> Optional[Union[str, Dict[str, int]]]:
    """The wire form of a NUMA placement: ``None`` for ``any`` (left out), ``"near"``, or
    ``{"node": N}``."""

    def fail() -> InvalidRequest:
        return InvalidRequest(f"NUMA placement {numa!r}: give any, near, or a node number")

    if isinstance(numa, bool):
        raise fail()
    if isinstance(numa, int):
        if 0 <= numa <= _U32_MAX:
            return {"node": numa}
        raise fail()
    if not isinstance(numa, str):
        raise fail()
    t = numa.strip().lower()
    if t == "any":
        return None
    if t == "near":
        return "near"
    if t and all(c in "0123456789" for c in t) and int(t) <= _U32_MAX:
        return {"node": int(t)}
    raise fail()


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U32_MAX:
        raise InvalidRequest(f"{what} must be a whole number from 0 to {_U32_MAX}, not {value!r}")
    return value


def host_args(
    host_memory: Size = 0, pinned: Size = 0, cpus: int = 0, numa: Numa = "any"
) -> Optional[Dict[str, Any]]:
    """The ``host`` part of an acquire (docs/HOST.md), or ``None`` when nothing is asked."""
    args: Dict[str, Any] = {
        "mem_bytes": to_bytes(host_memory, "host_memory"),
        "pinned_bytes": to_bytes(pinned, "pinned"),
        "cpus": _count(cpus, "cpus"),
    }
    where = numa_placement(numa)
    if where is not None:
        args["numa"] = where
    if where is None and not (args["mem_bytes"] or args["pinned_bytes"] or args["cpus"]):
        return None
    return args


def require_features(op: Dict[str, Any], features: Any) -> None:
    """Refuses (:class:`~gpud.InvalidRequest`) an operation that needs a protocol addition the
    daemon's welcome does not list: an older daemon would not understand it."""
    body = op.get("acquire") or op.get("resize") or {}
    if ("host" in body or "host_mem_bytes" in body) and FEATURE_HOST not in features:
        raise InvalidRequest(
            f"this gpud books no host resources (its welcome does not list {FEATURE_HOST!r}: "
            "it is older than this client)"
        )


def acquire_op(
    vram: Size = 0,
    compute: bool = False,
    device: Device = "any",
    cls: Union[str, Class] = Class.NORMAL,
    timeout: Optional[float] = None,
    label: Optional[str] = None,
    *,
    host_memory: Size = 0,
    pinned: Size = 0,
    cpus: int = 0,
    numa: Numa = "any",
) -> Dict[str, Any]:
    """The ``acquire`` operation. Arguments the daemon could not even parse are refused here
    with :class:`~gpud.InvalidRequest`; the daemon checks the rest (nothing asked, a label too
    long, a timeout over a year) and answers with the same code. ``host_memory``, ``pinned``,
    ``cpus`` and ``numa`` ask for host resources with the lease (:func:`host_args`); with no
    VRAM and no compute, the lease is of the host alone."""
    if not isinstance(compute, bool):
        raise InvalidRequest(f"compute must be True or False, not {compute!r}")
    if label is not None and not isinstance(label, str):
        raise InvalidRequest(f"label must be text, not {label!r}")
    args: Dict[str, Any] = {
        "device": placement(device),
        "vram_bytes": to_bytes(vram, "vram"),
        "compute": compute,
        "class": parse_class(cls),
    }
    ms = timeout_ms(timeout)
    if ms is not None:
        args["timeout_ms"] = ms
    if label is not None:
        args["label"] = label
    host = host_args(host_memory, pinned, cpus, numa)
    if host is not None:
        args["host"] = host
    # Inside a scheduler's job with a gpud budget, leases come from the budget.
    budget = os.environ.get("GPUD_BUDGET")
    if budget:
        args["budget"] = budget
    return {"acquire": args}


def resize_op(lease: int, vram: Size, timeout: Optional[float] = None) -> Dict[str, Any]:
    """The ``resize`` operation."""
    args: Dict[str, Any] = {"lease": lease, "vram_bytes": to_bytes(vram, "vram")}
    ms = timeout_ms(timeout)
    if ms is not None:
        args["timeout_ms"] = ms
    return {"resize": args}


def resize_host_op(
    lease: int, host_memory: Size, timeout: Optional[float] = None
) -> Dict[str, Any]:
    """The ``resize`` operation of a lease's host memory (:func:`resize_op` with
    ``host_mem_bytes``)."""
    host_mem_bytes = to_bytes(host_memory, "host_memory")
    op = resize_op(lease, 0, timeout)
    op["resize"]["host_mem_bytes"] = host_mem_bytes
    return op


def split_reply(ok: Any) -> Tuple[str, Any]:
    """A successful reply as ``(kind, value)``: ``("granted", {...})``, ``("pong", None)``."""
    if isinstance(ok, str):
        return ok, None
    if isinstance(ok, dict) and len(ok) == 1:
        ((kind, value),) = ok.items()
        return str(kind), value
    raise ProtocolError(f"unreadable reply {ok!r}")


class StatusPages:
    """Joins a status report the daemon sends in pages.

    A status reply that carries ``more`` (a cursor object) is one page: the client asks for
    the next with the operation ``{"status_page": <cursor>}`` and appends its ``leases`` and
    ``waiters``, until a page comes without ``more``. A daemon that does not page never sends
    ``more``, and the first reply is the whole report.
    """

    #: Pages after which a daemon that keeps sending cursors is taken to be broken.
    MAX_PAGES = 100_000

    def __init__(self, first: Any) -> None:
        if not isinstance(first, dict):
            raise ProtocolError(f"unreadable status {first!r}")
        self._report: Dict[str, Any] = dict(first)
        self._more = self._report.pop("more", None)
        self._pages = 1

    def next_op(self) -> Optional[Dict[str, Any]]:
        """The request for the next page, or ``None`` when the report is whole."""
        if self._more is None:
            return None
        return {"status_page": self._more}

    def add(self, kind: str, page: Any) -> None:
        """Adds the reply to :meth:`next_op`'s request."""
        if kind not in ("status", "status_page") or not isinstance(page, dict):
            raise ProtocolError(f"unexpected answer to status_page: {kind} {page!r}")
        self._pages += 1
        if self._pages > self.MAX_PAGES:
            raise ProtocolError(f"status did not end after {self.MAX_PAGES} pages")
        for key in ("leases", "waiters"):
            items = page.get(key, [])
            if not isinstance(items, list):
                raise ProtocolError(f"status page has {key} that is not a list")
            self._report.setdefault(key, []).extend(items)
        self._more = page.get("more")

    def report(self) -> Dict[str, Any]:
        """The whole report (after :meth:`next_op` returned ``None``)."""
        return self._report
