"""Every error code: one class each, mapped from the daemon's replies; each code a client can
reach is produced against a real daemon, through the client where the client can reach it,
through raw frames where only a broken client could."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional

import pytest

import gpud
from conftest import REPO, Daemon, child_env, wait_until
from gpud import protocol


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_every_error_code_of_the_protocol_has_its_class() -> None:
    """The codes in proto/src/message.rs (the source of truth) are exactly gpud.ERRORS."""
    text = (REPO / "proto" / "src" / "message.rs").read_text()
    body = text[text.index("pub enum ErrorCode {") :]
    body = body[: body.index("\n}")]
    variants = re.findall(r"^\s{4}([A-Z][A-Za-z]+),$", body, re.M)
    codes = {_snake(v) for v in variants}
    assert len(codes) >= 18
    assert codes == set(gpud.ERRORS)
    for code, cls in gpud.ERRORS.items():
        assert issubclass(cls, gpud.Error) and cls.code == code
        e = gpud.error_from_body({"code": code, "message": "why"})
        assert type(e) is cls and e.code == code and e.message == "why" and str(e) == "why"
    unknown = gpud.error_from_body({"code": "from_the_future", "message": "?"})
    assert type(unknown) is gpud.Error and unknown.code == "from_the_future"


def test_errors_of_acquire(start_daemon: Any) -> None:
    daemon = start_daemon("2x8GiB")
    with daemon.client() as c:
        cases = [
            ({}, gpud.InvalidRequest),  # nothing asked
            ({"vram": 0, "compute": False}, gpud.InvalidRequest),
            ({"vram": 1, "timeout": 40_000_000}, gpud.InvalidRequest),  # over a year
            ({"vram": 1, "label": "x" * 300}, gpud.InvalidRequest),  # label too long
            ({"vram": 1, "label": "a\nb"}, gpud.InvalidRequest),  # not printable
            ({"vram": "9GiB"}, gpud.NeverFits),
            ({"vram": (1 << 64) - 1, "compute": True}, gpud.NeverFits),
            ({"vram": 1, "device": 2}, gpud.UnknownDevice),
            ({"vram": 1, "device": "GPU-00000000-0000-4000-8000-00000000dead"}, gpud.UnknownDevice),
        ]
        for request, error in cases:
            with pytest.raises(error) as e:
                c.acquire(**request)
            assert e.value.code == error.code and e.value.message, request
        holder = c.acquire(vram="8GiB", device=0)
        with pytest.raises(gpud.TimedOut):
            c.acquire(vram="8GiB", device=0, timeout=0.2)
        # The session survived every refusal.
        assert [s.id for s in c.status().leases] == [holder.id]


def test_bad_arguments_are_refused_before_sending(daemon: Daemon) -> None:
    with daemon.client() as c:
        bad: List[Dict[str, Any]] = [
            {"vram": "12 parsecs"},
            {"vram": -1},
            {"vram": 1 << 64},
            {"vram": True},
            {"vram": 1.5},
            {"vram": 1, "cls": "urgent"},
            {"vram": 1, "device": "../etc"},
            {"vram": 1, "device": -1},
            {"vram": 1, "timeout": -1},
            {"vram": 1, "timeout": "soon"},
            {"vram": 1, "compute": "yes"},
            {"vram": 1, "label": 17},
        ]
        for request in bad:
            with pytest.raises(gpud.InvalidRequest):
                c.acquire(**request)
        lease = c.acquire(vram=1)
        for size in ("lots", -5):
            with pytest.raises(gpud.InvalidRequest):
                lease.resize(size)  # type: ignore[arg-type]
        with pytest.raises(gpud.InvalidRequest):
            c.drain("bad device!")
        # Nothing reached the daemon: no waiter, one lease, the session open.
        status = c.status()
        assert len(status.leases) == 1 and status.waiters == [] and status.daemon.sessions == 1


def test_errors_of_resize_and_release(daemon: Daemon) -> None:
    with daemon.client() as a_client, daemon.client() as b_client:
        a = a_client.acquire(vram="4GiB")
        with pytest.raises(gpud.NeverFits):
            a.resize("17GiB")
        with pytest.raises(gpud.InvalidRequest):
            a.resize(0)  # a memory-only lease must keep some memory
        b = b_client.acquire(vram="10GiB")
        # resize_pending: a grow waits, and another resize of the lease comes.
        first: List[BaseException] = []

        def grow() -> None:
            try:
                a.resize("8GiB")
            except gpud.Error as e:
                first.append(e)

        t = threading.Thread(target=grow)
        t.start()
        assert wait_until(lambda: len(a_client.status().waiters) == 1)
        with pytest.raises(gpud.ResizePending):
            a.resize("5GiB")
        # grow_deadlock: the other lease grows into memory only the first holds.
        with pytest.raises(gpud.GrowDeadlock):
            b.resize("14GiB")
        # cancelled: the lease of a waiting grow ends.
        a.release()
        t.join(5)
        assert len(first) == 1 and isinstance(first[0], gpud.Cancelled), first
        # unknown_lease: released, then revoked; revoked, then released.
        with pytest.raises(gpud.UnknownLease):
            b_client.revoke(a.id)
        b_client.revoke(b.id)
        assert b.wait_lost(2)
        with pytest.raises(gpud.UnknownLease):
            b.release()
        with pytest.raises(gpud.UnknownLease):
            b.resize("1GiB")


def test_limits_per_session(start_daemon: Any) -> None:
    daemon = start_daemon(
        config=["limits.max_leases_per_session = 1", "limits.max_outstanding_requests = 1"]
    )
    with daemon.client() as a, daemon.client() as b:
        a.acquire(vram="16GiB")
        with pytest.raises(gpud.LimitExceeded):
            a.acquire(vram=1)
        first: List[BaseException] = []

        def wait() -> None:
            try:
                b.acquire(vram=1, timeout=0.5)
            except gpud.Error as e:
                first.append(e)

        t = threading.Thread(target=wait)
        t.start()
        assert wait_until(lambda: len(a.status().waiters) == 1)
        with pytest.raises(gpud.LimitExceeded):
            b.acquire(vram=1, timeout=1)
        t.join(5)
        assert len(first) == 1 and isinstance(first[0], gpud.TimedOut), first


def test_a_frame_over_the_daemons_limit_is_frame_too_large(start_daemon: Any) -> None:
    daemon = start_daemon(config=["limits.max_frame_bytes = 1024"])
    c = daemon.client()
    with pytest.raises(gpud.FrameTooLarge):
        c.acquire(vram=1, label="x" * 2000)
    assert wait_until(lambda: c.closed)
    with pytest.raises(gpud.FrameTooLarge):  # the session's error stays the answer
        c.ping()


def test_a_stopping_daemon_is_shutting_down(daemon: Daemon) -> None:
    holder_client, waiter = daemon.client(), daemon.client()
    holder = holder_client.acquire(vram="16GiB")
    errors: List[BaseException] = []

    def wait() -> None:
        try:
            waiter.acquire(vram="1GiB")
        except gpud.Error as e:
            errors.append(e)

    t = threading.Thread(target=wait)
    t.start()
    assert wait_until(lambda: len(holder_client.status().waiters) == 1)
    assert daemon.terminate() == 0
    t.join(5)
    assert len(errors) == 1 and isinstance(errors[0], gpud.ShuttingDown), errors
    assert holder.wait_lost(2)
    events = [holder.next_event(0), holder.next_event(0)]
    assert gpud.ShuttingDownEvent() in events
    assert gpud.Revoked(holder.id, "lost") in events


AS_NOBODY = """
import json, sys, gpud
try:
    with gpud.Client(sys.argv[1]) as c:
        getattr(c, sys.argv[2])(**json.loads(sys.argv[3]))
    print("ok")
