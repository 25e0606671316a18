/* SO_REUSEPORT listeners: every worker thread binds its own socket to the same port and the
 * kernel spreads incoming connections over them (server/balance.h evens them out). */
#include "net/listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int gw_listen_bind(uv_loop_t *loop, uv_tcp_t *h, int *inited, const char *addr, int port, char *err,
                   size_t errlen)
{
    *inited = 0;
    struct sockaddr_storage ss;
    socklen_t sl;
    const char *a = strcmp(addr, "localhost") == 0 ? "127.0.0.1" : addr;
    memset(&ss, 0, sizeof(ss));
    if (uv_ip4_addr(a, port, (struct sockaddr_in *)&ss) == 0) {
        sl = sizeof(struct sockaddr_in);
    } else if (uv_ip6_addr(a, port, (struct sockaddr_in6 *)&ss) == 0) {
        sl = sizeof(struct sockaddr_in6);
    } else {
        snprintf(err, errlen, "Invalid bind address '%s'", addr);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        snprintf(err, errlen, "setsockopt(SO_REUSEPORT): %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (ss.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
        snprintf(err, errlen, "Could not create server TCP listening socket %s:%d: bind: %s", addr,
                 port, strerror(errno));
        close(fd);
        return -1;
    }
    int rc = uv_tcp_init(loop, h);
    if (rc == 0) {
        *inited = 1;
        rc = uv_tcp_open(h, fd);
        if (rc != 0) close(fd);
    } else {
        close(fd);
    }
    if (rc != 0) {
        snprintf(err, errlen, "Could not open %s:%d: %s", addr, port, uv_strerror(rc));
        return -1;
    }
    return 0;
}

int gw_listen_start(uv_tcp_t *h, uv_connection_cb cb)
{
    return uv_listen((uv_stream_t *)h, 511, cb);
}
