#!/bin/bash
# it-in-vm.sh -- the real system over the rdma transport, inside ONE boot of the Soft-RoCE
# qemu guest (tests/rdma/run-in-vm.sh, rxe0 at 192.168.77.1). Steps, in order:
#   1. start: dmkv-memnode serving tcp (:7000) and rdma (192.168.77.1:7471) at once, and two
#      dmkv-gateways (:6380, :6381) with --memnode rdma://192.168.77.1:7471
#   2. cli:   redis-cli SET/GET/DEL/DBSIZE/--scan across both gateways (each sees the
#             other's writes)
#   3. bench: redis-benchmark -t set,get -n 2000 -c 20 -r 10000 against gateway 1; must
#             report no errors. Under qemu TCG the numbers are NOT performance figures.
#   4. the integration test binaries (tests/integration, DMKV_IT_TESTS), each starting its
#      own memory node and gateways with DMKV_IT_MEMNODE_RDMA=192.168.77.1, so every
#      gateway reaches its memory node(s) over rdma (hook in tests/integration/procs.c)
#   4b. the same over pools of the other pairing, SepHash + ROLEX: DMKV_VM_ROLEX_TESTS
#       (default it_protocol it_incr_gateways it_memnode_kill it_rolex_retrainer;
#       "0" or DMKV_VM_SEPHASH=0 leaves them out)
#   5. it_linearizable over rdma (histories under SIGSTOP/SIGKILL, checked; then with a
#      lease holder's message arriving late, fenced by its QP's error state);
#      DMKV_VM_LIN=all adds a stalled lock holder, DMKV_VM_LIN=0 leaves them out
#   6. stop:  the servers of step 1 are still alive, exit 0 on SIGTERM, no sanitizer reports
#   7. entrypoint: deploy/entrypoint.sh's memnode/gateway/client roles as
#      deploy/docker-compose.host.yml runs them (host networking, rxe created once, shared;
#      plus a DMKV_TRANSPORT=tcp gateway on the same memory node)
# Every step has its own time limit (busybox timeout in the guest); the whole VM has
# DMKV_VM_TIMEOUT (default 2400 s). ctest runs this test alone (RUN_SERIAL), so its time
# adds to the suite's: the default set is what the rdma path needs checked (multi-gateway
# counters and WATCH, memory-node restart, split repair, linearizability under faults
# and gateway kills, QP fencing), each at DMKV_IT_SCALE=25 where a test has a
# scalable workload. On 2026-11-28 a 15-step set with it_shared_holds and the stalled
# lock holder took 1115 s here; in CI that day the earlier 18-step set (with
# it_chime_storm, it_index_rebuild, test_race and full-size workloads) ran past 1800 s and
# timed out (783 s here the day before): the emulated guest's speed varies 2-3x with the
# host's load.
#
# Usage
#   tests/rdma/it-in-vm.sh [--build DIR]      (default DIR: the repository's build-test)
# Environment
#   DMKV_IT_TESTS   integration tests to run in the guest (default "it_basic it_protocol
#                   it_incr_gateways it_node_restart it_memnode_kill it_separator_repair":
#                   three gateways on one memory node over rdma, the leaf-lock path without
#                   masked CAS, a memory node killed and restarted behind its rdma listener,
#                   empty and with --dir, then twice under the writes of three gateways
#                   (16 s here), a splitter killed before its separator went up). Opt in to
#                   more, e.g. DMKV_IT_TESTS="it_gateway_death it_shared_holds
#                   it_chime_storm it_index_rebuild" (~140-250 s each here; it_shared_holds
#                   runs DMKV_IT_SHARED_KEYS sequential keys, default 2000 here, fewer do not
#                   share holds enough; it_chime_storm DMKV_IT_STORM_OPS commands per
#                   client, default 1500 here), it_pipeline (~110 s), it_redis_cli (~120 s),
#                   it_concurrency (~170 s) with a larger DMKV_VM_TIMEOUT: all of these have
#                   passed over rdma this way.
#   DMKV_IT_SCALE   percent of each scalable workload (tests/integration/procs.h
#                   it_scaled), default 25 here
#   DMKV_IT_STEP_TIMEOUT  per integration-test time limit in seconds (default 450: it_incr_gateways
#                   took 283-301 s on this host on 2026-11-28)
#   and run-in-vm.sh's: DMKV_VM_TIMEOUT, DMKV_VM_KVM, RXE_VM_EXTRA_DEBS, RXE_VM_SH, ...
# Exit status: 0 all steps passed, 1 a step failed, 77 skipped (no qemu, VM cannot boot,
# binaries not built) with a plain message.
set -uo pipefail

