#!/bin/sh
# it-guest.sh -- runs INSIDE the Soft-RoCE qemu guest, called step by step by
# tests/rdma/it-in-vm.sh (see there). dash + busybox: keep it POSIX.
#
#   it-guest.sh start MEMNODE GATEWAY   dmkv-memnode (tcp :7000 and rdma :7471 on the rxe
#                                       address) + two dmkv-gateways on :6380 and :6381, both
#                                       with --memnode rdma://ADDR:7471
#   it-guest.sh cli                     redis-cli SET/GET/DEL/--scan across the two gateways
#   it-guest.sh bench                   redis-benchmark -t set,get against gateway 1
#   it-guest.sh entrypoint MEMNODE GATEWAY   deploy/entrypoint.sh's roles, host networking
#   it-guest.sh stop                    both gateways and the memory node still alive, then
#                                       SIGTERM: each must exit 0 (ASan/UBSan builds exit 1
#                                       when they found something, e.g. a leak)
# Logs and pid files go next to this script (a run folder inside the VM share).
set -u
D=$(cd "$(dirname "$0")" && pwd)
ADDR=${DMKV_RDMA_ADDR:-192.168.77.1}
MN_PORT=7000
RDMA_PORT=7471
GW1=6380
GW2=6381
URI=rdma://$ADDR:$RDMA_PORT

