#!/bin/bash
# Prefix enumeration with SCAN MATCH, side by side: Debian's redis-server and dmkv (one
# dmkv-memnode over tcp + one dmkv-gateway) in the same run. Both get the same N keys
# (default 1M: PREFIXES prefixes "pNNNN:" of PER_PREFIX keys each, 16-byte keys, 32-byte
# values, loaded by dmkv-bench-load). Then dmkv-bench-scan enumerates SAMPLES random
# prefixes on each server the way a client does (SCAN 0 MATCH pNNNN:* COUNT 100, then the
# returned cursors until cursor 0) and times (a) the first page and every page and (b) the
# whole enumeration of one prefix (until all its keys were seen, and until cursor 0). Plus
# dmkv's machine-independent counters from INFO dmkv: round trips per SCAN page (CHIME's and
# the SCAN command class's) and bytes per page.
# Redis's SCAN MATCH has no prefix seek: it walks the whole keyspace for every prefix.
# Usage: bench/scan-prefix.sh [BUILD_DIR] [PREFIXES] [PER_PREFIX]
# Environment: SAMPLES (200), COUNT (100), MAX_SECONDS per server (120), THREADS (gateway
# threads, 1), LOADERS (4), ports REDIS_PORT, DMKV_PORT, MEMNODE_PORT.
set -euo pipefail
BUILD=${1:-build}
PREFIXES=${2:-1000}
PER_PREFIX=${3:-1000}
N=$((PREFIXES * PER_PREFIX))
SAMPLES=${SAMPLES:-200}
COUNT=${COUNT:-100}
MAX_SECONDS=${MAX_SECONDS:-120}
THREADS=${THREADS:-1}
LOADERS=${LOADERS:-4}
REDIS_PORT=${REDIS_PORT:-16399}
DMKV_PORT=${DMKV_PORT:-16400}
MEMNODE_PORT=${MEMNODE_PORT:-17020}
. "$(dirname "$0")/lib.sh"

if [ "$PREFIXES" -gt 10000 ] || [ "$PREFIXES" -lt 1 ] || [ "$PER_PREFIX" -lt 1 ]; then
    echo "PREFIXES must be 1..10000 (16-byte keys pNNNN:NNNNNNNNNN), PER_PREFIX >= 1" >&2
    exit 2
fi
for t in bench/dmkv-bench-load bench/dmkv-bench-scan memnode/dmkv-memnode gateway/dmkv-gateway; do
    [ -x "$BUILD/$t" ] || { echo "missing $BUILD/$t (build first)" >&2; exit 1; }
done

start_servers "$BUILD" "$THREADS" 4g "$MEMNODE_PORT"

# load PORT -> the loader's summary line
load() { "$BUILD/bench/dmkv-bench-load" "$1" "$N" "$LOADERS" 64 "$PER_PREFIX"; }
rl=$(load "$REDIS_PORT")
dl=$(load "$DMKV_PORT")
for p in "$REDIS_PORT" "$DMKV_PORT"; do
    n=$(redis-cli -p "$p" DBSIZE)
    [ "$n" = "$N" ] || { echo "port $p holds $n keys after the load, want $N" >&2; exit 1; }
done

# scan PORT -> dmkv-bench-scan's name=value line (fails the script on a wrong enumeration)
scan() {
    "$BUILD/bench/dmkv-bench-scan" "$1" "$PREFIXES" "$PER_PREFIX" "$SAMPLES" "$COUNT" \
        "$MAX_SECONDS" 7
}
# get NAME LINE -> the value of NAME=... in LINE
get() { echo "$2" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3g", a / b; else print "-" }'; }

rs=$(scan "$REDIS_PORT") || { echo "redis-server: wrong enumeration: $rs" >&2; exit 1; }
redis-cli -p "$DMKV_PORT" CONFIG RESETSTAT >/dev/null
ds=$(scan "$DMKV_PORT") || { echo "dmkv: wrong enumeration: $ds" >&2; exit 1; }
info=$(redis-cli -p "$DMKV_PORT" INFO dmkv)
inf() { v=$(echo "$info" | field "$1"); echo "${v:--}"; }

printf '\n%s keys (%s prefixes x %s keys, 16 B keys, 32 B values), SCAN MATCH pNNNN:* COUNT %s,\n' \
    "$N" "$PREFIXES" "$PER_PREFIX" "$COUNT"
printf 'random prefixes (at most %s, %s s per server), gateway threads %s, %s\n' "$SAMPLES" \
    "$MAX_SECONDS" "$THREADS" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf '%-40s %14s %14s %9s\n' "" "redis-server" "dmkv" "ratio"
row() { printf '%-40s %14s %14s %9s\n' "$1" "$2" "$3" "$(ratio "$3" "$2")"; }
row "load rate (keys/s)" "$(echo "$rl" | awk '{print $6}')" "$(echo "$dl" | awk '{print $6}')"
row "prefixes enumerated" "$(get samples "$rs")" "$(get samples "$ds")"
row "SCAN calls per prefix" "$(get pages_per_prefix "$rs")" "$(get pages_per_prefix "$ds")"
row "first page, mean (us)" "$(get first_page_us "$rs")" "$(get first_page_us "$ds")"
row "any page, mean (us)" "$(get page_us "$rs")" "$(get page_us "$ds")"
row "any page, median (us)" "$(get page_p50_us "$rs")" "$(get page_p50_us "$ds")"
row "all keys of a prefix seen, mean (ms)" "$(get enum_ms "$rs")" "$(get enum_ms "$ds")"
row "prefix to cursor 0, mean (ms)" "$(get complete_ms "$rs")" "$(get complete_ms "$ds")"
row "prefix to cursor 0, median (ms)" "$(get complete_p50_ms "$rs")" "$(get complete_p50_ms "$ds")"
printf '%-40s %14s %14s\n' "dmkv: round trips per SCAN page (CHIME)" "-" "$(inf chime_rtts_per_scan_page)"
printf '%-40s %14s %14s\n' "dmkv: CHIME scan pages" "-" "$(inf chime_scan_pages)"
printf '%-40s %14s %14s\n' "dmkv: SCAN commands (scan_ops)" "-" "$(inf scan_ops)"
printf '%-40s %14s %14s\n' "dmkv: round trips per SCAN command" "-" "$(inf scan_rtts_per_op)"
printf '%-40s %14s %14s\n' "dmkv: verbs per SCAN command" "-" "$(inf scan_verbs_per_op)"
printf '%-40s %14s %14s\n' "dmkv: bytes per SCAN command" "-" "$(inf scan_bytes_per_op)"
printf '\nratio = dmkv / redis (below 1: dmkv is faster). Times depend on the machine (shared,\n'
printf 'noisy hosts); calls, round trips and bytes per page do not. Redis walks all %s keys\n' "$N"
printf 'for every prefix (no prefix seek); dmkv seeks to the prefix and stops after it.\n'
printf 'The scan_* counters cover the SCAN command class (SCAN, KEYS, DBSIZE) since CONFIG\n'
printf 'RESETSTAT, which ran after the load.\n'
