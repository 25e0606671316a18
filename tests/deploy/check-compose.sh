#!/bin/bash
# check-compose.sh -- static checks of deploy/ (no Docker engine needed; ctest deploy/compose_config)
#   1. deploy/docker-compose.yml and docker-compose.host.yml: `docker-compose config -q`
#      (Debian's docker-compose, which
#      scripts/install-deps.sh installs), with DMKV_TRANSPORT unset and =tcp; then the
#      resolved file (or, without docker-compose, the raw file through python3-yaml) must
#      have the services and the RDMA settings the deployment depends on.
#   2. deploy/Dockerfile: every COPY source exists, the stages the compose file builds
#      exist, the entrypoint parses (bash -n) and is executable.
#   3. Optional: tests/deploy/check-compose.sh BINARY... -- the runtime stage installs the
#      package of every library the binaries link directly (objdump NEEDED + dpkg -S).
# Exit: 0 ok, 1 a check failed, 77 neither docker-compose nor python3-yaml is available.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DOCKERFILE=$ROOT/deploy/Dockerfile
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

PY=""
for p in /usr/bin/python3 python3; do
    command -v "$p" >/dev/null && "$p" -c 'import yaml' 2>/dev/null && { PY=$p; break; }
done
resolved=$(mktemp)
trap 'rm -f "$resolved"' EXIT
[ -n "$PY" ] || command -v docker-compose >/dev/null || {
    echo "SKIP: neither docker-compose nor python3-yaml is installed"; exit 77; }

# --- 1. the compose files ---
for COMPOSE in "$ROOT/deploy/docker-compose.yml" "$ROOT/deploy/docker-compose.host.yml"; do
cf=deploy/$(basename "$COMPOSE")
if command -v docker-compose >/dev/null; then
    for t in "" tcp; do
        if out=$(cd "$ROOT" && DMKV_TRANSPORT=$t docker-compose -f "$COMPOSE" config -q 2>&1); then
            ok "$cf: docker-compose config -q${t:+ (DMKV_TRANSPORT=$t)}"
        else
            bad "$cf: docker-compose config -q${t:+ (DMKV_TRANSPORT=$t)}: $out"
        fi
    done
    (cd "$ROOT" && docker-compose -f "$COMPOSE" config >"$resolved" 2>/dev/null) || cp "$COMPOSE" "$resolved"
    what="docker-compose's resolved config"
elif [ -n "$PY" ]; then
    echo "note: docker-compose is not installed (scripts/install-deps.sh installs it);" \
         "falling back to a python3-yaml check of the raw file"
    cp "$COMPOSE" "$resolved"
    what="the raw file (python3-yaml)"
fi
if [ -n "$PY" ]; then
    if out=$("$PY" - "$resolved" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
errs = []
svcs = doc.get("services") or {}
for name in ("memnode", "gateway1", "gateway2", "client"):
    if name not in svcs:
        errs.append("no service %s" % name)
for name in ("memnode", "gateway1", "gateway2"):
    s = svcs.get(name) or {}
    caps = set(s.get("cap_add") or [])
    for c in ("NET_ADMIN", "IPC_LOCK", "SYS_RESOURCE"):
        if c not in caps:
            errs.append("%s: cap_add lacks %s" % (name, c))
    ml = (s.get("ulimits") or {}).get("memlock")
    if ml not in (-1, "-1") and not (isinstance(ml, dict) and ml.get("soft") == -1 and ml.get("hard") == -1):
        errs.append("%s: ulimits memlock is %r, want -1" % (name, ml))
    vols = [v if isinstance(v, str) else "%s:%s" % (v.get("source"), v.get("target")) for v in s.get("volumes") or []]
    devs = [d if isinstance(d, str) else str(d) for d in s.get("devices") or []]
    if not any(x.startswith("/dev/infiniband") for x in vols + devs):
        errs.append("%s: no /dev/infiniband volume or device" % name)
    b = s.get("build") or {}
    if not str(b.get("dockerfile", "")).endswith("deploy/Dockerfile"):
        errs.append("%s: build.dockerfile is not deploy/Dockerfile" % name)
    cmd = s.get("command")
    cmd = cmd if isinstance(cmd, list) else str(cmd).split()
    want = "memnode" if name == "memnode" else "gateway"
    if not cmd or cmd[0] != want:
        errs.append("%s: command %r, want [%r]" % (name, cmd, want))
c = svcs.get("client") or {}
if (c.get("build") or {}).get("target") != "client":
    errs.append("client: build.target is not client")
for g in ("gateway1", "gateway2"):
    s = svcs.get(g) or {}
    if s.get("network_mode") != "host" and not s.get("ports"):
        errs.append("%s: no published port" % g)
print("\n".join(errs))
sys.exit(1 if errs else 0)
EOF
    ); then
        ok "$cf: services memnode, gateway1, gateway2, client with caps, memlock, /dev/infiniband ($what)"
    else
        while read -r l; do [ -n "$l" ] && bad "$cf: $l"; done <<<"$out"
    fi
