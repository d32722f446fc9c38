"""Test harness: real ``gpud --simulate`` daemons on temporary sockets.

The daemon binary is ``$GPUD_BIN``, else ``target/debug/gpud`` of the repository (built by
``cargo build``). The package under test is the installed ``gpud`` (``pip install
./client/python``); when it is not installed, the source tree is used.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence

import pytest

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "client" / "python" / "src"

# Not installed: test the source tree. (From the repository root, the daemon's source folder
# `gpud/` would otherwise import as an empty namespace package.)
_spec = importlib.util.find_spec("gpud")
if _spec is None or _spec.origin is None:
    sys.path.insert(0, str(SRC))
    sys.modules.pop("gpud", None)
import gpud  # noqa: E402

GIB = 1 << 30


def gpud_bin() -> Path:
    env = os.environ.get("GPUD_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "gpud"
    if not path.exists():
        pytest.exit(f"{path} is missing: build it first (cargo build -p gpud), or set GPUD_BIN", 2)
    return path


class Daemon:
    """A gpud process on simulated devices, with its own directory (socket, config, state,
    log). Killed at the end of the test."""

    def __init__(self, simulate: str = "1x16GiB", config: Sequence[str] = ()) -> None:
        # Short paths: a Unix socket path has at most 107 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="gpud-py-"))
        os.chmod(self.dir, 0o755)
        self.socket = str(self.dir / "gpud.sock")
        self.config_path = self.dir / "gpud.toml"
        self.config_path.write_text("".join(line + "\n" for line in config))
        self.log_path = self.dir / "gpud.log"
        self._log = open(self.log_path, "ab")
        self.args = [
            str(gpud_bin()),
            "--simulate",
            simulate,
            "--socket",
            self.socket,
            "--headroom",
            "0",
            "--state-dir",
            str(self.dir / "state"),
            "--config",
            str(self.config_path),
            "--dbus",
            "none",
            "--log",
            "debug",
        ]
        self.process = subprocess.Popen(
            self.args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log
        )
        self._wait_ready()

    def _wait_ready(self, limit: float = 10.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gpud exited with {self.process.returncode}:\n{self.log()}")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.socket)
                return
            except OSError:
                time.sleep(0.01)
            finally:
                s.close()
        raise RuntimeError(f"gpud did not come up within {limit} s:\n{self.log()}")

    def client(self, **kwargs: object) -> "gpud.Client":
        return gpud.Client(self.socket, **kwargs)  # type: ignore[arg-type]

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def terminate(self, timeout: float = 5.0) -> Optional[int]:
        """SIGTERM, and the exit status."""
        self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def start_daemon() -> Iterator[Callable[..., Daemon]]:
    """``start_daemon(simulate="1x16GiB", config=[...])``: daemons stopped after the test."""
    started: List[Daemon] = []

    def start(simulate: str = "1x16GiB", config: Sequence[str] = ()) -> Daemon:
        d = Daemon(simulate, config)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def daemon(start_daemon: Callable[..., Daemon]) -> Daemon:
    """One daemon with one 16 GiB device."""
    return start_daemon()


def wait_until(check: Callable[[], bool], limit: float = 5.0) -> bool:
    """Polls ``check`` every 10 ms until it is true or ``limit`` seconds pass."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def child_env() -> dict:
    """The environment for Python subprocesses that import the package under test."""
    env = dict(os.environ)
    spec = getattr(gpud, "__file__", None)
    if spec is not None:
        env["PYTHONPATH"] = (
            str(Path(spec).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
        )
    return env
