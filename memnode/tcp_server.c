/* dmkv-memnode's tcp transport server (see tcp_server.h and dmkv/tcp_proto.h).
 *
 * Per client: bytes are read into a 64 KiB buffer and parsed incrementally (header, then
 * body); large bodies are read straight into the body buffer, which grows as data arrives
 * (a header that merely claims a big body costs nothing). A complete request is executed
 * at once; the replies to every request of one read go out together in one writev of
 * several buffers (dmkv/write_now.h; a uv_write for what the socket did not take), the
 * server half of doorbell batching. Reading stops while
 * queued replies exceed the high-water mark; the unparsed rest of the read buffer waits
 * until they drain. */
#include "tcp_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "dmkv/log.h"
#include "dmkv/write_now.h"
#include "mn_fence.h"

#define RBUF_SIZE (64u << 10)

struct mn_client {
    union { /* accepted on the unix listener: a pipe; both are uv_stream_t, used through sock */
        uv_tcp_t sock;
        uv_pipe_t pipe;
    };
    mn_tcp_server_t *s;
    mn_client_t *prev, *next;
    char peer[64];
    int closing;          /* uv_close called */
    uint64_t accepted_ms; /* uv_now when accepted (fences spare young connections) */
    int draining;         /* error reply queued: close once the write queue is empty */
    int paused;           /* reading stopped for backpressure */
    int reading;          /* uv_read_start in effect */
    uint64_t wq_bytes;    /* memory the queued and unwritten replies hold (their cap) */
    unsigned wq_reqs;     /* uv_writes in flight */
    mn_reply_t **outq;    /* replies of this read, not yet written */
    unsigned outn, outcap;
    mn_req_t req;      /* the request stream: parser and execution (mn_request.h) */
    size_t rpos, rlen; /* unparsed bytes rbuf[rpos, rlen) */
    uint8_t rbuf[RBUF_SIZE];
};

/* One uv_write carrying several replies. */
typedef struct reply_write {
    uv_write_t req;
    mn_client_t *c;
    size_t bytes;
    unsigned n;
    mn_reply_t *r[];
} reply_write_t;

static int flush_replies(mn_client_t *c);
static void parse(mn_client_t *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void reading(mn_client_t *c, int on)
{
    if (on == c->reading) return;
    c->reading = on;
    if (on)
        uv_read_start((uv_stream_t *)&c->sock, on_alloc, on_read);
    else
        uv_read_stop((uv_stream_t *)&c->sock);
}

static void on_client_closed(uv_handle_t *h)
{
    mn_client_t *c = h->data;
    mn_tcp_server_t *s = c->s;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->clients = c->next;
    if (c->next) c->next->prev = c->prev;
    s->stats.connections--;
    for (unsigned i = 0; i < c->outn; i++)
        mn_reply_free(c->outq[i]);
    free(c->outq);
    mn_req_free(&c->req);
    free(c);
}

static void client_close(mn_client_t *c)
{
    if (c->closing) return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->sock, on_client_closed);
}

unsigned mn_tcp_fence(mn_tcp_server_t *s, uint16_t holder)
{
    unsigned n = 0;
    for (mn_client_t *c = s->clients; c; c = c->next)
        if (!c->closing && c->req.holder == holder &&
            mn_fence_cuts(uv_now(s->loop), c->accepted_ms)) {
            dm_log(DM_LOG_VERBOSE, "Client %s: fenced (holder %u)", c->peer, (unsigned)holder);
            client_close(c);
            n++;
        }
    return n;
}

/* Replies were written: close a draining client once none is left, resume a paused one
 * below the low water mark. Returns 1 when c was resumed (parse its read buffer again). */
static int replies_written(mn_client_t *c)
{
    if (c->closing) return 0;
    if (c->draining) {
        if (c->wq_reqs == 0) client_close(c);
        return 0;
    }
    if (c->paused && c->wq_bytes < MN_TCP_LOW_WATER) {
        c->paused = 0;
        return 1;
    }
    return 0;
}

