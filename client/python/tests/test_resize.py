"""Resize: shrinking frees memory at once, growing waits, a timeout leaves the lease."""

from __future__ import annotations

import threading
from typing import List

import pytest

import gpud
from conftest import GIB, Daemon, wait_until


def test_growing_waits_until_the_memory_is_free(daemon: Daemon) -> None:
    a_client, b_client = daemon.client(), daemon.client()
    a = a_client.acquire(vram="4GiB")
    b = b_client.acquire(vram="10GiB")
    result: List[int] = []
    t = threading.Thread(target=lambda: result.append(a.resize("8GiB")))
    t.start()
    assert wait_until(lambda: len(b_client.status().waiters) == 1)
    waiter = b_client.status().waiters[0]
    assert waiter.grows_lease == a.id and waiter.vram_bytes == 4 * GIB
    t.join(0.3)
    assert t.is_alive() and not result, "the grow did not wait"
    b.release()
    t.join(5)
    assert result == [8 * GIB] and a.vram_bytes == 8 * GIB
    assert b_client.status().devices[0].reserved_bytes == 8 * GIB


def test_shrinking_frees_memory_for_a_waiter_at_once(daemon: Daemon) -> None:
    a_client, b_client = daemon.client(), daemon.client()
    a = a_client.acquire(vram="10GiB")
    granted: List[gpud.Lease] = []
    t = threading.Thread(target=lambda: granted.append(b_client.acquire(vram="10GiB")))
    t.start()
    assert wait_until(lambda: len(a_client.status().waiters) == 1)
    assert a.resize(6 * GIB) == 6 * GIB
    t.join(2)
    assert granted and granted[0].vram_bytes == 10 * GIB
    assert a.vram_bytes == 6 * GIB


def test_a_grow_that_times_out_leaves_the_lease_as_it_was(daemon: Daemon) -> None:
    a_client, b_client = daemon.client(), daemon.client()
    a = a_client.acquire(vram="4GiB")
    b_client.acquire(vram="10GiB")
    with pytest.raises(gpud.TimedOut):
        a.resize("8GiB", timeout=0.3)
    assert a.vram_bytes == 4 * GIB
    status = a_client.status()
    assert status.devices[0].reserved_bytes == 14 * GIB and status.waiters == []
    assert a.resize("6GiB", timeout=1) == 6 * GIB  # what fits grows at once
