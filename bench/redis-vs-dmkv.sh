#!/bin/bash
# make bench: dmkv against Debian's redis-server on the same machine, in one invocation.
# One dmkv-memnode over tcp and one dmkv-gateway (THREADS workers, default 1) beside one
# redis-server. Rows, in this order:
#   load        LOAD_KEYS distinct keys (16 B keys, 32 B values), 4 loader connections
#               x 64 pipelined (dmkv-bench-load), with bytes per key of each server;
#               then LOAD_KEYS more through a gateway with one worker per CPU (the default),
#               then LOAD_KEYS into a fresh memory node through such a gateway over tcp and
#               again over the memory node's unix socket (rows "... tcp", "... unix"), and
#               LOAD_REPEAT (3) times into a fresh memory node through a one-worker gateway,
#               the median pair reported (row "... 1thr median")
#   insert      SETs of new keys (random over 100M) from one connection at -P 1000
#   get/set     redis-benchmark -c 50 -r 100000 -d 32 at -P 1 and -P 16 (keys present,
#               so SET is an update), and one connection at -P 1000; the -P 16 rows
#               again through a gateway with one worker per CPU ("Nthr", the default)
#   ycsb-X-D    YCSB-style core workloads A, B, C, D, F, uniform and zipf 0.99 key choice
#               over the loaded keys (dmkv-bench-ycsb, 16 connections x 16 pipelined)
# then hot keys with and without the address cache, and one 10,000-command pipeline's first
# and last reply. Each row gives requests/s of both, the ratio dmkv / redis, CPU µs per
# operation of each server's processes (redis-server; dmkv-gateway + dmkv-memnode, from
# /proc), p50/p99 latency, and dmkv's machine-independent counters per operation (round
# trips, verbs, bytes; verbs per message to the memory node) from INFO dmkv.
# The table is also written as Markdown to $OUT/bench.md and the ratios drawn by gnuplot
# to $OUT/ratios.png (OUT defaults to bench/results).
# Usage: bench/redis-vs-dmkv.sh [BUILD_DIR] [REQUESTS]
# SERVER_BUILD=DIR runs the dmkv servers of another build (say, the previous design)
# with this build's drivers; QUICK=1 shrinks every row (a smoke run).
set -euo pipefail
BUILD=${1:-build}
N=${2:-100000}
SERVER_BUILD=${SERVER_BUILD:-$BUILD}
REDIS_PORT=${REDIS_PORT:-16379}
DMKV_PORT=${DMKV_PORT:-16380}
MEMNODE_PORT=${MEMNODE_PORT:-17000}
THREADS=${THREADS:-1}
HOT_KEYS=${HOT_KEYS:-1000}
NOCACHE_PORT=${NOCACHE_PORT:-16381}
MT_PORT=${MT_PORT:-16382}
UX_PORT=${UX_PORT:-16383}
LOAD_KEYS=${LOAD_KEYS:-1000000}
LOAD_REPEAT=${LOAD_REPEAT:-3} # fresh one-worker loads for the "1thr median" row (0: none)
YCSB_OPS=${YCSB_OPS:-200000}
OUT=${OUT:-$(dirname "$0")/results}
if [ "${QUICK:-0}" = 1 ]; then
    N=5000 LOAD_KEYS=20000 YCSB_OPS=5000
fi
NP=${NP:-$((N * 5))} # requests of the pipelined rows (-P 16, -P 1000)
. "$(dirname "$0")/lib.sh"
HZ=$(getconf CLK_TCK)
mkdir -p "$OUT"
MD="$OUT/bench.md"
DAT="$TMP/ratios.dat"
: >"$DAT"

start_servers "$SERVER_BUILD" "$THREADS" 2g "$MEMNODE_PORT"

# dmkv_counters: "ops rtts verbs bytes messages memnode_verbs", summed over INFO dmkv's
# command classes and memory nodes.
dmkv_counters() {
    redis-cli -p "$DMKV_PORT" INFO dmkv | tr -d '\r' | awk -F: '
        $1 ~ /_ops$/ { o += $2 } $1 ~ /_rtts$/ { r += $2 } $1 ~ /_verbs$/ && $1 !~ /^memnode/ { v += $2 }
        $1 ~ /_bytes_(read|written)$/ { b += $2 }
        $1 ~ /^memnode[0-9]+_messages$/ { m += $2 } $1 ~ /^memnode[0-9]+_verbs$/ { mv += $2 }
        END { printf "%d %d %d %d %d %d\n", o, r, v, b, m, mv }'
}

