# Shared by the bench scripts: process cleanup, waiting for a port, INFO field parsing.
pids=()
TMP=$(mktemp -d)
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

# wait_port PORT: until something answers PING there (10 s).
wait_port() {
    for _ in $(seq 1 200); do
        redis-cli -p "$1" PING >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "nothing answers on port $1" >&2
    exit 1
}

# field NAME: the value of NAME: in INFO output on stdin.
field() { tr -d '\r' | awk -F: -v k="$1" '$1 == k { print $2 }'; }
