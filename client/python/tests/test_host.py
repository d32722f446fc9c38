"""Host resources against a real daemon: host-only leases with their CPUs, leases that combine
a device with host memory and page-locked memory, refusals, and resize of host memory. The
daemon books a configured 16 GiB of host memory (no headroom; page-locked: half of it) and
the machine's own NUMA nodes and CPUs."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Callable, List

import pytest

import gpud
from conftest import GIB, Daemon, wait_until

HOST = ['[host]', 'memory = "16GiB"', 'memory_headroom = "0"']


@pytest.fixture
def host(start_daemon: Callable[..., Daemon]) -> Daemon:
    """A daemon with one 16 GiB device and 16 GiB of host memory."""
    return start_daemon(config=HOST)


def _host(client: gpud.Client) -> gpud.HostStatus:
    status = client.status().host
    assert status is not None, "the daemon reports no host section"
    return status


def test_a_host_only_lease_names_its_cpus(host: Daemon) -> None:
    with host.client() as client:
        assert gpud.FEATURE_HOST in client.features
        lease = client.acquire(host_memory="4GiB", cpus=1, label="synthesis")
        assert lease.host_memory_bytes == 4 * GIB and lease.pinned_bytes == 0
        nodes = {n.node: n for n in _host(client).numa}
        assert lease.numa_node in nodes, "the CPUs' node is none of the host's"
        assert len(lease.cpus) == 1 and lease.cpus[0] in nodes[lease.numa_node].cpus
        # No device: nothing for CUDA.
        assert lease.device_uuid == "" and lease.cuda_visible_devices == ""
        assert lease.vram_bytes == 0 and not lease.compute
        assert lease.host is not None and lease.id in lease.host.parts
        # The CPUs can be pinned to: they are this machine's.
        assert set(lease.cpus) <= os.sched_getaffinity(0)
        status = client.status()
        rows = {r.resource: r for r in status.leases}
        assert set(rows) == {"host_memory", "cpus"}
        assert rows["host_memory"].host is not None
        assert rows["host_memory"].host.mem_bytes == 4 * GIB
        assert rows["cpus"].host is not None and rows["cpus"].host.cpus == lease.cpus
        assert rows["host_memory"].label == "synthesis"
        assert status.host is not None and status.host.memory.reserved_bytes == 4 * GIB
        assert [n.granted for n in status.host.numa if n.granted] == [lease.cpus]
        assert status.devices[0].reserved_bytes == 0
        lease.release()
        after = _host(client)
        assert after.memory.reserved_bytes == 0 and all(n.granted == () for n in after.numa)
        assert client.status().leases == []


def test_a_lease_combines_a_device_with_host_and_page_locked_memory(host: Daemon) -> None:
    with host.client() as client:
        lease = client.acquire(vram="2GiB", compute=True, host_memory="3GiB", pinned="1GiB")
        assert lease.vram_bytes == 2 * GIB and lease.compute and lease.device_uuid
        assert lease.host_memory_bytes == 3 * GIB and lease.pinned_bytes == GIB
        assert lease.cpus == () and lease.numa_node is None
        status = client.status()
        assert sorted(r.resource for r in status.leases) == ["device", "host_memory", "pinned"]
        assert status.host is not None
        assert status.host.memory.reserved_bytes == 3 * GIB
        assert status.host.pinned.reserved_bytes == GIB
        lease.release()
        status = client.status()
        assert status.leases == [] and status.host is not None
        assert status.host.memory.reserved_bytes == 0 and status.host.pinned.reserved_bytes == 0


def test_page_locked_memory_alone_books_host_memory_too(host: Daemon) -> None:
    with host.client() as client:
        lease = client.acquire(pinned="2GiB")
        assert lease.pinned_bytes == 2 * GIB and lease.host_memory_bytes >= 2 * GIB
        assert _host(client).memory.reserved_bytes >= 2 * GIB


def test_refusals_say_what_was_wrong(host: Daemon) -> None:
    with host.client() as client:
        with pytest.raises(gpud.InvalidRequest, match="near"):
            client.acquire(cpus=1, numa="near")
        with pytest.raises(gpud.NeverFits):
            client.acquire(host_memory="32GiB")
        with pytest.raises(gpud.InvalidRequest, match="NUMA placement"):
            client.acquire(cpus=1, numa="far")
        plain = client.acquire(vram="1GiB")
        with pytest.raises(gpud.InvalidRequest, match="host memory"):
            plain.resize_host_memory("1GiB")
        assert client.status().leases[0].id == plain.id  # refusals leave the session usable


def test_host_leases_that_do_not_fit_together_are_serialized(host: Daemon) -> None:
    a, b = host.client(), host.client()
    try:
        first = a.acquire(host_memory="10GiB")
        granted: List[gpud.Lease] = []
        t = threading.Thread(target=lambda: granted.append(b.acquire(host_memory="10GiB")))
        t.start()
        assert wait_until(lambda: len(a.status().waiters) == 1)
        waiter = a.status().waiters[0]
        assert waiter.host is not None and waiter.host.mem_bytes == 10 * GIB
        assert _host(a).memory.queued.total == 1
        t.join(0.3)
        assert t.is_alive() and not granted, "both were admitted"
        first.release()
        t.join(5)
        assert granted and granted[0].host_memory_bytes == 10 * GIB
    finally:
        a.close()
        b.close()


def test_resize_of_host_memory_grows_waits_and_shrinks(host: Daemon) -> None:
    a, b = host.client(), host.client()
    try:
        lease = a.acquire(host_memory="4GiB", cpus=1)
        assert lease.resize_host_memory("8GiB") == 8 * GIB
        assert lease.host_memory_bytes == 8 * GIB and lease.vram_bytes == 0
        assert len(lease.cpus) == 1  # the rest of the grant stays
        other = b.acquire(host_memory="6GiB")
        # 12 + 6 > 16: the grow times out and the lease keeps its size.
        with pytest.raises(gpud.TimedOut):
            lease.resize_host_memory("12GiB", timeout=0.3)
        assert lease.host_memory_bytes == 8 * GIB
        grown: List[int] = []
        t = threading.Thread(target=lambda: grown.append(lease.resize_host_memory("12GiB")))
        t.start()
        assert wait_until(lambda: len(b.status().waiters) == 1)
        waiter = b.status().waiters[0]
        assert waiter.grows_lease == lease.id
        assert waiter.host is not None and waiter.host.mem_bytes == 4 * GIB
        t.join(0.3)
        assert t.is_alive() and not grown
        assert other.resize_host_memory("2GiB") == 2 * GIB  # a shrink is immediate...
        t.join(5)
        assert grown == [12 * GIB] and lease.host_memory_bytes == 12 * GIB  # ...and lets it grow
        assert _host(a).memory.reserved_bytes == 14 * GIB
        with pytest.raises(gpud.InvalidRequest):
            lease.resize_host_memory(0)
    finally:
        a.close()
        b.close()


def test_a_daemon_that_books_no_host_resources_is_not_asked(
    start_daemon: Callable[..., Daemon],
) -> None:
    off = start_daemon(config=["[host]", "enabled = false"])
    with off.client() as client:
        assert gpud.FEATURE_HOST not in client.features
        with pytest.raises(gpud.InvalidRequest, match="'host'"):
            client.acquire(vram="1GiB", host_memory="1GiB")
        lease = client.acquire(vram="1GiB")
        with pytest.raises(gpud.InvalidRequest, match="'host'"):
            lease.resize_host_memory("1GiB")
        assert client.status().host is None


def test_asyncio_host_leases(host: Daemon) -> None:
    async def main() -> None:
        async with gpud.aio.lease(host_memory="2GiB", cpus=1, socket=host.socket) as lease:
            assert lease.host_memory_bytes == 2 * GIB and len(lease.cpus) == 1
            assert await lease.resize_host_memory("3GiB") == 3 * GIB
            assert lease.host_memory_bytes == 3 * GIB
            status = await gpud.aio.status(host.socket)
            assert status.host is not None and status.host.memory.reserved_bytes == 3 * GIB
        status = await gpud.aio.status(host.socket)
        assert status.host is not None and status.host.memory.reserved_bytes == 0

    asyncio.run(main())


def test_gpud_lease_takes_host_resources(host: Daemon) -> None:
    with gpud.lease(vram="1GiB", host_memory="1GiB", pinned="512MiB", socket=host.socket) as lease:
        assert lease.pinned_bytes == GIB // 2 and lease.host_memory_bytes == GIB
    assert gpud.status(host.socket).leases == []
