"""Host resources on the wire, without a daemon: the acquire's and resize's host fields, the
grant's and status's host sections, and the refusal of a daemon that does not book them."""

from __future__ import annotations

from typing import Any, Dict

import pytest

import gpud
from gpud import protocol
from gpud._session import LeaseView, with_host_memory
from gpud.types import LeaseInfo, StatusReport, WaiterStatus

GIB = 1 << 30


def test_host_resources_go_on_the_wire_only_when_asked() -> None:
    assert "host" not in protocol.acquire_op(vram="1GiB")["acquire"]
    op = protocol.acquire_op(host_memory="8GiB", pinned=GIB, cpus=4)
    assert op["acquire"]["host"] == {"mem_bytes": 8 * GIB, "pinned_bytes": GIB, "cpus": 4}
    assert op["acquire"]["vram_bytes"] == 0 and op["acquire"]["compute"] is False
    assert protocol.acquire_op(vram=1, cpus=2, numa="near")["acquire"]["host"] == {
        "mem_bytes": 0,
        "pinned_bytes": 0,
        "cpus": 2,
        "numa": "near",
    }


@pytest.mark.parametrize(
    "numa, wire",
    [
        ("any", None),
        (" ANY ", None),
        ("near", "near"),
        ("Near", "near"),
        (0, {"node": 0}),
        (3, {"node": 3}),
        ("1", {"node": 1}),
    ],
)
def test_numa_placements(numa: Any, wire: Any) -> None:
    assert protocol.numa_placement(numa) == wire
    host = protocol.host_args(cpus=1, numa=numa)
    assert host is not None and host.get("numa") == wire


@pytest.mark.parametrize("numa", ["far", "-1", -1, 1 << 32, "1.5", True, None, 2.0, ""])
def test_bad_numa_placements_name_what_was_wrong(numa: Any) -> None:
    with pytest.raises(gpud.InvalidRequest, match="NUMA placement"):
        protocol.acquire_op(cpus=1, numa=numa)


@pytest.mark.parametrize(
    "kwargs, what",
    [
        ({"host_memory": "lots"}, "invalid size"),
        ({"pinned": -1}, "pinned"),
        ({"cpus": -1}, "cpus"),
        ({"cpus": 1 << 32}, "cpus"),
        ({"cpus": True}, "cpus"),
        ({"cpus": 2.0}, "cpus"),
    ],
)
def test_bad_host_amounts_are_refused_before_sending(kwargs: Dict[str, Any], what: str) -> None:
    with pytest.raises(gpud.InvalidRequest, match=what):
        protocol.acquire_op(**kwargs)


def test_a_numa_placement_alone_is_sent_for_the_daemon_to_judge() -> None:
    assert protocol.host_args(numa=1) == {
        "mem_bytes": 0,
        "pinned_bytes": 0,
        "cpus": 0,
        "numa": {"node": 1},
    }
    assert protocol.host_args() is None


def test_resize_of_host_memory() -> None:
    assert protocol.resize_host_op(7, "3GiB", timeout=1.5) == {
        "resize": {"lease": 7, "vram_bytes": 0, "host_mem_bytes": 3 * GIB, "timeout_ms": 1500}
    }
    assert "host_mem_bytes" not in protocol.resize_op(7, "3GiB")["resize"]


def test_a_daemon_without_the_host_feature_is_not_sent_host_resources() -> None:
    host_op = protocol.acquire_op(host_memory=1)
    with pytest.raises(gpud.InvalidRequest, match="'host'"):
        protocol.require_features(host_op, ())
    with pytest.raises(gpud.InvalidRequest, match="'host'"):
        protocol.require_features(protocol.resize_host_op(1, 1), ("queued",))
    protocol.require_features(host_op, ("queued", gpud.FEATURE_HOST))
    protocol.require_features(protocol.acquire_op(vram=1), ())
    protocol.require_features(protocol.resize_op(1, 1), ())


GRANT = {
    "lease": 9,
    "device_uuid": "",
    "device_index": 0,
    "device_name": "",
    "vram_bytes": 0,
    "compute": False,
    "class": "normal",
    "cuda_visible_devices": "",
    "token": "t",
    "host": {
        "mem_bytes": 4096,
        "pinned_bytes": 1024,
        "cpus": [2, 3],
        "numa_node": 1,
        "parts": [9, 10, 11],
    },
}


