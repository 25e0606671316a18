#!/bin/sh
# long-run.sh BUILD_DIR [OPS] [RUNS]: the linearizability run at scale (not in make test).
# Runs it_linearizable RUNS times (default 4) with OPS operations each (default 250000,
# so 1e6 in all) and fault rounds in proportion, alternating native masked CAS and the
# CAS fallback (DMKV_NO_MASKED_CAS=1, the rdma path) and the clock shift's sign (seed),
# each run's history checked; prints one summary line per run and the totals. Stops at
# the first failing run (its history file is named in the output).
set -eu
B=${1:?usage: long-run.sh BUILD_DIR [OPS] [RUNS]}
OPS=${2:-250000}
RUNS=${3:-4}
B=$(cd "$B" && pwd)
export DMKV_MEMNODE="$B/memnode/dmkv-memnode" DMKV_GATEWAY="$B/gateway/dmkv-gateway"
ROUNDS=$((OPS / 20000 < 6 ? 6 : OPS / 20000))
SECS=$((OPS / 200 + 120))
total=0
i=1
while [ "$i" -le "$RUNS" ]; do
    mcas=1
    [ $((i % 2)) -eq 0 ] && mcas=0
    log=$(mktemp /tmp/dmkv-long-run.XXXXXX)
    if [ "$mcas" = 0 ]; then
        DMKV_NO_MASKED_CAS=1 "$B/tests/it_linearizable" --ops "$OPS" --fault-rounds "$ROUNDS" \
            --seconds "$SECS" --seed "$i" >"$log" 2>&1 || { cat "$log"; exit 1; }
    else
        "$B/tests/it_linearizable" --ops "$OPS" --fault-rounds "$ROUNDS" --seconds "$SECS" \
            --seed "$i" >"$log" 2>&1 || { cat "$log"; exit 1; }
    fi
    line=$(grep -E '^[0-9]+ operations in' "$log")
    chk=$(grep -E '^checker:' "$log")
    n=${line%% *}
    total=$((total + n))
    echo "run $i (masked CAS: $mcas): $line | $chk"
    rm -f "$log"
    i=$((i + 1))
done
echo "long-run: $total operations in $RUNS runs, every history linearizable"