say() { echo "it-in-vm: $*" >&2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$ROOT/build-test
while [ $# -gt 0 ]; do
    case "$1" in
        --build) BUILD=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) say "unknown argument $1 (try --help)"; exit 2 ;;
    esac
done
BUILD=$(cd "$BUILD" 2>/dev/null && pwd -P) || { say "SKIP: no build folder $BUILD"; exit 77; }
MEMNODE=$BUILD/memnode/dmkv-memnode
GATEWAY=$BUILD/gateway/dmkv-gateway
for b in "$MEMNODE" "$GATEWAY"; do
    [ -x "$b" ] || { say "SKIP: $b is not built"; exit 77; }
done
ADDR=192.168.77.1

# --- redis-cli / redis-benchmark in the guest: Debian's redis-tools plus its libraries ---
# (the host's copies tell which packages they need; bookworm's list when they are missing)
redis_debs="redis-tools bash libtinfo6" # bash: deploy/entrypoint.sh
if command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null; then
    for lib in $(ldd "$(command -v redis-cli)" "$(command -v redis-benchmark)" 2>/dev/null |
                 awk '/=> \//{print $3}' | sort -u); do
        pkg=""
        for cand in "$lib" "$(readlink -f "$lib")" "/usr$lib" "/usr$(readlink -f "$lib")"; do
            pkg=$(dpkg -S "$cand" 2>/dev/null | head -n1 | cut -d: -f1) && [ -n "$pkg" ] && break
        done
        [ -n "$pkg" ] && redis_debs="$redis_debs $pkg"
    done
else
    redis_debs="$redis_debs libatomic1 liblzf1 libjemalloc2 libsystemd0 libssl3 libstdc++6
                libcap2 libgcrypt20 liblzma5 libzstd1 liblz4-1 libgpg-error0"
fi
RXE_VM_EXTRA_DEBS=$(printf '%s\n' ${RXE_VM_EXTRA_DEBS:-} $redis_debs | sort -u | tr '\n' ' ')
export RXE_VM_EXTRA_DEBS

# --- a guest image of our own: rxe-vm.sh keeps one initramfs per cache folder (it deletes
# the others when it builds one), so with redis-tools in it this test and rdma/verbs_in_vm
# would rebuild each other's image on every run. Same downloaded .debs (symlinked). ---
if [ -z "${RXE_VM_CACHE:-}" ] && [ -d /var/cache/rxe-vm ] && [ -w /var/cache/rxe-vm ]; then
    RXE_VM_CACHE=/var/cache/rxe-vm/it-in-vm
    mkdir -p "$RXE_VM_CACHE"
    mkdir -p /var/cache/rxe-vm/debs
    [ -e "$RXE_VM_CACHE/debs" ] || ln -s ../debs "$RXE_VM_CACHE/debs"
    [ -s /var/cache/rxe-vm/kernel-pkg ] && [ ! -s "$RXE_VM_CACHE/kernel-pkg" ] &&
        cp /var/cache/rxe-vm/kernel-pkg "$RXE_VM_CACHE/kernel-pkg"
    export RXE_VM_CACHE
fi

