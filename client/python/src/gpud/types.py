"""What the daemon reports: grants, status, events, as dataclasses.

Field names follow the wire (``proto/src/message.rs``), except ``class``, a Python keyword,
which is ``cls``. Fields a newer daemon adds are ignored; the ``raw`` attribute of
:class:`StatusReport` keeps the whole report as the daemon sent it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = [
    "LeaseInfo",
    "LeasePart",
    "HostGrant",
    "HostRequest",
    "HostPoolStatus",
    "NumaStatus",
    "HostStatus",
    "DaemonInfo",
    "QueueCounts",
    "ComputeHolder",
    "ProcessStatus",
    "DeviceStatus",
    "LeaseStatus",
    "WaiterStatus",
    "StatusReport",
    "YieldRequested",
    "Revoked",
    "OverUse",
    "ShuttingDownEvent",
    "Event",
    "event_from_wire",
]


@dataclass(frozen=True)
class LeasePart:
    """One granted part of a lease of several devices."""

    lease: int
    device_index: int
    device_uuid: str
    vram_bytes: int
    compute: bool

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "LeasePart":
        return cls(
            lease=int(d["lease"]),
            device_index=int(d["device_index"]),
            device_uuid=str(d["device_uuid"]),
            vram_bytes=int(d["vram_bytes"]),
            compute=bool(d["compute"]),
        )


def _ints(items: Any) -> Tuple[int, ...]:
    return tuple(int(x) for x in items or ())


@dataclass(frozen=True)
class HostGrant:
    """The host resources a lease holds (docs/HOST.md): host memory and page-locked memory in
    bytes, and CPUs by number (ascending; what ``os.sched_setaffinity`` pins to) with their
    NUMA node (``None`` without CPUs). ``parts`` are the lease ids of the host parts. In a
    status row, the part's own amount."""

    mem_bytes: int = 0
    pinned_bytes: int = 0
    cpus: Tuple[int, ...] = ()
    numa_node: Optional[int] = None
    parts: Tuple[int, ...] = ()

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "HostGrant":
        node = d.get("numa_node")
        return cls(
            mem_bytes=int(d.get("mem_bytes", 0)),
            pinned_bytes=int(d.get("pinned_bytes", 0)),
            cpus=_ints(d.get("cpus")),
            numa_node=None if node is None else int(node),
            parts=_ints(d.get("parts")),
        )


def _numa_from_wire(numa: Any) -> Union[str, int]:
    if numa is None:
        return "any"
    if isinstance(numa, str):
        return numa
    if isinstance(numa, dict) and "node" in numa:
        return int(numa["node"])
    raise ValueError(f"unknown NUMA placement {numa!r}")


@dataclass(frozen=True)
class HostRequest:
    """The host resources a waiting request asks for (for a resize of host memory: the extra
    bytes). ``numa``: ``"any"``, ``"near"``, or a node's number."""

    mem_bytes: int = 0
    pinned_bytes: int = 0
    cpus: int = 0
    numa: Union[str, int] = "any"

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "HostRequest":
        return cls(
            mem_bytes=int(d.get("mem_bytes", 0)),
            pinned_bytes=int(d.get("pinned_bytes", 0)),
            cpus=int(d.get("cpus", 0)),
            numa=_numa_from_wire(d.get("numa")),
        )


@dataclass(frozen=True)
class LeaseInfo:
    """A granted lease as its holder sees it. ``parts`` lists, for a lease of several devices,
    every part in the order asked (the first is this lease); it is empty for one device.
    ``host`` is the host resources granted with it (``None`` when it asked for none); a lease
    of the host alone has them and no device (its ``device_uuid`` is empty)."""

    lease: int
    device_uuid: str
    device_index: int
    device_name: str
    vram_bytes: int
    compute: bool
    cls: str
    cuda_visible_devices: str
    #: Secret that re-adopts the lease after a daemon restart; keep it private.
    token: str = field(default="", repr=False)
    parts: Tuple[LeasePart, ...] = ()
    host: Optional[HostGrant] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "LeaseInfo":
        host = d.get("host")
        return cls(
            lease=int(d["lease"]),
            device_uuid=str(d["device_uuid"]),
            device_index=int(d["device_index"]),
            device_name=str(d["device_name"]),
            vram_bytes=int(d["vram_bytes"]),
            compute=bool(d["compute"]),
            cls=str(d["class"]),
            cuda_visible_devices=str(d["cuda_visible_devices"]),
            token=str(d.get("token", "")),
            parts=tuple(LeasePart.from_wire(p) for p in d.get("parts", ())),
            host=None if host is None else HostGrant.from_wire(host),
        )


@dataclass(frozen=True)
class DaemonInfo:
    """Facts about the daemon."""

    version: str
    pid: int
    uptime_ms: int
    sessions: int
    backend: str

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DaemonInfo":
        return cls(
            version=str(d["version"]),
            pid=int(d["pid"]),
            uptime_ms=int(d["uptime_ms"]),
            sessions=int(d["sessions"]),
            backend=str(d["backend"]),
        )


