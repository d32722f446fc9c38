"""The asyncio client: the same protocol and the same leases as :mod:`gpud.client`, for
programs that run an event loop.

>>> async with gpud.aio.lease(vram="12GiB", compute=True, cls="high") as lease:  # doctest: +SKIP
...     await run_gpu_phase(lease.cuda_visible_devices)

A task of the client reads the connection. Yield callbacks run on the event loop: a plain
function is called there (it must not block), and a coroutine function is started as a task
(it may ``await lease.release()``). A request whose task is cancelled is withdrawn from the
daemon's queue; a grant that arrives after the cancellation is released.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Set, Tuple, Union

from . import protocol
from ._session import (
    LeaseState,
    LeaseView,
    Result,
    Session,
    log,
    run_callbacks,
    with_host_memory,
)
from .client import _expect, _program_name
from .errors import (
    ConnectError,
    ConnectionLost,
    Error,
    ProtocolError,
    UnknownLease,
    error_from_body,
)
from .protocol import Class, Device, Numa
from .sizes import Size
from .types import Event, LeaseInfo, StatusReport, YieldRequested

__all__ = ["Client", "Lease", "connect", "lease", "status", "YieldCallback"]

#: ``callback(lease, notice)``, a function or a coroutine function.
YieldCallback = Callable[["Lease", YieldRequested], Union[None, Awaitable[None]]]

SocketPath = Union[str, "os.PathLike[str]", None]


class _State(LeaseState):
    """Lease state with an asyncio event queue and flags (used on the loop only)."""

    def __init__(self, info: LeaseInfo) -> None:
        super().__init__(info)
        self.events: "asyncio.Queue[Event]" = asyncio.Queue()
        self.yield_flag = asyncio.Event()
        self.lost_flag = asyncio.Event()

    def deliver(self, event: Event) -> None:
        self.events.put_nowait(event)

    def changed(self) -> None:
        if self.yield_requested:
            self.yield_flag.set()
        if self.lost:
            self.lost_flag.set()


class Client:
    """A session with gpud (asyncio API). Open it with :func:`connect` (or
    ``await Client.connect(...)``); use it as an async context manager to close it."""

    def __init__(
        self,
        path: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        welcome: Dict[str, Any],
    ) -> None:
        """Use :func:`connect`."""
        self.socket_path = path
        self._reader = reader
        self._writer = writer
        self._session = Session(self._new_lease)
        #: This session's id, as status shows it.
        self.session_id: int = int(welcome.get("session", 0))
        #: The daemon's name and version.
        self.daemon: str = str(welcome.get("daemon", ""))
        #: The optional protocol additions the daemon's welcome lists (``"host"``, …).
        self.features: Tuple[str, ...] = tuple(str(f) for f in welcome.get("features", ()))
        self._session.session_id = self.session_id
        self._tasks: Set["asyncio.Future[Any]"] = set()
        self._closed = False
        self._read_task: Optional["asyncio.Task[None]"] = None

    @classmethod
    async def connect(
        cls,
        socket: SocketPath = None,
        *,
        name: Optional[str] = None,
        connect_timeout: float = 10.0,
    ) -> "Client":
        """Connects and says hello. ``socket``: default ``$GPUD_SOCKET``, else
        ``/run/gpud/gpud.sock``. Raises :class:`~gpud.ConnectError`, or the daemon's refusal."""
        path = protocol.socket_path(socket)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(path, limit=protocol.MAX_SERVER_FRAME),
                connect_timeout,
            )
        except (OSError, asyncio.TimeoutError) as e:
            raise ConnectError(
                f"cannot connect to gpud at {path}: {e or 'timed out'} (is gpud running? the "
                "socket is chosen with socket=, GPUD_SOCKET or gpud --socket)"
            ) from None
        frames = protocol.FrameReader()
        try:
            welcome, rest = await asyncio.wait_for(
                cls._handshake(path, reader, writer, frames, name or _program_name()),
                connect_timeout,
            )
        except BaseException as e:
            writer.close()
            if isinstance(e, asyncio.TimeoutError):
                raise ConnectionLost(f"gpud at {path} did not answer the hello") from None
            raise
        client = cls(path, reader, writer, welcome)
        client._read_task = asyncio.get_running_loop().create_task(client._read_loop(frames, rest))
        return client

    @staticmethod
    async def _handshake(
        path: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        frames: protocol.FrameReader,
        name: str,
    ) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        # As the blocking client: a refusal may come without the hello being read.
        writer.write(protocol.hello(name))
        try:
            await writer.drain()
        except OSError:
            pass
        while True:
            try:
                data = await reader.read(65536)
            except OSError as e:
                raise ConnectionLost(f"gpud at {path} did not answer the hello: {e}") from None
            if not data:
                raise ConnectionLost(f"gpud at {path} closed the connection during the hello")
            got = frames.feed(data)
            if not got:
                continue
            first, rest = got[0], got[1:]
            if first.get("type") == "welcome":
                return first, rest
            if first.get("type") == "error" and isinstance(first.get("error"), dict):
                raise error_from_body(first["error"])
            raise ProtocolError(f"expected a welcome, got {first!r}")

    # -- the connection's task ----------------------------------------------------------

    def _new_lease(self, info: LeaseInfo) -> LeaseState:
        state = _State(info)
        state.handle = Lease(self, state)
        return state

    async def _read_loop(self, frames: protocol.FrameReader, first: List[Dict[str, Any]]) -> None:
        why: Optional[BaseException] = None
        try:
            for frame in first:
                self._handle(frame)
            while True:
                data = await self._reader.read(65536)
                if not data:
                    break
                for frame in frames.feed(data):
                    self._handle(frame)
        except (OSError, Error) as e:
            why = e
        finally:
            self._session.end(why)
            self._writer.close()

    def _handle(self, frame: Dict[str, Any]) -> None:
        sends, calls = self._session.receive(frame)
        for data in sends:
            self._send(data)
        if calls:
            self._run(calls)

    def _run(self, calls: List[Callable[[], Any]]) -> None:
        for result in run_callbacks(calls):
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._callback_done)

    def _callback_done(self, task: "asyncio.Future[Any]") -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("gpud: a yield callback raised", exc_info=task.exception())

    def _send(self, data: bytes) -> None:
        if data and not self._writer.is_closing():
            self._writer.write(data)

    # -- requests -----------------------------------------------------------------------

    async def _call(self, op: Any, on_yield: Optional[YieldCallback] = None) -> Tuple[str, Any]:
        future: "asyncio.Future[Result]" = asyncio.get_running_loop().create_future()

        def resolve(result: Result) -> None:
            if not future.done():
                future.set_result(result)

        request_id, frame = self._session.start(op, resolve, on_yield)
        self._send(frame)
        try:
            result = await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                late = future.result()
                if isinstance(late, tuple) and late[0] == "granted":
                    late[1].handle._give_back()
            else:
                self._send(self._session.abandon(request_id))
            raise
        if isinstance(result, Error):
            raise result
        return result

    async def acquire(
        self,
        vram: Size = 0,
        compute: bool = False,
        device: Device = "any",
        cls: Union[str, Class] = Class.NORMAL,
        timeout: Optional[float] = None,
        label: Optional[str] = None,
        on_yield: Optional[YieldCallback] = None,
        *,
        host_memory: Size = 0,
        pinned: Size = 0,
        cpus: int = 0,
        numa: Numa = "any",
    ) -> "Lease":
        """Waits until a lease is granted; arguments as :meth:`gpud.Client.acquire`."""
        op = protocol.acquire_op(
            vram,
            compute,
            device,
            cls,
            timeout,
            label,
            host_memory=host_memory,
            pinned=pinned,
            cpus=cpus,
            numa=numa,
        )
        protocol.require_features(op, self.features)
        state = _expect(await self._call(op, on_yield), "granted")
        lease: Lease = state.handle
        return lease

    async def status(self) -> StatusReport:
        """The daemon's devices, leases and queues (every page of it)."""
        pages = protocol.StatusPages(_expect(await self._call("status"), "status"))
        while True:
            op = pages.next_op()
            if op is None:
                return StatusReport.from_wire(pages.report())
            pages.add(*await self._call(op))

    async def ping(self) -> None:
        """A round trip with no effect."""
        _expect(await self._call("ping"), "pong")

    async def metrics(self) -> str:
        """The daemon's metrics in the Prometheus text format."""
        return str(_expect(await self._call("metrics"), "metrics")["text"])

    async def drain(self, device: Device) -> None:
        """Stops grants on a device (admin)."""
        _expect(await self._call({"drain": {"device": protocol.placement(device)}}), "done")

    async def undrain(self, device: Device) -> None:
        """Grants on a drained device again (admin)."""
        _expect(await self._call({"undrain": {"device": protocol.placement(device)}}), "done")

    async def revoke(self, lease: Union[int, "Lease"]) -> None:
        """Takes a lease away from its holder, in any session (admin)."""
        lease_id = lease.id if isinstance(lease, Lease) else int(lease)
        _expect(await self._call({"revoke": {"lease": lease_id}}), "done")

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (closed here, or by the daemon)."""
        return self._closed or self._session.ended is not None

    async def close(self) -> None:
        """Closes the connection; the daemon frees every lease of the session."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        if self._read_task is not None:
            try:
                await self._read_task
            except Exception:
                pass
        try:
            await self._writer.wait_closed()
        except OSError:
            pass

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"gpud.aio.Client(socket={self.socket_path!r}, session={self.session_id})"


