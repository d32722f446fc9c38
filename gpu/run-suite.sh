#!/usr/bin/env bash
# The whole GPU check and benchmark suite, run on a GPU host from the prebuilt binaries in .gpu/
# (built by gpu/build.sh on the development machine and copied here with gpu/):
#   bash gpu/run-suite.sh [SECTION...]   (from the root of the copy)
# With no arguments every section runs; name sections to run only those (to split the suite
# into shorter runs; the sizes below say how long each takes).
# Logs and JSON go to $OUT (default ./gpu-out). The summary prints last.
#
# Each section is one `section NAME TIMEOUT_S COMMAND...` line below; add new ones there.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
G=.gpu
# Kernels are compiled by NVRTC on first use; cache them for the later sections of this run.
export GPUD_CUDA_CACHE_DIR=${GPUD_CUDA_CACHE_DIR:-/tmp/gpud-cuda-kernels}
export RUST_BACKTRACE=1

summary=()
failed=0

wanted=("$@")
# Whether section $1 was named on the command line.
named() { printf '%s\n' "${wanted[@]}" | grep -qx "$1"; }
section() {
    local name=$1 limit=$2
    shift 2
    if [ "${#wanted[@]}" -gt 0 ] && ! named "$name"; then
        return 0
    fi
    echo "=== $name: $*"
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    local took=$((SECONDS - start))
    tail -n 25 "$OUT/$name.log"
    summary+=("$(printf '%-16s rc=%-3s %4ss  %s' "$name" "$rc" "$took" "$OUT/$name.log")")
    [ "$rc" -eq 0 ] || failed=1
}

[ -d "$G" ] || { echo "no $G: run gpu/build.sh on the development machine and copy .gpu here" >&2; exit 2; }
{
    cat "$G/BUILD"
    nvidia-smi --query-gpu=name,uuid,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
    echo "cpus: $(nproc)"
} >"$OUT/env.log" 2>&1
cat "$OUT/env.log"

# --- quick: every kernel variant at the key sizes, NTT/H and MSM, about 3 minutes together ---
#   bash gpu/run-suite.sh cuda-quick msm-quick
# cuda-quick: the NTT variants checked (CPU at small sizes, each other at 2^20, 2^24, 2^27) and
# timed at NTT 2^20/2^24/2^27 and H 2^22/2^24, with both Fr products' rates. msm-quick: a small
# check (poisoned temporaries, every build), then 2^20/2^22/2^24 random and witness, end to end
# (pipelined and plain upload), on the device with phases, and every build at 2^24.
section cuda-quick 300 "$G/bin/gpud-cuda-bench" --quick --json "$OUT/cuda-quick.json"
[ -f "$OUT/cuda-quick.log" ] && grep -A 7 "== NTT variants" "$OUT/cuda-quick.log"
section msm-quick 300 "$G/bin/gpud-msm-bench" --check --bench --quick --json "$OUT/msm-quick.json"
[ -f "$OUT/msm-quick.log" ] && grep -A 9 "== MSM key sizes (ms" "$OUT/msm-quick.log"

# ntt-profile (only when named): Nsight Compute on the second forward NTT of 2^24 (its three
# radix-4 passes), every section; needs a runtime where ncu reads the counters.
if named ntt-profile; then
    section ntt-profile 240 ncu --clock-control none --kernel-name regex:ntt_radix4_kernel \
        --launch-skip 3 --launch-count 3 --set full --import-source no \
        "$G/bin/gpud-cuda-bench" --repeat-ntt 24
fi

# --- gpud-cuda: device layer, NTT, H polynomial ----------------------------------------------
# About 5 minutes together; to keep a run under 10 minutes with the MSM sections, split:
#   bash gpu/run-suite.sh cuda-tests cuda-memcheck cuda-check   and   ... cuda-bench
section cuda-tests 180 "$G/tests/gpu" --ignored --test-threads=1
# fixed-base (about 1 minute; also part of cuda-tests and prover-tests): the G1 and G2
# fixed-base kernels against blstrs over several chunks, and parameters with both on the GPU
# equal to the CPU path and proving. Alone:   bash gpu/run-suite.sh fixed-base
if named fixed-base; then
    section fixed-base 240 bash -c "\"$G/tests/gpu\" --ignored --test-threads=1 fixed_base &&
        \"$G/tests/prover_gpu\" --ignored --test-threads=1 parameters_with"