@dataclass(frozen=True)
class QueueCounts:
    """Waiting requests per class."""

    critical: int = 0
    high: int = 0
    normal: int = 0
    background: int = 0

    @property
    def total(self) -> int:
        return self.critical + self.high + self.normal + self.background

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "QueueCounts":
        return cls(
            critical=int(d.get("critical", 0)),
            high=int(d.get("high", 0)),
            normal=int(d.get("normal", 0)),
            background=int(d.get("background", 0)),
        )


@dataclass(frozen=True)
class ComputeHolder:
    """A lease holding a compute slot."""

    lease: int
    pid: int
    process: str
    cls: str
    held_ms: int

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "ComputeHolder":
        return cls(
            lease=int(d["lease"]),
            pid=int(d["pid"]),
            process=str(d["process"]),
            cls=str(d["class"]),
            held_ms=int(d["held_ms"]),
        )


@dataclass(frozen=True)
class ProcessStatus:
    """A process using device memory, as the daemon's last poll saw it."""

    pid: int
    process: str
    used_bytes: int
    owner_pid: Optional[int]
    over_use: bool

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "ProcessStatus":
        owner = d.get("owner_pid")
        return cls(
            pid=int(d["pid"]),
            process=str(d["process"]),
            used_bytes=int(d["used_bytes"]),
            owner_pid=None if owner is None else int(owner),
            over_use=bool(d.get("over_use", False)),
        )


@dataclass(frozen=True)
class DeviceStatus:
    """One device: its memory books, compute holders and queues."""

    index: int
    uuid: str
    name: str
    total_bytes: int
    headroom_bytes: int
    unmanaged_bytes: int
    capacity_bytes: int
    reserved_bytes: int
    free_bytes: int
    drained: bool
    compute_slots: int
    critical_slots: int
    compute_holder: Optional[ComputeHolder]
    compute_holders: List[ComputeHolder]
    queued: QueueCounts
    processes: List[ProcessStatus]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "DeviceStatus":
        holder = d.get("compute_holder")
        return cls(
            index=int(d["index"]),
            uuid=str(d["uuid"]),
            name=str(d["name"]),
            total_bytes=int(d["total_bytes"]),
            headroom_bytes=int(d["headroom_bytes"]),
            unmanaged_bytes=int(d["unmanaged_bytes"]),
            capacity_bytes=int(d["capacity_bytes"]),
            reserved_bytes=int(d["reserved_bytes"]),
            free_bytes=int(d["free_bytes"]),
            drained=bool(d["drained"]),
            compute_slots=int(d["compute_slots"]),
            critical_slots=int(d.get("critical_slots", 0)),
            compute_holder=None if holder is None else ComputeHolder.from_wire(holder),
            compute_holders=[ComputeHolder.from_wire(h) for h in d.get("compute_holders", [])],
            queued=QueueCounts.from_wire(d.get("queued", {})),
            processes=[ProcessStatus.from_wire(p) for p in d.get("processes", [])],
        )


@dataclass(frozen=True)
class LeaseStatus:
    """One granted lease, as status shows every lease of every session."""

    id: int
    device: str
    device_index: int
    vram_bytes: int
    compute: bool
    cls: str
    pid: int
    uid: int
    process: str
    session: int
    held_ms: int
    yield_requested: bool
    label: Optional[str]
    #: What the row reserves: ``"device"``, or a host part (``"host_memory"``, ``"pinned"``,
    #: ``"cpus"``), whose ``device`` is ``"host"`` or ``"numa<N>"`` and whose amount is in
    #: ``host``.
    resource: str = "device"
    host: Optional[HostGrant] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "LeaseStatus":
        host = d.get("host")
        return cls(
            id=int(d["id"]),
            device=str(d["device"]),
            device_index=int(d["device_index"]),
            vram_bytes=int(d["vram_bytes"]),
            compute=bool(d["compute"]),
            cls=str(d["class"]),
            pid=int(d["pid"]),
            uid=int(d["uid"]),
            process=str(d["process"]),
            session=int(d["session"]),
            held_ms=int(d["held_ms"]),
            yield_requested=bool(d["yield_requested"]),
            label=d.get("label"),
            resource=str(d.get("resource", "device")),
            host=None if host is None else HostGrant.from_wire(host),
        )


@dataclass(frozen=True)
class WaiterStatus:
    """One waiting request, in serving order."""

    session: int
    request: int
    pid: int
    cls: str
    device: str
    vram_bytes: int
    compute: bool
    grows_lease: Optional[int]
    waited_ms: int
    label: Optional[str]
    host: Optional[HostRequest] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "WaiterStatus":
        grows = d.get("grows_lease")
        host = d.get("host")
        return cls(
            session=int(d["session"]),
            request=int(d["request"]),
            pid=int(d["pid"]),
            cls=str(d["class"]),
            device=str(d["device"]),
            vram_bytes=int(d["vram_bytes"]),
            compute=bool(d["compute"]),
            grows_lease=None if grows is None else int(grows),
            waited_ms=int(d["waited_ms"]),
            label=d.get("label"),
            host=None if host is None else HostRequest.from_wire(host),
        )