static void on_write(uv_write_t *req, int status)
{
    reply_write_t *w = (reply_write_t *)req;
    mn_client_t *c = w->c;
    for (unsigned i = 0; i < w->n; i++)
        mn_reply_free(w->r[i]);
    c->wq_bytes -= w->bytes;
    c->wq_reqs--;
    free(w);
    if (c->closing) return;
    if (status < 0) {
        dm_log(DM_LOG_VERBOSE, "Client %s: write failed: %s", c->peer, uv_strerror(status));
        client_close(c);
        return;
    }
    if (replies_written(c)) parse(c); /* the rest of the read buffer; reads again once done */
}

/* The request stream's reply sink: queue r for c (takes ownership); flush_replies writes
 * the queue. */
static void reply_send(void *arg, mn_reply_t *r)
{
    mn_client_t *c = arg;
    if (c->outn == c->outcap) {
        unsigned cap = c->outcap ? c->outcap * 2 : 16;
        mn_reply_t **q = realloc(c->outq, cap * sizeof(*q));
        if (!q) {
            mn_reply_free(r);
            client_close(c);
            return;
        }
        c->outq = q, c->outcap = cap;
    }
    c->outq[c->outn++] = r;
    c->wq_bytes += r->cap; /* what it holds: a small reply takes a kept buffer */
}

/* Write the queued replies with one writev, or one uv_write for what the socket did not
 * take at once. Returns 1 when all were written at once (replies_written is then the
 * caller's), else 0. */
static int flush_replies(mn_client_t *c)
{
    if (!c->outn || c->closing) return 0;
    /* A message of the load carries ~15 batches, one reply each; -P 16 from many clients
     * more: 64 on the stack (1 KB) keeps the malloc off the usual flush. */
    uv_buf_t small[64], *b = c->outn <= 64 ? small : malloc(c->outn * sizeof(*b));
    if (!b) {
        client_close(c);
        return 0;
    }
    unsigned n = c->outn, nbufs = n;
    uint64_t bytes = 0;
    for (unsigned i = 0; i < n; i++) {
        bytes += c->outq[i]->cap;
        b[i] = uv_buf_init((char *)c->outq[i]->data, (unsigned)c->outq[i]->len);
    }
    c->outn = 0;
    c->s->stats.reply_writes++;
    int rc = dm_write_now((uv_stream_t *)&c->sock, b, &nbufs);
    reply_write_t *w = NULL;
    if (rc == 0) { /* the socket did not take it all: a write request keeps the replies */
        w = malloc(sizeof(*w) + n * sizeof(mn_reply_t *));
        if (w) {
            *w = (reply_write_t){.c = c, .bytes = bytes, .n = n};
            memcpy(w->r, c->outq, n * sizeof(mn_reply_t *));
            c->wq_reqs++;
            rc = uv_write(&w->req, (uv_stream_t *)&c->sock, b, nbufs, on_write);
            if (rc) c->wq_reqs--, free(w);
        } else {
            rc = UV_ENOMEM;
        }
    }
    if (b != small) free(b);
    if (rc == 0) return 0;           /* on_write frees them */
    for (unsigned i = 0; i < n; i++) /* written whole (1) or failed: done with */
        mn_reply_free(c->outq[i]);
    c->wq_bytes -= bytes;
    if (rc == 1) return 1; /* the kernel took it all: no write request (dmkv/write_now.h) */
    dm_log(DM_LOG_VERBOSE, "Client %s: write failed: %s", c->peer, uv_strerror(rc));
    client_close(c);
    return 0;
}

static void parse_requests(mn_client_t *c);

/* Consume rbuf[rpos, rlen) until it is empty, the client is paused or failed, then write
 * the replies of everything executed. Restarts reading when the buffer is consumed. */
static void parse(mn_client_t *c)
{
    do
        parse_requests(c);
    while (flush_replies(c) && replies_written(c));
}

/* After the request stream ran something: close, drain or pause as it and the write queue
 * say. Returns 0 while the client can go on. */
