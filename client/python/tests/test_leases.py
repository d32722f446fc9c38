"""Leases through a real daemon: acquire, release, several leases on one connection, status,
admin operations, the socket choice."""

from __future__ import annotations

import os

import pytest

import gpud
from conftest import GIB, Daemon, wait_until


def test_a_lease_is_granted_shown_and_released(daemon: Daemon) -> None:
    with daemon.client(name="py-test") as client:
        lease = client.acquire(vram="12GiB", compute=True, cls="high", label="proof_17")
        assert lease.vram_bytes == 12 * GIB and lease.compute and lease.cls == "high"
        assert lease.device_index == 0
        assert lease.device_uuid.startswith("GPU-")
        assert lease.cuda_visible_devices == lease.device_uuid
        assert lease.env({"PATH": "/bin"}) == {
            "PATH": "/bin",
            "CUDA_VISIBLE_DEVICES": lease.device_uuid,
        }
        assert not lease.yield_requested and not lease.lost
        status = client.status()
        assert isinstance(status, gpud.StatusReport)
        assert [(s.id, s.vram_bytes, s.compute, s.cls, s.label, s.pid) for s in status.leases] == [
            (lease.id, 12 * GIB, True, "high", "proof_17", os.getpid())
        ]
        assert status.leases[0].session == client.session_id
        device = status.devices[0]
        assert isinstance(device, gpud.DeviceStatus)
        assert (device.total_bytes, device.reserved_bytes, device.free_bytes) == (
            16 * GIB,
            12 * GIB,
            4 * GIB,
        )
        assert device.compute_holder is not None and device.compute_holder.lease == lease.id
        assert status.daemon.backend == "simulated"
        lease.release()
        assert lease.released
        assert client.status().leases == []
        assert client.status().devices[0].reserved_bytes == 0


def test_the_lease_context_manager_releases_and_closes(daemon: Daemon) -> None:
    with gpud.lease(vram=4 * GIB, socket=daemon.socket, timeout=5) as lease:
        assert gpud.status(daemon.socket).leases[0].id == lease.id
    assert gpud.status(daemon.socket).leases == []
    assert gpud.status(daemon.socket).daemon.sessions == 1  # only status's own


def test_one_client_holds_several_leases_and_closing_frees_them(daemon: Daemon) -> None:
    client = daemon.client()
    a = client.acquire(vram="4GiB")
    b = client.acquire(vram="4GiB", device=0)
    c = client.acquire(compute=True)
    probe = daemon.client()
    leases = probe.status().leases
    assert sorted(s.id for s in leases) == sorted([a.id, b.id, c.id])
    assert {s.session for s in leases} == {client.session_id}
    b.release()
    assert len(probe.status().leases) == 2
    client.close()
    assert client.closed
    assert wait_until(lambda: probe.status().leases == [])
    assert a.lost and a.revoke_reason == "lost"
    with pytest.raises(gpud.ConnectionLost):
        client.acquire(vram=1)


def test_the_socket_comes_from_gpud_socket(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUD_SOCKET", daemon.socket)
    with gpud.lease(vram="1GiB") as lease:
        assert gpud.status().leases[0].id == lease.id


def test_nothing_on_the_socket_is_a_connect_error(tmp_path: object) -> None:
    with pytest.raises(gpud.ConnectError) as e:
        gpud.Client("/nonexistent/gpud.sock")
    assert e.value.code == "connect" and "/nonexistent/gpud.sock" in str(e.value)
    assert isinstance(e.value, ConnectionError)


def test_ping_metrics_and_admin_operations(daemon: Daemon) -> None:
    with daemon.client() as holder, daemon.client() as admin:
        admin.ping()
        assert "gpud_" in admin.metrics()
        lease = holder.acquire(vram="2GiB", compute=True)
        admin.drain(0)
        assert admin.status().devices[0].drained
        with pytest.raises(gpud.TimedOut):
            admin.acquire(vram=1, timeout=0.2)
        admin.undrain("0")
        assert not admin.status().devices[0].drained
        admin.revoke(lease.id)
        assert lease.wait_lost(2)
        assert lease.revoke_reason == "admin"
        assert lease.next_event(1) == gpud.Revoked(lease.id, "admin")
        with pytest.raises(gpud.UnknownLease):
            lease.release()
        assert admin.status().leases == []


def test_a_waiting_acquire_interrupted_is_withdrawn(daemon: Daemon) -> None:
    """KeyboardInterrupt while waiting sends a cancel: the waiter leaves the queue."""
    import signal
    import threading

    # Python raises KeyboardInterrupt only where SIGINT has its handler: a run started in the
    # background by a shell without job control (nohup, `cmd &` in a script) inherits SIGINT
    # ignored, and the waiter would wait for ever.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with daemon.client() as holder, daemon.client() as waiter:
            holder.acquire(vram="16GiB")
            timer = threading.Timer(
                0.3,
                lambda: signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT),
            )
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                waiter.acquire(vram="1GiB")
            timer.join()
            assert wait_until(lambda: holder.status().waiters == [])
            waiter.ping()  # the session is still usable
    finally:
        signal.signal(signal.SIGINT, previous)
