"""The PyTorch helper, with a fake ``torch`` on sys.path: the fraction is the lease's VRAM
over the device's total, on the leased device; without torch nothing happens."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gpud
from conftest import Daemon, child_env

FAKE_CUDA = """
calls = []

class _Properties:
    def __init__(self, total_memory, uuid):
        self.total_memory = total_memory
        self.uuid = uuid

devices = [
    _Properties(80 << 30, "11111111-2222-3333-4444-555555555555"),
    _Properties(16 << 30, "5e1a0000-0000-4000-8000-000000000000"),  # gpud's simulated GPU 0
]

def is_available():
    return True

def device_count():
    return len(devices)

def get_device_properties(ordinal):
    return devices[ordinal]

def set_per_process_memory_fraction(fraction, device=None):
    calls.append((fraction, device))
"""


@pytest.fixture
def fake_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text("from . import cuda\n")
    (package / "cuda.py").write_text(FAKE_CUDA)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("torch", "torch.cuda"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


def test_the_fraction_is_the_lease_over_the_device_total(
    daemon: Daemon, fake_torch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch  # the fake

    with gpud.lease(vram="12GiB", compute=True, socket=daemon.socket) as lease:
        # The leased device is CUDA ordinal 1 here: found by its UUID.
        assert gpud.limit_torch_memory(lease) == 0.75
        assert torch.cuda.calls == [(0.75, 1)]
        # In a process that sees only the leased device, it is ordinal 0.
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", lease.cuda_visible_devices)
        torch.cuda.devices[0].total_memory = 16 << 30
        assert gpud.limit_torch_memory(lease) == 0.75
        assert torch.cuda.calls[-1] == (0.75, 0)
        # After a resize, again.
        lease.resize("4GiB")
        assert gpud.limit_torch_memory(lease, device=0) == 0.25
        assert torch.cuda.calls[-1] == (0.25, 0)
    with gpud.lease(compute=True, socket=daemon.socket) as compute_only:
        assert gpud.limit_torch_memory(compute_only) is None  # no memory to size it by
    assert len(torch.cuda.calls) == 3


def test_without_torch_nothing_happens(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with gpud.lease(vram="1GiB", socket=daemon.socket) as lease:
        assert gpud.limit_torch_memory(lease) is None


def test_importing_gpud_does_not_import_torch(fake_torch: Path) -> None:
    env = child_env()
    env["PYTHONPATH"] = f"{fake_torch}:{env.get('PYTHONPATH', '')}"
    code = textwrap.dedent(
        """
        import sys, gpud, gpud.aio
        import torch  # importable
        print("torch" in sys.modules)
        """
    )
    check = "import sys, gpud, gpud.aio; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr  # the fake is there to be imported