fi
# phase-tests (about 1 minute; also part of cuda-tests and prover-tests): the H polynomial from
# pageable and pinned memory, with C made on the device and with the split copy/transform path,
# within its charged bytes; proofs bit for bit with C on the device or copied, H first and MSMs
# first; the CUDA and CPU engines on a wrong witness. Alone:   bash gpu/run-suite.sh phase-tests
if named phase-tests; then
    section phase-tests 240 bash -c "\"$G/tests/gpu\" --ignored --test-threads=1 h_ &&
        \"$G/tests/prover_gpu\" --ignored --test-threads=1 c_made_on cuda_and_cpu_engines"
fi
section cuda-memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$G/bin/gpud-cuda-bench" --check --max-log 10
# Shared-memory races (a missing barrier between the radix kernel's rounds, the tiled bit
# reversal's two phases): only when named, e.g. bash gpu/run-suite.sh cuda-racecheck.
if named cuda-racecheck; then
    section cuda-racecheck 180 compute-sanitizer --tool racecheck --racecheck-report hazard \
        --error-exitcode 1 "$G/bin/gpud-cuda-bench" --check --max-log 10
fi
section cuda-check 300 "$G/bin/gpud-cuda-bench" --check --json "$OUT/cuda-check.json"
section cuda-bench 240 "$G/bin/gpud-cuda-bench" --bench --json "$OUT/cuda-bench.json"
# The benchmark's tables, whole, in the run's output.
[ -f "$OUT/cuda-bench.log" ] && grep -A 40 "== device-to-device" "$OUT/cuda-bench.log" | head -n 60

# --- gpud-cuda: BLS12-381 G1 MSM -------------------------------------------------------------
# About 560 s together: run them on their own,
#   bash gpu/run-suite.sh msm-tests msm-memcheck msm-check msm-bench
# msm-tests includes the chunked MSMs (msm_chunked: resident, streamed from ordinary and
# page-locked memory, host and device scalars, uneven tails, G1 and G2) against the unchunked
# MSM and blstrs, and the streamed charge bound (two chunk base buffers, not the query).
section msm-tests 240 "$G/tests/msm_gpu" --ignored --test-threads=1
section msm-memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$G/bin/gpud-msm-bench" --check --quick
section msm-check 150 "$G/bin/gpud-msm-bench" --check --max-log 24 --json "$OUT/msm-check.json"
section msm-bench 200 "$G/bin/gpud-msm-bench" --bench --json "$OUT/msm-bench.json"
[ -f "$OUT/msm-bench.log" ] && grep -A 40 "== MSM summary" "$OUT/msm-bench.log" | head -n 45

# --- gpud-cuda: BLS12-381 G2 MSM -------------------------------------------------------------
# About 4 minutes together:   bash gpu/run-suite.sh msm-g2 msm-g2-memcheck
# msm-g2: the G2 MSM against blstrs G2Projective::multi_exp for sizes 1..2^22 (random and
# witness-shaped scalars, poisoned temporaries) and the edge cases, then timed 2^16..2^24
# against blstrs on all cores (up to 2^22), and our G1 MSM at 2^22 for the ratio. Prints
# "PASS/FAIL G2 MSM equals blstrs ...", a timing table and two RATIO lines (G2/G1 at 2^22,
# target <= 3; witness/random, target <= 1.05), then "G2 builds" lines: the product's G2 build
# (no prefetch in the accumulation) against the prefetching one at 2^22. msm-g2-memcheck: small
# sizes under compute-sanitizer. (The msm-tests section runs the G2 GPU tests too.)
section msm-g2 300 "$G/bin/gpud-msm-bench" --g2 --check --bench --json "$OUT/msm-g2.json"
[ -f "$OUT/msm-g2.log" ] && grep -E "^(PASS|FAIL|RATIO|G2 builds)|== G2 MSM timing" -A 0 "$OUT/msm-g2.log"
[ -f "$OUT/msm-g2.log" ] && grep -A 20 "== G2 MSM timing" "$OUT/msm-g2.log" | head -n 22
section msm-g2-memcheck 240 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$G/bin/gpud-msm-bench" --g2 --check --quick --max-log 10

