#!/usr/bin/env bash
# Builds, on the development machine, the release binaries that gpu/run-suite.sh runs on a GPU
# host (which needs neither Rust nor cargo) and puts them in .gpu/ (git-ignored). Then copy the
# repository's gpu/ and .gpu/ to the GPU host and run there, from the copy's root:
#   bash gpu/run-suite.sh
#
# Sections add their binaries to the lists below: BINS (from src/bin) and TESTS (integration
# test targets, run there with --ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

BINS=(gpud-cuda-bench gpud-msm-bench)
TESTS=(gpu msm_gpu)
# gpud-prover: the CUDA engine's GPU tests. gpud-bench (crate bench/): the engines benchmark
# (`gpud-bench engines`) and the farm (the sharing benchmark). The farm runs gpud from the
# library inside gpud-bench, in a child process of its own (`gpud-bench farm-gpud`, the daemon
# binary's code with NVML), so the GPU host needs no separate gpud binary (8 MiB less to copy).
BENCH_BINS=(gpud-bench)
# gpud and gpudctl themselves: the MPS section (gpu/mps.sh) runs the daemon on NVML with
# [enforce] mps = true and programs under `gpudctl run --enforce mps`.
DAEMON_BINS=(gpud gpudctl)
PROVER_TESTS=(prover_gpu)

# gpud-bench with bellperson's CUDA prover as the engines benchmark's baseline (its
# bellperson-gpu feature: nvcc compiles ec-gpu-gen's kernels for sm_90 in bellperson's build
# script, and the link needs libcuda.so) when gpu/cuda-toolchain.sh can set that up here (nvcc
# wheels from PyPI, a link stub); otherwise bellperson's CPU prover is the baseline, and
# `gpud-bench engines` runs without it unless asked. GPU_BUILD_BELLPERSON=gpu makes a failed
# setup an error, =cpu skips it.
bellperson_mode=${GPU_BUILD_BELLPERSON:-auto}
case "$bellperson_mode" in auto | gpu | cpu) ;; *)
    echo "build.sh: GPU_BUILD_BELLPERSON=$bellperson_mode: expected auto, gpu or cpu" >&2
    exit 2
    ;;
esac
bellperson=cpu
if [ "$bellperson_mode" != cpu ]; then
    if toolchain=$(bash gpu/cuda-toolchain.sh); then
        bellperson=gpu
    elif [ "$bellperson_mode" = gpu ]; then
        echo "build.sh: GPU_BUILD_BELLPERSON=gpu but gpu/cuda-toolchain.sh failed" >&2
        exit 1
    else
        echo "build.sh: no CUDA toolchain (gpu/cuda-toolchain.sh failed): bellperson's CPU prover is the baseline" >&2
    fi
fi
# GPU_BUILD_OUT builds elsewhere (e.g. to check the build without replacing a prepared .gpu).
out=${GPU_BUILD_OUT:-.gpu}
rm -rf "$out"
mkdir -p "$out/bin" "$out/tests"

# The kernel benchmarks and their variants are not part of the product API: they exist only
# with gpud-cuda's bench-variants feature (its test targets get it through a dev-dependency).
cargo build --release -p gpud-cuda --features bench-variants --bins
if [ "$bellperson" = gpu ]; then
    (eval "$toolchain" && cargo build --release -p gpud-bench --bin gpud-bench --features bellperson-gpu)
else
    cargo build --release -p gpud-bench --bin gpud-bench
fi
cargo build --release -p gpud --bin gpud -p gpud-client --bin gpudctl
for b in "${BINS[@]}" "${BENCH_BINS[@]}" "${DAEMON_BINS[@]}"; do
    cp "$CARGO_TARGET_DIR/release/$b" "$out/bin/"
done
# The GPU baseline links the driver by its SONAME (the stub only stood in for it here).
if [ "$bellperson" = gpu ] && ! readelf -d "$out/bin/gpud-bench" | grep -q 'NEEDED.*\[libcuda\.so\.1\]'; then
    echo "build.sh: gpud-bench was built with bellperson-gpu but does not link libcuda.so.1" >&2
    exit 1
fi
# The LD_PRELOAD interposer, for the preload section (gpu/preload/run.sh, which runs gpud from
# gpud-bench and compiles its CUDA check program with the host's nvcc).
cargo build --release -p gpud-preload
mkdir -p "$out/lib"
cp "$CARGO_TARGET_DIR/release/libgpud_preload.so" "$out/lib/"

test_args=()
for t in "${TESTS[@]}"; do test_args+=(--test "$t"); done
prover_test_args=()
for t in "${PROVER_TESTS[@]}"; do prover_test_args+=(--test "$t"); done
{
    cargo test --release -p gpud-cuda "${test_args[@]}" --no-run --message-format=json
    cargo test --release -p gpud-prover "${prover_test_args[@]}" --no-run --message-format=json
} >"$out/.cargo-test.json"
python3 - "$out" <<'PY'
import json, shutil, sys, os
out = sys.argv[1]
for line in open(os.path.join(out, ".cargo-test.json")):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"].get("test"):
        name = m["target"]["name"]
        shutil.copy(m["executable"], os.path.join(out, "tests", name))
        print("test binary:", name)
PY
rm -f "$out/.cargo-test.json"
for t in "${TESTS[@]}" "${PROVER_TESTS[@]}"; do
    [ -x "$out/tests/$t" ] || { echo "build.sh: test binary $t missing" >&2; exit 1; }
done

# Line tables stay (backtraces, sanitizer reports) but compressed: a quarter of the size, so
# .gpu/ stays small enough to copy quickly (at most GPU_BUILD_MAX_MIB, default 72 MiB: 60 and the
# ~10 MiB of bellperson's CUDA kernels in a gpud-bench built with the baseline). The two
# largest, which embed gpud and the prover and are never run under compute-sanitizer, keep
# their symbols only (backtraces name functions, without lines): half their size again.
SYMBOLS_ONLY=(bin/gpud-bench tests/prover_gpu bin/gpud bin/gpudctl)
for f in "$out"/bin/* "$out"/tests/* "$out"/lib/*; do
    if printf '%s\n' "${SYMBOLS_ONLY[@]}" | grep -qx "${f#"$out"/}"; then
        objcopy --strip-debug "$f"
    else
        objcopy --compress-debug-sections=zlib "$f"
    fi
done

{
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "bellperson baseline: $bellperson"
} >"$out/BUILD"
size=$(du -sm "$out" | cut -f1)
echo "built into $out: ${size} MiB"
if [ "$bellperson" = gpu ]; then
    echo "baseline: bellperson's GPU prover (CUDA, sm_90) in gpud-bench engines"
else
    echo "baseline: bellperson's CPU prover only (no CUDA toolchain here): gpud-bench engines has no GPU baseline"
fi
max=${GPU_BUILD_MAX_MIB:-72}
if [ "$size" -gt "$max" ]; then
    echo "build.sh: $out is ${size} MiB, over GPU_BUILD_MAX_MIB=$max (a binary grew: check the list above)" >&2
    exit 1
fi
