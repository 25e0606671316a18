#!/bin/bash
# Side-by-side: redis-benchmark GET and SET (-c 50, -P 1 and -P 16) against Debian's
# redis-server and against dmkv (one dmkv-memnode over tcp + one dmkv-gateway), in the
# same invocation, plus dmkv's machine-independent counters (round trips, verbs and bytes
# per command) read from INFO. A second table runs hot keys (-r HOT_KEYS, default 1000,
# all present) against redis-server, dmkv, and a second gateway on the same memory node
# with the address cache off (DMKV_ADDR_CACHE=off: the previous design, 2 RTT GETs and
# 3 RTT SETs). Usage: bench/redis-vs-dmkv.sh [BUILD_DIR] [REQUESTS]
set -euo pipefail
BUILD=${1:-build}
N=${2:-100000}
REDIS_PORT=${REDIS_PORT:-16379}
DMKV_PORT=${DMKV_PORT:-16380}
MEMNODE_PORT=${MEMNODE_PORT:-17000}
THREADS=${THREADS:-1}
HOT_KEYS=${HOT_KEYS:-1000}
NOCACHE_PORT=${NOCACHE_PORT:-16381}
. "$(dirname "$0")/lib.sh"

start_servers "$BUILD" "$THREADS" 2g "$MEMNODE_PORT"
DMKV_ADDR_CACHE=off "$BUILD/gateway/dmkv-gateway" --port "$NOCACHE_PORT" --threads "$THREADS" \
    --memnode "tcp://127.0.0.1:$MEMNODE_PORT" 2>"$TMP/gateway-nocache.log" &
pids+=($!)
wait_port "$NOCACHE_PORT"

# rps PORT TEST PIPELINE [KEYSPACE] -> requests per second
rps() {
    redis-benchmark -p "$1" -t "$2" -n "$N" -c 50 -P "$3" -r "${4:-100000}" -d 32 --csv -q \
        2>/dev/null | awk -F'"' 'NR > 1 && $2 != "" { print $4; exit }'
}

printf '\nredis-benchmark -n %s -c 50 -r 100000 -d 32, gateway threads %s, %s\n' \
    "$N" "$THREADS" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf '%-6s %-4s %14s %14s %7s %9s %9s %11s\n' test -P "redis rps" "dmkv rps" ratio \
    "RTT/op" "verbs/op" "bytes/op"
for P in 1 16; do
    for T in set get; do
        redis-cli -p "$DMKV_PORT" CONFIG RESETSTAT >/dev/null 2>&1 || true
        r=$(rps "$REDIS_PORT" "$T" "$P")
        d=$(rps "$DMKV_PORT" "$T" "$P")
        rtt=$(redis-cli -p "$DMKV_PORT" INFO dmkv | field "${T}_rtts_per_op")
        verbs=$(redis-cli -p "$DMKV_PORT" INFO dmkv | field "${T}_verbs_per_op")
        bytes=$(redis-cli -p "$DMKV_PORT" INFO dmkv | field "${T}_bytes_per_op")
        ratio=$(awk -v a="$d" -v b="$r" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
        printf '%-6s %-4s %14s %14s %7s %9s %9s %11s\n' "$T" "$P" "$r" "$d" "$ratio" \
            "${rtt:--}" "${verbs:--}" "${bytes:--}"
    done
done
printf '\nratio = dmkv / redis. RTT, verbs and bytes per op are dmkv counters (INFO dmkv)\n'
printf 'and do not depend on the machine; requests/s do (shared, noisy hosts).\n'

# Hot keys: every key present (loaded first), so GET and SET find them.
for p in "$REDIS_PORT" "$DMKV_PORT"; do
    redis-benchmark -p "$p" -t set -n $((HOT_KEYS * 20)) -c 50 -r "$HOT_KEYS" -d 32 -q \
        >/dev/null 2>&1
done
printf '
hot keys: -r %s (all present), -P 1; dmkv with the address cache and without
' \
    "$HOT_KEYS"
printf '%-6s %14s %14s %14s %9s %9s
' test "redis rps" "dmkv rps" "no-cache rps" "RTT/op" \
    "no-cache"
for T in set get; do
    for p in "$DMKV_PORT" "$NOCACHE_PORT"; do
        redis-cli -p "$p" CONFIG RESETSTAT >/dev/null 2>&1 || true
    done
    r=$(rps "$REDIS_PORT" "$T" 1 "$HOT_KEYS")
    d=$(rps "$DMKV_PORT" "$T" 1 "$HOT_KEYS")
    n=$(rps "$NOCACHE_PORT" "$T" 1 "$HOT_KEYS")
    rtt=$(redis-cli -p "$DMKV_PORT" INFO dmkv | field "${T}_rtts_per_op")
    nrtt=$(redis-cli -p "$NOCACHE_PORT" INFO dmkv | field "${T}_rtts_per_op")
    printf '%-6s %14s %14s %14s %9s %9s
' "$T" "$r" "$d" "$n" "${rtt:--}" "${nrtt:--}"
done

# One connection, one 10,000-command pipeline: time to the first and the last reply.
printf '\none connection, a pipeline of 10000 commands (1000 keys, present)\n'
printf '%-6s %-6s %12s %12s %14s\n' test server "first ms" "last ms" "rps"
for T in set get; do
    for s in redis:"$REDIS_PORT" dmkv:"$DMKV_PORT"; do
        read -r _ f l r < <("$BUILD/bench/dmkv-bench-pipeline" "${s#*:}" 10000 "$T")
        printf '%-6s %-6s %12s %12s %14s\n' "$T" "${s%%:*}" "$f" "$l" "$r"
    done
done