# --- the run folder (inside the share, so the guest sees it at the same path) ---
D=$(mktemp -d "$BUILD/.it-in-vm.XXXXXX") || { say "cannot write into $BUILD"; exit 2; }
trap 'rm -rf "$D"' EXIT
cp "$HERE/it-guest.sh" "$D/it-guest.sh"
cp "$ROOT/deploy/entrypoint.sh" "$ROOT/deploy/gateway.conf" "$D/"
# /bin/sh (dash), not "sh": busybox's timeout would run its own ash applet, under which a
# plain `ip` is busybox's applet rather than iproute2's (no veth peers)
G="/bin/sh $D/it-guest.sh"

steps=("timeout 90 $G start $MEMNODE $GATEWAY"
       "timeout 60 $G cli"
       "timeout 240 $G bench")
STEP_T=${DMKV_IT_STEP_TIMEOUT:-450}
# it_gateway_death is opt-in here: on 2026-11-28 a victim killed while holding 1.5 MB of
# blocks past their quarantine (RAM-only free lists, lost with it: issue 12) lost 43% of
# the guest's 4.9 MB live data, over the test's 25% bound. The host runs it in both CAS
# modes with twice the live data.
for t in ${DMKV_IT_TESTS:-it_basic it_protocol it_incr_gateways it_node_restart it_memnode_kill it_separator_repair}; do
    bin=$BUILD/tests/$t
    [ -x "$bin" ] || { say "warning: $bin is not built, left out"; continue; }
    # it_gateway_death rewrites 20-200 KB values from four clients: each freed block waits
    # out its 2 s quarantine (a dead gateway's is taken over from its free log), so it
    # needs more than the others' 128 MB (on the host it takes up to 300 MB of its 512 MB
    # at full speed; 128 MB failed in CI before the free logs).
    size=128m; [ "$t" = it_gateway_death ] && size=256m
    steps+=("DMKV_IT_SCALE=${DMKV_IT_SCALE:-25} DMKV_IT_MEMNODE_RDMA=$ADDR DMKV_IT_MEMNODE_SIZE=$size DMKV_IT_STORM_OPS=${DMKV_IT_STORM_OPS:-1500} DMKV_IT_SHARED_KEYS=${DMKV_IT_SHARED_KEYS:-2000} DMKV_MEMNODE=$MEMNODE DMKV_GATEWAY=$GATEWAY timeout $STEP_T $bin")
done
# SepHash + ROLEX, the other pairing over rdma (issue 14): gateways on a pool whose point
# index is SepHash and whose range index is ROLEX, retrained by the memory node's own thread
# (memnode/mn_retrainer.c) while the gateways' RNIC verbs (here rxe's) change the same
# region. it_incr_gateways: several gateways INCR the same keys, so conditional appends race
# for one segment's entries and are placed at posting (rdma has no chains: every commit
# waits for its connection's earlier ones). it_protocol found SepHash's GET of a 256 KB
# value never answering here (its reads outlast the 1 s deadline under TCG). On 2026-12-01
# the three took 59, 91 and 64 s here. it_rolex_retrainer (the memory node's retrainer
# thread beside rxe's verbs) joined them on 2026-12-06 (55-64 s, 3 of 3 here): its earlier
# failures, and CI's "memory node connection lost" in it_incr_gateways on stop 64, were
# rxe stalling a READ fenced behind a CAS (docs/DESIGN.md, Transports).
# DMKV_VM_ROLEX_TESTS lists the tests, "0" leaves them out (DMKV_VM_SEPHASH=0 too).
ROLEX_TESTS=${DMKV_VM_ROLEX_TESTS:-it_protocol it_incr_gateways it_memnode_kill it_rolex_retrainer}
[ "$ROLEX_TESTS" = 0 ] || [ "${DMKV_VM_SEPHASH:-1}" = 0 ] && ROLEX_TESTS=""
for t in $ROLEX_TESTS; do
    bin=$BUILD/tests/$t
    [ -x "$bin" ] || { say "warning: $bin is not built, left out"; continue; }
    steps+=("DMKV_IT_POINT_INDEX=sephash DMKV_IT_RANGE_INDEX=rolex DMKV_IT_SCALE=${DMKV_IT_SCALE:-25} DMKV_IT_MEMNODE_RDMA=$ADDR DMKV_IT_MEMNODE_SIZE=128m DMKV_MEMNODE=$MEMNODE DMKV_GATEWAY=$GATEWAY timeout $STEP_T $bin")