class Lease(LeaseView):
    """A granted lease (asyncio API); ``async with`` releases it at the end of the block."""

    _state: _State

    def __init__(self, client: Client, state: _State) -> None:
        super().__init__(state)
        self._client = client

    async def wait_yield(self, timeout: Optional[float] = None) -> bool:
        """Waits until a yield notice arrives (``timeout`` seconds at most); returns
        :attr:`yield_requested`."""
        try:
            await asyncio.wait_for(self._state.yield_flag.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self._state.yield_requested

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until the lease is revoked or lost; returns :attr:`lost`."""
        try:
            await asyncio.wait_for(self._state.lost_flag.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self._state.lost

    async def next_event(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event for this lease, waiting up to ``timeout`` seconds (``None``: for
        ever, ``0``: only what has arrived); ``None`` when none came."""
        try:
            if timeout is not None and timeout <= 0:
                return self._state.events.get_nowait()
            return await asyncio.wait_for(self._state.events.get(), timeout)
        except (asyncio.QueueEmpty, asyncio.TimeoutError):
            return None

    def on_yield(self, callback: YieldCallback) -> None:
        """Calls ``callback(lease, notice)`` for each yield notice, on the event loop; at
        once if one has already arrived."""
        self._state.yield_hooks.append(callback)
        notice = self._state.yield_event
        if notice is not None:
            seen: YieldRequested = notice
            self._client._run([lambda: callback(self, seen)])

    async def release(self) -> None:
        """Releases the lease and waits until the daemon has freed it. A revoked lease gives
        :class:`~gpud.UnknownLease`."""
        _expect(await self._client._call({"release": {"lease": self.id}}), "released")
        self._state.released = True

    async def resize(self, vram: Size, timeout: Optional[float] = None) -> int:
        """Changes the reserved VRAM and returns the new size; as
        :meth:`gpud.Lease.resize`."""
        op = protocol.resize_op(self.id, vram, timeout)
        value = _expect(await self._client._call(op), "resized")
        size = int(value["vram_bytes"])
        self._state.info = dataclasses.replace(self._state.info, vram_bytes=size)
        return size

    async def resize_host_memory(self, host_memory: Size, timeout: Optional[float] = None) -> int:
        """Changes the reserved host memory and returns the new size; as
        :meth:`gpud.Lease.resize_host_memory`."""
        op = protocol.resize_host_op(self.id, host_memory, timeout)
        protocol.require_features(op, self._client.features)
        value = _expect(await self._client._call(op), "resized")
        size = int(value["vram_bytes"])
        self._state.info = with_host_memory(self._state.info, size)
        return size

    def _give_back(self) -> None:
        """Releases without waiting for the answer (a grant nobody wants)."""
        if self._state.released or self._client.closed:
            return
        self._state.released = True
        try:
            _, frame = self._client._session.start({"release": {"lease": self.id}}, None)
        except Error:
            return
        self._client._send(frame)

    async def _release_quietly(self) -> None:
        if self._state.released or self._state.lost or self._client.closed:
            return
        try:
            await self.release()
        except (UnknownLease, ConnectionLost):
            pass

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._release_quietly()


async def connect(
    socket: SocketPath = None, *, name: Optional[str] = None, connect_timeout: float = 10.0
) -> Client:
    """Connects to gpud (asyncio); see :meth:`Client.connect`."""
    return await Client.connect(socket, name=name, connect_timeout=connect_timeout)


@asynccontextmanager
async def lease(
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
) -> AsyncIterator[Lease]:
    """A lease on a connection of its own, released (and the connection closed) when the
    block ends; arguments as :meth:`gpud.Client.acquire`."""
    client = await connect(socket, name=name)
    try:
        granted = await client.acquire(
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
        async with granted:
            yield granted
    finally:
        await client.close()


async def status(socket: SocketPath = None) -> StatusReport:
    """The daemon's status, over a connection of its own."""
    async with await connect(socket) as client:
        return await client.status()
