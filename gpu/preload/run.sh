#!/usr/bin/env bash
# The interposer on a real GPU (run by gpu/run-suite.sh's `preload` section, or alone from the
# copy's root: bash gpu/preload/run.sh .gpu OUTDIR). Starts gpud (NVML) on a private socket,
# compiles the CUDA check program with nvcc, and with a 20 GiB lease allocates 30 GiB under
# GPUD_POLICY=fail (must fail with out-of-memory) and under grow (must succeed, gpud showing the
# grown lease while it is held): cudaMalloc, cudaMallocAsync, VMM (cuMemCreate), PyTorch and
# PyTorch with expandable segments; torch.cuda.mem_get_info() must report the lease; then the
# latency of cudaMalloc/cudaFree with and without the interposer. One PASS/FAIL line per check,
# a summary last; exit 1 when any check failed.
#   bash gpu/preload/run.sh .gpu OUTDIR bench instead: a PyTorch training step plain, under the
#       interposer and with GPUD_COMPUTE=auto (target <= 1.02x); and two loops of GPU bursts and
#       CPU phases under GPUD_COMPUTE=auto together against one after the other, with the time
#       gpud's interlock was held.
#   bash gpu/preload/run.sh .gpu OUTDIR two   instead: two PyTorch processes started with 1 GiB
#       leases each grow to 80 GiB (more than the card holds for both) under grow. Taken in one
#       piece each, both must finish (the second waits in gpud's queue); grown in 4 GiB steps,
#       both end up holding memory and waiting for the other's, and gpud's grow-deadlock rule
#       fails the younger grow (out-of-memory) so that the other finishes; gpud never reserves
#       more than capacity; and the same two without the interposer, where one of them runs out
#       of memory.
set -uo pipefail
G=${1:-.gpu}
OUT=${2:-gpu-out/preload}
WHAT=${3:-checks}
mkdir -p "$OUT"
LIB=$(realpath "$G/lib/libgpud_preload.so")
HERE=$(dirname "$0")
GIB=$((1 << 30))
LEASE_GIB=20
ALLOC_GIB=30

work=$(mktemp -d /tmp/gpud-preload.XXXXXX)
socket=$work/gpud.sock
passed=0
failed=0
pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

