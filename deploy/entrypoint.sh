#!/bin/bash
# dmkv container entrypoint (deploy/Dockerfile, deploy/docker-compose.yml).
#
#   dmkv-entrypoint memnode       dmkv-memnode: tcp transport on :7000 and, with rdma, the
#                                 rdma_cm listener on :7471 at this container's eth0 address
#   dmkv-entrypoint gateway       dmkv-gateway /etc/dmkv/gateway.conf --memnode ... (one per
#                                 host in DMKV_MEMNODES, in pool order)
#   dmkv-entrypoint client        waits for the gateways, shows that they share data, idles
#   dmkv-entrypoint CMD [ARGS]    runs CMD (after the rdma setup for the roles above only)
#
# Environment
#   DMKV_TRANSPORT   rdma (default) | tcp | auto. rdma: create a Soft-RoCE device on
#                    DMKV_NETDEV unless an RDMA device already sits on it (a real RoCE NIC),
#                    and fail with an explanation when that is impossible. tcp: no RDMA at
#                    all, gateways use tcp://. auto: rdma when possible, else tcp (logged).
#   DMKV_NETDEV      interface for RoCE (default: the default route's interface, else eth0)
#   DMKV_RXE_NAME    name of the rxe device (default rxe_<hostname>: rdma device names are
#                    host-wide while the kernel's rdma netns mode is "shared", the default)
#   DMKV_MEMNODES    gateway: memory-node hosts, space-separated, pool order (default
#                    "memnode"); "self" = this host (host networking): the address of
#                    DMKV_NETDEV for rdma, 127.0.0.1 for tcp
#   DMKV_MEMNODE_PORT (7000), DMKV_RDMA_PORT (7471), DMKV_MEMNODE_SIZE (1g),
#   DMKV_MEMNODE_BIND (memory node's tcp listen address, 0.0.0.0),
#   DMKV_GATEWAY_CONF (/etc/dmkv/gateway.conf), DMKV_GATEWAYS (client: host[:port] list,
#   default "gateway1 gateway2")
set -euo pipefail

log() { echo "dmkv-entrypoint: $*" >&2; }

TRANSPORT=${DMKV_TRANSPORT:-rdma}
NETDEV=${DMKV_NETDEV:-$(ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i+1); exit}}')}
NETDEV=${NETDEV:-eth0}
RXE_NAME=${DMKV_RXE_NAME:-rxe_$(tr -c 'A-Za-z0-9_\n' '_' </proc/sys/kernel/hostname | cut -c1-40)}
MEMNODE_PORT=${DMKV_MEMNODE_PORT:-7000}
RDMA_PORT=${DMKV_RDMA_PORT:-7471}

case "$TRANSPORT" in rdma|tcp|auto) ;; *)
    log "DMKV_TRANSPORT must be rdma, tcp or auto (got '$TRANSPORT')"; exit 2 ;; esac

explain_no_rxe() {
    cat >&2 <<EOF
dmkv-entrypoint: ----------------------------------------------------------------------
dmkv-entrypoint: cannot use RDMA in this container: $1
dmkv-entrypoint:
dmkv-entrypoint: Soft-RoCE needs the HOST kernel's rdma_rxe module (containers share the
dmkv-entrypoint: host kernel). On the host:
dmkv-entrypoint:     sudo modprobe rdma_rxe ib_uverbs rdma_ucm
dmkv-entrypoint: Debian and Fedora kernels ship it (CONFIG_RDMA_RXE=m), Ubuntu in
dmkv-entrypoint: linux-modules-extra; the kernels of Docker Desktop, WSL2 and many CI runners
dmkv-entrypoint: do not. Kernels whose rxe is not network-namespace aware (e.g. Linux 6.1)
dmkv-entrypoint: need host networking: deploy/docker-compose.host.yml (deploy/README.md).
dmkv-entrypoint: The container also needs: cap_add NET_ADMIN IPC_LOCK SYS_RESOURCE,
dmkv-entrypoint: ulimits memlock -1, and /dev/infiniband (see deploy/docker-compose.yml).
dmkv-entrypoint: Without RDMA, run everything over TCP instead:
dmkv-entrypoint:     DMKV_TRANSPORT=tcp docker-compose -f deploy/docker-compose.yml up
dmkv-entrypoint: ----------------------------------------------------------------------
EOF
}