class _State:
    def __init__(self, info: LeaseInfo) -> None:
        self.info = info


def test_host_grants_are_read() -> None:
    info = LeaseInfo.from_wire(GRANT)
    assert info.host == gpud.HostGrant(4096, 1024, (2, 3), 1, (9, 10, 11))
    view = LeaseView(_State(info))  # type: ignore[arg-type]
    assert (view.host_memory_bytes, view.pinned_bytes, view.cpus, view.numa_node) == (
        4096,
        1024,
        (2, 3),
        1,
    )
    assert "cpus=[2, 3]" in repr(view)
    resized = with_host_memory(info, 8192)
    assert resized.host is not None and resized.host.mem_bytes == 8192
    assert resized.host.cpus == (2, 3) and info.host is not None and info.host.mem_bytes == 4096

    plain = dict(GRANT)
    del plain["host"]
    view = LeaseView(_State(LeaseInfo.from_wire(plain)))  # type: ignore[arg-type]
    assert view.host is None and view.host_memory_bytes == 0 and view.cpus == ()
    assert view.numa_node is None and "cpus" not in repr(view)


def _row(**extra: Any) -> Dict[str, Any]:
    row = {
        "id": 4,
        "device": "host",
        "device_index": 0,
        "vram_bytes": 0,
        "compute": False,
        "class": "normal",
        "pid": 1,
        "uid": 0,
        "process": "p",
        "session": 1,
        "held_ms": 1,
        "yield_requested": False,
    }
    row.update(extra)
    return row


def _waiter(**extra: Any) -> Dict[str, Any]:
    w = {
        "session": 2,
        "request": 1,
        "pid": 2,
        "class": "high",
        "device": "any",
        "vram_bytes": 0,
        "compute": False,
        "grows_lease": None,
        "waited_ms": 5,
    }
    w.update(extra)
    return w


def test_status_reads_the_host_section() -> None:
    pool = {
        "total_bytes": 100,
        "headroom_bytes": 10,
        "unmanaged_bytes": 5,
        "capacity_bytes": 85,
        "reserved_bytes": 90,
        "queued": {"high": 1},
    }
    report = StatusReport.from_wire(
        {
            "daemon": {
                "version": "0",
                "pid": 1,
                "uptime_ms": 1,
                "sessions": 1,
                "backend": "simulated",
            },
            "devices": [],
            "leases": [
                _row(resource="host_memory", host={"mem_bytes": 4096, "pinned_bytes": 0}),
                _row(device="numa0", resource="cpus", host={"cpus": [0, 1], "numa_node": 0}),
                _row(device="GPU-a", vram_bytes=1),
            ],
            "waiters": [
                _waiter(host={"mem_bytes": 1, "pinned_bytes": 0, "cpus": 2, "numa": {"node": 1}}),
                _waiter(host={"cpus": 1, "numa": "near"}),
                _waiter(),
            ],
            "host": {
                "memory": pool,
                "pinned": dict(pool, queued={}),
                "numa": [{"node": 0, "cpus": [0, 1, 2, 3], "granted": [0, 1], "queued": {}}],
            },
        }
    )
    host = report.host
    assert host is not None
    assert host.memory.capacity_bytes == 85 and host.memory.queued.high == 1
    assert host.memory.free_bytes == 0  # over-committed: never negative
    assert host.numa[0].cpus == (0, 1, 2, 3) and host.numa[0].granted == (0, 1)
    mem, cpus, device = report.leases
    assert mem.resource == "host_memory" and mem.host is not None and mem.host.mem_bytes == 4096
    assert cpus.resource == "cpus" and cpus.host is not None and cpus.host.cpus == (0, 1)
    assert cpus.host.numa_node == 0
    assert device.resource == "device" and device.host is None
    w1, w2, w3 = report.waiters
    assert w1.host == gpud.HostRequest(1, 0, 2, 1)
    assert w2.host == gpud.HostRequest(0, 0, 1, "near")
    assert w3.host is None
    older = StatusReport.from_wire(
        {"daemon": report.raw["daemon"], "devices": [], "leases": [], "waiters": []}
    )
    assert older.host is None
    with pytest.raises(ValueError):
        WaiterStatus.from_wire(_waiter(host={"numa": {"far": 1}}))
