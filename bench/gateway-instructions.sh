#!/bin/bash
# Instructions the gateway process executes per command, counted by callgrind: a number that
# does not depend on the host's load (rates and CPU times here move by up to 2x between
# runs). One dmkv-memnode over tcp and one dmkv-gateway worker under valgrind; KEYS keys
# are loaded, then counting is switched on for N commands of each workload:
#   get, set   redis-benchmark -t get|set -P 16 -c 50 -r KEYS over the loaded keys
#   set1000    redis-benchmark -t set -P 1000 -c 1 -r KEYS: one connection's deep pipeline
#   insert     dmkv-bench-load of N new keys (4 connections x 64 pipelined)
# Valgrind runs the gateway ~50x slower: commands then outlast the slow log's 10 ms (its
# entries are counted here, not in a real run), and `rep stos`/`rep movs` count one
# instruction per iteration (large memset/memcpy look dearer than they are).
# Usage: bench/gateway-instructions.sh [BUILD_DIR] [N] [KEYS] [WORKLOADS]
# Environment: MEMNODE_PORT (17140), DMKV_PORT (16520); KEEP_CG=PREFIX keeps each
# workload's callgrind file as PREFIX.WORKLOAD. Prints "workload instructions/op".
set -euo pipefail
BUILD=${1:-build}
N=${2:-50000}
KEYS=${3:-20000}
WORKLOADS=${4:-"get set insert"}
MEMNODE_PORT=${MEMNODE_PORT:-17140}
DMKV_PORT=${DMKV_PORT:-16520}
for t in valgrind callgrind_control callgrind_annotate redis-benchmark; do
    command -v "$t" >/dev/null || { echo "$0: $t is needed (Debian: valgrind, redis-tools)" >&2; exit 77; }
done
. "$(dirname "$0")/lib.sh"

count() { # WORKLOAD: instructions per op of one fresh gateway
    local w=$1 out="$TMP/cg.$1"
    "$BUILD/memnode/dmkv-memnode" --port "$MEMNODE_PORT" --size 1g 2>>"$TMP/memnode.log" &
    local mn=$!
    pids+=("$mn")
    valgrind --tool=callgrind --callgrind-out-file="$out" --instr-atstart=no \
        "$BUILD/gateway/dmkv-gateway" --port "$DMKV_PORT" --threads 1 \
        --memnode "tcp://127.0.0.1:$MEMNODE_PORT" 2>>"$TMP/gateway.log" &
    local gw=$!
    pids+=("$gw")
    wait_port "$DMKV_PORT" 1200 # a gateway under valgrind starts in seconds
    "$BUILD/bench/dmkv-bench-load" "$DMKV_PORT" "$KEYS" 4 64 >/dev/null
    callgrind_control -i on "$gw" >/dev/null 2>&1
    case $w in
    get | set) redis-benchmark -p "$DMKV_PORT" -t "$w" -P 16 -c 50 -r "$KEYS" -n "$N" -q >/dev/null ;;
    set1000) redis-benchmark -p "$DMKV_PORT" -t set -P 1000 -c 1 -r "$KEYS" -n "$N" -q >/dev/null ;;
    insert) "$BUILD/bench/dmkv-bench-load" "$DMKV_PORT" "$N" 4 64 100 >/dev/null ;; # "pNNNN:" keys: new
    esac
    callgrind_control -d "$gw" >/dev/null 2>&1
    kill "$gw" "$mn"
    wait "$gw" "$mn" 2>/dev/null || true
    local total
    [ -n "${KEEP_CG:-}" ] && cp "$out.1" "$KEEP_CG.$w"
    total=$(callgrind_annotate "$out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
    printf '%-8s %8d\n' "$w" $((total / N))
}

printf '%-8s %8s\n' workload instr/op
for w in $WORKLOADS; do count "$w"; done
