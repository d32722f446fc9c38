"""The blocking client: a :class:`Client` (one connection, any number of leases) and its
:class:`Lease` objects.

A thread of the client reads the connection, so yield notices and revocations arrive while
the program computes; each call blocks only the calling thread, and a client may be used from
several threads at once (each waiting for its own answer). Yield callbacks run on one more
thread of the client's, so a callback may call the client (release the lease, for one).

Closing the client (or the process ending, even by ``kill -9``) closes the connection, and
the daemon frees every lease of the session at once.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import socket as _socket
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import protocol
from ._session import (
    LeaseState,
    LeaseView,
    Result,
    Session,
    run_callbacks,
    with_host_memory,
)
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

__all__ = ["Client", "Lease", "YieldCallback"]

log = logging.getLogger("gpud")

#: ``callback(lease, notice)``: called once per yield notice, on the client's callback thread.
YieldCallback = Callable[["Lease", YieldRequested], Any]

SocketPath = Union[str, "os.PathLike[str]", None]


def _program_name() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name or "python"


def _expect(result: Tuple[str, Any], kind: str) -> Any:
    got, value = result
    if got != kind:
        raise ProtocolError(f"expected a {kind} reply, got {got}")
    return value


class _State(LeaseState):
    """Lease state with a thread-safe event queue and flags to wait on."""

    def __init__(self, info: LeaseInfo) -> None:
        super().__init__(info)
        self.events: "queue.Queue[Event]" = queue.Queue()
        self.yield_flag = threading.Event()
        self.lost_flag = threading.Event()

    def deliver(self, event: Event) -> None:
        self.events.put(event)

    def changed(self) -> None:
        if self.yield_requested:
            self.yield_flag.set()
        if self.lost:
            self.lost_flag.set()


class Client:
    """A session with gpud (blocking API).

    ``socket``: the daemon's socket; default ``$GPUD_SOCKET``, else ``/run/gpud/gpud.sock``.
    ``name``: the client name status shows (default: the program's name).

    >>> with gpud.Client() as client:                      # doctest: +SKIP
    ...     a = client.acquire(vram="8GiB", compute=True)
    ...     b = client.acquire(vram="2GiB", device=1)
    ...     print(client.status().leases)

    Raises :class:`~gpud.ConnectError` when nothing answers on the socket, or the daemon's
    refusal (:class:`~gpud.NotAllowed`, :class:`~gpud.LimitExceeded`, …).
    """

    def __init__(
        self,
        socket: SocketPath = None,
        *,
        name: Optional[str] = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.socket_path = protocol.socket_path(socket)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._session = Session(self._new_lease)
        self._callbacks: "queue.Queue[Optional[List[Callable[[], Any]]]]" = queue.Queue()
        self._callback_thread: Optional[threading.Thread] = None
        self._closed = False
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(connect_timeout)
            sock.connect(self.socket_path)
        except OSError as e:
            sock.close()
            raise ConnectError(
                f"cannot connect to gpud at {self.socket_path}: {e} (is gpud running? the "
                "socket is chosen with socket=, GPUD_SOCKET or gpud --socket)"
            ) from None
        self._sock = sock
        reader = protocol.FrameReader()
        try:
            welcome, rest = self._handshake(reader, name or _program_name())
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        #: This session's id, as status shows it.
        self.session_id: int = int(welcome.get("session", 0))
        #: The daemon's name and version (``gpud 0.1.0``).
        self.daemon: str = str(welcome.get("daemon", ""))
        #: The optional protocol additions the daemon's welcome lists (``"host"``, …).
        self.features: Tuple[str, ...] = tuple(str(f) for f in welcome.get("features", ()))
        self._session.session_id = self.session_id
        self._reader = threading.Thread(
            target=self._read_loop, args=(reader, rest), name="gpud-client", daemon=True
        )
        self._reader.start()

    def _handshake(
        self, reader: protocol.FrameReader, name: str
    ) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        # A daemon that refuses the session answers (and closes) without reading the hello,
        # so a failed send is not the end: the refusal may be waiting to be read.
        try:
            self._sock.sendall(protocol.hello(name))
        except OSError:
            pass
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError as e:
                raise ConnectionLost(
                    f"gpud at {self.socket_path} did not answer the hello: {e}"
                ) from None
            if not data:
                raise ConnectionLost(
                    f"gpud at {self.socket_path} closed the connection during the hello"
                )
            frames = reader.feed(data)
            if not frames:
                continue
            first, rest = frames[0], frames[1:]
            if first.get("type") == "welcome":
                return first, rest
            if first.get("type") == "error" and isinstance(first.get("error"), dict):
                raise error_from_body(first["error"])
            raise ProtocolError(f"expected a welcome, got {first!r}")

    # -- the connection's thread --------------------------------------------------------

    def _new_lease(self, info: LeaseInfo) -> LeaseState:
        state = _State(info)
        state.handle = Lease(self, state)
        return state

    def _read_loop(self, reader: protocol.FrameReader, first: List[Dict[str, Any]]) -> None:
        why: Optional[BaseException] = None
        try:
            for frame in first:
                self._handle(frame)
            while True:
                data = self._sock.recv(65536)
                if not data:
                    break
                for frame in reader.feed(data):
                    self._handle(frame)
        except (OSError, Error) as e:
            why = e
        finally:
            with self._lock:
                self._session.end(why)
            try:
                self._sock.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass
            self._callbacks.put(None)

    def _handle(self, frame: Dict[str, Any]) -> None:
        with self._lock:
            sends, calls = self._session.receive(frame)
        for data in sends:
            self._send(data)
        if calls:
            self._schedule(calls)

    def _schedule(self, calls: List[Callable[[], Any]]) -> None:
        with self._lock:
            if self._callback_thread is None:
                self._callback_thread = threading.Thread(
                    target=self._callback_loop, name="gpud-callbacks", daemon=True
                )
                self._callback_thread.start()
        self._callbacks.put(calls)

    def _callback_loop(self) -> None:
        while True:
            calls = self._callbacks.get()
            if calls is None:
                return
            run_callbacks(calls)

    def _send(self, data: bytes) -> None:
        if not data:
            return
        try:
            with self._send_lock:
                self._sock.sendall(data)
        except OSError:
            # The reading thread sees the connection end and fails what waits.
            pass

    # -- requests -----------------------------------------------------------------------

    def _call(self, op: Any, on_yield: Optional[YieldCallback] = None) -> Tuple[str, Any]:
        done = threading.Event()
        box: List[Result] = []

        def resolve(result: Result) -> None:
            box.append(result)
            done.set()

        with self._lock:
            request_id, frame = self._session.start(op, resolve, on_yield)
        self._send(frame)
        try:
            done.wait()
        except BaseException:
            # Interrupted (KeyboardInterrupt): withdraw the request, or give back a grant
            # that came meanwhile.
            with self._lock:
                cancel = b"" if done.is_set() else self._session.abandon(request_id)
            self._send(cancel)
            if box and isinstance(box[0], tuple) and box[0][0] == "granted":
                box[0][1].handle._release_quietly()
            raise
        result = box[0]
        if isinstance(result, Error):
            raise result
        return result

    def acquire(
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
        """Waits until a lease is granted and returns it.

        ``vram``: bytes, or a size such as ``"12GiB"``; ``compute``: take the device's compute
        slot (at least one of the two); ``device``: ``"any"``, an index or a UUID; ``cls``:
        ``critical``, ``high``, ``normal`` or ``background``; ``timeout``: seconds to wait
        (``None``: for ever), then :class:`~gpud.TimedOut`; ``label``: shown in status;
        ``on_yield``: ``callback(lease, notice)`` for each yield notice.

        Host resources (docs/HOST.md), granted with the device part or alone (then no
        ``vram`` nor ``compute`` is needed): ``host_memory`` and ``pinned`` (page-locked)
        bytes or sizes, ``cpus`` (a number, of one NUMA node; the grant names them in
        :attr:`Lease.cpus`), ``numa``: ``"any"``, ``"near"`` (the device's node) or a node's
        number. A daemon whose welcome does not list ``"host"`` is not sent them
        (:class:`~gpud.InvalidRequest`).

        Errors: :class:`~gpud.InvalidRequest`, :class:`~gpud.NeverFits`,
        :class:`~gpud.UnknownDevice`, :class:`~gpud.TimedOut`, :class:`~gpud.LimitExceeded`,
        :class:`~gpud.NotAllowed` (the critical class), …
        """
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
        state = _expect(self._call(op, on_yield), "granted")
        lease: Lease = state.handle
        return lease

    def status(self) -> StatusReport:
        """The daemon's devices, leases and queues (every page of it)."""
        pages = protocol.StatusPages(_expect(self._call("status"), "status"))
        while True:
            op = pages.next_op()
            if op is None:
                return StatusReport.from_wire(pages.report())
            pages.add(*self._call(op))

    def ping(self) -> None:
        """A round trip with no effect."""
        _expect(self._call("ping"), "pong")

    def metrics(self) -> str:
        """The daemon's metrics in the Prometheus text format."""
        return str(_expect(self._call("metrics"), "metrics")["text"])

    def drain(self, device: Device) -> None:
        """Stops grants on a device (admin)."""
        _expect(self._call({"drain": {"device": protocol.placement(device)}}), "done")

    def undrain(self, device: Device) -> None:
        """Grants on a drained device again (admin)."""
        _expect(self._call({"undrain": {"device": protocol.placement(device)}}), "done")

    def revoke(self, lease: Union[int, "Lease"]) -> None:
        """Takes a lease away from its holder, in any session (admin)."""
        lease_id = lease.id if isinstance(lease, Lease) else int(lease)
        _expect(self._call({"revoke": {"lease": lease_id}}), "done")

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (closed here, or by the daemon)."""
        with self._lock:
            return self._closed or self._session.ended is not None

    def close(self) -> None:
        """Closes the connection; the daemon frees every lease of the session."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=5)
        self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"gpud.Client(socket={self.socket_path!r}, session={self.session_id})"


class Lease(LeaseView):
    """A granted lease (blocking API). Use it as a context manager to release it at the end
    of the block; it is also freed when its client closes or the process ends."""

    _state: _State

    def __init__(self, client: Client, state: _State) -> None:
        super().__init__(state)
        self._client = client

    def wait_yield(self, timeout: Optional[float] = None) -> bool:
        """Waits until a yield notice arrives (``timeout`` seconds at most); returns
        :attr:`yield_requested`."""
        self._state.yield_flag.wait(timeout)
        return self._state.yield_requested

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until the lease is revoked or lost; returns :attr:`lost`."""
        self._state.lost_flag.wait(timeout)
        return self._state.lost

    def next_event(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event for this lease, waiting up to ``timeout`` seconds (``None``: for
        ever, ``0``: only what has arrived); ``None`` when none came."""
        try:
            if timeout is not None and timeout <= 0:
                return self._state.events.get_nowait()
            return self._state.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def on_yield(self, callback: YieldCallback) -> None:
        """Calls ``callback(lease, notice)`` for each yield notice, on the client's callback
        thread; at once (there) if one has already arrived."""
        client = self._client
        with client._lock:
            self._state.yield_hooks.append(callback)
            notice = self._state.yield_event
        if notice is not None:
            seen: YieldRequested = notice
            client._schedule([lambda: callback(self, seen)])

    # -- changes ------------------------------------------------------------------------

    def release(self) -> None:
        """Releases the lease and waits until the daemon has freed it. A revoked lease gives
        :class:`~gpud.UnknownLease`."""
        _expect(self._client._call({"release": {"lease": self.id}}), "released")
        self._state.released = True

    def resize(self, vram: Size, timeout: Optional[float] = None) -> int:
        """Changes the reserved VRAM and returns the new size. Shrinking is immediate;
        growing waits like a request of the lease's class, up to ``timeout`` seconds, and on
        :class:`~gpud.TimedOut` the lease keeps its size."""
        op = protocol.resize_op(self.id, vram, timeout)
        value = _expect(self._client._call(op), "resized")
        size = int(value["vram_bytes"])
        self._state.info = dataclasses.replace(self._state.info, vram_bytes=size)
        return size

    def resize_host_memory(self, host_memory: Size, timeout: Optional[float] = None) -> int:
        """Changes the reserved host memory and returns the new size, as :meth:`resize` does
        the VRAM: shrinking is immediate, growing waits (``timeout`` seconds at most). Needs
        a daemon that books host resources (its welcome lists ``"host"``)."""
        op = protocol.resize_host_op(self.id, host_memory, timeout)
        protocol.require_features(op, self._client.features)
        value = _expect(self._client._call(op), "resized")
        size = int(value["vram_bytes"])
        self._state.info = with_host_memory(self._state.info, size)
        return size

    def _release_quietly(self) -> None:
        if self._state.released or self._state.lost or self._client.closed:
            return
        try:
            self.release()
        except (UnknownLease, ConnectionLost):
            pass  # revoked or disconnected meanwhile: nothing left to free

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self._release_quietly()
