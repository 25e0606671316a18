#!/bin/bash
# Start one dmkv-memnode (tcp transport) and one dmkv-gateway in the foreground; Ctrl-C
# (or SIGTERM) stops both. The gateway reaches the memory node over its unix socket
# (MEMNODE_SOCK; the loopback TCP stack costs the load about 0.9 s of CPU per million keys,
# docs/throughput.md); more gateways can join on tcp://127.0.0.1:MEMNODE_PORT.
# Usage: scripts/run.sh BUILD_DIR
BUILD=${1:-build}
PORT=${PORT:-6379}
MEMNODE_PORT=${MEMNODE_PORT:-7000}
MEMNODE_SIZE=${MEMNODE_SIZE:-1g}
MEMNODE_SOCK=${MEMNODE_SOCK:-/tmp/dmkv-memnode-$MEMNODE_PORT.sock}

# A session of its own: Ctrl-C signals the terminal's process group, and the memory node must
# outlive the gateway's clean stop (stop() below ends it after the gateway).
setsid "$BUILD/memnode/dmkv-memnode" --port "$MEMNODE_PORT" --size "$MEMNODE_SIZE" \
    --unixsocket "$MEMNODE_SOCK" --unixsocketperm 700 &
MEMNODE=$!
stop() {
    trap - INT TERM
    # The gateway first, and to its end: its clean stop hands its free blocks back to the
    # pool, which needs the memory node still up.
    if [ -n "$GATEWAY" ]; then
        kill "$GATEWAY" 2>/dev/null
        wait "$GATEWAY" 2>/dev/null
    fi
    kill "$MEMNODE" 2>/dev/null
    wait 2>/dev/null
    exit 0
}
trap stop INT TERM
# Wait for the memory node to listen before the gateway connects.
i=0
while ! [ -S "$MEMNODE_SOCK" ] || ! (exec 3<>"/dev/tcp/127.0.0.1/$MEMNODE_PORT") 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 $MEMNODE 2>/dev/null; then
        echo "dmkv-memnode did not start" >&2
        stop
    fi
    sleep 0.05
done
"$BUILD/gateway/dmkv-gateway" --port "$PORT" --memnode "unix://$MEMNODE_SOCK" &
GATEWAY=$!
wait $GATEWAY
stop
