"""One session's bookkeeping, without I/O: requests waiting for their replies, granted leases
and what happens to them as frames arrive. The blocking and asyncio clients own the socket
and the waiting; they feed every frame from the daemon to :meth:`Session.receive` and send
the frames it returns.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from . import protocol
from .errors import ConnectionLost, Error, ProtocolError, ShuttingDown, error_from_body
from .types import (
    Event,
    HostGrant,
    LeaseInfo,
    OverUse,
    Revoked,
    ShuttingDownEvent,
    YieldRequested,
    event_from_wire,
)

log = logging.getLogger("gpud")

#: A reply as the session hands it over: ``(kind, value)``, or the error to raise.
Result = Union[Tuple[str, Any], Error]
Resolve = Callable[[Result], None]
#: A yield callback: called with the lease (the client's lease object) and the notice.
YieldHook = Callable[[Any, YieldRequested], Any]


class LeaseState:
    """What a client knows about one granted lease. Subclasses deliver events to their
    holder (a thread-safe queue, an asyncio queue)."""

    def __init__(self, info: LeaseInfo) -> None:
        self.info = info
        self.yield_requested = False
        self.yield_event: Optional[YieldRequested] = None
        #: Why the lease is gone (``admin``, ``lost``, …); ``None`` while it is held.
        self.revoke_reason: Optional[str] = None
        self.released = False
        self.yield_hooks: List[YieldHook] = []
        #: The client's lease object for this state (what callbacks receive).
        self.handle: Any = None

    @property
    def lost(self) -> bool:
        return self.revoke_reason is not None

    def deliver(self, event: Event) -> None:
        """Hands an event to the holder (called by the session; must not block)."""
        raise NotImplementedError

    def changed(self) -> None:
        """The yield flag or the lost flag changed (wake whoever waits for them)."""


class _Pending:
    __slots__ = ("op", "resolve", "on_yield", "abandoned")

    def __init__(self, op: Any, resolve: Optional[Resolve], on_yield: Optional[YieldHook]) -> None:
        self.op = op
        self.resolve = resolve
        self.on_yield = on_yield
        self.abandoned = False


class Session:
    """Pending requests and leases of one connection."""

    def __init__(self, new_lease: Callable[[LeaseInfo], LeaseState]) -> None:
        self._new_lease = new_lease
        self._next_id = 1
        self._pending: Dict[int, _Pending] = {}
        self.leases: Dict[int, LeaseState] = {}
        self.session_id: Optional[int] = None
        self._session_error: Optional[Error] = None
        self._shutting_down = False
        self.ended: Optional[Error] = None

    def _take_id(self) -> int:
        i = self._next_id
        self._next_id += 1
        return i

    def start(
        self,
        op: Any,
        resolve: Optional[Resolve],
        on_yield: Optional[YieldHook] = None,
    ) -> Tuple[int, bytes]:
        """Registers a request; returns its id and the frame to send. ``resolve`` is called
        once with its answer (``None``: nobody waits for it)."""
        if self.ended is not None:
            raise copy_error(self.ended)
        request_id = self._take_id()
        self._pending[request_id] = _Pending(op, resolve, on_yield)
        return request_id, protocol.request(request_id, op)

    def abandon(self, request_id: int) -> bytes:
        """The caller stopped waiting: a frame that withdraws the request (a cancel), or
        nothing when its answer already came. A grant that arrives later is released."""
        p = self._pending.get(request_id)
        if p is None or p.abandoned or self.ended is not None:
            return b""
        p.abandoned = True
        p.resolve = None
        _, frame = self.start({"cancel": {"request": request_id}}, None)
        return frame

    def receive(self, frame: Dict[str, Any]) -> Tuple[List[bytes], List[Callable[[], Any]]]:
        """Routes one frame from the daemon. Returns frames to send (releases of grants
        nobody waits for) and the yield callbacks to run (outside any lock)."""
        sends: List[bytes] = []
        calls: List[Callable[[], Any]] = []
        kind = frame.get("type")
        if kind == "reply":
            self._reply(frame, sends)
        elif kind == "event":
            self._event(frame.get("event"), calls)
        elif kind == "error":
            body = frame.get("error")
            self._session_error = error_from_body(body if isinstance(body, dict) else {})
        elif kind == "welcome":
            pass
        else:
            log.debug("gpud: ignoring a frame of unknown type %r", kind)
        return sends, calls

    def _reply(self, frame: Dict[str, Any], sends: List[bytes]) -> None:
        p = self._pending.pop(frame.get("id"), None)  # type: ignore[arg-type]
        if p is None:
            return
        outcome = frame.get("outcome")
        result: Result
        if isinstance(outcome, dict) and "ok" in outcome:
            try:
                kind, value = protocol.split_reply(outcome["ok"])
                if kind == "granted":
                    state = self._new_lease(LeaseInfo.from_wire(value))
                    if p.on_yield is not None:
                        state.yield_hooks.append(p.on_yield)
                    if p.resolve is None:
                        # Nobody waits for it any more: give it back.
                        _, release = self.start({"release": {"lease": state.info.lease}}, None)
                        sends.append(release)
                        return
                    self.leases[state.info.lease] = state
                    value = state
                elif kind == "released":
                    gone = self.leases.pop(int(value["lease"]), None)
                    if gone is not None:
                        gone.released = True
                result = (kind, value)
            except (KeyError, TypeError, ValueError) as e:
                result = ProtocolError(f"unreadable reply {outcome!r}: {e}")
        elif isinstance(outcome, dict) and isinstance(outcome.get("error"), dict):
            result = error_from_body(outcome["error"])
        else:
            result = ProtocolError(f"unreadable reply {frame!r}")
        if p.resolve is not None:
            p.resolve(result)

    def _event(self, wire: Any, calls: List[Callable[[], Any]]) -> None:
        event = event_from_wire(wire)
        if event is None:
            log.debug("gpud: ignoring an event this version does not know: %r", wire)
            return
        if isinstance(event, YieldRequested):
            state = self.leases.get(event.lease)
            if state is None:
                return
            state.yield_requested = True
            state.yield_event = event
            state.deliver(event)
            state.changed()
            for hook in list(state.yield_hooks):
                calls.append(_bind(hook, state.handle, event))
        elif isinstance(event, Revoked):
            state = self.leases.pop(event.lease, None)
            if state is None:
                return
            state.revoke_reason = event.reason
            state.deliver(event)
            state.changed()
        else:
            if isinstance(event, ShuttingDownEvent):
                self._shutting_down = True
            assert isinstance(event, (OverUse, ShuttingDownEvent))
            for state in self.leases.values():
                state.deliver(event)

    def end(self, why: Optional[BaseException] = None) -> Error:
        """The connection ended: every waiting request fails and every lease is lost.
        Returns the error that later calls raise."""
        if self.ended is not None:
            return self.ended
        if self._session_error is not None:
            err: Error = self._session_error
        elif self._shutting_down:
            err = ShuttingDown("gpud is stopping")
        else:
            detail = f": {why}" if why is not None else ""
            err = ConnectionLost(f"the connection to gpud was lost{detail}")
        self.ended = err
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if p.resolve is not None:
                p.resolve(copy_error(err))
        leases, self.leases = self.leases, {}
        for lease_id, state in leases.items():
            state.revoke_reason = "lost"
            state.deliver(Revoked(lease_id, "lost"))
            state.changed()
        return err


def copy_error(e: Error) -> Error:
    """A fresh instance of ``e`` (one stored error is raised to several callers)."""
    fresh = type(e)(e.message)
    fresh.code = e.code
    return fresh


def _bind(hook: YieldHook, lease: Any, event: YieldRequested) -> Callable[[], Any]:
    return lambda: hook(lease, event)


def run_callbacks(calls: List[Callable[[], Any]]) -> List[Any]:
    """Runs yield callbacks, logging (not raising) what they raise; returns what they
    returned (the asyncio client schedules awaitables)."""
    results = []
    for call in calls:
        try:
            results.append(call())
        except Exception:  # a user's callback must not stop the client
            log.exception("gpud: a yield callback raised")
    return results


class LeaseView:
    """What both lease classes show of a lease: the grant, and what happened since."""

    def __init__(self, state: LeaseState) -> None:
        self._state = state

    # -- what was granted ---------------------------------------------------------------

    @property
    def info(self) -> LeaseInfo:
        """Everything the daemon said about the grant (the size as of the last resize)."""
        return self._state.info

    @property
    def id(self) -> int:
        """The lease's id, as status shows it."""
        return self._state.info.lease

    @property
    def device_uuid(self) -> str:
        return self._state.info.device_uuid

    @property
    def device_index(self) -> int:
        return self._state.info.device_index

    @property
    def device_name(self) -> str:
        return self._state.info.device_name

    @property
    def vram_bytes(self) -> int:
        return self._state.info.vram_bytes

    @property
    def compute(self) -> bool:
        return self._state.info.compute

    @property
    def cls(self) -> str:
        return self._state.info.cls

    @property
    def host(self) -> Optional[HostGrant]:
        """The host resources granted with the lease (``None`` when it asked for none)."""
        return self._state.info.host

    @property
    def host_memory_bytes(self) -> int:
        """The bytes of host memory the lease reserves now (after any resize)."""
        host = self._state.info.host
        return 0 if host is None else host.mem_bytes

    @property
    def pinned_bytes(self) -> int:
        """The bytes of page-locked host memory the lease reserves."""
        host = self._state.info.host
        return 0 if host is None else host.pinned_bytes

    @property
    def cpus(self) -> Tuple[int, ...]:
        """The CPUs granted (kernel numbers, ascending), empty when none were asked: pin the
        work to them with ``os.sched_setaffinity(0, lease.cpus)``."""
        host = self._state.info.host
        return () if host is None else host.cpus

    @property
    def numa_node(self) -> Optional[int]:
        """The NUMA node of the lease's CPUs; ``None`` when it holds none."""
        host = self._state.info.host
        return None if host is None else host.numa_node

    @property
    def cuda_visible_devices(self) -> str:
        """The value for ``CUDA_VISIBLE_DEVICES`` that shows CUDA exactly the leased device."""
        return self._state.info.cuda_visible_devices

    def env(self, base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """An environment for a child process (``base``, default ``os.environ``) with
        ``CUDA_VISIBLE_DEVICES`` set to the leased device."""
        env = dict(os.environ if base is None else base)
        env["CUDA_VISIBLE_DEVICES"] = self.cuda_visible_devices
        return env

    # -- what happened since ------------------------------------------------------------

    @property
    def yield_requested(self) -> bool:
        """Whether the daemon asked this lease to give back its compute slot (release it at
        the next safe point: CUDA kernels cannot be preempted)."""
        return self._state.yield_requested

    @property
    def lost(self) -> bool:
        """Whether the lease was revoked or its connection ended: it protects nothing now."""
        return self._state.lost

    @property
    def revoke_reason(self) -> Optional[str]:
        """Why the lease is gone (``admin``, ``yield_ignored``, ``over_use``, ``budget_ended``,
        ``reclaimed``, ``holder_stopped``, ``lost``)."""
        return self._state.revoke_reason

    @property
    def released(self) -> bool:
        return self._state.released

    def __repr__(self) -> str:
        i = self._state.info
        host = ""
        if i.host is not None:
            host = (
                f", host_memory_bytes={i.host.mem_bytes}, pinned_bytes={i.host.pinned_bytes}, "
                f"cpus={list(i.host.cpus)}"
            )
        return (
            f"{type(self).__module__.replace('.client', '')}.{type(self).__name__}"
            f"(id={i.lease}, device={i.device_index}, "
            f"vram_bytes={i.vram_bytes}, compute={i.compute}{host}, cls={i.cls!r})"
        )


def with_host_memory(info: LeaseInfo, size: int) -> LeaseInfo:
    """The grant after a resize of its host memory."""
    host = info.host if info.host is not None else HostGrant()
    return dataclasses.replace(info, host=dataclasses.replace(host, mem_bytes=size))