@dataclass(frozen=True)
class HostPoolStatus:
    """A host pool of bytes (host memory, page-locked memory), counted like a device's
    memory: ``capacity_bytes`` = total − headroom − unmanaged."""

    total_bytes: int
    headroom_bytes: int
    unmanaged_bytes: int
    capacity_bytes: int
    reserved_bytes: int
    queued: QueueCounts

    @property
    def free_bytes(self) -> int:
        """What leases may still reserve (0 when over-committed)."""
        return max(0, self.capacity_bytes - self.reserved_bytes)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "HostPoolStatus":
        return cls(
            total_bytes=int(d["total_bytes"]),
            headroom_bytes=int(d["headroom_bytes"]),
            unmanaged_bytes=int(d["unmanaged_bytes"]),
            capacity_bytes=int(d["capacity_bytes"]),
            reserved_bytes=int(d["reserved_bytes"]),
            queued=QueueCounts.from_wire(d.get("queued", {})),
        )


@dataclass(frozen=True)
class NumaStatus:
    """One NUMA node's CPUs that gpud hands out, and those granted now."""

    node: int
    cpus: Tuple[int, ...]
    granted: Tuple[int, ...]
    queued: QueueCounts

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "NumaStatus":
        return cls(
            node=int(d["node"]),
            cpus=_ints(d.get("cpus")),
            granted=_ints(d.get("granted")),
            queued=QueueCounts.from_wire(d.get("queued", {})),
        )


@dataclass(frozen=True)
class HostStatus:
    """The host's own resources as gpud books them."""

    memory: HostPoolStatus
    pinned: HostPoolStatus
    numa: List[NumaStatus]

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "HostStatus":
        return cls(
            memory=HostPoolStatus.from_wire(d["memory"]),
            pinned=HostPoolStatus.from_wire(d["pinned"]),
            numa=[NumaStatus.from_wire(n) for n in d.get("numa", [])],
        )


@dataclass(frozen=True)
class StatusReport:
    """The daemon's whole state: devices, leases and waiters (every page, when paged), and
    the host's resources (``host``; ``None`` from daemons that do not book them)."""

    daemon: DaemonInfo
    devices: List[DeviceStatus]
    leases: List[LeaseStatus]
    waiters: List[WaiterStatus]
    #: The report as the daemon sent it (pages joined), for fields this version does not name.
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    host: Optional[HostStatus] = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "StatusReport":
        host = d.get("host")
        return cls(
            daemon=DaemonInfo.from_wire(d["daemon"]),
            devices=[DeviceStatus.from_wire(x) for x in d.get("devices", [])],
            leases=[LeaseStatus.from_wire(x) for x in d.get("leases", [])],
            waiters=[WaiterStatus.from_wire(x) for x in d.get("waiters", [])],
            raw=dict(d),
            host=None if host is None else HostStatus.from_wire(host),
        )


@dataclass(frozen=True)
class YieldRequested:
    """Release the compute slot at the next safe point (``critical_waiting`` or ``max_hold``).
    ``revoke_in_ms``: when the daemon revokes the lease if it is still held."""

    lease: int
    reason: str
    revoke_in_ms: Optional[int] = None


@dataclass(frozen=True)
class Revoked:
    """The lease is gone (``admin``, ``yield_ignored``, ``over_use``, ``budget_ended``,
    ``reclaimed``, ``holder_stopped`` (its process was stopped when the lease was needed or
    reached its maximum hold), or the client's own ``lost`` when the connection ended): stop
    using the device."""

    lease: int
    reason: str


@dataclass(frozen=True)
class OverUse:
    """The session's processes use more memory on a device than its leases there reserve."""

    device_index: int
    used_bytes: int
    reserved_bytes: int
    revoke_in_ms: Optional[int] = None


@dataclass(frozen=True)
class ShuttingDownEvent:
    """The daemon is stopping; the connection closes next."""


Event = Union[YieldRequested, Revoked, OverUse, ShuttingDownEvent]


def event_from_wire(e: Any) -> Optional[Event]:
    """An event frame's ``event``; ``None`` for an event this version does not know."""
    if e == "shutting_down":
        return ShuttingDownEvent()
    if not isinstance(e, dict) or len(e) != 1:
        return None
    ((kind, d),) = e.items()
    if kind == "yield_requested":
        return YieldRequested(int(d["lease"]), str(d["reason"]), d.get("revoke_in_ms"))
    if kind == "revoked":
        return Revoked(int(d["lease"]), str(d["reason"]))
    if kind == "over_use":
        return OverUse(
            int(d["device_index"]),
            int(d["used_bytes"]),
            int(d["reserved_bytes"]),
            d.get("revoke_in_ms"),
        )
    return None