else
    echo "note: python3-yaml is missing: only docker-compose's own validation ran"
fi
for v in $(grep -oE '^\s+- \./[^:]+' "$COMPOSE" | sed 's/.*- \.\///' | sort -u); do
    [ -e "$ROOT/deploy/$v" ] && ok "$cf: volume source deploy/$v exists" || bad "$cf: volume source deploy/$v is missing"
done
for t in $(grep -E '^\s+target:' "$COMPOSE" | awk '{print $2}' | sort -u); do
    grep -qiE "^FROM .* AS $t\s*$" "$DOCKERFILE" || bad "$cf builds target $t, which deploy/Dockerfile lacks"
done
done

# --- 2. the Dockerfile ---
[ -f "$DOCKERFILE" ] || { bad "no deploy/Dockerfile"; echo "$fails check(s) failed"; exit 1; }
while read -r src; do
    [ -e "$ROOT/$src" ] && ok "Dockerfile COPY source $src exists" || bad "Dockerfile COPY source $src is missing"
done < <(awk 'toupper($1) == "COPY" && $2 !~ /^--/ { for (i = 2; i < NF; i++) print $i }' "$DOCKERFILE")
for stage in build runtime client; do
    grep -qiE "^FROM .* AS $stage\s*$" "$DOCKERFILE" && ok "Dockerfile stage $stage" || bad "Dockerfile has no stage $stage"
done
ep=$ROOT/deploy/entrypoint.sh
if bash -n "$ep" 2>/dev/null && [ -x "$ep" ]; then ok "deploy/entrypoint.sh parses and is executable"
else bad "deploy/entrypoint.sh does not parse (bash -n) or is not executable"; fi

# --- 3. runtime libraries of given binaries ---
runtime=$(awk '/^FROM .* AS runtime/{on=1; next} /^FROM /{on=0} on' "$DOCKERFILE")
for bin in "$@"; do
    [ -x "$bin" ] || { bad "$bin is not an executable"; continue; }
    command -v objdump >/dev/null || { echo "note: no objdump, library check skipped"; break; }
    for so in $(objdump -p "$bin" | awk '/NEEDED/{print $2}'); do
        case "$so" in libc.so*|libm.so*|libgcc_s.so*|libasan.so*|libubsan.so*|ld-linux*|libpthread*|libdl*|librt*) continue ;; esac
        path=$(ldd "$bin" | awk -v s="$so" '$1 == s {print $3}')
        pkg=""
        for cand in "$path" "$(readlink -f "$path")" "/usr$path" "/usr$(readlink -f "$path")"; do
            pkg=$(dpkg -S "$cand" 2>/dev/null | head -n1 | cut -d: -f1) && [ -n "$pkg" ] && break
        done
        if [ -z "$pkg" ]; then bad "$(basename "$bin"): no Debian package owns $so"
        elif grep -qw -- "$pkg" <<<"$runtime"; then ok "$(basename "$bin"): $so from $pkg is in the runtime stage"
        else bad "$(basename "$bin") needs $so ($pkg), which the runtime stage does not install"; fi
    done
done

[ $fails -eq 0 ] && { echo "deploy checks passed"; exit 0; }
echo "$fails deploy check(s) failed"
exit 1
