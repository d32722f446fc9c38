"""The wire format without a daemon: frames, arguments as the daemon reads them, paging."""

from __future__ import annotations

import json
import struct

import pytest

import gpud
from gpud import protocol


def test_frames_are_a_big_endian_length_and_json() -> None:
    frame = protocol.encode({"type": "hello", "version": 1})
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    assert json.loads(frame[4:]) == {"type": "hello", "version": 1}


def test_the_reader_joins_frames_split_across_reads() -> None:
    data = protocol.encode({"a": 1}) + protocol.encode({"b": "é"})
    reader = protocol.FrameReader()
    got = []
    for i in range(len(data)):
        got.extend(reader.feed(data[i : i + 1]))
    assert got == [{"a": 1}, {"b": "é"}]


def test_the_reader_refuses_what_is_not_a_json_object() -> None:
    with pytest.raises(gpud.ProtocolError):
        protocol.FrameReader().feed(struct.pack(">I", 3) + b"abc")
    with pytest.raises(gpud.ProtocolError):
        protocol.FrameReader().feed(struct.pack(">I", 2) + b"[]")
    with pytest.raises(gpud.ProtocolError):
        protocol.FrameReader(max_frame=10).feed(struct.pack(">I", 11))


def test_the_hello_names_the_protocol_version() -> None:
    frame = json.loads(protocol.hello("prover")[4:])
    assert frame == {"type": "hello", "version": 1, "client": "prover"}
    assert gpud.PROTOCOL_VERSION == 1
    assert gpud.__version__.split(".")[0] == str(gpud.PROTOCOL_VERSION)


def test_acquire_uses_the_wire_names() -> None:
    op = protocol.acquire_op("12GiB", True, 0, "HIGH", 1.5, "proof 17")
    assert op == {
        "acquire": {
            "device": "0",
            "vram_bytes": 12 << 30,
            "compute": True,
            "class": "high",
            "timeout_ms": 1500,
            "label": "proof 17",
        }
    }
    assert protocol.acquire_op(compute=True)["acquire"] == {
        "device": "any",
        "vram_bytes": 0,
        "compute": True,
        "class": "normal",
    }
    assert protocol.acquire_op(cls=gpud.Class.CRITICAL, timeout=0.3)["acquire"]["timeout_ms"] == 300
    assert protocol.resize_op(4, "1GiB", 2)["resize"] == {
        "lease": 4,
        "vram_bytes": 1 << 30,
        "timeout_ms": 2000,
    }


@pytest.mark.parametrize(
    "device, wire",
    [
        ("any", "any"),
        ("ANY", "any"),
        (3, "3"),
        ("3", "3"),
        (" 007 ", "7"),
        ("GPU-5f3e2c1a-0000-1111-2222-333344445555", "GPU-5f3e2c1a-0000-1111-2222-333344445555"),
    ],
)
def test_devices_read_as_placements(device: object, wire: str) -> None:
    assert protocol.placement(device) == wire  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "device", ["", "../etc", "99999999999", -1, 1 << 32, True, None, "x" * 97, "ab"]
)
def test_bad_devices_are_invalid_requests(device: object) -> None:
    with pytest.raises(gpud.InvalidRequest):
        protocol.placement(device)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", ["urgent", "", None, 1])
def test_unknown_classes_are_invalid_requests(cls: object) -> None:
    with pytest.raises(gpud.InvalidRequest):
        protocol.parse_class(cls)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), "30", True, 1e30])
def test_bad_timeouts_are_invalid_requests(timeout: object) -> None:
    with pytest.raises(gpud.InvalidRequest):
        protocol.acquire_op(vram=1, timeout=timeout)  # type: ignore[arg-type]


def test_the_socket_is_the_argument_then_the_environment_then_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GPUD_SOCKET", raising=False)
    assert gpud.socket_path() == gpud.DEFAULT_SOCKET == "/run/gpud/gpud.sock"
    monkeypatch.setenv("GPUD_SOCKET", "")
    assert gpud.socket_path() == gpud.DEFAULT_SOCKET
    monkeypatch.setenv("GPUD_SOCKET", "/tmp/env.sock")
    assert gpud.socket_path() == "/tmp/env.sock"
    assert gpud.socket_path("/tmp/arg.sock") == "/tmp/arg.sock"


def test_status_pages_are_joined_until_more_is_absent() -> None:
    first = {"daemon": {}, "devices": [1], "leases": [1, 2], "waiters": [], "more": {"after": 2}}
    pages = protocol.StatusPages(first)
    assert pages.next_op() == {"status_page": {"after": 2}}
    pages.add("status", {"leases": [3], "waiters": [7], "more": {"after": 3}})
    assert pages.next_op() == {"status_page": {"after": 3}}
    pages.add("status", {"leases": [], "waiters": [8]})
    assert pages.next_op() is None
    assert pages.report() == {"daemon": {}, "devices": [1], "leases": [1, 2, 3], "waiters": [7, 8]}
    assert protocol.StatusPages({"leases": []}).next_op() is None
    with pytest.raises(gpud.ProtocolError):
        protocol.StatusPages(first).add("pong", None)


def test_a_jobs_budget_from_the_environment_goes_with_every_acquire(monkeypatch):
    monkeypatch.delenv("GPUD_BUDGET", raising=False)
    assert "budget" not in protocol.acquire_op(vram=1, compute=False)["acquire"]
    monkeypatch.setenv("GPUD_BUDGET", "12:secret")
    assert protocol.acquire_op(vram=1, compute=False)["acquire"]["budget"] == "12:secret"


def test_grants_of_one_device_have_no_parts_and_of_several_list_them() -> None:
    from gpud.types import LeaseInfo

    one = {
        "lease": 4,
        "device_uuid": "GPU-a",
        "device_index": 0,
        "device_name": "sim",
        "vram_bytes": 1,
        "compute": False,
        "class": "normal",
        "cuda_visible_devices": "GPU-a",
    }
    assert LeaseInfo.from_wire(one).parts == ()
    two = dict(one, cuda_visible_devices="GPU-a,GPU-b")
    two["parts"] = [
        {"lease": 4, "device_index": 0, "device_uuid": "GPU-a", "vram_bytes": 1, "compute": False},
        {"lease": 5, "device_index": 1, "device_uuid": "GPU-b", "vram_bytes": 1, "compute": True},
    ]
    info = LeaseInfo.from_wire(two)
    assert [p.device_uuid for p in info.parts] == ["GPU-a", "GPU-b"]
    assert info.parts[1].lease == 5 and info.parts[1].compute
