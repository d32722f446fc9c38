"""The asyncio API against a real daemon (each test runs its own event loop)."""

from __future__ import annotations

import asyncio
from typing import Any, List

import pytest

import gpud
import gpud.aio
from conftest import GIB, Daemon


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _until(check: Any, limit: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while loop.time() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.01)
    return bool(await check())


def test_acquire_status_release(daemon: Daemon) -> None:
    async def main() -> None:
        async with await gpud.aio.connect(daemon.socket, name="aio-test") as client:
            lease = await client.acquire(vram="12GiB", compute=True, cls="high", label="aio")
            assert (lease.vram_bytes, lease.compute, lease.cls) == (12 * GIB, True, "high")
            assert lease.cuda_visible_devices.startswith("GPU-")
            status = await client.status()
            assert [(s.id, s.label, s.session) for s in status.leases] == [
                (lease.id, "aio", client.session_id)
            ]
            await client.ping()
            assert "gpud_" in await client.metrics()
            await lease.release()
            assert lease.released and (await client.status()).leases == []
        assert client.closed

    run(main())


def test_the_lease_context_manager_and_status(daemon: Daemon) -> None:
    async def main() -> None:
        async with gpud.aio.lease(vram=2 * GIB, socket=daemon.socket, timeout=5) as lease:
            assert [s.id for s in (await gpud.aio.status(daemon.socket)).leases] == [lease.id]
        assert (await gpud.aio.status(daemon.socket)).leases == []

    run(main())


def test_two_clients_asking_10_gib_each_take_turns(daemon: Daemon) -> None:
    async def main() -> None:
        a = await gpud.aio.connect(daemon.socket)
        b = await gpud.aio.connect(daemon.socket)
        first = await a.acquire(vram="10GiB")
        second = asyncio.ensure_future(b.acquire(vram="10GiB"))
        assert await _until(lambda: _waiters(a, 1))
        await asyncio.sleep(0.2)
        assert not second.done()
        await first.release()
        lease = await asyncio.wait_for(second, 5)
        assert lease.vram_bytes == 10 * GIB
        await a.close()
        await b.close()

    run(main())


async def _waiters(client: gpud.aio.Client, n: int) -> bool:
    return len((await client.status()).waiters) == n


def test_timeouts_and_errors_map(start_daemon: Any) -> None:
    daemon = start_daemon(config=["limits.max_leases_per_session = 2"])

    async def main() -> None:
        async with await gpud.aio.connect(daemon.socket) as c:
            for request, error in [
                ({}, gpud.InvalidRequest),
                ({"vram": "17GiB"}, gpud.NeverFits),
                ({"vram": 1, "device": 3}, gpud.UnknownDevice),
                ({"vram": 1, "cls": "urgent"}, gpud.InvalidRequest),
                ({"vram": "lots"}, gpud.InvalidRequest),
            ]:
                with pytest.raises(error):
                    await c.acquire(**request)
            held = await c.acquire(vram="10GiB")
            with pytest.raises(gpud.TimedOut):
                await c.acquire(vram="10GiB", timeout=0.2)
            await c.acquire(vram=1)
            with pytest.raises(gpud.LimitExceeded):
                await c.acquire(vram=1)
            await c.revoke(held)
            assert await held.wait_lost(2) and held.revoke_reason == "admin"
            assert await held.next_event(1) == gpud.Revoked(held.id, "admin")
            with pytest.raises(gpud.UnknownLease):
                await held.release()

    run(main())


def test_a_critical_request_makes_the_holder_yield(daemon: Daemon) -> None:
    async def main() -> None:
        holder_client = await gpud.aio.connect(daemon.socket)
        critical = await gpud.aio.connect(daemon.socket)
        seen: List[Any] = []
        released = asyncio.Event()

        async def on_yield(lease: gpud.aio.Lease, notice: gpud.YieldRequested) -> None:
            seen.append(notice)
            await lease.release()  # a coroutine callback may wait on the client
            released.set()

        holder = await holder_client.acquire(vram="1GiB", compute=True, on_yield=on_yield)
        assert not await holder.wait_yield(0.3)
        plain: List[Any] = []
        holder.on_yield(lambda lease, notice: plain.append(notice))
        lease = await critical.acquire(compute=True, cls="critical", timeout=5)
        assert holder.yield_requested
        assert seen == [gpud.YieldRequested(holder.id, "critical_waiting", 30000)] == plain
        await asyncio.wait_for(released.wait(), 2)
        assert lease.cls == "critical"
        await holder_client.close()
        await critical.close()

    run(main())


def test_resize_grow_waits_and_shrink_frees(daemon: Daemon) -> None:
    async def main() -> None:
        a = await gpud.aio.connect(daemon.socket)
        b = await gpud.aio.connect(daemon.socket)
        small = await a.acquire(vram="4GiB")
        big = await b.acquire(vram="10GiB")
        with pytest.raises(gpud.TimedOut):
            await small.resize("8GiB", timeout=0.2)
        assert small.vram_bytes == 4 * GIB
        grow = asyncio.ensure_future(small.resize("8GiB"))
        assert await _until(lambda: _waiters(a, 1))
        with pytest.raises(gpud.ResizePending):
            await small.resize("5GiB")
        assert await big.resize("8GiB") == 8 * GIB  # shrinking frees the grow's memory
        assert await asyncio.wait_for(grow, 5) == 8 * GIB and small.vram_bytes == 8 * GIB
        await a.close()
        await b.close()

    run(main())


def test_a_cancelled_acquire_leaves_the_queue(daemon: Daemon) -> None:
    async def main() -> None:
        a = await gpud.aio.connect(daemon.socket)
        b = await gpud.aio.connect(daemon.socket)
        await a.acquire(vram="16GiB")
        waiting = asyncio.ensure_future(b.acquire(vram="1GiB"))
        assert await _until(lambda: _waiters(a, 1))
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await _until(lambda: _waiters(a, 0))
        # A wait that times out on the client's side is withdrawn the same way.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(b.acquire(vram="1GiB"), 0.3)
        assert await _until(lambda: _waiters(a, 0))
        await b.ping()
        await a.close()
        await b.close()

    run(main())


def test_closing_frees_every_lease_and_fails_what_waits(daemon: Daemon) -> None:
    async def main() -> None:
        probe = await gpud.aio.connect(daemon.socket)
        c = await gpud.aio.connect(daemon.socket)
        x = await c.acquire(vram="8GiB")
        await c.acquire(vram="8GiB")
        waiting = asyncio.ensure_future(c.acquire(vram="1GiB"))
        assert await _until(lambda: _waiters(probe, 1))
        await c.close()
        with pytest.raises(gpud.ConnectionLost):
            await waiting
        assert x.lost and x.revoke_reason == "lost"
        assert await _until(lambda: _leases_none(probe))
        with pytest.raises(gpud.ConnectionLost):
            await c.ping()
        await probe.close()

    run(main())


async def _leases_none(client: gpud.aio.Client) -> bool:
    return (await client.status()).leases == []


def test_nothing_on_the_socket_is_a_connect_error() -> None:
    with pytest.raises(gpud.ConnectError):
        run(gpud.aio.connect("/nonexistent/gpud.sock"))
