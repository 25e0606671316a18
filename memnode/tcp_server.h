/* dmkv-memnode's tcp transport server: HELLO, VERBS and STATS (dmkv/tcp_proto.h) on one
 * libuv loop. The loop's single thread executes every batch in arrival order, so each verb
 * is atomic with respect to all others. Nothing a client sends makes it touch memory outside
 * the region or crash: bad verbs get a per-verb DM_ERANGE / DM_EALIGN / DM_EINVAL, malformed
 * messages get a DM_TCP_ERROR reply and that connection is closed. A client whose unsent
 * replies exceed MN_TCP_HIGH_WATER bytes is not read from until they drain below
 * MN_TCP_LOW_WATER. */
#ifndef MEMNODE_TCP_SERVER_H
#define MEMNODE_TCP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "dmkv/tcp_proto.h"
#include "mn_region.h"
#include "mn_request.h"

#define MN_TCP_HIGH_WATER (64ull << 20) /* bytes of queued replies that pause reading */
#define MN_TCP_LOW_WATER (16ull << 20)  /* resume reading below this */

typedef struct mn_client mn_client_t;

#define MN_UNIX_PATH_MAX 108 /* sizeof sockaddr_un.sun_path, its NUL included (Linux) */

typedef struct mn_tcp_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_pipe_t unix_listener; /* --unixsocket: the same protocol without the TCP stack */
    int unix_listening;
    unsigned unix_accepted; /* names its connections (peer "unix:N") */
    char unix_path[MN_UNIX_PATH_MAX];
    mn_region_t *region;
    char auth[DM_TCP_MAX_TOKEN + 1]; /* required HELLO token; "" = none */
    uint64_t start_ms;               /* uv_now at start, for uptime */
    dm_tcp_stats_t stats;            /* counters served by STATS (region fields filled then) */
    mn_client_t *clients;            /* connected clients (doubly linked) */
    mn_req_env_t env;                /* what their request streams share */
    int listening;
} mn_tcp_server_t;

/* Start listening on bind:port (IPv4 or IPv6 numeric address; port 0 = any free port).
 * auth NULL or "" = no token required; at most DM_TCP_MAX_TOKEN bytes. unix_path (NULL:
 * none) is a unix stream socket served the same way, bound before the tcp port (chmod to
 * unix_perm unless 0): a gateway on this host then skips the loopback TCP stack (about 0.9 s
 * of CPU per million keys loaded, docs/throughput.md). A socket file no process answers on
 * (a killed node's) is replaced; a live one is refused (UV_EADDRINUSE). mn_tcp_stop closes
 * it and removes the file. Returns 0, or a negative libuv error code with a message in err
 * (errlen bytes). */
int mn_tcp_start(mn_tcp_server_t *s, uv_loop_t *loop, mn_region_t *region, const char *bind,
                 int port, const char *auth, const char *unix_path, unsigned unix_perm, char *err,
                 size_t errlen);

/* Fence (mn_fence.h): close every connection whose HELLO named holder and that was accepted
 * at least MN_FENCE_FRESH_MS ago, at once: bytes it sent that were not executed yet
 * (unread, or parsed while paused) are dropped. Returns how many were closed. */
unsigned mn_tcp_fence(mn_tcp_server_t *s, uint16_t holder);

/* The port actually bound (host order), or -1. */
int mn_tcp_port(mn_tcp_server_t *s);

/* Stop listening and close every client connection; the loop must run again to release the
 * handles (uv_run returns once they are closed). */
void mn_tcp_stop(mn_tcp_server_t *s);

#endif
