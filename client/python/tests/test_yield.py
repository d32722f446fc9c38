"""Yield notices: a critical request makes the compute holder see the notice, as a flag, an
event and a callback."""

from __future__ import annotations

import threading
from typing import List, Tuple

import gpud
from conftest import Daemon, wait_until


def test_a_critical_request_makes_the_holder_see_the_yield_notice(daemon: Daemon) -> None:
    holder_client, critical = daemon.client(), daemon.client()
    seen: List[Tuple[gpud.Lease, gpud.YieldRequested, str]] = []
    called = threading.Event()

    def on_yield(lease: gpud.Lease, notice: gpud.YieldRequested) -> None:
        seen.append((lease, notice, threading.current_thread().name))
        called.set()

    holder = holder_client.acquire(vram="1GiB", compute=True, on_yield=on_yield)
    assert not holder.wait_yield(0.3), "a notice without any critical waiter"
    granted: List[gpud.Lease] = []
    t = threading.Thread(
        target=lambda: granted.append(critical.acquire(compute=True, cls="critical"))
    )
    t.start()
    assert holder.wait_yield(2)
    assert holder.yield_requested
    assert called.wait(2)
    lease, notice, thread = seen[0]
    assert lease is holder
    # By default an ignored notice to a compute lease is revoked 30 s later.
    assert notice == gpud.YieldRequested(holder.id, "critical_waiting", 30000)
    assert thread == "gpud-callbacks"
    assert holder.next_event(1) == notice
    assert holder_client.status().leases[0].yield_requested
    # A callback registered after the notice runs at once.
    late = threading.Event()
    holder.on_yield(lambda lease, notice: late.set())
    assert late.wait(2)
    holder.release()
    t.join(5)
    assert granted and granted[0].compute and granted[0].cls == "critical"


def test_a_callback_may_release_the_lease_itself(daemon: Daemon) -> None:
    holder_client, critical = daemon.client(), daemon.client()
    holder_client.acquire(compute=True, on_yield=lambda lease, notice: lease.release())
    lease = critical.acquire(compute=True, cls="critical", timeout=5)
    assert lease.compute
    assert [s.id for s in critical.status().leases] == [lease.id]


def test_other_waiters_ask_no_yield(daemon: Daemon) -> None:
    holder_client, high, critical = daemon.client(), daemon.client(), daemon.client()
    holder = holder_client.acquire(vram="10GiB", compute=True)

    def ask(client: gpud.Client, **request: object) -> None:
        try:
            client.acquire(**request)  # type: ignore[arg-type]
        except gpud.ConnectionLost:
            pass  # the daemon stops at the end of the test

    threading.Thread(target=ask, args=(high,), kwargs={"compute": True, "cls": "high"}).start()
    # A critical request for memory alone does not need the compute slot.
    threading.Thread(
        target=ask, args=(critical,), kwargs={"vram": "10GiB", "cls": "critical"}
    ).start()
    assert wait_until(lambda: len(holder_client.status().waiters) == 2)
    assert not holder.wait_yield(0.3)
    assert holder.next_event(0) is None
    high.close()
    critical.close()
