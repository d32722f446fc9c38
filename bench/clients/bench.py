"""The Python client's driver for gpud-bench-clients (bench/src/bin/gpud-bench-clients.rs,
which runs it with client/python/src on PYTHONPATH; the Rust, C and Go drivers measure the
same two things).

    python3 bench.py SOCKET round-trip N   N acquire (1 GiB, no compute) + release round trips
    python3 bench.py SOCKET handoff N      N handoffs of the compute slot between two connections

After N/10 not counted, prints one JSON line: {"client":"python","phase":...,"samples_ns":[...]}

Handoff: two threads, each with its own connection, ask for the compute slot in turn. The
holder waits until the daemon's status shows the other's acquire waiting, takes a timestamp and
releases; the other's acquire returns and it takes a timestamp; the difference is one sample.
Then it holds, and the roles are swapped.
"""

import json
import os
import sys
import threading
import time
import traceback

import gpud

# How long a holder waits for the other connection's acquire to show, in ns.
QUEUE_WAIT_NS = 10 * 1000 * 1000 * 1000

now_ns = time.perf_counter_ns  # CLOCK_MONOTONIC


def round_trip(socket, n):
    client = gpud.Client(socket)
    warmup = n // 10
    samples = []
    for i in range(n + warmup):
        t = now_ns()
        client.acquire(vram=1 << 30).release()
        if i >= warmup:
            samples.append(now_ns() - t)
    client.close()
    return samples


def handoff(socket, m):
    warmup = m // 10
    last = warmup + m
    # Only the holder of the compute slot touches these (and the GIL orders them).
    shared = {"last_release": 0, "grants": 0, "done": False}
    samples = []

    def worker(client):
        try:
            while True:
                lease = client.acquire(compute=True)
                now = now_ns()
                if shared["done"]:
                    lease.release()
                    return
                # The first grant follows no release; then `warmup` not counted.
                n = shared["grants"]
                shared["grants"] = n + 1
                if n > warmup:
                    samples.append(now - shared["last_release"])
                if n == last:
                    shared["done"] = True
                    lease.release()
                    return
                # Release only once the other connection waits for the slot.
                since = now_ns()
                while not client.status().waiters:
                    if now_ns() - since > QUEUE_WAIT_NS:
                        raise RuntimeError("the other connection's acquire never showed in the queue")
                shared["last_release"] = now_ns()
                lease.release()
        except BaseException:
            # The other thread may wait for a slot this one holds: end the whole process.
            traceback.print_exc()
            os._exit(1)

    clients = [gpud.Client(socket), gpud.Client(socket)]
    threads = [threading.Thread(target=worker, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    return samples


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in ("round-trip", "handoff"):
        sys.exit("usage: bench.py SOCKET round-trip|handoff COUNT")
    socket, phase, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    samples = (round_trip if phase == "round-trip" else handoff)(socket, count)
    print(json.dumps({"client": "python", "phase": phase, "samples_ns": samples}))


if __name__ == "__main__":
    main()
