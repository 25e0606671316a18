#!/bin/bash
# The index engines side by side (issue 14): for each pairing this build can make (point
# index x range index), a fresh dmkv-memnode over tcp and one dmkv-gateway creating the
# pool with --point-index/--range-index, then in one run:
#   - the load of N keys (default 1M: PREFIXES prefixes "pNNNN:" of N / PREFIXES keys,
#     16-byte keys, 32-byte values, dmkv-bench-load 4 x 64 pipelined): keys/s, and round
#     trips, verbs and bytes per insert, splits and merges counted;
#   - pool bytes per key after the load (live blocks and structures; taken from the node);
#   - one client, no pipeline, OPS commands each, counted from INFO dmkv: GET of present
#     keys, SET of new keys, SET of present keys, DEL of present keys, and one SCAN page
#     (SCAN cursor MATCH pNNNN:* COUNT 100);
#   - prefix SCAN: dmkv-bench-scan enumerates SAMPLES random prefixes (time per prefix).
# The papers' numbers are printed beside ours. Rates depend on the machine; round trips,
# verbs and bytes do not. PAIRINGS="race:chime race:rolex sephash:rolex" adds the ROLEX
# pairings (--range-index rolex, 2026-12-01): not by default, as the "pNNNN:" keys share
# their 8-byte image N / PREFIXES at a time, ROLEX's worst case (every lock walks the run;
# bench/README.md measures its own case with `dmkv-bench-load ... hex`).
# Usage: bench/engines.sh [BUILD_DIR] [N] [PREFIXES]
# Environment: OPS (2000), SAMPLES (100), MEMNODE_PORT (17040), DMKV_PORT (16420).
set -euo pipefail
BUILD=${1:-build}
N=${2:-1000000}
PREFIXES=${3:-1000}
PER_PREFIX=$((N / PREFIXES))
OPS=${OPS:-2000}
SAMPLES=${SAMPLES:-100}
MEMNODE_PORT=${MEMNODE_PORT:-17040}
DMKV_PORT=${DMKV_PORT:-16420}
PAIRINGS=${PAIRINGS:-"race:chime sephash:chime"}
. "$(dirname "$0")/lib.sh"

for t in bench/dmkv-bench-load bench/dmkv-bench-scan memnode/dmkv-memnode gateway/dmkv-gateway; do
    [ -x "$BUILD/$t" ] || { echo "missing $BUILD/$t (build first)" >&2; exit 1; }
done
[ "$PER_PREFIX" -ge 1 ] && [ "$PREFIXES" -le 10000 ] ||
    { echo "PREFIXES must be 1..10000 and at most N" >&2; exit 2; }

key() { printf 'p%04d:%010d' $(($1 / PER_PREFIX)) $(($1 % PER_PREFIX)); }
# counters CLASS -> "rtts verbs bytes" per op of CLASS since the last CONFIG RESETSTAT
counters() {
    local info
    info=$(redis-cli -p "$DMKV_PORT" INFO dmkv)
    printf '%s %s %s\n' "$(echo "$info" | field "$1_rtts_per_op")" \
        "$(echo "$info" | field "$1_verbs_per_op")" "$(echo "$info" | field "$1_bytes_per_op")"
}
# run_ops CLASS: the commands on stdin, one at a time from one client, then CLASS's counters
run_ops() {
    redis-cli -p "$DMKV_PORT" CONFIG RESETSTAT >/dev/null
    redis-cli -p "$DMKV_PORT" >/dev/null
    counters "$1"
}

