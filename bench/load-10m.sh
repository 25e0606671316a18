#!/bin/bash
# Load N distinct keys (16-byte keys, 32-byte values; default 10M) into Debian's
# redis-server and into dmkv (two memory nodes over tcp, one gateway) in the same run, and
# print the load rate, memory per key (redis-server's used_memory against the pool's
# allocated bytes), RACE's load factor and global depth, and dmkv's round trips and verbs
# per insert, splits included (INFO dmkv). Usage: bench/load-10m.sh [BUILD_DIR] [N]
set -euo pipefail
BUILD=${1:-build}
N=${2:-10000000}
THREADS=${THREADS:-4}
REDIS_PORT=${REDIS_PORT:-16389}
DMKV_PORT=${DMKV_PORT:-16390}
MN1=${MN1:-17010}
MN2=${MN2:-17011}
. "$(dirname "$0")/lib.sh"

start_servers "$BUILD" 2 4g "$MN1" "$MN2"

base=$(redis-cli -p "$REDIS_PORT" INFO memory | field used_memory)
r=$("$BUILD/bench/dmkv-bench-load" "$REDIS_PORT" "$N" "$THREADS")
used=$(redis-cli -p "$REDIS_PORT" INFO memory | field used_memory)
redis-cli -p "$DMKV_PORT" CONFIG RESETSTAT >/dev/null
d=$("$BUILD/bench/dmkv-bench-load" "$DMKV_PORT" "$N" "$THREADS")
info=$(redis-cli -p "$DMKV_PORT" INFO dmkv)
pool=$("$BUILD/bench/dmkv-pool-info" "tcp://127.0.0.1:$MN1" "tcp://127.0.0.1:$MN2")
pget() { echo "$pool" | awk -v k="$1" '$1 == k { print $2 }'; }

rrate=$(echo "$r" | awk '{print $6}')
drate=$(echo "$d" | awk '{print $6}')
printf '\n%s distinct keys (16 B keys, 32 B values), %s loader threads x 64 pipelined, %s\n' \
    "$N" "$THREADS" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf '%-34s %16s %16s\n' "" "redis-server" "dmkv"
printf '%-34s %16s %16s\n' "load rate (keys/s)" "$rrate" "$drate"
printf '%-34s %16.1f %16.1f\n' "bytes per key" "$(echo "($used - $base) / $N" | bc -l)" \
    "$(echo "$(pget pool_allocated_bytes) / $N" | bc -l)"
printf '%-34s %16s %16s\n' "keys (DBSIZE)" "$(redis-cli -p "$REDIS_PORT" DBSIZE)" "$(pget keys)"
printf '%-34s %16s %16s\n' "RACE load factor" "-" "$(pget race_load_factor)"
printf '%-34s %16s %16s\n' "RACE global depth" "-" "$(pget race_global_depth)"
printf '%-34s %16s %16s\n' "round trips per insert (splits in)" "-" "$(echo "$info" | field set_rtts_per_op)"
printf '%-34s %16s %16s\n' "verbs per insert" "-" "$(echo "$info" | field set_verbs_per_op)"
printf '%-34s %16s %16s\n' "bytes per insert" "-" "$(echo "$info" | field set_bytes_per_op)"
printf '%-34s %16s %16s\n' "subtable splits" "-" "$(echo "$info" | field race_splits)"
printf '%-34s %16s %16s\n' "node 0 / node 1 allocated MiB" "-" \
    "$(( $(pget node0_allocated_bytes) >> 20 )) / $(( $(pget node1_allocated_bytes) >> 20 ))"
printf '\nbytes per key: redis-server used_memory growth; dmkv: bytes taken from the memory\n'
printf 'nodes (KV blocks, subtables, directory, partly used chunks). Rates depend on the machine.\n'