# A row is measured in two halves: run_redis CMD... then run_dmkv CMD...; each runs CMD
# (which prints "rps p50_us p99_us" on its last line) with the CPU of that server's
# processes and, for dmkv, its counters sampled around it. emit NAME OPS prints the row.
run_redis() {
    local c0 c1
    c0=$(cpu_ticks "$REDIS_PID")
    read -r R_RPS R_P50 R_P99 < <("$@" | tail -1)
    c1=$(cpu_ticks "$REDIS_PID")
    R_CPU=$((c1 - c0))
}
run_dmkv() {
    local c0 c1 k0 k1
    redis-cli -p "$DMKV_PORT" CONFIG RESETSTAT >/dev/null
    k0=$(dmkv_counters)
    c0=$(cpu_ticks "${DMKV_PIDS[@]}")
    read -r D_RPS D_P50 D_P99 < <("$@" | tail -1)
    c1=$(cpu_ticks "${DMKV_PIDS[@]}")
    k1=$(dmkv_counters)
    D_CPU=$((c1 - c0))
    read -r D_RTT D_VERBS D_BYTES D_VPM < <(echo "$k0 $k1" | awk '{
        o = $7; if (o == 0) o = 1; m = $11 - $5; if (m == 0) m = 1
        printf "%.2f %.2f %.0f %.2f\n", $8 / o, $9 / o, $10 / o, ($12 - $6) / m }')
}
# run_dmkv_on PORT PID... -- CMD...: run_dmkv against another gateway (PORT) whose CPU is
# that of PID... (its memory node and itself).
run_dmkv_on() {
    local saved_port=$DMKV_PORT saved_pids=("${DMKV_PIDS[@]}")
    DMKV_PORT=$1 DMKV_PIDS=()
    shift
    while [ "$1" != -- ]; do
        DMKV_PIDS+=("$1")
        shift
    done
    shift
    run_dmkv "$@"
    DMKV_PORT=$saved_port DMKV_PIDS=("${saved_pids[@]}")
}
emit() {
    local name=$1 ops=$2
    awk -v n="$name" -v r="$R_RPS" -v d="$D_RPS" -v rc="$R_CPU" -v dc="$D_CPU" -v ops="$ops" \
        -v hz="$HZ" -v rp50="$R_P50" -v rp99="$R_P99" -v dp50="$D_P50" -v dp99="$D_P99" \
        -v rtt="$D_RTT" -v vb="$D_VERBS" -v by="$D_BYTES" -v vpm="$D_VPM" -v md="$MD" \
        -v dat="$DAT" 'BEGIN {
        ratio = r > 0 ? d / r : 0
        rcpu = rc * 1e6 / hz / ops; dcpu = dc * 1e6 / hz / ops
        line = sprintf("| %-14s | %10.0f | %10.0f | %5.2f | %6.1f | %6.1f | %6.0f / %-6.0f | %6.0f / %-6.0f | %5s | %5s | %6s | %5s |",
                       n, r, d, ratio, rcpu, dcpu, rp50, rp99, dp50, dp99, rtt, vb, by, vpm)
        print line; print line >> md
        printf "\"%s\" %.3f\n", n, ratio >> dat }'
}