# --- gpud-prover and gpud-bench: the CUDA engine end to end ----------------------------------
# About 6 to 7 minutes together; on their own, or split in two:
#   bash gpu/run-suite.sh prover-tests prover-bench
# prover-tests: GPU proofs equal bellperson's create_proof bit for bit (synthetic 2^9..2^14,
# poseidon 2^12, sha256 2^15; resident bases and per-phase uploads), the pipeline on the CUDA
# engine, G2 on the GPU and on the CPU (both bit for bit), a proof under a quarter of the
# unchunked lease (chunked MSMs, measured peak <= the lease, bit for bit), typed errors for a
# lease below the plan's smallest, GPU-generated parameters equal the CPU path, evicted resident
# bases freeing their memory and proving again once reloaded. prover-bench: full proofs of
# 2^18, 2^20 and 2^22 of the PoRep-shaped circuit (parallel synthesis) on the CPU and CUDA
# engines, by stage, with
# parameters from the fast generator (G1 and G2 on the GPU), and bellperson's own GPU prover on the
# same key as the baseline (one warm-up and 3 timed proofs per size, the first equal to ours
# bit for bit, all verified; about 1.5 s a proof at 2^20 and ~5 s at 2^22, so ~30 s of the
# section), with the ratio bellperson / ours; JSON in $OUT/prover-bench.json. The section
# fails if bellperson did not run on the GPU. A .gpu built without the CUDA toolchain
# (BUILD says "bellperson baseline: cpu") runs without the baseline.
export GPUD_PROVER_TEST_PARAMS=${GPUD_PROVER_TEST_PARAMS:-/tmp/gpud-prover-test-params}
# bellperson's rust-gpu-tools does not know the H200 by name.
export RUST_GPU_TOOLS_CUSTOM_GPU=${RUST_GPU_TOOLS_CUSTOM_GPU:-"NVIDIA H200:16896"}
section prover-tests 300 "$G/tests/prover_gpu" --ignored --test-threads=1
baseline=none
grep -qx "bellperson baseline: gpu" "$G/BUILD" && baseline=bellperson
section prover-bench 540 "$G/bin/gpud-bench" engines --circuit porep --sizes 18,20,22 --baseline "$baseline" \
    --json "$OUT/prover-bench.json"
[ -f "$OUT/prover-bench.log" ] && grep -A 12 "== engines summary" "$OUT/prover-bench.log" | head -n 20
[ -f "$OUT/prover-bench.log" ] && grep -E -A 8 "^(baseline:|== baseline)" "$OUT/prover-bench.log"

# gpu-phase-27 (expected about 3 minutes, bounded at 420 s; needs ~50 GiB host memory and ~96 GiB of the GPU): the GPU
# phase of a 2^27 PoRep-shaped partition on RANDOM bases (2^20 points repeated; no proof, the
# issue's fallback where 2^27 parameters do not fit host memory), per budget 16 GiB and 48 GiB:
# the plan, planned and measured peak, per-step times, total; bases streamed from page-locked
# memory, and resident under their own lease where the GPU also holds them. Alone:
#   bash gpu/run-suite.sh gpu-phase-27
section gpu-phase-27 420 "$G/bin/gpud-bench" gpu-phase --log 27 --budget 16GiB --budget 48GiB \
    --json "$OUT/gpu-phase-27.json"
[ -f "$OUT/gpu-phase-27.log" ] && grep -A 8 "== gpu-phase summary" "$OUT/gpu-phase-27.log"

# --- PoRep-shaped partitions -----------------------------------------------------------------
#   bash gpu/run-suite.sh porep-26            (about 3 minutes; bounded at 9)
#   bash gpu/run-suite.sh prover-bench-synthetic   (about 4 minutes; bounded at 9)
# porep-26: one 2^26 PoRep-shaped partition (4591 challenge segments, 4592 public inputs):
# parameters from the fast generator in memory (about 31 GB; G1 and G2 on the GPU),
# the bases resident (about 29 GiB of VRAM), a warm-up and a timed proof on the CUDA engine
# with parallel synthesis and a 48 GiB phase lease (room to copy a and b beside the other
# MSMs), both verified; then one more proof with the bases streamed from
# page-locked memory within a 16 GiB phase lease (planned and measured peak). Prints
# generation, synthesis, GPU phase, tail, peak host RSS and VRAM. prover-bench-synthetic: the
# prover-bench above on the synthetic circuit (its chain is not segmented: synthesis stays on
# one core), with the same baseline.
section porep-26 540 "$G/bin/gpud-bench" partition --circuit porep --log-size 26 --budget 16GiB \
    --resident-budget 48GiB
# porep-27 (about 6 minutes, bounded at 590 s; needs about 100 GiB of host memory and about
# 100 GiB of the GPU; only when named): the same at 2^27, a whole PoRep partition (about 134 M
# constraints): parameters of about 58 GiB generated in memory (never on disk, G1 and G2 on the
# GPU), resident with a 48 GiB phase lease and streamed within 16 GiB, every proof verified.
# Alone:
#   bash gpu/run-suite.sh porep-27
if named porep-27; then
    section porep-27 590 "$G/bin/gpud-bench" partition --circuit porep --log-size 27 --budget 16GiB \
        --resident-budget 48GiB