say() { echo "it-guest: $*"; }
fail() {
    echo "it-guest: FAIL: $*"
    for f in "$D"/*.log; do
        [ -f "$f" ] || continue
        echo "---- tail of $f ----"
        tail -n 25 "$f"
    done
    exit 1
}
# wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds
wait_for() {
    n=$(($1 * 5))
    shift
    while [ "$n" -gt 0 ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
        n=$((n - 1))
    done
    return 1
}
cli() { redis-cli -h 127.0.0.1 -p "$@"; }
# expect PORT WANT ARGS...: redis-cli's raw output must equal WANT
expect() {
    p=$1
    want=$2
    shift 2
    got=$(cli "$p" "$@" 2>&1) || fail "redis-cli -p $p $* exited $?: $got"
    [ "$got" = "$want" ] || fail "redis-cli -p $p $*: got '$got', want '$want'"
}
# serve NAME CMD...: run a server in the background, outliving this step; its pid goes to
# NAME.pid, its output to NAME.log and, once it exits, its exit status to NAME.rc
serve() {
    name=$1
    shift
    rm -f "$D/$name.rc"
    (
        "$@" >"$D/$name.log" 2>&1 &
        echo $! >"$D/$name.pid"
        wait $!
        echo $? >"$D/$name.rc"
    ) &
    wait_for 5 test -s "$D/$name.pid"
}
errors() { cli "$1" INFO stats | tr -d '\r' | sed -n 's/^total_error_replies://p'; }
alive() { [ -f "$D/$1.pid" ] && kill -0 "$(cat "$D/$1.pid")" 2>/dev/null; }

case "${1:-}" in
start)
    MEMNODE=$2
    GATEWAY=$3
    say "memory node: tcp 127.0.0.1:$MN_PORT and rdma $ADDR:$RDMA_PORT"
    serve memnode "$MEMNODE" --port $MN_PORT --size 256m --rdma-port $RDMA_PORT --rdma-bind "$ADDR"
    wait_for 30 grep -q "rdma listener on" "$D/memnode.log" || fail "memory node did not start"
    for p in $GW1 $GW2; do
        serve gw$p "$GATEWAY" --port $p --threads 2 --memnode "$URI"
    done
    for p in $GW1 $GW2; do
        wait_for 60 sh -c "redis-cli -p $p PING | grep -q PONG" || fail "gateway :$p does not answer PING"
        # the log reaches the shared folder a little after PING answers: poll it
        wait_for 10 grep -q "node 0: $URI" "$D/gw$p.log" || fail "gateway :$p is not on $URI"
        say "gateway :$p up on $URI ($(cli $p INFO dmkv | grep -c rtts) rtt counters in INFO dmkv)"
    done
    ;;
cli)
    # each gateway sees the other's writes at once (they share the memory node over rdma)
    expect $GW1 OK FLUSHALL
    expect $GW1 OK SET k1 from-gw1
    expect $GW2 from-gw1 GET k1
    expect $GW2 OK SET k2 from-gw2
    expect $GW1 from-gw2 GET k2
    expect $GW2 OK SET k1 overwritten-by-gw2
    expect $GW1 overwritten-by-gw2 GET k1
    i=0
    while [ $i -lt 200 ]; do
        echo "SET scan:$i v$i"
        i=$((i + 1))
    done | cli $GW1 >/dev/null || fail "pipe of 200 SETs into gateway :$GW1"
    expect $GW2 202 DBSIZE
    for p in $GW1 $GW2; do
        n=$(cli $p --scan | sort -u | wc -l)
        [ "$n" -eq 202 ] || fail "redis-cli -p $p --scan: $n distinct keys, want 202"
        n=$(cli $p --scan --pattern 'scan:1*' | sort -u | wc -l)
        [ "$n" -eq 111 ] || fail "redis-cli -p $p --scan --pattern scan:1*: $n keys, want 111"
    done
    expect $GW2 1 DEL k1
    expect $GW1 "" GET k1
    expect $GW1 0 EXISTS k1
    expect $GW1 1 DEL k2
    expect $GW2 0 EXISTS k2
    expect $GW1 200 DBSIZE
    # INFO's rdma counters: doorbells rung and no connection failed
    info=$(cli $GW1 INFO dmkv | tr -d '\r')
    echo "$info" | grep -Eq '^rdma_doorbells:[1-9]' || fail "INFO dmkv has no rdma_doorbells"
    echo "$info" | grep -q '^rdma_connection_failures:0$' ||
        fail "INFO dmkv: $(echo "$info" | grep rdma_connection_failures)"
    say "cross-gateway SET/GET/DEL/DBSIZE/--scan over rdma: ok"
    ;;
bench)
    expect $GW1 OK FLUSHALL
    say "redis-benchmark -t set,get -n 2000 -c 20 -r 10000 -q against gateway :$GW1 (rdma)"
    say "(qemu TCG emulation with Soft-RoCE: these numbers are NOT performance figures)"
    e0=$(errors $GW1)
    out=$(redis-benchmark -h 127.0.0.1 -p $GW1 -t set,get -n 2000 -c 20 -r 10000 -q 2>&1)
    rc=$?
    e1=$(errors $GW1)
    printf '%s\n' "$out" | tr '\r' '\n' | grep -v '^ *$' | grep -v 'rps=' | sed 's/^/  /'
    [ $rc -eq 0 ] || fail "redis-benchmark exited $rc"
    # redis-benchmark 7 prints "Error from server ..." for error replies; the gateway counts them
    printf '%s\n' "$out" | grep -qiE 'error|refused|reset' && fail "redis-benchmark reported errors"
    [ -n "$e0" ] && [ "$e0" = "$e1" ] ||
        fail "gateway :$GW1 total_error_replies went from '$e0' to '$e1' during the benchmark"
    say "no errors: redis-benchmark printed none, gateway total_error_replies stayed at $e1"
    for t in SET GET; do
        printf '%s\n' "$out" | tr '\r' '\n' | grep -q "^$t: .*requests per second" ||
            fail "redis-benchmark printed no $t result"
    done
    n=$(cli $GW2 DBSIZE)
    [ "$n" -ge 1 ] && [ "$n" -le 10000 ] || fail "DBSIZE after the benchmark is '$n' (want 1..10000)"
    say "DBSIZE seen from gateway :$GW2 after the benchmark: $n"
    cli $GW1 INFO dmkv | tr -d '\r' | grep -E '^(get|set)_(ops|rtts_per_op):' | sed 's/^/  /'
    ;;
stop)
    rc=0
    for s in gw$GW1 gw$GW2 memnode; do
        alive $s || { say "FAIL: $s is not running any more"; rc=1; }
    done
    for s in gw$GW1 gw$GW2 memnode; do
        [ -f "$D/$s.pid" ] || continue
        pid=$(cat "$D/$s.pid")
        kill -TERM "$pid" 2>/dev/null
        if ! wait_for 20 test -s "$D/$s.rc"; then
            say "FAIL: $s did not exit 20 s after SIGTERM"
            kill -KILL "$pid" 2>/dev/null
            rc=1
        elif [ "$(cat "$D/$s.rc")" != 0 ]; then
            say "FAIL: $s exited with status $(cat "$D/$s.rc") after SIGTERM"
            rc=1
        fi
        if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$D/$s.log"; then
            say "FAIL: sanitizer report in $s.log"
            rc=1
        fi
    done
    [ $rc -eq 0 ] || fail "servers did not stop cleanly"
    say "gateways and memory node stopped cleanly (no sanitizer reports)"
    ;;
entrypoint)
    # deploy/entrypoint.sh as docker-compose.host.yml runs it (host networking), on a fresh
    # veth: the memory node creates rxe_dmkv, both gateways find and share it, the client
    # role checks that they share data, and a gateway with DMKV_TRANSPORT=tcp reaches the
    # same memory node (tcp and rdma served at once) and sees the same data.
    mkdir -p /tmp/ep-bin
    ln -sf "$2" /tmp/ep-bin/dmkv-memnode
    ln -sf "$3" /tmp/ep-bin/dmkv-gateway
    PATH=/tmp/ep-bin:$PATH
    export PATH DMKV_NETDEV=hn0 DMKV_RXE_NAME=rxe_dmkv DMKV_MEMNODE_PORT=7100 \
        DMKV_RDMA_PORT=7571 DMKV_GATEWAY_CONF="$D/gateway.conf" DMKV_MEMNODES=self
    ip link add hn0 type veth peer name hn1 && ip addr add 10.8.0.2/24 dev hn0 &&
        ip link set hn1 up && ip link set hn0 up || fail "cannot make the veth hn0"
    EP="bash $D/entrypoint.sh"
    serve ep-memnode env DMKV_MEMNODE_BIND=127.0.0.1 DMKV_MEMNODE_SIZE=128m $EP memnode
    wait_for 30 grep -q "rdma listener on 10.8.0.2:7571" "$D/ep-memnode.log" ||
        fail "entrypoint memnode: no rdma listener on 10.8.0.2:7571"
    grep -q "created Soft-RoCE device rxe_dmkv on hn0" "$D/ep-memnode.log" ||
        fail "entrypoint memnode did not create rxe_dmkv on hn0"
    for p in 6479 6480; do
        serve ep-gw$p $EP gateway --port $p --bind 127.0.0.1
    done
    for p in 6479 6480; do
        wait_for 60 sh -c "redis-cli -p $p PING | grep -q PONG" || fail "entrypoint gateway :$p does not answer"
        # the log reaches the shared folder a little after PING answers: poll it (as in start)
        wait_for 10 grep -q "RDMA device rxe_dmkv already on hn0" "$D/ep-gw$p.log" ||
            fail "entrypoint gateway :$p did not reuse rxe_dmkv"
        wait_for 10 grep -q "node 0: rdma://10.8.0.2:7571" "$D/ep-gw$p.log" ||
            fail "entrypoint gateway :$p not on rdma"
    done
    serve ep-client env DMKV_GATEWAYS="127.0.0.1:6479 127.0.0.1:6480" $EP client
    wait_for 30 grep -q "GET on 127.0.0.1:6480: written via 127.0.0.1:6479" "$D/ep-client.log" ||
        fail "entrypoint client: the gateways do not share data"
    serve ep-gwtcp env DMKV_TRANSPORT=tcp $EP gateway --port 6481 --bind 127.0.0.1
    wait_for 60 sh -c "redis-cli -p 6481 PING | grep -q PONG" || fail "DMKV_TRANSPORT=tcp gateway does not answer"
    grep -q "node 0: tcp://127.0.0.1:7100" "$D/ep-gwtcp.log" || fail "DMKV_TRANSPORT=tcp gateway not on tcp"
    expect 6481 "written via 127.0.0.1:6479" GET dmkv:hello
    rc=0
    for s in ep-client ep-gwtcp ep-gw6479 ep-gw6480 ep-memnode; do
        kill -TERM "$(cat "$D/$s.pid")" 2>/dev/null
        wait_for 20 test -s "$D/$s.rc" || { say "FAIL: $s did not stop"; rc=1; }
    done
    for s in ep-gwtcp ep-gw6479 ep-gw6480 ep-memnode; do
        [ "$(cat "$D/$s.rc" 2>/dev/null)" = 0 ] || { say "FAIL: $s exited $(cat "$D/$s.rc" 2>/dev/null)"; rc=1; }
    done
    [ $rc -eq 0 ] || fail "entrypoint roles did not stop cleanly"
    say "deploy/entrypoint.sh (host networking): rxe created once and shared, rdma and tcp gateways share data: ok"
    ;;
*)
    echo "usage: $0 start MEMNODE GATEWAY | cli | bench | stop | entrypoint MEMNODE GATEWAY" >&2
    exit 2
    ;;
esac
exit 0