# rb PORT TEST PIPELINE CLIENTS [KEYS=100000] [REQUESTS=$N]: redis-benchmark's CSV ->
# "rps p50_us p99_us".
rb() {
    local port=$1 test=$2 p=$3 c=$4 keys=${5:-100000} n=${6:-$N}
    redis-benchmark -p "$port" -t "$test" -n "$n" -c "$c" -P "$p" -r "$keys" -d 32 --csv -q \
        2>/dev/null | awk -F'"' 'NR > 1 && $2 != "" { print $4, $10 * 1000, $14 * 1000; exit }'
}
# dmkv-bench-load -> "rps 0 0" (it times the whole load, not single commands).
load() { "$BUILD/bench/dmkv-bench-load" "$1" "$LOAD_KEYS" 4 64 | awk '{ print $6, 0, 0 }'; }
# The next LOAD_KEYS keys (LOAD_KEYS .. 2 LOAD_KEYS - 1), on a server that holds the first;
# load_from PORT K: LOAD_KEYS keys from K on.
load_more() {
    "$BUILD/bench/dmkv-bench-load" "$1" $((2 * LOAD_KEYS)) 4 64 0 "$LOAD_KEYS" |
        awk '{ print $6, 0, 0 }'
}
load_from() {
    "$BUILD/bench/dmkv-bench-load" "$1" $(($2 + LOAD_KEYS)) 4 64 0 "$2" | awk '{ print $6, 0, 0 }'
}
FRESH_FROM=$((2 * LOAD_KEYS)) # redis-server's keys for the fresh rows: beyond the first two
# fresh_pair tcp|unix THREADS: LOAD_KEYS keys into a fresh memory node through a gateway
# with THREADS workers over tcp or the node's unix socket, and LOAD_KEYS more keys into
# redis-server beside it; sets R_* and D_* as run_redis and run_dmkv do (no row).
fresh_pair() {
    local kind=$1 threads=$2 port=$((MEMNODE_PORT + 1)) sock=$TMP/fresh.sock uri mn gw
    rm -f "$sock"
    "$SERVER_BUILD/memnode/dmkv-memnode" --port "$port" --size 2g --unixsocket "$sock" \
        2>>"$TMP/memnode-fresh.log" &
    mn=$!
    pids+=("$mn")
    for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.05; done
    uri=tcp://127.0.0.1:$port
    [ "$kind" = unix ] && uri=unix://$sock
    "$SERVER_BUILD/gateway/dmkv-gateway" --port "$UX_PORT" --threads "$threads" --memnode "$uri" \
        2>"$TMP/gateway-fresh-$kind.log" &
    gw=$!
    pids+=("$gw")
    wait_port "$UX_PORT"
    run_redis load_from "$REDIS_PORT" "$FRESH_FROM"
    FRESH_FROM=$((FRESH_FROM + LOAD_KEYS))
    run_dmkv_on "$UX_PORT" "$mn" "$gw" -- load "$UX_PORT"
    kill "$gw"
    wait "$gw" 2>/dev/null || true
    kill "$mn"
    wait "$mn" 2>/dev/null || true
}
# fresh_load tcp|unix: the row "load N 2thr tcp|unix" (see below).
fresh_load() {
    fresh_pair "$1" "$MT"
    emit "load ${LOAD_KEYS} ${MT}thr $1" "$LOAD_KEYS"
}
# fresh_load_median: LOAD_REPEAT fresh pairs with one gateway worker over tcp, the row
# "load N 1thr median" from the pair whose ratio is the median (a single load moved by a
# quarter between runs minutes apart: bench/README.md, stop 66); every pair's ratio is
# listed below the table.
FRESH_RATIOS=
fresh_load_median() {
    local i pairs=() mid
    for i in $(seq 1 "$LOAD_REPEAT"); do
        fresh_pair tcp 1
        pairs+=("$(awk -v r="$R_RPS" -v d="$D_RPS" 'BEGIN { printf "%.4f", (r > 0 ? d / r : 0) }') $R_RPS $R_P50 $R_P99 $R_CPU $D_RPS $D_P50 $D_P99 $D_CPU $D_RTT $D_VERBS $D_BYTES $D_VPM")
    done
    FRESH_RATIOS=$(printf '%s\n' "${pairs[@]}" | awk '{ printf "%s%.2f", (NR > 1 ? ", " : ""), $1 }')
    mid=$(printf '%s\n' "${pairs[@]}" | sort -n | awk -v m=$(((LOAD_REPEAT + 1) / 2)) 'NR == m')
    read -r _ R_RPS R_P50 R_P99 R_CPU D_RPS D_P50 D_P99 D_CPU D_RTT D_VERBS D_BYTES D_VPM <<<"$mid"
    emit "load ${LOAD_KEYS} 1thr median" "$LOAD_KEYS"
}
# dmkv-bench-ycsb -> "rps p50_us p99_us".
ycsb() {
    "$BUILD/bench/dmkv-bench-ycsb" "$1" "$2" "$3" "$LOAD_KEYS" "$YCSB_OPS" 16 16 |
        awk '{ print $6, $8, $10 }'
}