fi
section prover-bench-synthetic 540 "$G/bin/gpud-bench" engines --circuit synthetic --sizes 18,20,22 \
    --baseline "$baseline" --json "$OUT/prover-bench-synthetic.json"

# --- MPS: hard memory limits for unmodified programs ------------------------------------------
# About 1 minute: gpud on NVML with [enforce] mps = true starts the driver's MPS control daemon;
# `gpudctl run --enforce mps --vram 20GiB` runs PyTorch (30 GiB must raise OutOfMemoryError,
# 15 GiB must succeed, mem_get_info printed), a 9.5 GiB lease checks the MiB form of the limit,
# the same lease without --enforce allocates 30 GiB, and gpud's stop ends the MPS daemon. Needs
# root, python3 with PyTorch and nvidia-cuda-mps-control; only when named:
#   bash gpu/run-suite.sh mps-enforce
if named mps-enforce; then
    section mps-enforce 300 bash gpu/mps.sh "$G"
    [ -f "$OUT/mps-enforce.log" ] && grep -E "^(PASS|FAIL)" "$OUT/mps-enforce.log"
fi

# --- libgpud_preload.so, the LD_PRELOAD interposer -------------------------------------------
# About 2 minutes: gpud (from gpud-bench) on the real device, nvcc compiles gpu/preload's check
# program here; with a 20 GiB lease a 30 GiB allocation fails under GPUD_POLICY=fail and
# succeeds after the lease grows under grow, for cudaMalloc, cudaMallocAsync, VMM, PyTorch and
# PyTorch with expandable segments; torch.cuda.mem_get_info() equals the lease; cudaMalloc and
# cudaFree latency with and without the interposer. Logs: $OUT/preload/.
#   bash gpu/run-suite.sh preload
section preload 420 bash gpu/preload/run.sh "$G" "$OUT/preload"
[ -f "$OUT/preload.log" ] && grep -E '^(PASS|FAIL|preload:)' "$OUT/preload.log"
# preload-two (only when named; about 1 minute): two PyTorch processes started with 1 GiB
# leases each grow to 80 GiB under grow: in one piece each (both must finish, the second waits),
# then in 4 GiB steps (both hold memory and wait for the other's: gpud's grow-deadlock rule
# fails the younger grow, the other finishes), gpud never over capacity; then the same two
# without the interposer (one runs out of memory).
#   bash gpu/run-suite.sh preload-two
# preload-bench (only when named; about 2 minutes): a PyTorch training step plain, under the
# interposer and with GPUD_COMPUTE=auto (target <= 1.02x), and two loops of GPU bursts and CPU
# phases sharing the card under GPUD_COMPUTE=auto against one after the other.
#   bash gpu/run-suite.sh preload-bench
if named preload-bench; then
    section preload-bench 300 bash gpu/preload/run.sh "$G" "$OUT/preload-bench" bench
    [ -f "$OUT/preload-bench.log" ] && grep -E '^(PASS|FAIL|INFO|preload-bench:)' "$OUT/preload-bench.log"
fi
if named preload-two; then
    section preload-two 300 bash gpu/preload/run.sh "$G" "$OUT/preload-two" two
    [ -f "$OUT/preload-two.log" ] && grep -E '^(PASS|FAIL|INFO|preload-two:)' "$OUT/preload-two.log"
fi

