"""The conformance corpus (conformance/scenarios.txt, format in conformance/README.md), run
with this package against a real daemon per scenario: every scenario once with the blocking
client and once with the asyncio client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

import gpud
import gpud.aio
from conftest import REPO, Daemon
from gpud import protocol

CORPUS = REPO / "conformance" / "scenarios.txt"

AWAIT = 10.0  # await/acquire: an answer within this
PENDING = 0.2  # pending: still waiting this much later
NOTICE = 2.0  # yield yes / revoked: within this
NO_NOTICE = 0.3  # yield no: none within this

REQUEST_KEYS = {
    "vram",
    "compute",
    "device",
    "class",
    "timeout",
    "label",
    "host_mem",
    "pinned",
    "cpus",
    "numa",
}
#: verb -> (names a lease, keys it takes, takes `-> expect`)
VERBS: Dict[str, Tuple[bool, set, bool]] = {
    "acquire": (True, REQUEST_KEYS, True),
    "begin": (True, REQUEST_KEYS, False),
    "pending": (True, set(), False),
    "await": (True, set(), True),
    "release": (True, set(), True),
    "resize": (True, {"vram", "host_mem", "timeout"}, True),
    "check": (
        True,
        {"vram", "compute", "device", "host_mem", "pinned", "cpus", "numa_node"},
        False,
    ),
    "yield": (True, set(), True),
    "revoked": (True, set(), True),
    "drop": (False, set(), False),
    "status": (False, {"leases", "waiters", "devices"}, False),
    "drain": (False, {"device"}, True),
    "undrain": (False, {"device"}, True),
    "revoke": (True, set(), True),
}


class CorpusError(Exception):
    pass


@dataclass
class Step:
    line: int
    text: str
    client: str
    verb: str
    lease: Optional[str] = None
    args: Dict[str, str] = field(default_factory=dict)
    expect: Optional[str] = None
    #: raw/rawfirst: the error code and the frame text; sleep: the milliseconds
    code: str = ""
    frame: str = ""


@dataclass
class Scenario:
    name: str
    line: int
    simulate: str = "1x16GiB"
    config: List[str] = field(default_factory=list)
    steps: List[Step] = field(default_factory=list)


def _split(text: str) -> Tuple[str, str]:
    text = text.lstrip()
    head, _, rest = text.partition(" ")
    return head, rest.lstrip()


def parse_step(line: int, text: str) -> Step:
    client, rest = _split(text)
    verb, rest = _split(rest)
    if not client or not verb:
        raise CorpusError(f"line {line}: a step is `<client> <verb> ...`")
    step = Step(line, text, client, verb)
    if verb in ("raw", "rawfirst"):
        step.code, step.frame = _split(rest)
        if not step.code or not step.frame:
            raise CorpusError(f"line {line}: `{verb} <code> <frame text>`")
        return step
    tokens = rest.split()
    if "->" in tokens:
        i = tokens.index("->")
        if len(tokens) != i + 2:
            raise CorpusError(f"line {line}: `->` takes one word")
        step.expect, tokens = tokens[i + 1], tokens[:i]
    if verb == "sleep":
        if len(tokens) != 1 or not tokens[0].isdigit() or step.expect:
            raise CorpusError(f"line {line}: `sleep <ms>`")
        step.frame = tokens[0]
        return step
    if verb not in VERBS:
        raise CorpusError(f"line {line}: unknown verb {verb!r}")
    names_lease, keys, takes_expect = VERBS[verb]
    if names_lease:
        if not tokens or "=" in tokens[0]:
            raise CorpusError(f"line {line}: `{verb}` needs a lease name")
        step.lease, tokens = tokens[0], tokens[1:]
    for t in tokens:
        k, eq, v = t.partition("=")
        if not eq or k not in keys or k in step.args:
            raise CorpusError(f"line {line}: bad argument {t!r} for {verb}")
        step.args[k] = v
    if verb == "resize" and ("vram" in step.args) == ("host_mem" in step.args):
        raise CorpusError(f"line {line}: `resize` needs vram=SIZE or host_mem=SIZE")
    if takes_expect != (step.expect is not None):
        raise CorpusError(f"line {line}: `{verb}` {'needs' if takes_expect else 'takes no'} `->`")
    return step


def parse(text: str) -> List[Scenario]:
    scenarios: List[Scenario] = []
    current: Optional[Scenario] = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, rest = _split(line)
        if word == "scenario":
            if current is not None or not rest or " " in rest:
                raise CorpusError(f"line {number}: a scenario starts after `end`, with one name")
            current = Scenario(rest, number)
        elif current is None:
            raise CorpusError(f"line {number}: outside a scenario")
        elif word == "end":
            scenarios.append(current)
            current = None
        elif word == "gpud":
            if not rest.startswith("simulate="):
                raise CorpusError(f"line {number}: `gpud simulate=<SPEC>`")
            current.simulate = rest[len("simulate=") :]
        elif word == "config":
            current.config.append(rest)
        else:
            current.steps.append(parse_step(number, line))
    if current is not None:
        raise CorpusError(f"scenario {current.name} has no `end`")
    return scenarios


def size(text: str) -> int:
    return (1 << 64) - 1 if text == "max" else gpud.parse_size(text)


def yes_no(text: str) -> bool:
    if text not in ("yes", "no"):
        raise CorpusError(f"expected yes or no, not {text!r}")
    return text == "yes"


def request_args(args: Dict[str, str]) -> Dict[str, Any]:
    """Corpus arguments as the package takes them; class and device passed through as they
    are (the package refuses what it cannot send, with the daemon's code)."""
    out: Dict[str, Any] = {}
    if "vram" in args:
        out["vram"] = size(args["vram"])
    if "compute" in args:
        out["compute"] = yes_no(args["compute"])
    if "device" in args:
        out["device"] = args["device"]
    if "class" in args:
        out["cls"] = args["class"]
    if "timeout" in args:
        out["timeout"] = int(args["timeout"]) / 1000
    if "label" in args:
        out["label"] = args["label"]
    if "host_mem" in args:
        out["host_memory"] = size(args["host_mem"])
    if "pinned" in args:
        out["pinned"] = size(args["pinned"])
    if "cpus" in args:
        out["cpus"] = int(args["cpus"])
    if "numa" in args:
        out["numa"] = args["numa"]
    return out


# -- the two APIs behind one face ---------------------------------------------------------


class BlockingApi:
    def connect(self, path: str, name: str) -> gpud.Client:
        return gpud.Client(path, name=name)

    def begin(
        self, client: gpud.Client, request: Dict[str, Any]
    ) -> "concurrent.futures.Future[Any]":
        future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(client.acquire(**request))
            except BaseException as e:
                future.set_exception(e)

        threading.Thread(target=run, daemon=True).start()
        return future

    def call(self, thunk: Callable[[], Any]) -> Any:
        return thunk()

    def wait_yield(self, lease: gpud.Lease, timeout: float) -> bool:
        return lease.wait_yield(timeout)

    def wait_lost(self, lease: gpud.Lease, timeout: float) -> bool:
        return lease.wait_lost(timeout)

    def close(self) -> None:
        pass


class AsyncApi:
    """The asyncio client on an event loop of its own thread; the runner waits on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(AWAIT + 5)

    def connect(self, path: str, name: str) -> gpud.aio.Client:
        return self._run(gpud.aio.connect(path, name=name))

    def begin(
        self, client: gpud.aio.Client, request: Dict[str, Any]
    ) -> "concurrent.futures.Future[Any]":
        async def acquire() -> Any:
            return await client.acquire(**request)

        return asyncio.run_coroutine_threadsafe(acquire(), self.loop)

    def call(self, thunk: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return await thunk()

        return self._run(run())

    def wait_yield(self, lease: gpud.aio.Lease, timeout: float) -> bool:
        return self._run(lease.wait_yield(timeout))

    def wait_lost(self, lease: gpud.aio.Lease, timeout: float) -> bool:
        return self._run(lease.wait_lost(timeout))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def word(thunk: Callable[[], Any], ok: str) -> str:
    try:
        thunk()
        return ok
    except gpud.Error as e:
        return e.code


# -- the runner ---------------------------------------------------------------------------


class StepFailed(Exception):
    pass


class Run:
    def __init__(self, scenario: Scenario, api: Any) -> None:
        self.daemon = Daemon(scenario.simulate, scenario.config)
        self.api = api
        self.clients: Dict[str, Any] = {}
        self.dropped: set = set()
        self.waiting: Dict[str, "concurrent.futures.Future[Any]"] = {}
        self.held: Dict[str, Any] = {}
        self.ids: Dict[str, int] = {}

    def client(self, name: str) -> Any:
        if name in self.dropped:
            raise StepFailed(f"client {name} dropped its connection earlier")
        if name not in self.clients:
            self.clients[name] = self.api.connect(self.daemon.socket, f"conformance-{name}")
        return self.clients[name]

    def lease(self, name: str) -> Any:
        if name not in self.held:
            raise StepFailed(f"no held lease named {name}")
        return self.held[name]

    def expect(self, step: Step, seen: str) -> None:
        if step.expect is not None and seen != step.expect:
            raise StepFailed(f"expected {step.expect}, saw {seen}")

    def begin(self, step: Step) -> Optional[str]:
        """Starts an acquire; the client's own refusal (a class it cannot send) as a word."""
        assert step.lease is not None
        if step.lease in self.held or step.lease in self.waiting:
            raise StepFailed(f"lease name {step.lease} is in use")
        client = self.client(step.client)
        request = request_args(step.args)
        try:
            protocol.acquire_op(**request)  # what the package refuses before sending
        except gpud.InvalidRequest as e:
            return e.code
        self.waiting[step.lease] = self.api.begin(client, request)
        return None

    def await_lease(self, name: str) -> str:
        future = self.waiting.pop(name, None)
        if future is None:
            raise StepFailed(f"lease {name} was not begun")
        try:
            lease = future.result(AWAIT)
        except concurrent.futures.TimeoutError:
            raise StepFailed(f"no answer within {AWAIT} s") from None
        except gpud.Error as e:
            return e.code
        self.held[name] = lease
        self.ids[name] = lease.id
        return "granted"

    def step(self, step: Step) -> None:
        v, api = step.verb, self.api
        if v == "acquire":
            refusal = self.begin(step)
            self.expect(step, refusal if refusal else self.await_lease(step.lease or ""))
        elif v == "begin":
            refusal = self.begin(step)
            if refusal:
                raise StepFailed(f"the client refused the request: {refusal}")
        elif v == "pending":
            future = self.waiting.get(step.lease or "")
            if future is None:
                raise StepFailed(f"lease {step.lease} was not begun")
            time.sleep(PENDING)
            if future.done():
                raise StepFailed(
                    f"expected still waiting, but it was answered: {future.exception() or 'granted'}"
                )
        elif v == "await":
            self.expect(step, self.await_lease(step.lease or ""))
        elif v == "release":
            lease = self.held.pop(step.lease or "", None)
            if lease is None:
                raise StepFailed(f"lease {step.lease} is not held")
            self.expect(step, word(lambda: api.call(lease.release), "ok"))
        elif v == "resize":
            lease = self.lease(step.lease or "")
            timeout = int(step.args["timeout"]) / 1000 if "timeout" in step.args else None
            if "host_mem" in step.args:
                host = size(step.args["host_mem"])
                resize = lambda: lease.resize_host_memory(host, timeout)  # noqa: E731
            else:
                vram = size(step.args["vram"])
                resize = lambda: lease.resize(vram, timeout)  # noqa: E731
            self.expect(step, word(lambda: api.call(resize), "ok"))
        elif v == "check":
            info = self.lease(step.lease or "").info
            wrong = []
            if "vram" in step.args and size(step.args["vram"]) != info.vram_bytes:
                wrong.append(f"vram {info.vram_bytes}")
            if "compute" in step.args and yes_no(step.args["compute"]) != info.compute:
                wrong.append(f"compute {info.compute}")
            if "device" in step.args and int(step.args["device"]) != info.device_index:
                wrong.append(f"device {info.device_index}")
            host = info.host or gpud.HostGrant()
            if "host_mem" in step.args and size(step.args["host_mem"]) != host.mem_bytes:
                wrong.append(f"host memory {host.mem_bytes}")
            if "pinned" in step.args and size(step.args["pinned"]) != host.pinned_bytes:
                wrong.append(f"page-locked memory {host.pinned_bytes}")
            if "cpus" in step.args and int(step.args["cpus"]) != len(host.cpus):
                wrong.append(f"CPUs {list(host.cpus)}")
            node = "none" if host.numa_node is None else str(host.numa_node)
            if step.args.get("numa_node", node) != node:
                wrong.append(f"NUMA node {node}")
            if wrong:
                raise StepFailed("the lease has " + ", ".join(wrong))
        elif v == "yield":
            lease = self.lease(step.lease or "")
            if yes_no(step.expect or ""):
                seen = api.wait_yield(lease, NOTICE)
            else:
                time.sleep(NO_NOTICE)
                seen = lease.yield_requested
            self.expect(step, "yes" if seen else "no")
        elif v == "revoked":
            lease = self.lease(step.lease or "")
            self.expect(step, "yes" if api.wait_lost(lease, NOTICE) else "no")
        elif v == "drop":
            client = self.client(step.client)
            api.call(client.close)
            self.dropped.add(step.client)
        elif v == "status":
            client = self.client(step.client)
            status = api.call(client.status)
            counts = {
                "leases": len(status.leases),
                "waiters": len(status.waiters),
                "devices": len(status.devices),
            }
            wrong = [
                f"{k}={counts[k]} (not {want})"
                for k, want in step.args.items()
                if int(want) != counts[k]
            ]
            if wrong:
                raise StepFailed("status has " + ", ".join(wrong))
        elif v in ("drain", "undrain"):
            client = self.client(step.client)
            method = getattr(client, v)
            self.expect(step, word(lambda: api.call(lambda: method(step.args["device"])), "ok"))
        elif v == "revoke":
            if step.lease not in self.ids:
                raise StepFailed(f"lease {step.lease} was never granted")
            client = self.client(step.client)
            lease_id = self.ids[step.lease or ""]
            self.expect(step, word(lambda: api.call(lambda: client.revoke(lease_id)), "ok"))
        elif v in ("raw", "rawfirst"):
            raw(self.daemon.socket, v == "raw", step.code, step.frame)
        elif v == "sleep":
            time.sleep(int(step.frame) / 1000)
        else:
            raise StepFailed(f"unknown verb {v}")

    def close(self) -> None:
        self.daemon.stop()  # the clients' connections end with it


def raw(path: str, hello: bool, code: str, text: str) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    out = protocol.hello("conformance-raw") if hello else b""
    payload = text.encode()
    try:
        s.sendall(out + struct.pack(">I", len(payload)) + payload)
    except OSError:
        pass  # closed before reading it all: the answer is still there to read
    reader = protocol.FrameReader()
    seen: List[Dict[str, Any]] = []
    deadline = time.monotonic() + NOTICE
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                data = s.recv(65536)
            except OSError:
                break
            if not data:
                break
            for frame in reader.feed(data):
                body = (
                    frame.get("error")
                    if frame.get("type") == "error"
                    else (frame.get("outcome") or {}).get("error")
                )
                if isinstance(body, dict) and body.get("code") == code:
                    return
                seen.append(frame)
    finally:
        s.close()
    raise StepFailed(f"expected an error {code}, saw {seen or 'no frame with an error'}")


SCENARIOS = parse(CORPUS.read_text())


def test_the_corpus_parses_and_names_each_scenario_once() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names)) and len(names) >= 30