{
    printf '# dmkv vs redis-server, %s\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)"
    printf 'dmkv: one memnode over tcp, gateway threads %s; %s cores; requests %s (pipelined rows %s), load %s keys, ycsb %s ops\n\n' \
        "$THREADS" "$(nproc)" "$N" "$NP" "$LOAD_KEYS" "$YCSB_OPS"
} >"$MD"
hdr='| row            | redis rps  | dmkv rps   | ratio | redis µs/op | dmkv µs/op | redis p50/p99 µs | dmkv p50/p99 µs | RTT/op | verbs/op | bytes/op | verbs/msg |'
printf '\n%s\n' "$hdr"
printf '%s\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n' "$hdr" >>"$MD"

# The load, on fresh servers: rate and memory per key.
base=$(redis-cli -p "$REDIS_PORT" INFO memory | field used_memory)
run_redis load "$REDIS_PORT"
used=$(redis-cli -p "$REDIS_PORT" INFO memory | field used_memory)
run_dmkv load "$DMKV_PORT"
pool=$("$SERVER_BUILD/bench/dmkv-pool-info" "tcp://127.0.0.1:$MEMNODE_PORT")
live=$(redis-cli -p "$DMKV_PORT" INFO memory | field pool_live_bytes)
emit "load ${LOAD_KEYS}" "$LOAD_KEYS"
# A second gateway on the same pool with one worker per CPU (the gateway's default; this one
# has THREADS): it loads LOAD_KEYS more keys, as redis-server does, on a pool that holds
# LOAD_KEYS already, and later serves the "-P 16 Nthr" rows.
MT=$(nproc) MT_PID=
if [ "$THREADS" = 1 ] && [ "$MT" -gt 1 ]; then
    "$SERVER_BUILD/gateway/dmkv-gateway" --port "$MT_PORT" --threads "$MT" \
        --memnode "tcp://127.0.0.1:$MEMNODE_PORT" 2>"$TMP/gateway-mt.log" &
    MT_PID=$!
    pids+=("$MT_PID")
    wait_port "$MT_PORT"
    run_redis load_more "$REDIS_PORT"
    run_dmkv_on "$MT_PORT" "${DMKV_PIDS[0]}" "$MT_PID" -- load_more "$MT_PORT"
    emit "load +${LOAD_KEYS} ${MT}thr" "$LOAD_KEYS"
    # A fresh pool loaded by a gateway with one worker per CPU, over tcp and then over the
    # memory node's unix socket (--memnode unix://: no loopback TCP stack between them), each
    # on a memory node of its own: the two rows differ in the link alone. redis-server loads
    # the next LOAD_KEYS keys beside each.
    if "$SERVER_BUILD/memnode/dmkv-memnode" --help | grep -q -- --unixsocket; then
        fresh_load tcp
        fresh_load unix
        [ "$LOAD_REPEAT" -gt 0 ] && fresh_load_median
    fi
fi
# The gateway without the address cache (hot-key rows) starts after the load: each
# gateway's worker takes a chunk when it starts, which would count in the load's bytes.
DMKV_ADDR_CACHE=off "$SERVER_BUILD/gateway/dmkv-gateway" --port "$NOCACHE_PORT" \
    --threads "$THREADS" --memnode "tcp://127.0.0.1:$MEMNODE_PORT" \
    2>"$TMP/gateway-nocache.log" &
pids+=($!)
wait_port "$NOCACHE_PORT"
# New keys from one pipelining connection (random over 100M: almost every SET an insert).
run_redis rb "$REDIS_PORT" set 1000 1 100000000
run_dmkv rb "$DMKV_PORT" set 1000 1 100000000
emit "insert -c1 -P1000" "$N"

# Pipelined rows run NP requests: at $N they last a third of a second, a few dozen clock
# ticks of CPU, too few to see a 10% change in CPU per operation.
for P in 1 16; do
    n=$N
    [ "$P" = 16 ] && n=$NP
    for T in get set; do
        run_redis rb "$REDIS_PORT" "$T" "$P" 50 100000 "$n"
        run_dmkv rb "$DMKV_PORT" "$T" "$P" 50 100000 "$n"
        emit "$T -P $P" "$n"
    done
done
for T in get set; do
    run_redis rb "$REDIS_PORT" "$T" 1000 1 100000 "$NP"
    run_dmkv rb "$DMKV_PORT" "$T" 1000 1 100000 "$NP"
    emit "$T -c1 -P1000" "$NP"