# --- farm: the sharing benchmark (gpud vs the in-process ideal, no lock, flock) ---------------
# Each is a run of its own (several minutes) and runs only when named:
#   bash gpu/run-suite.sh farm       (about 8 minutes: bundle + ballast ~40 s, 20 cells of 12 s
#                                     (modes gpud, gpud2, ideal, flock, none at N 1, 2, 4, 8), 3
#                                     priority runs of 16 s; on the 2-GPU machine also placement
#                                     any vs one GPU at N = 8, 2 cells more)
#   bash gpu/run-suite.sh farm-x2    (the 2-GPU machine, placement only: N = 4 and 8; ~3 minutes)
#   bash gpu/run-suite.sh farm-priority (the priority runs alone; ~2 minutes)
#   bash gpu/run-suite.sh farm-ratio    (gpud against the ideal alone, 25 s windows; ~4 minutes)
#   bash gpu/run-suite.sh farm-warm     (warm bases in evictable leases vs per-phase uploads,
#                                        and a critical partition reclaiming them; ~4 minutes)
#   bash gpu/run-suite.sh farm-host     (host admission: per-process bounds vs gpud host
#                                        leases, then inside a 24 GiB cgroup; ~5 minutes, root)
#   bash gpu/run-suite.sh farm-g2       (2^24 partitions, B_G2 on the GPU vs on the CPU, N = 1,
#                                        2, 4: throughput and CPU utilisation; ~8.5 minutes)
# A ballast process holds all but 16 GiB of each GPU (gpud sees it through NVML); each
# partition's footprint is padded to 6 GiB. Results: $OUT/farm*/farm.json (metrics, written
# after every cell), farm.md (the tables, also printed last), cells/ (every process's report),
# logs/. Shrink with e.g. --duration 8 --priority-duration 10 --ns 1,2,8; plot here with
#   gpud-bench farm-plot farm.json docs/farm.png
# The per-process reports and logs are packed into one archive, a few files to copy back
# instead of hundreds (unpack with `tar xzf cells-logs.tgz` beside farm.json).
# farm_section NAME TIMEOUT ARGS...: the farm with ARGS into $OUT/NAME (2^21 partitions), only
# when NAME is named; prints its tables and packs the per-process files.
farm_section() {
    local name=$1 limit=$2
    shift 2
    named "$name" || return 0
    section "$name" "$limit" "$G/bin/gpud-bench" farm --out "$OUT/$name" --log-size 21 "$@"
    [ -f "$OUT/$name/farm.md" ] && cat "$OUT/$name/farm.md"
    [ -d "$OUT/$name/cells" ] || return 0
    (cd "$OUT/$name" && tar czf cells-logs.tgz cells logs && rm -rf cells logs)
}
farm_section farm 570 --modes gpud,gpud2,ideal,flock,none --duration 12 --priority-duration 16 \
    --multi-gpu --multi-ns 8
# farm-priority: the priority runs alone (8 normal provers, a critical 2^16 proof every second;
# gpud, gpud with a critical slot, flock), about 2 minutes.
farm_section farm-priority 300 --no-matrix --priority-n 8 --priority-duration 16
# farm-ratio: gpud against the in-process ideal only, N = 2, 4, 8, windows of 25 s (the matrix's
# 12 s windows leave a ±7 % spread of the phase length between cells), about 4 minutes.
farm_section farm-ratio 330 --modes gpud,ideal --ns 2,4,8 --duration 25 --priority-n 0
# farm-warm: warm state against per-phase uploads, about 4 minutes: gpud (bases uploaded in
# every phase) and gpud-warm (each prover's bases resident in an evictable lease, its phase
# leases the footprint less the bases) at N = 4 and 8, 20 s windows; then 8 normal provers and a
# critical 2^16 partition padded to 4 GiB every second under gpud with a critical slot, cold and
# warm. Warm, the card is full (8 context leases of 0.52 GiB, 8 × 0.64 GiB of warm bases and a
# 5.8 GiB phase leave ~0.4 GiB of the 15.5): the critical partition beside the phase fits only
# by reclaiming warm bases (a larger one could not fit even so, and waits for the phase). The
# time from its request to its grant is the critical wait.
farm_section farm-warm 420 --modes gpud,gpud-warm --ns 4,8 --duration 20 --priority-n 8 \
    --priority-modes gpudc,gpudc-warm --priority-duration 16 --critical-phase-vram 4GiB