except gpud.Error as e:
    print(type(e).__name__, e.code)
"""


def _as_nobody(socket_path: str, method: str, **kwargs: Any) -> str:
    out = subprocess.run(
        [sys.executable, "-c", AS_NOBODY, socket_path, method, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        env=child_env(),
        user=65534,
        group=65534,
        extra_groups=[],
        timeout=20,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _nobody_can_run_python() -> bool:
    try:
        subprocess.run(
            [sys.executable, "-c", "import gpud"],
            env=child_env(),
            user=65534,
            group=65534,
            extra_groups=[],
            check=True,
            capture_output=True,
            timeout=20,
        )
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


@pytest.mark.skipif(
    os.geteuid() != 0, reason="runs a client as uid 65534: needs root (CI runs as root)"
)
def test_what_a_user_may_not_do(start_daemon: Any) -> None:
    if not _nobody_can_run_python():
        pytest.skip(f"uid 65534 cannot run {sys.executable} with the package (a private home?)")
    # Not in the allow list: refused at connect.
    closed = start_daemon(config=['socket_mode = "0666"'])
    assert _as_nobody(closed.socket, "ping") == "NotAllowed not_allowed"
    # Allowed, but neither admin nor critical.
    daemon = start_daemon(config=['socket_mode = "0666"', "access.allowed_uids = [65534]"])
    assert _as_nobody(daemon.socket, "acquire", vram=1) == "ok"
    assert (
        _as_nobody(daemon.socket, "acquire", compute=True, cls="critical")
        == "NotAllowed not_allowed"
    )
    assert _as_nobody(daemon.socket, "drain", device=0) == "PermissionDenied permission_denied"
    assert _as_nobody(daemon.socket, "revoke", lease=1) == "PermissionDenied permission_denied"


def _raw(
    socket_path: str, frames: List[bytes], hello: bool = True, until: Optional[str] = None
) -> List[Dict[str, Any]]:
    """Sends frames on a connection of its own; returns what came back (until a frame
    carrying the error ``until``, or the end of the connection, or 2 s)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(socket_path)
    s.settimeout(2)
    reader = protocol.FrameReader()
    got: List[Dict[str, Any]] = []
    try:
        s.sendall((protocol.hello("raw") if hello else b"") + b"".join(frames))
        while True:
            data = s.recv(65536)
            if not data:
                break
            got.extend(reader.feed(data))
            if until and any(_code(f) == until for f in got):
                break
    except socket.timeout:
        pass
    finally:
        s.close()
    return got


