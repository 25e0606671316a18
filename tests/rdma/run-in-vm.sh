#!/bin/bash
# run-in-vm.sh -- run test commands inside a throw-away qemu guest that has a real
# Soft-RoCE device (rxe0 at 192.168.77.1, GID index 1 = RoCEv2 IPv4), using the recipe
# tools/rxe-vm/rxe-vm.sh carried in this repository. Builds nothing: give it binaries built
# on the host (they run unchanged in the guest: same Debian libc, libibverbs, librdmacm).
#
# Usage
#   tests/rdma/run-in-vm.sh [--share DIR] [--] 'CMD1 ARGS' ['CMD2 ARGS' ...]
#   e.g. tests/rdma/run-in-vm.sh --share build-rdma build-rdma/tests/test_rdma_verbs
# Each argument is one shell command line, run in order in the guest. The guest's cwd is
# the current directory when it lies inside the shared folder, else the shared folder: give
# absolute paths otherwise. DMKV_RDMA_ADDR=192.168.77.1 is set.
#
# Shared folder: --share DIR, else $DMKV_VM_SHARE, else the repository's top level. It is
# mounted at the same absolute path in the guest, so the commands' paths must lie inside.
# Runtime libraries: every command word that is an existing file is run through ldd; the
# Debian packages owning its libraries (dpkg -S) are added to the guest (RXE_VM_EXTRA_DEBS),
# e.g. libasan8 libubsan1 libuv1 libxxhash0 libboost-context1.74.0 for an ASan build.
#
# Exit status: 0 when every command passed; 1 when one failed; 77 (ctest "skipped", with a
# plain message) when qemu is not installed, the VM cannot boot, or every command skipped.
# Environment: DMKV_VM_TIMEOUT (seconds, default 900), DMKV_VM_KVM=1 to let rxe-vm.sh use
# /dev/kvm (by default it is hidden with a private mount namespace: nested KVM on some CI
# hosts hangs the guest, TCG always works), and rxe-vm.sh's own RXE_VM_* variables.
set -uo pipefail

say() { echo "run-in-vm: $*" >&2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(git -C "$HERE" rev-parse --show-toplevel 2>/dev/null || (cd "$HERE/../.." && pwd))
RXEVM=${RXE_VM_SH:-$ROOT/tools/rxe-vm/rxe-vm.sh}
SHARE=${DMKV_VM_SHARE:-$ROOT}
while [ $# -gt 0 ]; do
    case "$1" in
        --share) SHARE=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { say "no command given (try --help)"; exit 2; }

if [ ! -x "$RXEVM" ]; then
    say "SKIP: the rxe VM recipe is not at $RXEVM"
    exit 77
fi
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    say "SKIP: qemu-system-x86_64 is not installed (scripts/install-deps.sh installs qemu-system-x86)"
    exit 77
fi
SHARE=$(cd "$SHARE" && pwd -P) || { say "cannot enter share folder"; exit 2; }

# --- runtime packages the guest needs for these binaries (ldd + dpkg -S) ---
base_pkgs=$(sed -n '/^PKGS="/,/RXE_VM_EXTRA_DEBS/p' "$RXEVM" | tr -d '"' |
    sed 's/PKGS=//; s/\${RXE_VM_EXTRA_DEBS.*//' | tr '\n' ' ')
extra=" ${RXE_VM_EXTRA_DEBS:-} "
for cmd in "$@"; do
    for w in $cmd; do
        [ -f "$w" ] && [ -x "$w" ] || continue
        case "$(cd "$(dirname "$w")" && pwd -P)/" in "$SHARE"/*) ;; *)
            say "warning: $w is outside the shared folder $SHARE (use --share)" ;; esac
        while read -r lib; do
            [ -n "$lib" ] || continue
            pkg=""
            for cand in "$lib" "$(readlink -f "$lib")" "/usr$lib" "/usr$(readlink -f "$lib")"; do
                pkg=$(dpkg -S "$cand" 2>/dev/null | head -n1 | cut -d: -f1) && [ -n "$pkg" ] && break
            done
            [ -n "$pkg" ] || { say "warning: no Debian package owns $lib"; continue; }
            case " $base_pkgs $extra " in *" $pkg "*) ;; *) extra="$extra$pkg " ;; esac
        done < <(ldd "$w" 2>/dev/null | awk '/=> \//{print $3}')
    done
done
RXE_VM_EXTRA_DEBS=$(printf '%s\n' $extra | sort -u | tr '\n' ' ' | sed 's/ $//')
export RXE_VM_EXTRA_DEBS
[ -n "$RXE_VM_EXTRA_DEBS" ] && say "extra guest packages: $RXE_VM_EXTRA_DEBS"

# --- the guest script, in a run folder inside the share (the guest sees the same path) ---
RUN=$(mktemp -d "$SHARE/.rxe-vm-run.XXXXXX") || { say "cannot write into $SHARE"; exit 2; }
trap 'rm -rf "$RUN"' EXIT
{
    echo 'echo booted > '"'$RUN/booted'"
    echo 'export DMKV_RDMA_ADDR=192.168.77.1'
    echo 'export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:color=never}'
    echo 'export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}'
    echo 'pass=0; fail=0; skip=0'
    i=0
    for cmd in "$@"; do
        i=$((i + 1))
        q=$(printf '%s' "$cmd" | sed "s/'/'\\\\''/g")
        echo "echo '=== [$i] $q'"
        echo "t0=\$(date +%s)"
        echo "sh -c '$q'; rc=\$?"
        echo "t1=\$(date +%s)"
        echo "case \$rc in 0) pass=\$((pass+1)); r=PASS ;; 77) skip=\$((skip+1)); r=SKIP ;; *) fail=\$((fail+1)); r=\"FAIL (rc=\$rc)\" ;; esac"
        echo "echo \"=== [$i] \$r in \$((t1 - t0)) s\""
        echo "echo \"[$i] \$r: $q\" >> '$RUN/summary'"
    done
    echo 'echo "$pass passed, $fail failed, $skip skipped" >> '"'$RUN/summary'"
    echo '[ $fail -eq 0 ] || exit 1'
    echo '[ $pass -gt 0 ] || exit 77'
    echo 'exit 0'
} > "$RUN/guest.sh"

# --- boot (TCG unless DMKV_VM_KVM=1) ---
# 4 GiB: several ASan-built memory nodes and gateways run at once in the multi-gateway steps
vm=("$RXEVM" -s "$SHARE" -m "${DMKV_VM_MEM:-4096}" -t "${DMKV_VM_TIMEOUT:-900}" -- sh "$RUN/guest.sh")
if [ "${DMKV_VM_KVM:-0}" != 1 ] && [ -e /dev/kvm ] && command -v unshare >/dev/null &&
    unshare -m true 2>/dev/null; then
    : > "$RUN/nokvm"
    unshare -m bash -c 'mount --bind "$1" /dev/kvm && mount -o remount,bind,ro /dev/kvm 2>/dev/null
                        shift; exec "$@"' _ "$RUN/nokvm" "${vm[@]}"
    rc=$?
else
    "${vm[@]}"
    rc=$?
fi

if [ ! -e "$RUN/booted" ]; then
    say "SKIP: the rxe VM could not boot or run the command (rxe-vm.sh exit $rc)"
    exit 77
fi
echo "---- rdma tests in the rxe VM ----"
cat "$RUN/summary" 2>/dev/null || echo "(no summary: the guest stopped early, exit $rc)"
if [ "$rc" = 124 ]; then say "the VM timed out"; exit 1; fi
exit "$rc"