"$G/bin/gpud-bench" farm-gpud --socket "$socket" --state-dir "$work/state" >"$OUT/gpud.log" 2>&1 &
gpud_pid=$!
cleanup() {
    kill "$gpud_pid" 2>/dev/null
    wait "$gpud_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do
    [ -S "$socket" ] && break
    sleep 0.1
done
[ -S "$socket" ] || { fail "gpud did not start (see $OUT/gpud.log)"; exit 1; }

if [ "$WHAT" = bench ]; then
    python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1 ||
        { fail "PyTorch with CUDA is not importable"; exit 1; }
    pre=(env LD_PRELOAD="$LIB" GPUD_SOCKET="$socket" GPUD_VRAM=1GiB GPUD_POLICY=grow)
    # A training step, three runs each way, interleaved: the best of each.
    best() { sort -n | head -n 1; }
    plain=() under=() auto=()
    for _ in 1 2 3; do
        plain+=("$(python3 "$HERE/torch_bench.py" step 200 | awk '/^step_ms/ {print $2}')")
        under+=("$("${pre[@]}" python3 "$HERE/torch_bench.py" step 200 | awk '/^step_ms/ {print $2}')")
        auto+=("$("${pre[@]}" GPUD_COMPUTE=auto python3 "$HERE/torch_bench.py" step 200 | awk '/^step_ms/ {print $2}')")
    done
    p=$(printf '%s\n' "${plain[@]}" | best)
    u=$(printf '%s\n' "${under[@]}" | best)
    a=$(printf '%s\n' "${auto[@]}" | best)
    echo "INFO training step (ms, best of 3): plain $p (${plain[*]}), interposer $u (${under[*]}), interposer + compute auto $a (${auto[*]})"
    for pair in "interposer:$u" "interposer + compute auto:$a"; do
        name=${pair%%:*} v=${pair##*:}
        ratio=$(awk -v x="$v" -v y="$p" 'BEGIN {printf "%.3f", x / y}')
        if awk -v r="$ratio" 'BEGIN {exit !(r <= 1.02)}'; then
            pass "training step with the $name: ${ratio}x plain (target <= 1.02)"
        else
            fail "training step with the $name: ${ratio}x plain (target <= 1.02)"
        fi
    done
    # --compute auto: two loops of GPU bursts (20 matmuls) and CPU phases (100 ms) share the
    # card, the interlock taken only around the bursts; against the same two one after the
    # other. The interlock's busy time comes from gpud's metrics.
    busy() { "$G/bin/gpudctl" --socket "$socket" metrics | awk '/^gpud_device_compute_busy_seconds_total/ {s += $NF} END {print s + 0}'; }
    loop=(python3 "$HERE/torch_bench.py" bursts 30 20 100)
    auto_env=("${pre[@]}" GPUD_COMPUTE=auto GPUD_COMPUTE_IDLE=20ms)
    b0=$(busy)
    start=$(date +%s.%N)
    "${auto_env[@]}" "${loop[@]}" >"$OUT/seq-a.log" 2>&1
    "${auto_env[@]}" "${loop[@]}" >"$OUT/seq-b.log" 2>&1
    seq_wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.2f", e - s}')
    b1=$(busy)
    start=$(date +%s.%N)
    "${auto_env[@]}" "${loop[@]}" >"$OUT/par-a.log" 2>&1 &
    pa=$!
    "${auto_env[@]}" "${loop[@]}" >"$OUT/par-b.log" 2>&1 &
    pb=$!
    wait "$pa"; ra=$?
    wait "$pb"; rb=$?
    par_wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.2f", e - s}')
    b2=$(busy)
    gpu_s=$(cat "$OUT"/par-*.log | awk '/^bursts/ {g += $6} END {printf "%.2f", g}')
    held=$(awk -v a="$b1" -v b="$b2" 'BEGIN {printf "%.2f", b - a}')
    held_seq=$(awk -v a="$b0" -v b="$b1" 'BEGIN {printf "%.2f", b - a}')
    speedup=$(awk -v s="$seq_wall" -v p="$par_wall" 'BEGIN {printf "%.2f", s / p}')
    echo "INFO compute auto: one after the other ${seq_wall} s (interlock held ${held_seq} s); together ${par_wall} s (interlock held ${held} s of ${par_wall} s wall, bursts' GPU time ${gpu_s} s)"
    if [ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] && awk -v x="$speedup" 'BEGIN {exit !(x >= 1.3)}'; then
        pass "compute auto: two burst loops together finish ${speedup}x faster than one after the other (target >= 1.3), interlock held ${held} of ${par_wall} s"
    else
        fail "compute auto: exits $ra $rb, together ${speedup}x one after the other (target >= 1.3; $OUT/par-*.log)"
    fi
    echo "preload-bench: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
fi

if [ "$WHAT" = two ]; then
    python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1 ||
        { fail "PyTorch with CUDA is not importable"; exit 1; }
    # gpud's reservations against capacity, every 100 ms, while the two run.
    (while :; do python3 "$HERE/gpudstat.py" "$socket" device; sleep 0.1; done) >"$OUT/reserved.log" 2>/dev/null &
    poller=$!
    # Two processes under the interposer, each growing to 80 GiB in tensors of $2 GiB; their
    # exit codes land in rcs, the seconds in took.
    two() {
        local tag=$1 step=$2 start=$SECONDS pids=() who p
        for who in a b; do
            env LD_PRELOAD="$LIB" GPUD_SOCKET="$socket" GPUD_VRAM=1GiB GPUD_POLICY=grow \
                GPUD_GROW_TIMEOUT=300s PRELOAD_CHECK_HOLD_MS=5000 \
                python3 "$HERE/preload_torch.py" grow 80 "$step" >"$OUT/two-$tag-$who.log" 2>&1 &
            pids+=($!)
        done
        rcs=()
        for p in "${pids[@]}"; do
            wait "$p"
            rcs+=($?)
        done
        took=$((SECONDS - start))
    }
    # 80 GiB at once each (weights loaded in one piece): the second waits in gpud's queue for
    # the first to finish; both must finish.
    two whole 80
    if [ "${rcs[0]}" -eq 0 ] && [ "${rcs[1]}" -eq 0 ]; then
        pass "two processes each taking 80 GiB from 1 GiB leases both finished in ${took} s (exits ${rcs[*]})"
    else
        fail "two processes each taking 80 GiB: exits ${rcs[*]} (10: out of memory; $OUT/two-whole-*.log)"
    fi
    # 80 GiB in 4 GiB steps each: near the card's capacity both hold memory and both wait to
    # grow into the other's, a real deadlock; gpud's rule fails the younger grow (the program
    # sees out-of-memory) and the other finishes. Nothing may hang.
    two steps 4
    sorted=$(printf '%s\n' "${rcs[@]}" | sort -n | tr '\n' ' ')
    if [ "$sorted" = "0 0 " ] || [ "$sorted" = "0 10 " ]; then
        pass "two processes growing to 80 GiB in 4 GiB steps ended in ${took} s (exits ${rcs[*]}; 10: the younger grow failed as deadlocked)"
    else
        fail "two processes growing to 80 GiB in 4 GiB steps: exits ${rcs[*]} ($OUT/two-steps-*.log)"
    fi
    grep -h "out of memory" "$OUT"/two-steps-*.log | sed 's/^/INFO /'
    kill "$poller" 2>/dev/null
    over=$(awk '$1 > $2 {n++} END {print n + 0}' "$OUT/reserved.log")
    peak=$(awk 'BEGIN {m = 0} $1 > m {m = $1; c = $2} END {printf "%.1f of %.1f GiB", m / 2^30, c / 2^30}' "$OUT/reserved.log")
    if [ "$over" -eq 0 ]; then
        pass "gpud never reserved more than capacity (peak $peak, $(wc -l <"$OUT/reserved.log") samples)"
    else
        fail "gpud reserved more than capacity in $over samples ($OUT/reserved.log)"
    fi
    # Without gpud: both at once, no interposer; one of them is expected to run out of memory.
    pids=()
    for who in a b; do
        PRELOAD_CHECK_HOLD_MS=5000 python3 "$HERE/preload_torch.py" grow 80 4 \
            >"$OUT/two-plain-$who.log" 2>&1 &
        pids+=($!)
    done
    rcs=()
    for p in "${pids[@]}"; do
        wait "$p"
        rcs+=($?)
    done
    echo "INFO without the interposer the same two exit ${rcs[*]} (10: out of memory)"
    echo "preload-two: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
fi

stubs=""
for d in /usr/local/cuda/lib64/stubs /usr/local/cuda/targets/x86_64-linux/lib/stubs; do
    [ -d "$d" ] && stubs="-L$d" && break
done
if ! nvcc -O2 -arch=sm_90 -o "$work/preload_check" "$HERE/preload_check.cu" $stubs -lcuda \
    >"$OUT/nvcc.log" 2>&1; then
    fail "nvcc preload_check.cu (see $OUT/nvcc.log)"
    exit 1
fi

# under POLICY NAME CMD...: CMD with the interposer and a 20 GiB lease, output in $OUT/NAME.log,
# held allocations kept 3 s; sets $rc and $lease (what gpud reserved for it while it held).
under() {
    local policy=$1 name=$2
    shift 2
    local log=$OUT/$name.log
    env LD_PRELOAD="$LIB" GPUD_SOCKET="$socket" GPUD_VRAM=${LEASE_GIB}GiB GPUD_POLICY="$policy" \
        GPUD_GROW_TIMEOUT=60s PRELOAD_CHECK_HOLD_MS=3000 "$@" >"$log" 2>&1 &
    local pid=$!
    lease=0
    for _ in $(seq 600); do
        if grep -q '^held' "$log"; then
            lease=$(python3 "$HERE/gpudstat.py" "$socket" "$pid")
            break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    wait "$pid"
    rc=$?
}

# check_path NAME CMD...: 30 GiB fails under fail, succeeds under grow with the lease grown.
check_path() {
    local name=$1
    shift
    under fail "$name-fail" "$@"
    if [ "$rc" -eq 10 ]; then
        pass "$name: ${ALLOC_GIB} GiB with a ${LEASE_GIB} GiB lease fails under fail (out of memory)"
    else
        fail "$name: under fail expected out of memory (exit 10), got exit $rc ($OUT/$name-fail.log)"
    fi
    under grow "$name-grow" "$@"
    if [ "$rc" -eq 0 ] && [ "$lease" -ge $((ALLOC_GIB * GIB)) ]; then
        pass "$name: ${ALLOC_GIB} GiB succeeds under grow, lease grown to $(awk -v b="$lease" 'BEGIN { printf "%.2f", b / 2^30 }') GiB"
    else
        fail "$name: under grow expected success with a lease >= ${ALLOC_GIB} GiB, got exit $rc, lease $lease ($OUT/$name-grow.log)"
    fi
}

check_path cudaMalloc "$work/preload_check" malloc $ALLOC_GIB
check_path cudaMallocAsync "$work/preload_check" async $ALLOC_GIB
check_path vmm "$work/preload_check" vmm $ALLOC_GIB

if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    under grow torch-info python3 "$HERE/preload_torch.py" info
    total=$(awk '/^meminfo/ {print $3; exit}' "$OUT/torch-info.log")
    if [ "$rc" -eq 0 ] && [ "${total:-0}" -eq $((LEASE_GIB * GIB)) ]; then
        pass "torch.cuda.mem_get_info() total = the ${LEASE_GIB} GiB lease ($(awk '/^meminfo/ {print $2; exit}' "$OUT/torch-info.log") free)"
    else
        fail "torch.cuda.mem_get_info() total ${total:-none}, expected $((LEASE_GIB * GIB)) ($OUT/torch-info.log)"
    fi
    check_path torch python3 "$HERE/preload_torch.py" alloc $ALLOC_GIB
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    check_path torch-expandable python3 "$HERE/preload_torch.py" alloc $ALLOC_GIB
    unset PYTORCH_CUDA_ALLOC_CONF
else
    fail "PyTorch with CUDA is not importable: the PyTorch checks did not run"
fi

# Latency of cudaMalloc/cudaFree of 1 MiB within the lease, median of 2000 rounds, three runs
# each way, alternating.
for i in 1 2 3; do
    "$work/preload_check" bench 2000 1048576 >"$OUT/bench-plain-$i.log" 2>&1
    env LD_PRELOAD="$LIB" GPUD_SOCKET="$socket" GPUD_VRAM=${LEASE_GIB}GiB \
        "$work/preload_check" bench 2000 1048576 >"$OUT/bench-preload-$i.log" 2>&1
done
python3 - "$OUT" <<'PY'
import re, statistics, sys, pathlib
out = pathlib.Path(sys.argv[1])
def runs(kind):
    vals = []
    for f in sorted(out.glob(f"bench-{kind}-*.log")):
        m = re.search(r"malloc_us=([\d.]+) free_us=([\d.]+)", f.read_text())
        if m:
            vals.append((float(m.group(1)), float(m.group(2))))
    return vals
plain, pre = runs("plain"), runs("preload")
bad = False
if len(plain) < 3 or len(pre) < 3:
    print("FAIL latency: a benchmark run failed (see bench-*.log)")
    sys.exit(1)
for i, what in enumerate(["cudaMalloc", "cudaFree"]):
    a = statistics.median(v[i] for v in plain)
    b = statistics.median(v[i] for v in pre)
    verdict = "PASS" if b - a <= 2.0 else "FAIL"
    bad |= verdict == "FAIL"
    print(f"{verdict} latency {what} 1 MiB: {a:.2f} us plain, {b:.2f} us under the interposer, "
          f"ratio {b / a:.3f}, overhead {b - a:+.2f} us (target <= 2 us); "
          f"runs plain {[v[i] for v in plain]} preload {[v[i] for v in pre]}")
sys.exit(1 if bad else 0)
PY
[ $? -eq 0 ] && passed=$((passed + 1)) || failed=$((failed + 1))

echo "preload: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