def test_the_parser_refuses_mistakes() -> None:
    for bad in [
        "scenario s\na acquire l1 vram=1GiB\nend\n",
        "scenario s\na pending l1 -> granted\nend\n",
        "scenario s\na acquire l1 size=1GiB -> granted\nend\n",
        "scenario s\na frobnicate l1\nend\n",
        "scenario s\na resize l1 -> ok\nend\n",
        "scenario s\na resize l1 vram=1 host_mem=1 -> ok\nend\n",
        "scenario s\na acquire l1 vram=1GiB -> granted\n",
        "a acquire l1 -> granted\n",
    ]:
        with pytest.raises(CorpusError):
            parse(bad)


@pytest.mark.parametrize("api_name", ["blocking", "asyncio"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(scenario: Scenario, api_name: str) -> None:
    api = BlockingApi() if api_name == "blocking" else AsyncApi()
    run = Run(scenario, api)
    try:
        for step in scenario.steps:
            try:
                run.step(step)
            except (StepFailed, CorpusError, gpud.Error) as e:
                log = "\n    ".join(run.daemon.log().splitlines()[-15:])
                pytest.fail(
                    f"{CORPUS}:{step.line}: scenario {scenario.name} ({api_name}): `{step.text}`: {e}\n"
                    f"  daemon log (last lines):\n    {log}",
                    pytrace=False,
                )
    finally:
        run.close()
        api.close()
