#!/bin/bash
# The index engines side by side (issue 14): for each pairing (point index x range index),
# a fresh dmkv-memnode over tcp and one dmkv-gateway creating the pool with
# --point-index/--range-index, then, at each size of the load in turn (default 1M then
# 10M keys, the load continued from one size to the next on the same pool):
#   - the load (16-byte keys, 32-byte values, dmkv-bench-load 4 x 64 pipelined): keys/s of
#     this step, and round trips, verbs and bytes per insert; splits, merges, ROLEX leaves
#     taken and retrains (model version) counted;
#   - pool bytes per key after the load (live blocks and structures; taken from the node);
#   - one client, no pipeline, OPS commands each, counted from INFO dmkv: GET of present
#     keys, SET of new keys, SET of present keys, DEL of present keys, and one SCAN page
#     (SCAN cursor MATCH <prefix>* COUNT 100);
#   - prefix SCAN: dmkv-bench-scan enumerates SAMPLES random loaded prefixes.
# Keys: PREFIXES prefixes of LAST / PREFIXES keys (LAST: the last size). KEYS=hex
# (default): "%04x%04x%08x" (prefix, a 16-bit spread of the number, the number): keys of a
# prefix differ in their first 8 bytes, numeric-like keys, ROLEX's case (its 8-byte
# images) and no harder for the others. KEYS=prefix: "pNNNN:%010d", which share their
# 8-byte image LAST / PREFIXES at a time: ROLEX's worst case (every lock walks the run).
# The papers' numbers are printed beside ours. Rates depend on the machine; round trips,
# verbs and bytes do not.
# Usage: bench/engines.sh [BUILD_DIR] [SIZES="1000000 10000000"] [PREFIXES=1000]
# Environment: PAIRINGS (all four), KEYS (hex), OPS (2000), SAMPLES (100), OUT (a file that
# holds the tables of the pairings done so far, rewritten after each), MEMNODE_SIZE
# (about 1.2 KB a key of the last size, at least 4g), MEMNODE_PORT (17040),
# DMKV_PORT (16420).
set -euo pipefail
BUILD=${1:-build}
SIZES=${2:-"1000000 10000000"}
PREFIXES=${3:-1000}
LAST=${SIZES##* }
PER_PREFIX=$((LAST / PREFIXES))
OPS=${OPS:-2000}
SAMPLES=${SAMPLES:-100}
KEYS=${KEYS:-hex}
MEMNODE_PORT=${MEMNODE_PORT:-17040}
DMKV_PORT=${DMKV_PORT:-16420}
PAIRINGS=${PAIRINGS:-"race:chime sephash:chime race:rolex sephash:rolex"}
gib=$(((LAST * 1200 + (1 << 30) - 1) >> 30))
MEMNODE_SIZE=${MEMNODE_SIZE:-$((gib > 4 ? gib : 4))g}
. "$(dirname "$0")/lib.sh"

for t in bench/dmkv-bench-load bench/dmkv-bench-scan memnode/dmkv-memnode gateway/dmkv-gateway; do
    [ -x "$BUILD/$t" ] || { echo "missing $BUILD/$t (build first)" >&2; exit 1; }
done
[ "$PER_PREFIX" -ge 1 ] && [ "$PREFIXES" -le 10000 ] ||
    { echo "PREFIXES must be 1..10000 and at most the last size" >&2; exit 2; }
case $KEYS in
hex)
    [ "$PER_PREFIX" -le 65536 ] || { echo "KEYS=hex takes at most 65536 keys a prefix" >&2; exit 2; }
    FORMAT=hex:$PER_PREFIX
    key() { local n=$(($1 % PER_PREFIX)); printf '%04x%04x%08x' $(($1 / PER_PREFIX)) $((n * 40503 & 0xffff)) "$n"; }
    pattern() { printf '%04x*' "$1"; } ;;
prefix)
    FORMAT=$PER_PREFIX
    key() { printf 'p%04d:%010d' $(($1 / PER_PREFIX)) $(($1 % PER_PREFIX)); }
    pattern() { printf 'p%04d:*' "$1"; } ;;
