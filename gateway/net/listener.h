/* Listening sockets shared by worker threads through SO_REUSEPORT. */
#ifndef GW_NET_LISTENER_H
#define GW_NET_LISTENER_H

#include <stddef.h>
#include <uv.h>

/* Create a TCP socket with SO_REUSEADDR + SO_REUSEPORT bound to addr:port (IPv4 or IPv6
 * literal, or "localhost"), wrap it in h (initialised on loop) and start listening with
 * backlog 511, calling cb for each connection. Returns 0, or -1 with a message in err
 * (h is then closed when it was initialised; *inited says whether it was). */
int gw_listen_reuseport(uv_loop_t *loop, uv_tcp_t *h, int *inited, const char *addr, int port,
                        uv_connection_cb cb, char *err, size_t errlen);

#endif
