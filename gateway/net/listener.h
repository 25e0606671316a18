/* Listening sockets shared by worker threads through SO_REUSEPORT. */
#ifndef GW_NET_LISTENER_H
#define GW_NET_LISTENER_H

#include <stddef.h>
#include <uv.h>

/* Create a TCP socket with SO_REUSEADDR + SO_REUSEPORT bound to addr:port (IPv4 or IPv6
 * literal, or "localhost") and wrap it in h (initialised on loop), not listening yet: the
 * port refuses connections until gw_listen_start. Returns 0, or -1 with a message in err
 * (h is then closed when it was initialised; *inited says whether it was). */
int gw_listen_bind(uv_loop_t *loop, uv_tcp_t *h, int *inited, const char *addr, int port, char *err,
                   size_t errlen);

/* Start listening on h (bound by gw_listen_bind) with backlog 511, calling cb for each
 * connection, on h's loop thread. Returns 0 or a libuv error code. */
int gw_listen_start(uv_tcp_t *h, uv_connection_cb cb);

#endif
