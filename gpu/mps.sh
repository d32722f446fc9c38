#!/usr/bin/env bash
# MPS enforcement on a real GPU (run by gpu/run-suite.sh as section mps-enforce; needs root,
# python3 with PyTorch, and the driver's nvidia-cuda-mps-control in PATH):
#   bash gpu/mps.sh [BINARIES_DIR]    (default .gpu: gpud and gpudctl in its bin/)
# gpud runs on NVML with [enforce] mps = true, so it starts and supervises an MPS control
# daemon; `gpudctl run --enforce mps --vram 20GiB` must make a PyTorch allocation of 30 GiB fail
# with OutOfMemoryError and one of 15 GiB succeed. Prints PASS/FAIL lines; exits 1 on a FAIL.
set -uo pipefail
G=${1:-.gpu}
work=$(mktemp -d /tmp/gpud-mps.XXXXXX)
sock=$work/gpud.sock
failed=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failed=1; }

if pgrep -x nvidia-cuda-mps-control >/dev/null; then
    echo "note: another MPS control daemon runs on this host (pgrep): $(pgrep -a -x nvidia-cuda-mps-control)"
fi
cat >"$work/gpud.toml" <<EOF
[devices]
headroom = "1GiB"
[enforce]
mps = true
mps_directory = "$work/mps"
EOF
"$G/bin/gpud" --config "$work/gpud.toml" --socket "$sock" --state-dir "$work/state" \
    --dbus none --log info 2>"$work/gpud.log" &
gpud_pid=$!
cleanup() {
    kill "$gpud_pid" 2>/dev/null
    wait "$gpud_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
ctl() { "$G/bin/gpudctl" --socket "$sock" "$@"; }

# The MPS status as one JSON object, or nothing while gpud is not answering.
mps_status() {
    ctl status --json 2>/dev/null | python3 -c \
        'import json,sys; print(json.dumps(json.load(sys.stdin).get("enforcement",{}).get("mps",{})))' 2>/dev/null
}
up=0
for _ in $(seq 1 60); do
    if mps_status | grep -q '"available": true'; then up=1; break; fi
    sleep 0.5
done
echo "enforcement.mps: $(mps_status)"
if [ "$up" = 1 ]; then
    pass "gpud started the MPS control daemon"
else
    fail "MPS did not come up within 30 s; gpud's log:"
    tail -n 30 "$work/gpud.log"
    exit 1
fi
mps_pid=$(mps_status | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')

cat >"$work/alloc.py" <<'EOF'
import os, sys
import torch
gib = float(sys.argv[1])
free, total = torch.cuda.mem_get_info()
print(f"  mem_get_info: free {free / 2**30:.2f} GiB, total {total / 2**30:.2f} GiB;"
      f" CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={os.environ.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT')}"
      f" CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")
print(f"  free_bytes={free}")
try:
    x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    print(f"  allocated {gib} GiB")
    sys.exit(0)
except torch.cuda.OutOfMemoryError as e:
    print(f"  OutOfMemoryError for {gib} GiB: {str(e).splitlines()[0][:160]}")
    sys.exit(3)
EOF

# run LEASE GIB ENFORCE: the probe under `gpudctl run`; sets $rc and $free (bytes).
run() {
    local lease=$1 gib=$2 enforce=$3
    echo "-- gpudctl run --enforce $enforce --vram $lease: allocate $gib GiB"
    out=$(ctl run --enforce "$enforce" --vram "$lease" -- python3 "$work/alloc.py" "$gib" 2>&1)
    rc=$?
    echo "$out" | grep -v '^  free_bytes='
    free=$(echo "$out" | sed -n 's/^  free_bytes=//p')
}

run 20GiB 30 mps
[ "$rc" = 3 ] && pass "20 GiB lease under MPS: a 30 GiB allocation raised OutOfMemoryError" ||
    fail "20 GiB lease under MPS: a 30 GiB allocation gave rc=$rc (3 = OutOfMemoryError)"
if [ -n "$free" ] && [ "$free" -le $((20 << 30)) ] && [ "$free" -ge $((18 << 30)) ]; then
    pass "mem_get_info inside the program: free $free bytes, within 2 GiB below the 20 GiB lease"
else
    fail "mem_get_info inside the program: free '${free}' bytes, not within 2 GiB below the 20 GiB lease"
fi
run 20GiB 15 mps
[ "$rc" = 0 ] && pass "20 GiB lease under MPS: a 15 GiB allocation succeeded" ||
    fail "20 GiB lease under MPS: a 15 GiB allocation gave rc=$rc"
# A lease that is not whole GiB goes to MPS in MiB (9728M).
run 9728MiB 10 mps
[ "$rc" = 3 ] && pass "9.5 GiB lease (limit in MiB) under MPS: 10 GiB raised OutOfMemoryError" ||
    fail "9.5 GiB lease (limit in MiB) under MPS: 10 GiB gave rc=$rc (3 = OutOfMemoryError)"
run 9728MiB 8 mps
[ "$rc" = 0 ] && pass "9.5 GiB lease (limit in MiB) under MPS: 8 GiB succeeded" ||
    fail "9.5 GiB lease (limit in MiB) under MPS: 8 GiB gave rc=$rc"
# The control: the same lease without MPS enforces nothing.
run 20GiB 30 none
[ "$rc" = 0 ] && pass "without --enforce mps the 30 GiB allocation succeeds (the limit above was MPS's)" ||
    fail "without --enforce mps the 30 GiB allocation gave rc=$rc"

# Stop: gpud quits the MPS daemon.
kill -TERM "$gpud_pid"
for _ in $(seq 1 40); do kill -0 "$gpud_pid" 2>/dev/null || break; sleep 0.25; done
if kill -0 "$gpud_pid" 2>/dev/null; then
    fail "gpud did not stop within 10 s of SIGTERM"
elif kill -0 "$mps_pid" 2>/dev/null; then
    fail "the MPS control daemon (pid $mps_pid) still runs after gpud stopped"
else
    pass "gpud stopped and the MPS control daemon (pid $mps_pid) is gone"
fi
echo "-- gpud's MPS log lines:"
grep -i "mps" "$work/gpud.log" | tail -n 20
echo "-- MPS control log:"
tail -n 10 "$work/mps/log/control.log" 2>/dev/null
[ "$failed" = 0 ] && echo "mps-enforce: all PASS" || echo "mps-enforce: some FAIL"
exit "$failed"
