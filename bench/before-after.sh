#!/bin/bash
# bench/before-after.sh [BUILD_DIR] BEFORE_BUILD_DIR [REQUESTS]: the make bench driver
# twice in one invocation, each beside its own redis-server run: first with the dmkv
# servers of BEFORE_BUILD_DIR (say, a build of the previous design: git worktree add
# /tmp/before REV && cmake -S /tmp/before -B /tmp/before/build ...), then with BUILD_DIR's;
# then one Markdown table ($OUT/before-after.md) and one chart ($OUT/before-after.png)
# of both. Each run's own table stays in $OUT/before and $OUT/after.
set -euo pipefail
BUILD=${1:-build}
BEFORE=${2:?usage: bench/before-after.sh BUILD_DIR BEFORE_BUILD_DIR [REQUESTS]}
N=${3:-100000}
HERE=$(dirname "$0")
. "$HERE/lib.sh"
OUT=${OUT:-$HERE/results}
OUT="$OUT/before" SERVER_BUILD="$BEFORE" "$HERE/redis-vs-dmkv.sh" "$BUILD" "$N"
OUT="$OUT/after" "$HERE/redis-vs-dmkv.sh" "$BUILD" "$N"

# rows FILE: "name|redis rps|dmkv rps|ratio|redis µs|dmkv µs|RTT/op" per table row.
rows() {
    awk -F'|' 'NF > 12 && $2 !~ /row|---/ {
        for (i = 2; i <= 10; i++) gsub(/^ +| +$/, "", $i)
        print $2 "|" $3 "|" $4 "|" $5 "|" $6 "|" $7 "|" $10 }' "$1"
}
MD="$OUT/before-after.md"
DAT="$OUT/before-after.dat"
{
    printf '# dmkv before and after, each beside redis-server (%s)\n\n' "$(date -u +%FT%RZ)"
    printf 'before: %s; after: %s. Requests/s depend on the machine: compare ratios.\n\n' \
        "$BEFORE" "$BUILD"
    printf '| row | redis rps | dmkv before | ratio | redis rps | dmkv after | ratio |'
    printf ' CPU µs/op redis | dmkv before | dmkv after | RTT/op before | after |\n'
    printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
} >"$MD"
: >"$DAT"
# Rows in the after run's order, each joined with the before run's row of that name.
awk -F'|' -v md="$MD" -v dat="$DAT" 'NR == FNR { b[$1] = $0; next } $1 in b {
        split(b[$1], x, "|")
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
            $1, x[2], x[3], x[4], $2, $3, $4, $5, x[6], $6, x[7], $7 >> md
        printf "\"%s\" %s %s\n", $1, x[4], $4 >> dat }' \
    <(rows "$OUT/before/bench.md") <(rows "$OUT/after/bench.md")
cat "$MD"
if ratio_chart "$OUT/before-after.png" \
    "dmkv / redis-server requests per second, before and after (same machine)" \
    "\"$DAT\" using 2:xtic(1) title \"before\" lc rgb \"#b0b0b0\", \"\" using 3 title \"after\" lc rgb \"#3b6ea5\""; then
    printf '\n![before and after](before-after.png)\n' >>"$MD"
    echo "chart: $OUT/before-after.png"
fi