done
# The same -P 16 rows through the second gateway with one worker per CPU (started after
# the load): clients spread over its workers, which share one address cache.
if [ -n "$MT_PID" ]; then
    for T in get set; do
        run_redis rb "$REDIS_PORT" "$T" 16 50 100000 "$NP"
        run_dmkv_on "$MT_PORT" "${DMKV_PIDS[0]}" "$MT_PID" -- rb "$MT_PORT" "$T" 16 50 100000 "$NP"
        emit "$T -P 16 ${MT}thr" "$NP"
    done
fi
for W in a b c f d; do
    for D in uniform zipf; do
        run_redis ycsb "$REDIS_PORT" "$W" "$D"
        run_dmkv ycsb "$DMKV_PORT" "$W" "$D"
        emit "ycsb-$W $D" "$YCSB_OPS"
    done
done

bpk_redis=$(echo "($used - $base) / $LOAD_KEYS" | bc -l)
bpk_dmkv=$(echo "$(echo "$pool" | awk '$1 == "pool_allocated_bytes" { print $2 }') / $LOAD_KEYS" | bc -l)
{
    printf '\nratio = dmkv / redis rps. µs/op: CPU of the server processes per operation (from\n'
    printf '/proc; dmkv = gateway + memory node). Latency of the load row is not timed per\n'
    printf 'command. RTT, verbs, bytes per op and verbs per message are dmkv counters (INFO dmkv)\n'
    printf 'and do not depend on the machine; rates and CPU do (shared, noisy hosts).\n'
    [ -n "$FRESH_RATIOS" ] &&
        printf '\n"load %s 1thr median": the median of %s fresh pairs with one gateway worker, ratios %s\n' \
            "$LOAD_KEYS" "$LOAD_REPEAT" "$FRESH_RATIOS"
    printf '\nbytes per key after the load: redis-server %.1f (used_memory growth), dmkv %.1f\n' \
        "$bpk_redis" "$bpk_dmkv"
    printf '(pool bytes taken from the memory node, in whole 16 MiB chunks: KV blocks, subtables,\n'
    printf 'CHIME, partly used chunks; in live blocks alone, INFO pool_live_bytes: %.1f)\n' \
        "$(echo "${live:-0} / $LOAD_KEYS" | bc -l)"
} | tee -a "$MD"

if ratio_chart "$OUT/ratios.png" "dmkv / redis-server requests per second (same machine, same run)" \
    "\"$DAT\" using 2:xtic(1) lc rgb \"#3b6ea5\" notitle"; then
    printf '\n![ratios](ratios.png)\n' >>"$MD"
    echo "chart: $OUT/ratios.png; table: $MD"
fi

# Hot keys: every key present (loaded first), so GET and SET find them.
for p in "$REDIS_PORT" "$DMKV_PORT"; do
    redis-benchmark -p "$p" -t set -n $((HOT_KEYS * 20)) -c 50 -r "$HOT_KEYS" -d 32 -q \
        >/dev/null 2>&1
done
printf '\nhot keys: -r %s (all present), -P 1; dmkv with the address cache and without\n' \
    "$HOT_KEYS"
printf '%-6s %14s %14s %14s %9s %9s\n' test "redis rps" "dmkv rps" "no-cache rps" "RTT/op" \
    "no-cache"
for T in set get; do
    for p in "$DMKV_PORT" "$NOCACHE_PORT"; do
        redis-cli -p "$p" CONFIG RESETSTAT >/dev/null 2>&1 || true
    done
    r=$(rb "$REDIS_PORT" "$T" 1 50 "$HOT_KEYS" | awk '{ print $1 }')
    d=$(rb "$DMKV_PORT" "$T" 1 50 "$HOT_KEYS" | awk '{ print $1 }')
    n=$(rb "$NOCACHE_PORT" "$T" 1 50 "$HOT_KEYS" | awk '{ print $1 }')
    rtt=$(redis-cli -p "$DMKV_PORT" INFO dmkv | field "${T}_rtts_per_op")
    nrtt=$(redis-cli -p "$NOCACHE_PORT" INFO dmkv | field "${T}_rtts_per_op")
    printf '%-6s %14s %14s %14s %9s %9s\n' "$T" "$r" "$d" "$n" "${rtt:--}" "${nrtt:--}"
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
