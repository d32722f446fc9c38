"""gpud: GPU leases for Python programs.

gpud is a per-host daemon that decides who may use how much GPU memory (VRAM) and who holds
each GPU's compute slot. This package speaks its socket protocol (docs/PROTOCOL.md), with a
blocking API (this module, :mod:`gpud.client`) and an asyncio API (:mod:`gpud.aio`)::

    import gpud

    with gpud.lease(vram="12GiB", compute=True, cls="high", timeout=30) as lease:
        env = lease.env()                    # CUDA_VISIBLE_DEVICES = the leased device
        run_gpu_phase(env, should_stop=lambda: lease.yield_requested)

The package's major version is the protocol version it speaks (:data:`PROTOCOL_VERSION`):
``1.x.y`` speaks version 1, which every gpud of protocol version 1 accepts.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, Union

from . import aio
from .client import Client, Lease, SocketPath, YieldCallback
from .errors import (
    ERRORS,
    BadFrame,
    Cancelled,
    ConnectError,
    ConnectionLost,
    DuplicateRequest,
    Error,
    FrameTooLarge,
    GrowDeadlock,
    HelloRequired,
    Internal,
    InvalidRequest,
    LimitExceeded,
    NeverFits,
    NoSuchProcess,
    NotAllowed,
    NotDescendant,
    NotProcessOwner,
    PermissionDenied,
    ProtocolError,
    ResizePending,
    ShuttingDown,
    TimedOut,
    UnknownDevice,
    UnknownLease,
    UnknownRequest,
    UnsupportedVersion,
    error_from_body,
)
from .protocol import (
    DEFAULT_SOCKET,
    FEATURE_HOST,
    PROTOCOL_VERSION,
    Class,
    Device,
    Numa,
    socket_path,
)
from .pytorch import limit_torch_memory
from .sizes import Size, format_size, parse_size
from .types import (
    ComputeHolder,
    DaemonInfo,
    DeviceStatus,
    Event,
    HostGrant,
    HostPoolStatus,
    HostRequest,
    HostStatus,
    LeaseInfo,
    LeasePart,
    LeaseStatus,
    NumaStatus,
    OverUse,
    ProcessStatus,
    QueueCounts,
    Revoked,
    ShuttingDownEvent,
    StatusReport,
    WaiterStatus,
    YieldRequested,
)

__version__ = "1.0.0"

__all__ = [
    "__version__",
    "PROTOCOL_VERSION",
    "DEFAULT_SOCKET",
    "FEATURE_HOST",
    "Client",
    "Lease",
    "Class",
    "Device",
    "Numa",
    "Size",
    "YieldCallback",
    "aio",
    "connect",
    "lease",
    "status",
    "socket_path",
    "parse_size",
    "format_size",
    "limit_torch_memory",
    "error_from_body",
    "ERRORS",
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
    "LeaseInfo",
    "LeasePart",
    "HostGrant",
    "HostRequest",
    "HostStatus",
    "HostPoolStatus",
    "NumaStatus",
    "StatusReport",
    "DaemonInfo",
    "DeviceStatus",
    "LeaseStatus",
    "WaiterStatus",
    "ComputeHolder",
    "ProcessStatus",
    "QueueCounts",
    "Event",
    "YieldRequested",
    "Revoked",
    "OverUse",
    "ShuttingDownEvent",
]


def connect(socket: SocketPath = None, *, name: Optional[str] = None) -> Client:
    """A blocking :class:`Client` (``socket``: default ``$GPUD_SOCKET``, else
    :data:`DEFAULT_SOCKET`)."""
    return Client(socket, name=name)


@contextmanager
def lease(
    vram: Size = 0,
    compute: bool = False,
    device: Device = "any",
    cls: Union[str, Class] = Class.NORMAL,
    timeout: Optional[float] = None,
    label: Optional[str] = None,
    *,
    on_yield: Optional[YieldCallback] = None,
    socket: SocketPath = None,
    name: Optional[str] = None,
    host_memory: Size = 0,
    pinned: Size = 0,
    cpus: int = 0,
    numa: Numa = "any",
) -> Iterator[Lease]:
    """A lease on a connection of its own, released (and the connection closed) when the
    block ends. Arguments as :meth:`Client.acquire`: ``vram`` in bytes or ``"12GiB"``,
    ``compute``, ``device`` (``"any"``, an index, a UUID), ``cls``, ``timeout`` in seconds,
    ``label``, ``on_yield(lease, notice)``; host resources ``host_memory``, ``pinned``,
    ``cpus``, ``numa``."""
    with Client(socket, name=name) as client:
        granted = client.acquire(
            vram,
            compute,
            device,
            cls,
            timeout,
            label,
            on_yield,
            host_memory=host_memory,
            pinned=pinned,
            cpus=cpus,
            numa=numa,
        )
        with granted:
            yield granted


def status(socket: SocketPath = None) -> StatusReport:
    """The daemon's status (devices, leases, waiters), over a connection of its own."""
    with Client(socket) as client:
        return client.status()
