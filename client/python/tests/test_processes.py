"""Leases between processes: two 10 GiB holders on a 16 GiB device take turns; a holder
killed with SIGKILL frees its lease for the waiter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List

import gpud
from conftest import GIB, Daemon, child_env, wait_until

HOLD = """
import sys, time, gpud
with gpud.Client(sys.argv[1]) as client:
    lease = client.acquire(vram="10GiB", compute=sys.argv[2] == "compute")
    print("granted", time.monotonic(), flush=True)
    time.sleep(float(sys.argv[3]))
    released = time.monotonic()
    lease.release()
    print("released", released, flush=True)
"""


def _times(out: str) -> Dict[str, float]:
    return {word: float(value) for word, value in (line.split() for line in out.splitlines())}


def test_two_processes_asking_10_gib_each_on_16_gib_are_serialized(daemon: Daemon) -> None:
    def start() -> "subprocess.Popen[str]":
        return subprocess.Popen(
            [sys.executable, "-c", HOLD, daemon.socket, "memory", "0.6"],
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )

    probe = daemon.client()
    first = start()
    assert wait_until(lambda: len(probe.status().leases) == 1)
    second = start()
    # The second waits while the first holds: one lease, one waiter, 10 GiB reserved.
    assert wait_until(lambda: len(probe.status().waiters) == 1)
    status = probe.status()
    assert len(status.leases) == 1 and status.devices[0].reserved_bytes == 10 * GIB
    assert status.waiters[0].pid == second.pid
    out = [p.communicate(timeout=20)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0]
    a, b = (_times(o) for o in out)
    assert b["granted"] >= a["released"], f"the holds overlap: {a} {b}"
    assert probe.status().leases == []


def test_kill_9_of_a_holder_frees_its_lease_for_the_waiter(daemon: Daemon) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, daemon.socket, "compute", "600"],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("granted")
        probe = daemon.client()
        assert probe.status().leases[0].pid == holder.pid
        waiter = daemon.client()
        got: List[object] = []
        granted_at: List[float] = []

        def wait() -> None:
            got.append(waiter.acquire(vram="10GiB", compute=True, timeout=10))
            granted_at.append(time.monotonic())

        t = threading.Thread(target=wait)
        t.start()
        assert wait_until(lambda: len(probe.status().waiters) == 1)
        killed = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        t.join(5)
        assert got and isinstance(got[0], gpud.Lease), "the waiter was not granted after kill -9"
        assert granted_at[0] - killed < 1.0, f"grant took {granted_at[0] - killed:.3f} s"
        assert [s.pid for s in probe.status().leases] == [os.getpid()]
    finally:
        holder.kill()
        holder.wait()
