/* The tcp backend's blocking part: connect with a timeout, the HELLO handshake, the auth
 * token setting and the one-shot STATS query. Runs before a socket joins a libuv loop. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dmkv/errors.h"
#include "dmkv/verbs.h"
#include "dmkv/transport.h"
#include "tcp_internal.h"

static char auth_token[DM_TCP_MAX_TOKEN + 1];

void dm_tcp_set_auth(const char *token)
{
    snprintf(auth_token, sizeof(auth_token), "%s", token ? token : "");
}

int dm_tcp_io_all(int fd, void *buf, size_t len, int writing, int timeout_ms)
{
    uint8_t *p = buf;
    while (len) {
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int pr = poll(&pfd, 1, timeout_ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) return DM_ETIMEDOUT;
        if (pr < 0) return DM_EIO;
        ssize_t k = writing ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, p, len, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k <= 0) return DM_EIO;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Non-blocking connect to one address, waiting up to the connect timeout. Returns fd or -1
 * with errno set. */
static int connect_one(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
    if (errno == EINPROGRESS) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int pr;
        do
            pr = poll(&pfd, 1, DM_TCP_CONNECT_TIMEOUT_MS);
        while (pr < 0 && errno == EINTR);
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (pr == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
            return fd;
        errno = pr == 0 ? ETIMEDOUT : (soerr ? soerr : errno);
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

void dm_tcp_node_name(const char *host, int port, char *buf, size_t len)
{
    if (port == 0)
        snprintf(buf, len, "unix://%s", host);
    else
        snprintf(buf, len, "%s:%d", host, port);
}

static int connect_to(const char *host, int port, char *err, size_t errlen)
{
    if (port == 0) { /* a unix socket: host is its path */
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(host) >= sizeof(sa.sun_path)) {
            snprintf(err, errlen, "unix socket path '%s' longer than %zu bytes", host,
                     sizeof(sa.sun_path) - 1);
            return DM_EINVAL;
        }
        memcpy(sa.sun_path, host, strlen(host) + 1);
        struct addrinfo ai = {.ai_family = AF_UNIX,
                              .ai_socktype = SOCK_STREAM,
                              .ai_addr = (struct sockaddr *)&sa,
                              .ai_addrlen = sizeof(sa)};
        int fd = connect_one(&ai);
        if (fd < 0) {
            int why = errno;
            snprintf(err, errlen, "cannot connect to memory node unix://%s: %s", host,
                     strerror(why));
            return why == ETIMEDOUT ? DM_ETIMEDOUT : DM_EIO;
        }
        return fd;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai) {
        snprintf(err, errlen, "cannot resolve memory node host '%s': %s", host, gai_strerror(gai));
        return DM_EIO;
    }
    int fd = -1, why = ECONNREFUSED;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = connect_one(ai);
        if (fd < 0) why = errno;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to memory node %s:%d: %s", host, port, strerror(why));
        return why == ETIMEDOUT ? DM_ETIMEDOUT : DM_EIO;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    return fd;
}

/* Send HELLO on fd and parse the answer. Returns 0 or DM_E* with err filled. */
static int hello(int fd, const char *name, dm_tcp_hello_reply_t *out, char *err, size_t errlen)
{
    size_t tlen = strlen(auth_token);
    uint8_t req[sizeof(dm_tcp_hdr_t) + sizeof(dm_tcp_hello_t) + DM_TCP_MAX_TOKEN];
    dm_tcp_hdr_t h = {.magic = DM_TCP_MAGIC,
                      .type = DM_TCP_HELLO,
                      .seq = 0,
                      .body_len = sizeof(dm_tcp_hello_t) + tlen};
    dm_tcp_hello_t hb = {
        .version = DM_TCP_PROTO_VERSION, .token_len = (uint16_t)tlen, .holder = dm_holder_id()};
    memcpy(req, &h, sizeof(h));
    memcpy(req + sizeof(h), &hb, sizeof(hb));
    memcpy(req + sizeof(h) + sizeof(hb), auth_token, tlen);
    int rc = dm_tcp_io_all(fd, req, sizeof(h) + sizeof(hb) + tlen, 1, DM_TCP_CONNECT_TIMEOUT_MS);
    dm_tcp_hdr_t rh;
    if (!rc) rc = dm_tcp_io_all(fd, &rh, sizeof(rh), 0, DM_TCP_CONNECT_TIMEOUT_MS);
    if (rc) {
        snprintf(err, errlen, "memory node %s: handshake failed (%s)", name,
                 rc == DM_ETIMEDOUT ? "no answer within 5 s" : "connection closed");
        return rc;
    }
    int is_hello = rh.type == (DM_TCP_HELLO | DM_TCP_REPLY);
    if (rh.magic != DM_TCP_MAGIC || (!is_hello && rh.type != (DM_TCP_ERROR | DM_TCP_REPLY)) ||
        rh.body_len > DM_TCP_MAX_TEXT || (rh.status == 0 && (!is_hello || rh.seq != 0))) {
        snprintf(err, errlen, "%s does not speak the dmkv memory-node protocol", name);
        return DM_EPROTO;
    }
    char body[DM_TCP_MAX_TEXT + 1];
    if (dm_tcp_io_all(fd, body, rh.body_len, 0, DM_TCP_CONNECT_TIMEOUT_MS)) {
        snprintf(err, errlen, "memory node %s: handshake failed (truncated answer)", name);
        return DM_EIO;
    }
    body[rh.body_len] = 0;
    if (rh.status != 0) {
        int st = rh.status == DM_EAUTH || rh.status == DM_EPROTO ? rh.status : DM_EIO;
        snprintf(err, errlen, "memory node %s refused the connection: %s", name, body);
        return st;
    }
    if (rh.body_len != sizeof(*out)) {
        snprintf(err, errlen, "memory node %s: malformed HELLO answer", name);
        return DM_EPROTO;
    }
    memcpy(out, body, sizeof(*out));
    if (out->version != DM_TCP_PROTO_VERSION) {
        snprintf(err, errlen, "memory node %s speaks protocol %u, this build %u", name,
                 out->version, DM_TCP_PROTO_VERSION);
        return DM_EPROTO;
    }
    return 0;
}

int dm_tcp_connect_hello(const char *host, int port, dm_tcp_hello_reply_t *out, char *err,
                         size_t errlen)
{
    if (!host || !*host || port < 0 || port > 65535 || (port == 0 && host[0] != '/')) {
        snprintf(err, errlen, "bad memory node address %s:%d", host ? host : "(null)", port);
        return DM_EINVAL;
    }
    int fd = connect_to(host, port, err, errlen);
    if (fd < 0) return fd;
    char name[DM_TCP_NAME_LEN];
    dm_tcp_node_name(host, port, name, sizeof(name));
    int rc = hello(fd, name, out, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int dm_tcp_query_stats(const char *host, int port, dm_tcp_stats_t *out, char *err, size_t errlen)
{
    dm_tcp_hello_reply_t hr;
    int fd = dm_tcp_connect_hello(host, port, &hr, err, errlen);
    if (fd < 0) return fd;
    dm_tcp_hdr_t h = {.magic = DM_TCP_MAGIC, .type = DM_TCP_STATS, .seq = 1};
    int rc = dm_tcp_io_all(fd, &h, sizeof(h), 1, DM_TCP_CONNECT_TIMEOUT_MS);
    if (!rc) rc = dm_tcp_io_all(fd, &h, sizeof(h), 0, DM_TCP_CONNECT_TIMEOUT_MS);
    if (!rc && (h.magic != DM_TCP_MAGIC || h.type != (DM_TCP_STATS | DM_TCP_REPLY) ||
                h.status != 0 || h.seq != 1 || h.body_len != sizeof(*out)))
        rc = DM_EPROTO;
    if (!rc) rc = dm_tcp_io_all(fd, out, sizeof(*out), 0, DM_TCP_CONNECT_TIMEOUT_MS);
    close(fd);
    if (rc) {
        char name[DM_TCP_NAME_LEN];
        dm_tcp_node_name(host, port, name, sizeof(name));
        snprintf(err, errlen, "memory node %s: STATS failed: %s", name, dm_strerror(rc));
    }
    return rc;
}