*) echo "KEYS must be hex or prefix" >&2; exit 2 ;;
esac

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
# measure PAIR N: the rows after the pool holds keys 0..N-1 (prefixes 0..N/PER_PREFIX-1)
measure() {
    local pair=$1 n=$2 info got step i loaded=$(($2 / PER_PREFIX))
    sleep 0.5 # the cron flushes the live-byte counts
    info=$(redis-cli -p "$DMKV_PORT" INFO memory)
    got=$(redis-cli -p "$DMKV_PORT" DBSIZE)
    [ "$got" = "$n" ] || { echo "$pair: DBSIZE $got after loading $n keys" >&2; exit 1; }
    R[$pair,$n,live]=$(awk -v b="$(echo "$info" | field pool_live_bytes)" -v n="$n" 'BEGIN{printf "%.1f", b / n}')
    R[$pair,$n,taken]=$(awk -v b="$(echo "$info" | field pool_taken_bytes)" -v n="$n" 'BEGIN{printf "%.1f", b / n}')
    step=$((n / OPS > 0 ? n / OPS : 1))
    R[$pair,$n,get]=$(for i in $(seq 0 $((OPS - 1))); do echo "GET $(key $((i * step % n)))"; done | run_ops get)
    R[$pair,$n,setnew]=$(for i in $(seq 0 $((OPS - 1))); do echo "SET new:$i v$i"; done | run_ops set)
    R[$pair,$n,setupd]=$(for i in $(seq 0 $((OPS - 1))); do echo "SET $(key $((i * step % n))) w$i"; done | run_ops set)
    R[$pair,$n,del]=$(for i in $(seq 0 $((OPS - 1))); do echo "DEL new:$i"; done | run_ops del)
    R[$pair,$n,scan]=$(for i in $(seq 0 $((OPS / 10))); do echo "SCAN 0 MATCH $(pattern $((i * 7919 % loaded))) COUNT 100"; done | run_ops scan)
    s=$("$BUILD/bench/dmkv-bench-scan" "$DMKV_PORT" "$loaded" "$FORMAT" "$SAMPLES" 100 120 7) ||
        { echo "$pair: wrong prefix enumeration: $s" >&2; exit 1; }
    R[$pair,$n,prefix]=$(echo "$s" | tr ' ' '\n' | awk -F= '$1 == "complete_ms" { print $2 }')
    info=$(redis-cli -p "$DMKV_PORT" INFO dmkv)
    R[$pair,$n,waits]="lease waits $(echo "$info" | field rolex_lock_waits)$(echo "$info" | field chime_lock_waits) takeovers $(echo "$info" | field rolex_lease_takeovers)$(echo "$info" | field chime_lease_takeovers)"
}

col() { echo "$1" | awk -v i="$2" '{print $i}'; }
# print_tables PAIRS...: one table per size, the columns of PAIRS (the pairings measured)
print_tables() {
    local pairs="$*" n p
    for n in $SIZES; do
        printf '\n%s keys (%s keys a prefix, KEYS=%s), 16 B keys, 32 B values, one memory node over tcp, one gateway (%s workers); %s\n' \
            "$n" "$PER_PREFIX" "$KEYS" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)"
        printf '%-34s' "" && for p in $pairs; do printf ' %14s' "$p"; done && printf '  %s\n' "papers"
        row() { # LABEL KEY FIELD PAPER
            printf '%-34s' "$1"
            for p in $pairs; do printf ' %14s' "$(col "${R[$p,$n,$2]}" "$3")"; done
            printf '  %s\n' "$4"
        }
        row "load: keys/s (this step)" load 1 ""
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
        for p in $pairs; do printf '%s after the load: %s; after the commands: %s\n' "$p" "${R[$p,$n,splits]}" "${R[$p,$n,waits]}"; done
    done
    printf '\nCounters are per command from INFO dmkv (set_*, get_*, del_*, scan_*), splits and\n'
    printf 'merges apart (split_*). SepHash x/y: segment splits / CurSegment merges. The papers\n'
    printf 'count their index alone; dmkv adds the range index (CHIME leaf lock and entry).\n'
}

declare -A R
done_pairs=()
for pair in $PAIRINGS; do
    point=${pair%%:*} range=${pair##*:}
    "$BUILD/memnode/dmkv-memnode" --port "$MEMNODE_PORT" --size "$MEMNODE_SIZE" 2>>"$TMP/memnode-$point.log" &
    mpid=$!
    pids+=($mpid)
    sleep 0.3
    "$BUILD/gateway/dmkv-gateway" --port "$DMKV_PORT" --memnode "tcp://127.0.0.1:$MEMNODE_PORT" \
        --point-index "$point" --range-index "$range" 2>"$TMP/gateway-$point.log" &
    gpid=$!
    pids+=($gpid)
    wait_port "$DMKV_PORT"

    from=0
    for n in $SIZES; do
        redis-cli -p "$DMKV_PORT" CONFIG RESETSTAT >/dev/null
        out=$("$BUILD/bench/dmkv-bench-load" "$DMKV_PORT" "$n" 4 64 "$FORMAT" "$from")
        R[$pair,$n,load]=$(echo "$out" | awk '{print $6}')
        R[$pair,$n,ins]=$(counters set)
        info=$(redis-cli -p "$DMKV_PORT" INFO)
        R[$pair,$n,splits]="race $(echo "$info" | field race_splits), sephash $(echo "$info" | field sephash_splits)/$(echo "$info" | field sephash_merges), chime $(echo "$info" | field chime_leaf_splits), rolex leaves $(echo "$info" | field rolex_leaves_taken) retrains $(echo "$info" | field rolex_model_version) LT $(echo "$info" | field rolex_lt_entries) cuts $(echo "$info" | field rolex_domain_cuts)"
        measure "$pair" "$n"
        from=$n
    done

    kill "$gpid" "$mpid"
    wait "$gpid" "$mpid" 2>/dev/null || true
    done_pairs+=("$pair")
    [ -z "${OUT:-}" ] || print_tables "${done_pairs[@]}" >"$OUT" # kept should a later one fail
done
print_tables $PAIRINGS

