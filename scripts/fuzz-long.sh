#!/usr/bin/env bash
# The long fuzz run: every fuzz target of the daemon (the frame decoder, the payload parser,
# requests through the hub core, the journal's replay) to CASES cases each, in parallel
# chunks of independent random seeds, one chunk per core at a time.
#
#   scripts/fuzz-long.sh [CASES] [TEST-BINARY] [OUT-DIR]
#
# CASES defaults to 10,000,000. Without TEST-BINARY, gpud's unit-test binary is built here in
# release; a binary built elsewhere (`cargo test --release -p gpud --lib --no-run`) can be
# copied to a machine with more cores and run there with this script alone. Each chunk's
# output goes to OUT-DIR (default: a temporary directory); a failing chunk's output holds
# proptest's minimal failing input. Prints one line per target and exits non-zero if any
# chunk failed.
set -euo pipefail
cases=${1:-10000000}
bin=${2:-}
out=${3:-$(mktemp -d -t gpud-fuzz-XXXXXX)}
jobs=${JOBS:-$(nproc)}
mkdir -p "$out"

if [ -z "$bin" ]; then
    cd "$(dirname "$0")/.."
    echo "building gpud's unit tests (release)..." >&2
    bin=$(cargo test --release -p gpud --lib --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])')
fi
[ -x "$bin" ] || { echo "no test binary at '$bin'" >&2; exit 2; }

targets=$("$bin" --list 2>/dev/null | sed -n 's/: test$//p' | grep '::fuzz_' || true)
[ -n "$targets" ] || { echo "$bin lists no fuzz targets" >&2; exit 2; }

# Every target in `jobs` chunks: the light targets finish early and the heavy one keeps every
# core busy to the end.
per_chunk=$(( (cases + jobs - 1) / jobs ))
chunks=()
for t in $targets; do
    for i in $(seq 1 "$jobs"); do
        chunks+=("$t $i")
    done
done
echo "fuzz: $(echo "$targets" | wc -l) targets x $jobs chunks of $per_chunk cases, $jobs at a time, output in $out" >&2
start=$(date +%s)
printf '%s\n' "${chunks[@]}" |
    xargs -P "$jobs" -L 1 sh -c '
        name=$(echo "$1" | tr ":" "_")
        if GPUD_FUZZ_CASES='"$per_chunk"' "'"$bin"'" --exact "$1" > "'"$out"'/$name.$2.log" 2>&1; then
            echo ok > "'"$out"'/$name.$2.status"
        else
            echo failed > "'"$out"'/$name.$2.status"
        fi
        echo "fuzz: $1 chunk $2 done" >&2
    ' sh
seconds=$(( $(date +%s) - start ))

status=0
for t in $targets; do
    name=$(echo "$t" | tr ":" "_")
    ok=$(cat "$out/$name".*.status 2>/dev/null | grep -c "^ok$" || true)
    failed=$(cat "$out/$name".*.status 2>/dev/null | grep -c "^failed$" || true)
    echo "$t: $(( ok * per_chunk )) cases passed in $ok chunks, $failed chunks failed"
    if [ "$failed" -gt 0 ]; then
        status=1
        grep -l '^failed$' "$out/$name".*.status | sed 's/status$/log/' | sed 's/^/  see /'
    fi
done
echo "fuzz: $seconds s on $jobs cores ($(uname -m), $(nproc) CPUs)"
exit $status