def _code(frame: Dict[str, Any]) -> Optional[str]:
    if frame.get("type") == "error":
        return frame["error"]["code"]
    if frame.get("type") == "reply" and "error" in frame["outcome"]:
        return frame["outcome"]["error"]["code"]
    return None


def _mapped(frames: List[Dict[str, Any]], code: str) -> gpud.Error:
    body = next(
        f["error"] if f["type"] == "error" else f["outcome"]["error"]
        for f in frames
        if _code(f) == code
    )
    return gpud.error_from_body(body)


def _bytes(text: str) -> bytes:
    payload = text.encode()
    return struct.pack(">I", len(payload)) + payload


def test_errors_only_a_broken_client_reaches(daemon: Daemon) -> None:
    """bad_frame, hello_required, unsupported_version, unknown_request, duplicate_request:
    the client never sends what causes them; raw frames do, and the replies map."""
    sock = daemon.socket
    req = lambda i, op: protocol.request(i, op)  # noqa: E731
    cases = [
        ([_bytes("not json")], True, "bad_frame", gpud.BadFrame),
        ([protocol.hello("again")], True, "bad_frame", gpud.BadFrame),
        (
            [
                _bytes(
                    '{"type":"request","id":1,"op":{"acquire":{"vram_bytes":1,"class":"urgent"}}}'
                )
            ],
            True,
            "bad_frame",
            gpud.BadFrame,
        ),
        ([req(1, "ping")], False, "hello_required", gpud.HelloRequired),
        (
            [_bytes('{"type":"hello","version":2}')],
            False,
            "unsupported_version",
            gpud.UnsupportedVersion,
        ),
        ([req(1, {"cancel": {"request": 9}})], True, "unknown_request", gpud.UnknownRequest),
        ([req(1, {"release": {"lease": 4242}})], True, "unknown_lease", gpud.UnknownLease),
    ]
    for frames, hello, code, cls in cases:
        got = _raw(sock, frames, hello, until=code)
        assert isinstance(_mapped(got, code), cls), (code, got)
    # duplicate_request: an id in use by a waiting request.
    with daemon.client() as holder:
        holder.acquire(vram="16GiB")
        waiting = req(7, {"acquire": {"vram_bytes": 1}})
        got = _raw(sock, [waiting, waiting], until="duplicate_request")
        assert isinstance(_mapped(got, "duplicate_request"), gpud.DuplicateRequest), got
        # cancelled: a cancel of the waiting request.
        got = _raw(sock, [waiting, req(8, {"cancel": {"request": 7}})], until="cancelled")
        assert isinstance(_mapped(got, "cancelled"), gpud.Cancelled), got