declare -A R
for pair in $PAIRINGS; do
    point=${pair%%:*} range=${pair##*:}
    "$BUILD/memnode/dmkv-memnode" --port "$MEMNODE_PORT" --size 4g 2>>"$TMP/memnode-$point.log" &
    mpid=$!
    pids+=($mpid)
    sleep 0.3
    "$BUILD/gateway/dmkv-gateway" --port "$DMKV_PORT" --memnode "tcp://127.0.0.1:$MEMNODE_PORT" \
        --point-index "$point" --range-index "$range" 2>"$TMP/gateway-$point.log" &
    gpid=$!
    pids+=($gpid)
    wait_port "$DMKV_PORT"

    redis-cli -p "$DMKV_PORT" CONFIG RESETSTAT >/dev/null
    out=$("$BUILD/bench/dmkv-bench-load" "$DMKV_PORT" "$N" 4 64 "$PER_PREFIX")
    R[$pair,load]=$(echo "$out" | awk '{print $6}')
    info=$(redis-cli -p "$DMKV_PORT" INFO)
    R[$pair,ins]=$(counters set)
    R[$pair,splits]="race $(echo "$info" | field race_splits) sephash $(echo "$info" | field sephash_splits)/$(echo "$info" | field sephash_merges) chime $(echo "$info" | field chime_leaf_splits)"
    sleep 0.5 # the cron flushes the live-byte counts
    info=$(redis-cli -p "$DMKV_PORT" INFO memory)
    n=$(redis-cli -p "$DMKV_PORT" DBSIZE)
    [ "$n" = "$N" ] || { echo "$pair: DBSIZE $n after loading $N keys" >&2; exit 1; }
    R[$pair,live]=$(awk -v b="$(echo "$info" | field pool_live_bytes)" -v n="$N" 'BEGIN{printf "%.1f", b / n}')
    R[$pair,taken]=$(awk -v b="$(echo "$info" | field pool_taken_bytes)" -v n="$N" 'BEGIN{printf "%.1f", b / n}')

    step=$((N / OPS > 0 ? N / OPS : 1))
    R[$pair,get]=$(for i in $(seq 0 $((OPS - 1))); do echo "GET $(key $((i * step % N)))"; done | run_ops get)
    R[$pair,setnew]=$(for i in $(seq 0 $((OPS - 1))); do echo "SET new:$i v$i"; done | run_ops set)
    R[$pair,setupd]=$(for i in $(seq 0 $((OPS - 1))); do echo "SET $(key $((i * step % N))) w$i"; done | run_ops set)
    R[$pair,del]=$(for i in $(seq 0 $((OPS - 1))); do echo "DEL new:$i"; done | run_ops del)
    R[$pair,scan]=$(for i in $(seq 0 $((OPS / 10))); do printf 'SCAN 0 MATCH p%04d:* COUNT 100\n' $((i * 7919 % PREFIXES)); done | run_ops scan)
    s=$("$BUILD/bench/dmkv-bench-scan" "$DMKV_PORT" "$PREFIXES" "$PER_PREFIX" "$SAMPLES" 100 120 7) ||
        { echo "$pair: wrong prefix enumeration: $s" >&2; exit 1; }
    R[$pair,prefix]=$(echo "$s" | tr ' ' '\n' | awk -F= '$1 == "complete_ms" { print $2 }')

    kill "$gpid" "$mpid"
    wait "$gpid" "$mpid" 2>/dev/null || true
done

col() { echo "$1" | awk -v i="$2" '{print $i}'; }
printf '\n%s keys (%s prefixes), 16 B keys, 32 B values, one memory node over tcp, one gateway worker; %s\n' \
    "$N" "$PREFIXES" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf '%-34s' "" && for p in $PAIRINGS; do printf ' %18s' "$p"; done && printf '  %s\n' "papers"
row() { # LABEL KEY FIELD PAPER
    printf '%-34s' "$1"
    for p in $PAIRINGS; do printf ' %18s' "$(col "${R[$p,$2]}" "$3")"; done
    printf '  %s\n' "$4"
}
row "load: keys/s" load 1 ""
row "load: round trips per insert" ins 1 "RACE 3, SepHash 2 (index alone)"
row "load: verbs per insert" ins 2 ""
row "load: bytes per insert" ins 3 ""
row "GET: round trips" get 1 "RACE 2, SepHash ~2 index + 1 block"
row "GET: bytes" get 3 ""
row "SET new key: round trips" setnew 1 "RACE 3, SepHash 2"
row "SET new key: verbs" setnew 2 ""
row "SET update: round trips" setupd 1 "RACE 3, SepHash 2"
row "DEL: round trips" del 1 "RACE 3, SepHash 2"
row "SCAN page (COUNT 100): round trips" scan 1 "CHIME 1 (+h uncached); ROLEX N/delta leaves, 1 batch"
row "SCAN page: bytes" scan 3 ""
row "pool bytes per key (live)" live 1 "per 100M keys: RACE 1.66 GB, SepHash 0.85 GB (index)"
row "pool bytes per key (taken)" taken 1 ""
row "prefix to cursor 0, mean (ms)" prefix 1 ""
for p in $PAIRINGS; do printf '%s splits after the load: %s\n' "$p" "${R[$p,splits]}"; done
printf '\nCounters are per command from INFO dmkv (set_*, get_*, del_*, scan_*), splits and\n'
printf 'merges apart (split_*). SepHash x/y: segment splits / CurSegment merges. The papers\n'
printf 'count their index alone; dmkv adds the range index (CHIME leaf lock and entry).\n'