# The RDMA device on $NETDEV ("" when none), from `rdma link show`:
#   link rxe_memnode/1 state ACTIVE physical_state LINK_UP netdev eth0
rdma_dev_on_netdev() {
    rdma link show 2>/dev/null |
        awk -v nd="$NETDEV" '{for (i = 1; i < NF; i++) if ($i == "netdev" && $(i+1) == nd) {split($2, a, "/"); print a[1]; exit}}'
}

# 0 when rdma_rxe is loaded or loadable, 1 when the host kernel certainly lacks it,
# 2 when we cannot tell from inside the container (the kernel may still autoload it).
rxe_module_state() {
    [ -d /sys/module/rdma_rxe ] && return 0
    if command -v modprobe >/dev/null && [ -d "/lib/modules/$(uname -r)" ]; then
        modprobe -n -q rdma_rxe 2>/dev/null && return 0
        return 1
    fi
    return 2
}

# Make sure an RDMA device sits on $NETDEV; 0 on success, 1 after explaining why not.
setup_rdma() {
    if ! command -v rdma >/dev/null; then explain_no_rxe "the rdma tool (iproute2) is missing"; return 1; fi
    if ! ip link show "$NETDEV" >/dev/null 2>&1; then explain_no_rxe "no interface $NETDEV"; return 1; fi
    local dev
    dev=$(rdma_dev_on_netdev)
    if [ -n "$dev" ]; then
        log "RDMA device $dev already on $NETDEV (RoCE NIC or rxe made earlier): using it"
    else
        local st=0
        rxe_module_state || st=$?
        if [ "$st" = 1 ]; then
            explain_no_rxe "the host kernel $(uname -r) has no rdma_rxe module (modprobe -n rdma_rxe failed)"
            return 1
        fi
        [ "$st" = 2 ] && log "rdma_rxe is not loaded (/sys/module/rdma_rxe missing) and /lib/modules is not visible here; trying anyway (the kernel may autoload it)"
        local out
        if ! out=$(rdma link add "$RXE_NAME" type rxe netdev "$NETDEV" 2>&1); then
            dev=$(rdma_dev_on_netdev) # another container on the same host netdev won the race?
            if [ -n "$dev" ]; then
                log "RDMA device $dev appeared on $NETDEV meanwhile: using it"
            elif [ ! -d /sys/module/rdma_rxe ]; then
                explain_no_rxe "the host has no rdma_rxe module loaded (/sys/module/rdma_rxe missing): $out"
            else
                explain_no_rxe "'rdma link add $RXE_NAME type rxe netdev $NETDEV' failed: $out (needs cap NET_ADMIN)"
            fi
            [ -n "$dev" ] || return 1
        else
            dev=$RXE_NAME
            log "created Soft-RoCE device $dev on $NETDEV"
        fi
    fi
    # The verbs and rdma_cm character devices must be reachable in here.
    if [ ! -e /dev/infiniband/rdma_cm ] || ! ls /dev/infiniband/uverbs* >/dev/null 2>&1; then
        explain_no_rxe "/dev/infiniband/rdma_cm or uverbs* missing: load ib_uverbs and rdma_ucm on the host and give the container /dev/infiniband"
        return 1
    fi
    if [ "$(ulimit -l)" != unlimited ]; then
        ulimit -l unlimited 2>/dev/null ||
            log "warning: memlock limit is $(ulimit -l) KiB (set ulimits memlock -1): registering the memory node's region may fail"
    fi
    # wait for the port to come up and its IPv4 GID (RoCEv2) to appear
    for _ in $(seq 50); do
        grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null &&
            grep -qs "ffff:" /sys/class/infiniband/"$dev"/ports/1/gids/* && break
        sleep 0.1
    done
    log "$(rdma link show "$dev/1" 2>/dev/null || echo "$dev")"
    return 0
}

use_rdma=0
role=${1:-gateway}
case "$role" in memnode|gateway)
    if [ "$TRANSPORT" != tcp ]; then
        if setup_rdma; then
            use_rdma=1
        elif [ "$TRANSPORT" = auto ]; then
            log "DMKV_TRANSPORT=auto: falling back to the tcp transport"
        else
            exit 1
        fi
    fi ;;
esac

# IPv4 address of $NETDEV (where the rdma_cm listener binds and RoCEv2 GIDs come from)
netdev_addr() {
    local a
    a=$(ip -4 -o addr show dev "$NETDEV" 2>/dev/null | awk '{split($4, x, "/"); print x[1]; exit}')
    [ -n "$a" ] || { log "$NETDEV has no IPv4 address"; exit 1; }
    echo "$a"
}

gw_port() { case "$1" in *:*) echo "${1##*:}" ;; *) echo 6379 ;; esac; }

# wait_tcp HOST PORT SECONDS: until HOST:PORT accepts a connection
wait_tcp() {
    for _ in $(seq $(($3 * 5))); do
        (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
        sleep 0.2
    done
    log "$1:$2 did not accept connections within $3 s"
    return 1
}

case "$role" in
memnode)
    shift
    args=(--bind "${DMKV_MEMNODE_BIND:-0.0.0.0}" --port "$MEMNODE_PORT" --size "${DMKV_MEMNODE_SIZE:-1g}")
    if [ "$use_rdma" = 1 ]; then
        addr=$(netdev_addr)
        args+=(--rdma-port "$RDMA_PORT" --rdma-bind "$addr")
    fi
    exec dmkv-memnode "${args[@]}" "$@"
    ;;
gateway)
    shift
    args=("${DMKV_GATEWAY_CONF:-/etc/dmkv/gateway.conf}")
    for h in ${DMKV_MEMNODES:-memnode}; do
        if [ "$h" = self ]; then
            wait_tcp 127.0.0.1 "$MEMNODE_PORT" 120
            if [ "$use_rdma" = 1 ]; then h=$(netdev_addr); else h=127.0.0.1; fi
        else
            wait_tcp "$h" "$MEMNODE_PORT" 120
        fi
        if [ "$use_rdma" = 1 ]; then
            args+=(--memnode "rdma://$h:$RDMA_PORT")
        else
            args+=(--memnode "tcp://$h:$MEMNODE_PORT")
        fi
    done
    # the memory node starts its rdma listener right after its tcp port
    [ "$use_rdma" = 1 ] && sleep 1
    exec dmkv-gateway "${args[@]}" "$@"
    ;;
client)
    shift
    # DMKV_GATEWAYS: host or host:port (default port 6379), space-separated
    gws=(${DMKV_GATEWAYS:-gateway1 gateway2})
    for g in "${gws[@]}"; do wait_tcp "${g%%:*}" "$(gw_port "$g")" 180; done
    first=${gws[0]}
    last=${gws[${#gws[@]} - 1]}
    redis-cli -h "${first%%:*}" -p "$(gw_port "$first")" SET dmkv:hello "written via $first" >/dev/null
    log "SET on $first, GET on $last: $(redis-cli -h "${last%%:*}" -p "$(gw_port "$last")" GET dmkv:hello)"
    log "try: docker-compose -f deploy/docker-compose.yml exec client redis-cli -h ${first%%:*} -p $(gw_port "$first")"
    exec sleep infinity
    ;;
*)
    exec "$@"
    ;;
esac
