/* Internal to the tcp backend: the blocking connect + HELLO handshake shared by dm_tcp_open
 * (tcp.c) and dm_tcp_query_stats (tcp_handshake.c). */
#ifndef DMKV_TCP_INTERNAL_H
#define DMKV_TCP_INTERNAL_H

#include <stddef.h>

#include "dmkv/tcp_proto.h"

#define DM_TCP_CONNECT_TIMEOUT_MS 5000 /* connect, and each blocking handshake step */

/* Connect to host:port (any address family, TCP_NODELAY, 5 s timeout), or with port 0 to
 * the unix stream socket at the absolute path host (same protocol, no TCP stack), send HELLO with
 * the token from dm_tcp_set_auth and read the answer. Returns a connected blocking socket fd and
 * fills *hello, or a negative DM_E* (DM_EIO, DM_ETIMEDOUT, DM_EPROTO, DM_EAUTH) with a
 * message in err. The next request on the fd must use seq 1 or later (HELLO used seq 0). */
int dm_tcp_connect_hello(const char *host, int port, dm_tcp_hello_reply_t *hello, char *err,
                         size_t errlen);

#define DM_TCP_NAME_LEN 280 /* room for dm_tcp_node_name: a 255-byte host and a port */

/* A memory node's name for messages: "host:port", or "unix:///path" for port 0. */
void dm_tcp_node_name(const char *host, int port, char *buf, size_t len);

/* Blocking send/receive of exactly len bytes, waiting at most timeout_ms for each chunk.
 * Returns 0, DM_ETIMEDOUT or DM_EIO (peer closed or socket error). */
int dm_tcp_io_all(int fd, void *buf, size_t len, int writing, int timeout_ms);

#endif
