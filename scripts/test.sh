#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine with Rust (run as root, as CI does):
# installs what the tests need, builds once in the dev profile, then checks formatting,
# lints and every test. GPU tests are marked `#[ignore = "needs a GPU"]` and run on a GPU
# host with gpu/run-suite.sh. Each step prints a header; the end (or a failure) prints the
# steps' times and the tests passed, failed and ignored, summed over cargo, Go and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
step_name=""
step_start=$SECONDS
steps=()
# step TITLE: closes the step before (its time) and prints the next one's header.
step() {
    [ -z "$step_name" ] || steps+=("$(printf '  %-52s %5ss' "$step_name" $((SECONDS - step_start)))")
    step_name=$1
    step_start=$SECONDS
    printf '\n==> %s\n' "$1"
}
summary() {
    local rc=$?
    [ -z "$step_name" ] || steps+=("$(printf '  %-52s %5ss' "$step_name" $((SECONDS - step_start)))")
    printf '\n== steps (%ss in all)\n' $((SECONDS - started))
    printf '%s\n' "${steps[@]}"
    echo "== tests"
    python3 scripts/test-summary.py --cargo target/test-output.log --go target/go-test-output.log \
        --pytest target/python-test-output.log || true
    if [ "$rc" -eq 0 ]; then
        echo "all tests passed (build folder: $(du -sh target 2>/dev/null | cut -f1))"
    else
        echo "FAILED in step: $step_name (exit $rc)"
    fi
}
# Logs of an earlier run must not count in this one's summary.
mkdir -p target
rm -f target/test-output.log target/go-test-output.log target/python-test-output.log
trap summary EXIT

step "system packages"

# System packages the tests use: C and C++ compilers (kernel arithmetic compiled on the host;
# libgpud's C and C++ test programs), pip and venv (NVRTC wheel, the Python client's tests),
# dbus-daemon, busctl and dbus-send (D-Bus tests), setpriv (calls as another user), systemd tools
# (unit checks, socket activation, systemd-analyze security), a font (the farm's plot), Go (the
# Go client's tests, client/go), pkg-config and binutils (libgpud's tests), Slurm and munge
# (a real one-node cluster, tests/system/slurm.rs).
missing=()
command -v g++ >/dev/null || missing+=(build-essential)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
# The Python client's tests run in a virtual environment (Debian's Python refuses pip installs
# into the system's site-packages, PEP 668).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
command -v dbus-daemon >/dev/null || missing+=(dbus-daemon)
command -v dbus-send >/dev/null || missing+=(dbus-bin)
command -v setpriv >/dev/null || missing+=(util-linux)
command -v busctl >/dev/null || missing+=(systemd)
command -v systemd-socket-activate >/dev/null || missing+=(systemd)
command -v pkill >/dev/null || missing+=(procps)
command -v go >/dev/null || missing+=(golang-go)
# libgpud's tests build C programs through pkg-config and read their ELF headers.
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v readelf >/dev/null || missing+=(binutils)
command -v slurmctld >/dev/null || missing+=(slurmctld)
command -v slurmd >/dev/null || missing+=(slurmd)
command -v sbatch >/dev/null || missing+=(slurm-client)
command -v munged >/dev/null || missing+=(munge)
# A TrueType font for the farm's plot (bench/tests/farm.rs draws one).
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
# The Debian packages' test (scripts/test-package.sh) builds with debhelper, lints, reads man.
command -v dh >/dev/null || missing+=(debhelper)
command -v lintian >/dev/null || missing+=(lintian)
command -v man >/dev/null || missing+=(man-db)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
eval "$(cuda/ci-setup.sh)"

# One clean build: incremental artifacts would only cost disk (and CI disk is finite).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
step "formatting, the import graph, the summary's parser"
cargo fmt --all -- --check
# The module import graphs have no circle (docs/ARCHITECTURE.md, "The import graph").
python3 scripts/module-graph.py --self-test
python3 scripts/module-graph.py --check gpud/src cuda/src >/dev/null
python3 scripts/test-summary.py --self-test
# Clippy checks the dependencies in check mode (metadata only); the dev build below compiles
# them once, and every later step (tests, Go, Python, the demo) runs what it built.
step "clippy (-D warnings)"
cargo clippy --workspace --all-targets -- -D warnings
# System tests run the real binaries: build them first, with every target at once so that the
# binaries carry the same features as the tests (a `--bins` build alone leaves dev-dependency
# features out and makes `cargo test` compile half the workspace a second time).
step "build (dev profile, every target)"
cargo build --workspace --all-targets
step "cargo test"
# The Slurm cluster test fails, rather than skips, when Slurm is missing.
export GPUD_REQUIRE_SLURM=1
cargo test --workspace -- --show-output 2>&1 | tee target/test-output.log
step "Go client (gofmt, go vet, go test)"
# The Go client (standard library only: nothing to download) against the daemon just built,
# with the shared conformance corpus. -count=1: a cached result would not see a new gpud.
(
    cd client/go
    export GOFLAGS=-mod=mod GOPROXY=off GOCACHE="${GOCACHE:-$PWD/../../target/go-cache}"
    # With gpud-bench-clients' Go driver (its own module, which replaces the client with this one).
    unformatted=$(gofmt -l . ../../bench/clients/bench_go)
    if [ -n "$unformatted" ]; then
        echo "gofmt: these files need formatting: $unformatted" >&2
        exit 1
    fi
    go vet ./...
    (cd ../../bench/clients/bench_go && go vet ./...)
    # -v names every test in the log (the summary counts them); the terminal gets the packages.
    log=../../target/go-test-output.log
    if ! GPUD_BIN=$PWD/../../target/debug/gpud go test -count=1 -v ./... >"$log" 2>&1; then
        cat "$log"
        exit 1
    fi
    grep -E '^(ok|FAIL|\?) ' "$log"
)
step "Python client (pytest)"
# The Python client (client/python), installed with pip as a user would, tested with pytest
# against target/debug/gpud: its own tests and the conformance corpus.
python3 -m venv --clear target/python-venv
target/python-venv/bin/python -m pip install --quiet --disable-pip-version-check ./client/python pytest
GPUD_BIN="$PWD/target/debug/gpud" target/python-venv/bin/python -m pytest -q -rs client/python 2>&1 |
    tee target/python-test-output.log
step "the demo (the README's first command, small)"
# gpud, gpudctl and the provers from the dev build above, on a simulated GPU.
target/debug/gpud-prover demo --log-size 10
step "the Debian packages (build, lintian, install, check, purge)"
scripts/test-package.sh target/debug