static int after_request(mn_client_t *c)
{
    if (c->req.state == MN_REQ_CLOSE) {
        client_close(c);
        return -1;
    }
    if (c->req.state == MN_REQ_FAILED && !c->draining) {
        c->draining = 1; /* its error reply is queued: close once written */
        reading(c, 0);
    }
    if (c->closing || c->draining) return -1;
    if (c->wq_bytes > MN_TCP_HIGH_WATER) {
        c->paused = 1;
        dm_log(DM_LOG_DEBUG, "Client %s: %llu reply bytes queued, pausing reads", c->peer,
               (unsigned long long)c->wq_bytes);
    }
    return 0;
}

static void parse_requests(mn_client_t *c)
{
    while (c->rpos < c->rlen && !c->closing && !c->draining && !c->paused) {
        c->rpos += mn_req_feed(&c->req, c->rbuf + c->rpos, c->rlen - c->rpos);
        if (after_request(c)) return;
    }
    if (c->closing || c->draining) return;
    if (c->paused) {
        reading(c, 0);
    } else if (c->rpos == c->rlen) {
        c->rpos = c->rlen = 0;
        reading(c, 1);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    mn_client_t *c = h->data;
    (void)suggested;
    /* A body of a read buffer or more goes straight into place (64 MiB at a time); out of
     * memory for it: a NULL buffer, libuv reports UV_ENOBUFS. */
    if (mn_req_body_missing(&c->req) >= RBUF_SIZE) {
        uint64_t room;
        uint8_t *at = mn_req_body_room(&c->req, 64u << 20, &room);
        *buf = uv_buf_init((char *)at, at ? (unsigned)room : 0);
        return;
    }
    *buf = uv_buf_init((char *)c->rbuf, RBUF_SIZE);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    mn_client_t *c = st->data;
    if (c->closing) return;
    if (nread < 0) {
        if (nread == UV_EOF)
            dm_log(DM_LOG_VERBOSE, "Client %s closed the connection", c->peer);
        else
            dm_log(DM_LOG_VERBOSE, "Client %s: read error: %s", c->peer, uv_strerror((int)nread));
        client_close(c);
        return;
    }
    if (nread == 0) return;
    if ((uint8_t *)buf->base != c->rbuf) { /* landed in the body buffer (on_alloc) */
        mn_req_body_got(&c->req, (uint64_t)nread);
        if (!mn_req_body_missing(&c->req)) { /* complete: the request ran */
            if (after_request(c) == 0)
                parse(c); /* rbuf is empty: applies backpressure or keeps reading */
            else if (flush_replies(c))
                replies_written(c); /* a draining client closes */
        }
        return;
    }
    c->rpos = 0;
    c->rlen = (size_t)nread;
    c->s->stats.reads++;
    parse(c);
}

/* c->peer = "ip:port" of a tcp client (TCP_NODELAY set on the way). */
static void name_tcp_peer(mn_client_t *c)
{
    uv_tcp_nodelay(&c->sock, 1);
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    char ip[48] = "?";
    int port = 0;
    if (uv_tcp_getpeername(&c->sock, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    snprintf(c->peer, sizeof(c->peer), "%s:%d", ip, port);
}

static void on_connection(uv_stream_t *ls, int status)
{
    mn_tcp_server_t *s = ls->data;
    if (status < 0) {
        dm_log(DM_LOG_WARNING, "Accept error: %s", uv_strerror(status));
        return;
    }
    mn_client_t *c = calloc(1, sizeof(*c));
    if (!c) {
        dm_log(DM_LOG_WARNING, "Out of memory accepting a client");
        return;
    }
    c->s = s;
    mn_req_init(&c->req, &s->env, c->peer, reply_send, c);
    int unix_ls = ls == (uv_stream_t *)&s->unix_listener;
    if (unix_ls)
        uv_pipe_init(s->loop, &c->pipe, 0);
    else
        uv_tcp_init(s->loop, &c->sock);
    c->sock.data = c;
    c->next = s->clients;
    if (s->clients) s->clients->prev = c;
    s->clients = c;
    s->stats.connections++;
    c->accepted_ms = uv_now(s->loop);
    if (uv_accept(ls, (uv_stream_t *)&c->sock) != 0) {
        client_close(c);
        return;
    }
    if (unix_ls)
        snprintf(c->peer, sizeof(c->peer), "unix:%d", ++s->unix_accepted);
    else
        name_tcp_peer(c);
    dm_log(DM_LOG_VERBOSE, "Accepted %s", c->peer);
    reading(c, 1);
}

/* STATS fields only the server knows. */
static void fill_stats(void *arg, dm_tcp_stats_t *st)
{
    mn_tcp_server_t *s = arg;
    st->uptime_ms = uv_now(s->loop) - s->start_ms;
}

/* 1 when a process accepts connections on the unix socket at path. */
static int socket_answers(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* Listen on the unix socket at path (chmod to perm unless 0), replacing a socket file that
 * no process answers on. Returns 0 or a negative libuv error with a message in err. */
static int listen_unix(mn_tcp_server_t *s, const char *path, unsigned perm, char *err,
                       size_t errlen)
{
    struct stat st;
    /* A socket file left by a memory node that was killed: bind would fail on it. One that a
     * live process answers on, and anything else at the path, is not ours to remove. */
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        if (socket_answers(path)) {
            snprintf(err, errlen, "unix socket %s: another process is listening on it", path);
            return UV_EADDRINUSE;
        }
        unlink(path);
    }
    uv_pipe_init(s->loop, &s->unix_listener, 0);
    s->unix_listener.data = s;
    s->unix_listening = 1;
    int rc = uv_pipe_bind(&s->unix_listener, path), bound = rc == 0;
    if (!rc && perm) rc = chmod(path, perm) ? uv_translate_sys_error(errno) : 0;
    if (!rc) rc = uv_listen((uv_stream_t *)&s->unix_listener, 511, on_connection);
    if (rc) {
        snprintf(err, errlen, "cannot listen on unix socket %s: %s", path, uv_strerror(rc));
        s->unix_listening = 0;
        uv_close((uv_handle_t *)&s->unix_listener, NULL);
        if (bound) unlink(path);
        return rc;
    }
    snprintf(s->unix_path, sizeof(s->unix_path), "%s", path);
    return 0;
}

int mn_tcp_start(mn_tcp_server_t *s, uv_loop_t *loop, mn_region_t *region, const char *bind,
                 int port, const char *auth, const char *unix_path, unsigned unix_perm, char *err,
                 size_t errlen)
{
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->region = region;
    s->start_ms = uv_now(loop);
    if (auth && strlen(auth) > DM_TCP_MAX_TOKEN) {
        snprintf(err, errlen, "auth token longer than %u bytes", DM_TCP_MAX_TOKEN);
        return UV_EINVAL;
    }
    snprintf(s->auth, sizeof(s->auth), "%s", auth ? auth : "");
    s->env = (mn_req_env_t){
        .region = region, .auth = s->auth, .stats = &s->stats, .fill_stats = fill_stats, .arg = s};
    struct sockaddr_storage addr;
    int rc = strchr(bind, ':') ? uv_ip6_addr(bind, port, (struct sockaddr_in6 *)&addr)
                               : uv_ip4_addr(bind, port, (struct sockaddr_in *)&addr);
    if (rc) {
        snprintf(err, errlen, "bad bind address '%s': %s", bind, uv_strerror(rc));
        return rc;
    }
    /* The unix socket first: a client that finds the tcp port open finds it too. */
    if (unix_path && (rc = listen_unix(s, unix_path, unix_perm, err, errlen))) return rc;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->listening = 1;
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (rc) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", bind, port, uv_strerror(rc));
        mn_tcp_stop(s);
        return rc;
    }
    return 0;
}

int mn_tcp_port(mn_tcp_server_t *s)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    if (!s->listening || uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &sl)) return -1;
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

void mn_tcp_stop(mn_tcp_server_t *s)
{
    if (s->listening) {
        s->listening = 0;
        uv_close((uv_handle_t *)&s->listener, NULL);
    }
    if (s->unix_listening) {
        s->unix_listening = 0;
        uv_close((uv_handle_t *)&s->unix_listener, NULL);
        unlink(s->unix_path); /* as redis-server removes its unixsocket at shutdown */
    }
    for (mn_client_t *c = s->clients; c; c = c->next)
        client_close(c);
}
