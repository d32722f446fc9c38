#!/usr/bin/env python3
"""Sums the test counts of the suite's logs: cargo test, go test -v and pytest.

    test-summary.py [--cargo LOG] [--go LOG] [--pytest LOG]   prints one line per suite and a total
    test-summary.py --self-test                               checks the parsers on sample output

A log that does not exist (its step did not run yet) counts as nothing.
"""
import os
import re
import sys

CARGO = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", re.M)
GO = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ", re.M)
PYTEST_LINE = re.compile(r"^=*\s*(?:\d+ \w+(?:, )?)+.* in [\d.]+s", re.M)
PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)")


def cargo(text):
    """(passed, failed, ignored) over every test binary's `test result:` line."""
    totals = [0, 0, 0]
    for m in CARGO.finditer(text):
        for i in range(3):
            totals[i] += int(m.group(i + 1))
    return tuple(totals)


def go(text):
    """(passed, failed, skipped) from `go test -v`: every test and subtest."""
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for m in GO.finditer(text):
        counts[m.group(1)] += 1
    return counts["PASS"], counts["FAIL"], counts["SKIP"]


def pytest(text):
    """(passed, failed, skipped) from pytest's last summary line (errors count as failed)."""
    lines = PYTEST_LINE.findall(text)
    if not lines:
        return 0, 0, 0
    counts = {}
    for n, what in PYTEST_COUNT.findall(lines[-1]):
        counts[what] = counts.get(what, 0) + int(n)
    failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    passed = counts.get("passed", 0) + counts.get("xpassed", 0)
    skipped = counts.get("skipped", 0) + counts.get("xfailed", 0)
    return passed, failed, skipped


def read(path):
    if not path or not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        return f.read()


def summary(logs):
    """The summary's lines and whether anything failed."""
    lines, total, any_failed = [], [0, 0, 0], False
    for name, parse, path in logs:
        text = read(path)
        if text is None:
            continue
        counts = parse(text)
        any_failed |= counts[1] > 0
        for i in range(3):
            total[i] += counts[i]
        lines.append(f"  {name:<8} {counts[0]:>6} passed {counts[1]:>4} failed {counts[2]:>4} ignored")
    lines.append(f"  {'total':<8} {total[0]:>6} passed {total[1]:>4} failed {total[2]:>4} ignored")
    return lines, any_failed


def self_test():
    cargo_log = """
running 3 tests
test a ... ok
test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s
   Doc-tests gpud
test result: FAILED. 10 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.2s
"""
    assert cargo(cargo_log) == (13, 2, 1), cargo(cargo_log)
    go_log = """=== RUN   TestA
--- PASS: TestA (0.00s)
=== RUN   TestB
    --- PASS: TestB/sub (0.00s)
    --- SKIP: TestB/other (0.00s)
--- FAIL: TestB (0.01s)
FAIL
"""
    assert go(go_log) == (2, 1, 1), go(go_log)
    py_log = """..s.F
SKIPPED [1] test_x.py:3: needs a GPU
1 failed, 3 passed, 1 skipped in 2.51s
"""
    assert pytest(py_log) == (3, 1, 1), pytest(py_log)
    assert pytest("===== 12 passed, 2 skipped in 0.88s =====\n") == (12, 0, 2)
    assert pytest("no tests ran in 0.01s\n") == (0, 0, 0)
    lines, failed = summary([("cargo", cargo, None)])
    assert lines == [f"  {'total':<8} {0:>6} passed {0:>4} failed {0:>4} ignored"] and not failed
    print("test-summary.py: self-test passed")


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    paths = {}
    it = iter(argv)
    for flag in it:
        if flag not in ("--cargo", "--go", "--pytest"):
            print(__doc__, file=sys.stderr)
            return 2
        paths[flag[2:]] = next(it, None)
    lines, failed = summary(
        [
            ("cargo", cargo, paths.get("cargo")),
            ("go", go, paths.get("go")),
            ("pytest", pytest, paths.get("pytest")),
        ]
    )
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