done
# The linearizability run over rdma: 2 memory nodes, 3 gateways, SIGSTOP and SIGKILL faults
# (no clock shift: the guest has no libfaketime), a smaller run than on the host.
LIN=${DMKV_VM_LIN:-1}
LIN_ENV="DMKV_IT_MEMNODE_RDMA=$ADDR DMKV_IT_MEMNODE_SIZE=128m DMKV_MEMNODE=$MEMNODE DMKV_GATEWAY=$GATEWAY"
if [ -x "$BUILD/tests/it_linearizable" ] && [ "$LIN" != 0 ]; then
    steps+=("$LIN_ENV timeout 400 $BUILD/tests/it_linearizable --ops ${DMKV_IT_LIN_OPS:-4000} --fault-rounds 4 --seconds 200")
    # A lease holder's message that passed its send-by check reaches the node 3.5 s late
    # (the thread blocks before ibv_post_send): the taker has the node move the holder's QP
    # to the error state first (dmkv/fence.h), so the stale leaf image never lands. Only
    # rdma has QPs: this one is here by default.
    steps+=("$LIN_ENV timeout 300 $BUILD/tests/it_linearizable --ops ${DMKV_IT_STALL_OPS:-1000} --no-faults --timeout-ms 10000 --stall wire:3500:100 --seconds 150")
    # A leaf-lock holder stalled 3.5 s before its RACE write (lease takeovers over rdma,
    # where every lock is the masked-CAS fallback, which nomcas/it_linearizable_stall runs
    # on the host): DMKV_VM_LIN=all.
    [ "$LIN" = all ] &&
        steps+=("$LIN_ENV timeout 300 $BUILD/tests/it_linearizable --ops ${DMKV_IT_STALL_OPS:-1000} --no-faults --timeout-ms 10000 --stall locked:3500:8 --seconds 150")
fi
steps+=("timeout 90 $G stop")
[ -f "$D/entrypoint.sh" ] && steps+=("timeout 150 $G entrypoint $MEMNODE $GATEWAY")

say "one VM boot, ${#steps[@]} steps; redis-benchmark numbers under TCG emulation are not performance figures"
t0=$(date +%s)
DMKV_VM_TIMEOUT=${DMKV_VM_TIMEOUT:-2400} "$HERE/run-in-vm.sh" --share "$BUILD" -- "${steps[@]}" 2>&1 |
    tee "$D/vm.out"
rc=${PIPESTATUS[0]}
say "exit $rc after $(($(date +%s) - t0)) s"
if [ "$rc" = 1 ]; then
    for f in "$D"/*.log; do
        [ -f "$f" ] || continue
        echo "---- $(basename "$f") (last 30 lines) ----"
        tail -n 30 "$f"
    done
    # CI keeps the head and the tail of a long output: the failed steps' own output goes
    # last, so the tail says which step failed and why.
    awk '/^=== \[[0-9]+\] /{ if ($3 == "PASS" || $3 == "SKIP") { sec = ""; next }
                                if ($3 == "FAIL") { print "---- failed step " $2 " (last 40 lines) ----";
                                                    n = split(sec, l, "\n"); for (i = (n > 40 ? n - 40 : 1); i <= n; i++) print l[i];
                                                    print $0; sec = ""; next }
                                sec = $0; next }
         { sec = sec "\n" $0 }' "$D/vm.out"
fi
exit "$rc"
