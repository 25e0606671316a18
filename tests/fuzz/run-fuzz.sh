#!/bin/sh
# run-fuzz.sh BUILD_DIR [SECONDS]: build the libFuzzer targets (fuzz_resp: the RESP parser;
# fuzz_glob: MATCH patterns; fuzz_chime: SCAN cursors and CHIME inner-node, leaf and key-record images as
# read from the pool; fuzz_kvblock: KV block images as read from the pool; fuzz_memnode:
# the memory node's tcp request stream, parser and verb execution against a region;
# fuzz_rolex: ROLEX leaf images and SCAN cursors) with
# clang, AddressSanitizer and UBSan into BUILD_DIR/fuzz and run each for SECONDS (default 20) from its seed corpus (tests/fuzz/corpus/<name>; new
# inputs go to BUILD_DIR/fuzz/corpus-<name>, not into the repository). A crash, leak or
# sanitizer report fails (the reproducer is left in BUILD_DIR/fuzz). Exit 77 (skipped)
# without clang or its libFuzzer runtime (Debian: clang, libclang-rt-14-dev).
set -eu
B=${1:?usage: run-fuzz.sh BUILD_DIR [SECONDS]}
SECS=${2:-20}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
OUT="$B/fuzz"
CC=${FUZZ_CC:-clang}
if ! command -v "$CC" >/dev/null 2>&1; then
    echo "SKIP: $CC not installed"
    exit 77
fi
mkdir -p "$OUT"
FLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$SRC/gateway"
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){(void)d;(void)n;return 0;}' |
    $CC $FLAGS -x c - -o "$OUT/probe" 2>/dev/null; then
    echo "SKIP: $CC cannot link libFuzzer (install libclang-rt-14-dev)"
    exit 77
fi
G="$SRC/gateway"
$CC $FLAGS -I"$SRC/dmcore/include" -o "$OUT/fuzz_resp" "$HERE/fuzz_resp.c" "$G/resp/parser.c" \
    "$G/util/buf.c" "$G/util/oom.c" "$G/util/splitargs.c" "$G/util/strconv.c" \
    "$SRC/dmcore/util/log.c"
$CC $FLAGS -o "$OUT/fuzz_glob" "$HERE/fuzz_glob.c" "$G/util/glob.c"
$CC $FLAGS -I"$SRC/dmcore/include" -I"$SRC/dmcore/chime" -o "$OUT/fuzz_chime" \
    "$HERE/fuzz_chime.c" "$SRC/dmcore/chime/layout.c" -lxxhash
$CC $FLAGS -I"$SRC/dmcore/include" -o "$OUT/fuzz_kvblock" "$HERE/fuzz_kvblock.c" \
    "$SRC/dmcore/kvblock/kvblock.c" -lxxhash
$CC $FLAGS -I"$SRC/dmcore/include" -I"$SRC/memnode" -o "$OUT/fuzz_memnode" \
    "$HERE/fuzz_memnode.c" "$SRC/memnode/mn_request.c" "$SRC/memnode/mn_region.c" \
    "$SRC/dmcore/transport/exec.c" \
    "$SRC/dmcore/util/log.c"
$CC $FLAGS -I"$SRC/dmcore/include" -I"$SRC/dmcore/rolex" -o "$OUT/fuzz_rolex" \
    "$HERE/fuzz_rolex.c" "$SRC/dmcore/rolex/leaf_image.c" "$SRC/dmcore/rolex/cursor.c" -lxxhash
# resp_oom: the RESP parser again with every allocation over 300 bytes failing
# (DMKV_TEST_ALLOC_MAX, gateway/util/oom.h): its out-of-memory paths.
ln -sf fuzz_resp "$OUT/fuzz_resp_oom"
for t in resp resp_oom glob chime kvblock memnode rolex; do
    mkdir -p "$OUT/corpus-$t"
    echo "fuzz_$t: $SECS s"
    rc=0
    cap=
    [ "$t" = resp_oom ] && cap=300
    seeds=$HERE/corpus/$(echo "$t" | sed 's/_oom//')
    (cd "$OUT" && DMKV_TEST_ALLOC_MAX=$cap ./fuzz_$t -max_total_time="$SECS" -max_len=$(case $t in chime) echo 9000 ;; memnode) echo 20000 ;; *) echo 4096 ;; esac) -timeout=10 \
        -rss_limit_mb=1024 -print_final_stats=1 "corpus-$t" "$seeds") \
        >"$OUT/fuzz_$t.log" 2>&1 || rc=$?
    tail -8 "$OUT/fuzz_$t.log"
    if [ "$rc" -ne 0 ]; then
        echo "fuzz_$t FAILED (exit $rc): full log $OUT/fuzz_$t.log, reproducer in $OUT"
        grep -E "ERROR|SUMMARY|==[0-9]+==|#[0-9]+ 0x" "$OUT/fuzz_$t.log" | head -30
        exit 1
    fi
done
echo "run-fuzz: no crash, leak or sanitizer report"
