"""Status paging against a fake daemon that pages: a reply with ``more`` is followed by
``{"status_page": <cursor>}`` requests until a page has no ``more``; leases and waiters are
joined. The last test checks the same against a real daemon with more leases than a page."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
from typing import Any, Dict, List

import gpud
import gpud.aio
from gpud import protocol


def _lease(i: int) -> Dict[str, Any]:
    return {
        "id": i,
        "device": "GPU-x",
        "device_index": 0,
        "vram_bytes": i,
        "compute": False,
        "class": "normal",
        "pid": 1,
        "uid": 0,
        "process": "p",
        "session": 1,
        "held_ms": 0,
        "yield_requested": False,
        "label": None,
    }


def _waiter(i: int) -> Dict[str, Any]:
    return {
        "session": 2,
        "request": i,
        "pid": 2,
        "class": "high",
        "device": "any",
        "vram_bytes": 1,
        "compute": True,
        "grows_lease": None,
        "waited_ms": 5,
        "label": "w",
    }


DAEMON = {"version": "0.2.0", "pid": 1, "uptime_ms": 1, "sessions": 1, "backend": "simulated"}
PAGES = {
    None: {
        "daemon": DAEMON,
        "devices": [],
        "leases": [_lease(1), _lease(2)],
        "waiters": [],
        "more": {"after": 2},
    },
    2: {"leases": [_lease(3)], "waiters": [_waiter(10)], "more": {"after": 3}},
    3: {"leases": [], "waiters": [_waiter(11)]},
}


class FakeDaemon:
    """Answers a hello and status requests, one page per request; records the ops."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="gpud-fake-")
        self.path = os.path.join(self.dir, "fake.sock")
        self.ops: List[Any] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(4)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        reader = protocol.FrameReader()
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                for frame in reader.feed(data):
                    if frame["type"] == "hello":
                        conn.sendall(
                            protocol.encode(
                                {"type": "welcome", "version": 1, "session": 1, "daemon": "fake"}
                            )
                        )
                        continue
                    op = frame["op"]
                    self.ops.append(op)
                    page = PAGES[None] if op == "status" else PAGES[op["status_page"]["after"]]
                    conn.sendall(
                        protocol.encode(
                            {
                                "type": "reply",
                                "id": frame["id"],
                                "outcome": {"ok": {"status": page}},
                            }
                        )
                    )

    def close(self) -> None:
        self.server.close()


def _check(report: gpud.StatusReport, ops: List[Any]) -> None:
    assert ops == ["status", {"status_page": {"after": 2}}, {"status_page": {"after": 3}}]
    assert [lease.id for lease in report.leases] == [1, 2, 3]
    assert [w.request for w in report.waiters] == [10, 11]
    assert report.waiters[0].cls == "high" and report.daemon.version == "0.2.0"
    assert "more" not in report.raw


def test_the_blocking_client_joins_every_page() -> None:
    fake = FakeDaemon()
    try:
        _check(gpud.status(fake.path), fake.ops)
    finally:
        fake.close()


def test_the_asyncio_client_joins_every_page() -> None:
    fake = FakeDaemon()
    try:
        _check(asyncio.run(gpud.aio.status(fake.path)), fake.ops)
    finally:
        fake.close()


def test_a_real_daemon_pages_a_status_of_more_leases_than_a_page(start_daemon: Any) -> None:
    """More leases than one page shows (4096): status follows the daemon's pages to every
    lease, each once, in id order."""
    d = start_daemon(
        config=[
            "[limits]",
            "max_leases_per_session = 5000",
            "max_entries_per_uid = 5000",
            "requests_per_second = 1000000",
        ]
    )
    with d.client() as client:
        leases = [client.acquire(vram=1 << 20, label=f"job-{i}") for i in range(4200)]
        status = client.status()
        assert [s.id for s in status.leases] == sorted(lease.id for lease in leases)
