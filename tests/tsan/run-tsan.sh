#!/bin/sh
# run-tsan.sh SOURCE_DIR BUILD_DIR: ThreadSanitizer over the code that runs on several
# threads at once. Builds dmkv with -DDMKV_TSAN=ON into BUILD_DIR (coroutine switches are
# annotated as TSan fibers, dmcore/coro/coro.c) and runs, one at a time: the unit tests whose
# threads share one pool through the local transport (RACE and CHIME writers, free lists,
# coroutines) and the integration tests with several multi-threaded gateway processes on one
# memory node, plus the gateway's own cross-thread paths (MONITOR lines, CLIENT KILL,
# maxmemory-clients eviction: it_introspection, it_protocol; connections passed between
# threads: it_client_spread; the address cache a gateway's
# workers share: it_addr_cache), and it_concurrency and it_incr_gateways on the SepHash +
# ROLEX pairing (PAIRINGS below), whose memory node runs the ROLEX retrainer thread beside
# its executor (it_rolex_retrainer too). Every process (tests, gateways, memory nodes) writes its reports to
# BUILD_DIR/reports/tsan.PID: any report fails this test, whatever the exit codes said.
set -eu
SRC=$1
B=$2
TESTS="unit/test_coro|unit/test_transport|unit/test_race|unit/test_chime|unit/test_pool_free|unit/test_sephash"
TESTS="$TESTS|unit/test_rolex"
TESTS="$TESTS|integration/it_concurrency|integration/it_incr_gateways"
TESTS="$TESTS|integration/it_chime_storm|integration/it_resize|integration/it_pipeline"
TESTS="$TESTS|integration/it_introspection|integration/it_protocol|integration/it_addr_cache"
TESTS="$TESTS|integration/it_client_spread"
TESTS="$TESTS|integration/it_rolex_retrainer"
# The other engines' multi-gateway paths (issue 14): the same binaries on a pool whose point
# index is SepHash and whose range index is ROLEX (tests/CMakeLists.txt names them
# <engine>/<test>), so their targets are the ones above. One pairing runs both engines'
# code (and the memory node's retrainer thread); sephash/it_concurrency and
# rolex/it_concurrency ran the same code split over two runs (155 s and ~150 s of TSan alone
# here, 2026-12-02) and left the suite at 2,392 s of its 2,400 s limit in CI.
PAIRINGS="rolex/sephash_it_concurrency|rolex/sephash_it_incr_gateways"

# Only what these tests run: the daemons and the tests' own programs (the whole tree, with
# the benches, tools and every other test, took about twice as long beside the ASan suite).
TARGETS="dmkv-gateway dmkv-memnode $(echo "$TESTS" | tr '|' '\n' | sed 's,^[a-z]*/,,' | tr '\n' ' ')"
cmake -S "$SRC" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDMKV_TSAN=ON >/dev/null
# shellcheck disable=SC2086 # one word per target
cmake --build "$B" -j2 --target $TARGETS >"$B.build.log" 2>&1 || {
    tail -n 40 "$B.build.log"
    exit 1
}
rm -rf "$B/reports"
mkdir -p "$B/reports"
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 log_path=$B/reports/tsan suppressions=$SRC/tests/tsan/suppressions.txt"
# it_chime_storm's 9 clients x 12,000 commands took over its 600 s limit under TSan beside
# the ASan suite in a clean-clone make test (2026-11-29; SETs at 40-80 ms each). Its
# interleavings start with the first commands (the rxe VM runs 1,500): 4,000 took 205 s
# alone (2026-11-30), 2,500 125 s alone, 1,500 224 s beside the ASan suite, 800 167 s
# (2026-12-02).
export DMKV_IT_STORM_OPS=500
# The multi-gateway tests at 15% of their commands (it_concurrency, it_incr_gateways,
# it_resize, it_pipeline): the races TSan looks for are between the threads of one process
# and happen from the first hundred commands on, and the suite's time is bounded by this
# test beside the rest (CI: 40 minutes on 2026-11-30 and 2026-12-01 at 50%; at 30%
# it_resize took 236 s and it_concurrency 163 s beside the ASan suite, 2026-12-02).
export DMKV_IT_SCALE=15
cd "$B"
rc=0
ctest -R "^($TESTS)\$" --output-on-failure --timeout 900 || rc=$?
# The SepHash + ROLEX pairing at 10%: at 30% its it_concurrency took 310 s beside the ASan
# suite, at 15% 128 s (2026-12-02).
DMKV_IT_SCALE=10 ctest -R "^($PAIRINGS)\$" --output-on-failure --timeout 900 || rc=$?
n=0
for f in "$B"/reports/tsan.*; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    echo "---- $f ----"
    head -n 60 "$f"
done
echo "run-tsan: ctest exit $rc, $n ThreadSanitizer report file(s)"
[ "$rc" -eq 0 ] && [ "$n" -eq 0 ]