farm_section farm-x2 570 --multi-gpu --no-matrix --priority-n 0 --multi-ns 4,8 --duration 12
# farm-host (only when named; about 5 minutes, root, cgroup v2 writable at /sys/fs/cgroup with
# the memory controller): host admission (issue 16). 8 provers of 2^22 partitions, 4 lanes each
# (the partitions a process may synthesize at once), every partition synthesized anew (0.5 GiB
# of assignment, ~2 s on a core) beside a 1.3 GiB key per process. Four cells of 25 s:
# host-bounds (per-process bounds only, as before) and host-gpud (each partition leases its
# host memory and a CPU from gpud, the tail a CPU, each process its resident footprint), first
# without a limit (throughput, GPU busy, peak RSS), then each inside its own cgroup with
# memory.max = 24 GiB and no swap, gpud's [host] memory set to 24 GiB (the farm makes and
# removes the groups): 8 × (1.8 + 4 × 0.5) GiB does not fit, so host-bounds-limit loses provers
# to the OOM killer and host-gpud-limit must lose none. Prints a HOST line per cell (per_min,
# gpu_busy, peak_rss_gib, oom_kills = provers ended by SIGKILL, cgroup_oom_kill) and the table;
# JSON in $OUT/farm-host/farm.json. The cgroups of a run cut short are removed after it.
if named farm-host; then
    section farm-host 480 "$G/bin/gpud-bench" farm --out "$OUT/farm-host" --log-size 22 \
        --no-matrix --priority-n 0 --calibrate-secs 3 \
        --host-n 8 --host-lanes 4 --host-duration 25 --host-limit 24GiB
    for d in /sys/fs/cgroup/gpud-farm-*; do
        [ -d "$d" ] || continue
        echo 1 >"$d/cgroup.kill" 2>/dev/null
        sleep 1
        rmdir "$d" 2>/dev/null && echo "farm-host: removed the leftover cgroup $d"
    done
    [ -f "$OUT/farm-host.log" ] && grep -E '^HOST ' "$OUT/farm-host.log"
    [ -f "$OUT/farm-host/farm.md" ] && grep -A 8 '^Host admission' "$OUT/farm-host/farm.md"
    if [ -d "$OUT/farm-host/cells" ]; then
        (cd "$OUT/farm-host" && tar czf cells-logs.tgz cells logs && rm -rf cells logs)
    fi
fi
# farm-g2 (only when named; about 8.5 minutes, one device call on its own): issue 15's farm
# item. gpud provers of 2^24 synthetic partitions (one process each, one compute slot) computing
# B_G2 in the GPU phase under their lease (--g2 gpu: the key carries the G2 query, 9.6 M points,
# 1.8 GB, uploaded per phase from page-locked memory; the lease includes its bases and
# temporaries) against in the CPU tail with blstrs on the host's 16 cores (--g2 cpu, what
# operators' provers do today), N = 1, 2, 4, N outer. No ballast (--card above the H200's
# memory), no pad, no modeled tail (--tail-ms 0: a tail is the real assembly, verification and,
# in cpu mode, the G2 MSM), one witness. Every proof's B_G2 is compared with the bundle's
# precomputed sum and every proof verified. Windows: 20 s with G2 on the GPU (phase ~1.5-2 s:
# ~10 partitions per cell, 10 / 5 / 2.5 per prover at N = 1 / 2 / 4) and 70 s with G2 on the
# CPU (a tail ~10 s alone on 16 cores, the host the bottleneck from N = 2 on: ~6, ~7 and ~7
# partitions per cell, ~6 / 3.5 / 1.7 per prover; the lanes' rate stays sound at 1-2 per lane).
# Time: bundle (fast parameters, G1 and G2 on the GPU; G2 took ~70 s at 2^24 on the CPU, the
# 17 s at 2^22; key 5.5 GB, G2 query 1.8 GB, the witness 2.2 GB and its G2 sum ~25 s; reused
# from /tmp/gpud-farm when there), calibration ~15 s, six cells of 20 or 70 s plus ~14 s of
# setup each (a prover reads ~9.5 GB and page-locks ~7.3 GB), ~510 s in all; NVRTC adds its
# compile time when no earlier section of the call filled the kernel cache. Host memory: ~11 GB
# per prover, ~45 GB at N = 4. Prints a G2 line per cell (per_min_lanes, gpu_busy, cpu_busy =
# all cores from /proc/stat, provers_cores from their own CPU seconds, g2_ms, phase_ms, tail_ms,
# oom, failed) and the G2 table; JSON in $OUT/farm-g2/farm.json (g2_cells).
if named farm-g2; then
    section farm-g2 540 "$G/bin/gpud-bench" farm --out "$OUT/farm-g2" --log-size 24 \
        --no-matrix --priority-n 0 --witnesses 1 --calibrate-secs 4 --tail-ms 0 \
        --card 1TiB --phase-vram 0 \
        --g2-compare gpu,cpu --g2-ns 1,2,4 --g2-duration 20 --g2-cpu-duration 70
    [ -f "$OUT/farm-g2.log" ] && grep -E '^G2 ' "$OUT/farm-g2.log"
    [ -f "$OUT/farm-g2/farm.md" ] && grep -A 9 '^B_G2 placement' "$OUT/farm-g2/farm.md"
    if [ -d "$OUT/farm-g2/cells" ]; then
        (cd "$OUT/farm-g2" && tar czf cells-logs.tgz cells logs && rm -rf cells logs)
    fi
fi

echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
