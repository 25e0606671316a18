# Shared by the bench scripts: process cleanup, waiting for a port, INFO field parsing,
# starting redis-server and dmkv side by side.
pids=()
TMP=$(mktemp -d)
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

# wait_port PORT [TRIES]: until something answers PING there (TRIES x 50 ms, default 10 s).
wait_port() {
    for _ in $(seq 1 "${2:-200}"); do
        redis-cli -p "$1" PING >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "nothing answers on port $1" >&2
    exit 1
}

# field NAME: the value of NAME: in INFO output on stdin.
field() { tr -d '\r' | awk -F: -v k="$1" '$1 == k { print $2 }'; }

# start_servers BUILD THREADS SIZE MEMNODE_PORT...: Debian's redis-server on $REDIS_PORT and
# dmkv (one dmkv-memnode of SIZE per MEMNODE_PORT over tcp, one dmkv-gateway with THREADS
# workers on $DMKV_PORT), both answering PING on return; logs in $TMP. Sets REDIS_PID and
# DMKV_PIDS (memory nodes and gateway) for cpu_ticks.
start_servers() {
    local build=$1 threads=$2 size=$3
    shift 3
    local uris=() p
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$TMP" >"$TMP/redis.log" 2>&1 &
    pids+=($!)
    REDIS_PID=$!
    DMKV_PIDS=()
    for p in "$@"; do
        "$build/memnode/dmkv-memnode" --port "$p" --size "$size" 2>>"$TMP/memnode.log" &
        pids+=($!)
        DMKV_PIDS+=($!)
        uris+=(--memnode "tcp://127.0.0.1:$p")
    done
    sleep 0.3
    "$build/gateway/dmkv-gateway" --port "$DMKV_PORT" --threads "$threads" "${uris[@]}" \
        2>"$TMP/gateway.log" &
    pids+=($!)
    DMKV_PIDS+=($!)
    wait_port "$REDIS_PORT"
    wait_port "$DMKV_PORT"
}

# cpu_ticks PID...: user + system CPU the processes used so far, in clock ticks.
cpu_ticks() {
    local t=0 p
    for p in "$@"; do
        t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{ print $12 + $13 }')))
    done
    echo "$t"
}

# ratio_chart PNG TITLE PLOT: a bar chart of dmkv / redis-server ratios (gnuplot); PLOT is
# gnuplot's plot arguments. Returns 1 without gnuplot.
ratio_chart() {
    command -v gnuplot >/dev/null || return 1
    gnuplot <<EOF
set terminal png size 1100,520
set output "$1"
set title "$2"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8
set yrange [0:*]
set ylabel "ratio"
set xtics rotate by -40
set grid ytics
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2
plot $3
EOF
}
