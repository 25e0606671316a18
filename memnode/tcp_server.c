/* dmkv-memnode's tcp transport server (see tcp_server.h and dmkv/tcp_proto.h).
 *
 * Per client: bytes are read into a 64 KiB buffer and parsed incrementally (header, then
 * body); large bodies are read straight into the body buffer, which grows as data arrives
 * (a header that merely claims a big body costs nothing). A complete request is executed
 * at once; the replies to every request of one read go out together in one uv_write
 * (writev of several buffers), the server half of doorbell batching. Reading stops while
 * queued replies exceed the high-water mark; the unparsed rest of the read buffer waits
 * until they drain. */
#include "tcp_server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/errors.h"
#include "dmkv/region_exec.h"
#include "dmkv/superblock.h"
#include "dmkv/verbs.h"
#include "dmkv/log.h"

#define RBUF_SIZE (64u << 10)
#define BODY_KEEP (1u << 20) /* body buffers up to this are kept for the next request */

struct mn_client {
    uv_tcp_t sock;
    mn_tcp_server_t *s;
    mn_client_t *prev, *next;
    char peer[64];
    int closing;    /* uv_close called */
    int draining;   /* error reply queued: close once the write queue is empty */
    int paused;     /* reading stopped for backpressure */
    int hello_done; /* HELLO accepted */
    int reading;    /* uv_read_start in effect */
    uint64_t wq_bytes;
    unsigned wq_reqs;    /* uv_writes in flight */
    struct reply **outq; /* replies of this read, not yet written */
    unsigned outn, outcap;
    /* parser */
    uint8_t hbuf[sizeof(dm_tcp_hdr_t)];
    size_t hgot;
    int in_body;
    dm_tcp_hdr_t hdr;
    uint8_t *body;
    uint64_t body_cap, body_got;
    size_t rpos, rlen; /* unparsed bytes rbuf[rpos, rlen) */
    uint8_t rbuf[RBUF_SIZE];
};

typedef struct reply {
    size_t len;
    uint8_t data[]; /* dm_tcp_hdr_t + body */
} reply_t;

/* One uv_write carrying several replies. */
typedef struct reply_write {
    uv_write_t req;
    mn_client_t *c;
    size_t bytes;
    unsigned n;
    reply_t *r[];
} reply_write_t;

static void flush_replies(mn_client_t *c);

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
        free(c->outq[i]);
    free(c->outq);
    free(c->body);
    free(c);
}

static void client_close(mn_client_t *c)
{
    if (c->closing) return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->sock, on_client_closed);
}

/* Allocate a reply with a header for (type, status, seq, count) and body_len body bytes.
 * NULL when out of memory. */
static reply_t *reply_new(uint8_t type, int status, uint32_t seq, uint32_t count, uint64_t body_len)
{
    reply_t *r = malloc(sizeof(*r) + sizeof(dm_tcp_hdr_t) + body_len);
    if (!r) return NULL;
    r->len = sizeof(dm_tcp_hdr_t) + body_len;
    dm_tcp_hdr_t h = {.magic = DM_TCP_MAGIC,
                      .type = type | DM_TCP_REPLY,
                      .status = (int16_t)status,
                      .seq = seq,
                      .count = count,
                      .body_len = body_len};
    memcpy(r->data, &h, sizeof(h));
    return r;
}

static void on_write(uv_write_t *req, int status)
{
    reply_write_t *w = (reply_write_t *)req;
    mn_client_t *c = w->c;
    for (unsigned i = 0; i < w->n; i++)
        free(w->r[i]);
    c->wq_bytes -= w->bytes;
    c->wq_reqs--;
    free(w);
    if (c->closing) return;
    if (status < 0) {
        dm_log(DM_LOG_VERBOSE, "Client %s: write failed: %s", c->peer, uv_strerror(status));
        client_close(c);
        return;
    }
    if (c->draining) {
        if (c->wq_reqs == 0) client_close(c);
        return;
    }
    if (c->paused && c->wq_bytes < MN_TCP_LOW_WATER) {
        c->paused = 0;
        parse(c); /* the rest of the read buffer; restarts reading once it is consumed */
    }
}

/* Queue r for c (takes ownership); flush_replies writes the queue. */
static void reply_send(mn_client_t *c, reply_t *r)
{
    if (c->outn == c->outcap) {
        unsigned cap = c->outcap ? c->outcap * 2 : 16;
        reply_t **q = realloc(c->outq, cap * sizeof(*q));
        if (!q) {
            free(r);
            client_close(c);
            return;
        }
        c->outq = q, c->outcap = cap;
    }
    c->outq[c->outn++] = r;
    c->wq_bytes += r->len;
}

/* Write the queued replies with one uv_write. */
static void flush_replies(mn_client_t *c)
{
    if (!c->outn || c->closing) return;
    reply_write_t *w = malloc(sizeof(*w) + c->outn * sizeof(reply_t *));
    uv_buf_t small[16], *b = c->outn <= 16 ? small : malloc(c->outn * sizeof(*b));
    if (!w || !b) {
        free(w);
        if (b != small) free(b);
        client_close(c);
        return;
    }
    w->c = c;
    w->n = c->outn;
    w->bytes = 0;
    for (unsigned i = 0; i < c->outn; i++) {
        w->r[i] = c->outq[i];
        w->bytes += c->outq[i]->len;
        b[i] = uv_buf_init((char *)c->outq[i]->data, (unsigned)c->outq[i]->len);
    }
    c->outn = 0;
    c->wq_reqs++;
    c->s->stats.reply_writes++;
    int rc = uv_write(&w->req, (uv_stream_t *)&c->sock, b, w->n, on_write);
    if (b != small) free(b);
    if (rc) {
        for (unsigned i = 0; i < w->n; i++)
            free(w->r[i]);
        c->wq_bytes -= w->bytes;
        c->wq_reqs--;
        free(w);
        dm_log(DM_LOG_VERBOSE, "Client %s: write failed: %s", c->peer, uv_strerror(rc));
        client_close(c);
    }
}

/* Reply with an error message and close the connection once it is written. */
static void fail_client(mn_client_t *c, uint8_t type, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_client(mn_client_t *c, uint8_t type, int status, const char *fmt, ...)
{
    char text[DM_TCP_MAX_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    dm_log(DM_LOG_NOTICE, "Client %s: %s; closing the connection", c->peer, text);
    if (c->closing || c->draining) return;
    c->draining = 1;
    reading(c, 0);
    size_t n = strlen(text);
    reply_t *r = reply_new(type, status, c->hdr.seq, 0, n);
    if (!r) {
        client_close(c);
        return;
    }
    memcpy(r->data + sizeof(dm_tcp_hdr_t), text, n);
    reply_send(c, r);
}

/* Check a request header before its body is read. Returns 0, or fails the client. */
static int check_header(mn_client_t *c)
{
    const dm_tcp_hdr_t *h = &c->hdr;
    if (h->magic != DM_TCP_MAGIC) {
        fail_client(c, DM_TCP_ERROR, DM_EPROTO, "bad magic 0x%08x: not the dmkv tcp protocol",
                    h->magic);
        return -1;
    }
    switch (h->type) {
    case DM_TCP_HELLO:
        if (c->hello_done) {
            fail_client(c, DM_TCP_ERROR, DM_EINVAL, "HELLO sent twice");
            return -1;
        }
        if (h->body_len < sizeof(dm_tcp_hello_t) ||
            h->body_len > sizeof(dm_tcp_hello_t) + DM_TCP_MAX_TOKEN) {
            fail_client(c, DM_TCP_HELLO, DM_EINVAL, "malformed HELLO (body %llu bytes)",
                        (unsigned long long)h->body_len);
            return -1;
        }
        return 0;
    case DM_TCP_VERBS:
    case DM_TCP_STATS:
        if (!c->hello_done) {
            fail_client(c, DM_TCP_ERROR, DM_EPROTO, "request before HELLO");
            return -1;
        }
        if (h->type == DM_TCP_STATS) {
            if (h->body_len) {
                fail_client(c, DM_TCP_ERROR, DM_EINVAL, "STATS with a body");
                return -1;
            }
            return 0;
        }
        if (h->count > DM_TCP_MAX_VERBS || h->body_len < h->count * sizeof(dm_tcp_verb_t) ||
            h->body_len - h->count * sizeof(dm_tcp_verb_t) > DM_TCP_MAX_BATCH_BYTES) {
            fail_client(c, DM_TCP_ERROR, DM_ETOOBIG, "VERBS over the limits (%u verbs, %llu bytes)",
                        h->count, (unsigned long long)h->body_len);
            return -1;
        }
        return 0;
    default:
        fail_client(c, DM_TCP_ERROR, DM_EINVAL, "unknown request type %u", h->type);
        return -1;
    }
}

static void do_hello(mn_client_t *c)
{
    mn_tcp_server_t *s = c->s;
    dm_tcp_hello_t hb;
    memcpy(&hb, c->body, sizeof(hb));
    if (hb.token_len != c->hdr.body_len - sizeof(hb)) {
        fail_client(c, DM_TCP_HELLO, DM_EINVAL, "malformed HELLO (token length %u)", hb.token_len);
        return;
    }
    if (hb.version != DM_TCP_PROTO_VERSION) {
        fail_client(c, DM_TCP_HELLO, DM_EPROTO,
                    "protocol version %u not supported (this memory node speaks %u)", hb.version,
                    DM_TCP_PROTO_VERSION);
        return;
    }
    size_t alen = strlen(s->auth);
    if (alen) {
        /* Compare without an early exit so timing does not leak the token's prefix. */
        unsigned diff = hb.token_len != alen;
        const uint8_t *tok = c->body + sizeof(hb);
        for (size_t i = 0; i < alen; i++)
            diff |= (unsigned)(s->auth[i] ^ (i < hb.token_len ? tok[i] : 0));
        if (diff) {
            fail_client(c, DM_TCP_HELLO, DM_EAUTH, "invalid auth token");
            return;
        }
    }
    reply_t *r = reply_new(DM_TCP_HELLO, 0, c->hdr.seq, 0, sizeof(dm_tcp_hello_reply_t));
    if (!r) {
        client_close(c);
        return;
    }
    dm_tcp_hello_reply_t hr = {.version = DM_TCP_PROTO_VERSION,
                               .caps = DM_CAP_MASKED_CAS,
                               .region_size = s->region->size,
                               .incarnation =
                                   ((const dm_superblock_t *)s->region->base)->incarnation};
    memcpy(r->data + sizeof(dm_tcp_hdr_t), &hr, sizeof(hr));
    c->hello_done = 1;
    dm_log(DM_LOG_VERBOSE, "Client %s: HELLO accepted", c->peer);
    reply_send(c, r);
}

static void do_stats(mn_client_t *c)
{
    mn_tcp_server_t *s = c->s;
    reply_t *r = reply_new(DM_TCP_STATS, 0, c->hdr.seq, 0, sizeof(dm_tcp_stats_t));
    if (!r) {
        client_close(c);
        return;
    }
    dm_tcp_stats_t st = s->stats;
    st.region_size = s->region->size;
    st.alloc_ptr =
        __atomic_load_n((uint64_t *)(s->region->base + DM_SB_OFF(alloc_ptr)), __ATOMIC_RELAXED);
    st.uptime_ms = uv_now(s->loop) - s->start_ms;
    memcpy(r->data + sizeof(dm_tcp_hdr_t), &st, sizeof(st));
    reply_send(c, r);
}

static int in_region(const mn_region_t *rg, uint64_t off, uint64_t len)
{
    return off <= rg->size && len <= rg->size - off;
}

static void do_verbs(mn_client_t *c)
{
    mn_tcp_server_t *s = c->s;
    mn_region_t *rg = s->region;
    uint32_t n = c->hdr.count;
    const uint8_t *desc = c->body;
    /* Pass 1: payload sizes must match the body; READ bytes bound the reply. */
    uint64_t writes = 0, reads = 0;
    for (uint32_t i = 0; i < n; i++) {
        dm_tcp_verb_t tv;
        memcpy(&tv, desc + i * sizeof(tv), sizeof(tv));
        if ((tv.op == DM_OP_READ || tv.op == DM_OP_WRITE) && tv.len > DM_TCP_MAX_IO) {
            fail_client(c, DM_TCP_ERROR, DM_ETOOBIG, "verb %u: length %u over the limit", i,
                        tv.len);
            return;
        }
        if (tv.op == DM_OP_WRITE)
            writes += tv.len;
        else if (tv.op == DM_OP_READ && in_region(rg, tv.offset, tv.len))
            reads += tv.len;
        /* Start the region's cache misses of every verb now, so pass 2 overlaps them
         * (random lines of a large region: most of the memory node's CPU went to waiting
         * for them one at a time). First 4 lines of each verb. */
        if (tv.op != DM_OP_WRITE && in_region(rg, tv.offset, tv.len))
            for (uint64_t o = 0; o < tv.len && o < 256; o += 64)
                __builtin_prefetch(rg->base + tv.offset + o);
    }
    if (writes != c->hdr.body_len - (uint64_t)n * sizeof(dm_tcp_verb_t) ||
        reads > DM_TCP_MAX_BATCH_BYTES) {
        fail_client(c, DM_TCP_ERROR, DM_EINVAL,
                    "VERBS body does not match its verbs (%llu WRITE bytes, %llu READ bytes)",
                    (unsigned long long)writes, (unsigned long long)reads);
        return;
    }
    reply_t *r =
        reply_new(DM_TCP_VERBS, 0, c->hdr.seq, n, (uint64_t)n * sizeof(dm_tcp_result_t) + reads);
    if (!r) {
        fail_client(c, DM_TCP_ERROR, DM_ENOMEM, "out of memory for a %llu-byte reply",
                    (unsigned long long)reads);
        return;
    }
    /* Pass 2: execute in order. */
    const uint8_t *wdata = desc + (uint64_t)n * sizeof(dm_tcp_verb_t);
    uint8_t *res = r->data + sizeof(dm_tcp_hdr_t);
    uint8_t *rdata = res + (uint64_t)n * sizeof(dm_tcp_result_t);
    for (uint32_t i = 0; i < n; i++) {
        dm_tcp_verb_t tv;
        memcpy(&tv, desc + i * sizeof(tv), sizeof(tv));
        dm_verb_t v = {.op = tv.op,
                       .len = tv.len,
                       .offset = tv.offset,
                       .compare = tv.compare,
                       .swap = tv.swap,
                       .compare_mask = tv.compare_mask,
                       .swap_mask = tv.swap_mask};
        if (tv.op == DM_OP_WRITE) {
            v.buf = (void *)wdata;
            wdata += tv.len;
        } else if (tv.op == DM_OP_READ) {
            v.buf = rdata;
        }
        if ((tv.op == DM_OP_READ || tv.op == DM_OP_WRITE) && !in_region(rg, tv.offset, tv.len))
            v.status = DM_ERANGE;
        else
            v.status = dm_region_exec_serial(rg->base, rg->size, &v); /* one loop thread */
        if (tv.op == DM_OP_READ && v.status == 0) {
            rdata += tv.len;
            s->stats.bytes_read += tv.len;
        } else if (tv.op == DM_OP_WRITE && v.status == 0) {
            s->stats.bytes_written += tv.len;
        }
        dm_tcp_result_t tr = {.status = v.status, .result = v.result};
        memcpy(res + i * sizeof(tr), &tr, sizeof(tr));
    }
    s->stats.verbs += n;
    s->stats.batches++;
    reply_send(c, r);
}

/* A whole request (header + body) is in c: execute it and reset the parser. */
static void dispatch(mn_client_t *c)
{
    switch (c->hdr.type) {
    case DM_TCP_HELLO:
        do_hello(c);
        break;
    case DM_TCP_STATS:
        do_stats(c);
        break;
    default:
        do_verbs(c);
        break;
    }
    c->in_body = 0;
    c->hgot = 0;
    c->body_got = 0;
    if (c->body_cap > BODY_KEEP) {
        free(c->body);
        c->body = NULL;
        c->body_cap = 0;
    }
}

/* Make room for at least want more body bytes (capped at the body's length), growing
 * geometrically. Returns 0 or -1 when out of memory. */
static int body_reserve(mn_client_t *c, uint64_t want)
{
    uint64_t need = c->body_got + want;
    if (need <= c->body_cap) return 0;
    uint64_t cap = c->body_cap ? c->body_cap * 2 : 4096;
    if (cap < need) cap = need;
    if (cap > c->hdr.body_len) cap = c->hdr.body_len;
    uint8_t *nb = realloc(c->body, cap);
    if (!nb) return -1;
    c->body = nb;
    c->body_cap = cap;
    return 0;
}

/* Header complete: validate, then dispatch at once if there is no body. */
static void header_done(mn_client_t *c)
{
    memcpy(&c->hdr, c->hbuf, sizeof(c->hdr));
    if (check_header(c)) return;
    c->in_body = 1;
    c->body_got = 0;
    if (c->hdr.body_len == 0) dispatch(c);
}

static void parse_requests(mn_client_t *c);

/* Consume rbuf[rpos, rlen) until it is empty, the client is paused or failed, then write
 * the replies of everything executed. Restarts reading when the buffer is consumed. */
static void parse(mn_client_t *c)
{
    parse_requests(c);
    flush_replies(c);
}

static void parse_requests(mn_client_t *c)
{
    while (c->rpos < c->rlen && !c->closing && !c->draining && !c->paused) {
        const uint8_t *d = c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos;
        if (!c->in_body) {
            size_t k = sizeof(c->hbuf) - c->hgot < avail ? sizeof(c->hbuf) - c->hgot : avail;
            memcpy(c->hbuf + c->hgot, d, k);
            c->hgot += k;
            c->rpos += k;
            if (c->hgot == sizeof(c->hbuf)) header_done(c);
        } else {
            uint64_t left = c->hdr.body_len - c->body_got;
            size_t k = left < avail ? (size_t)left : avail;
            if (body_reserve(c, k)) {
                fail_client(c, DM_TCP_ERROR, DM_ENOMEM, "out of memory for a request body");
                return;
            }
            memcpy(c->body + c->body_got, d, k);
            c->body_got += k;
            c->rpos += k;
            if (c->body_got == c->hdr.body_len) dispatch(c);
        }
        if (!c->closing && !c->draining && c->wq_bytes > MN_TCP_HIGH_WATER) {
            c->paused = 1;
            dm_log(DM_LOG_DEBUG, "Client %s: %llu reply bytes queued, pausing reads", c->peer,
                   (unsigned long long)c->wq_bytes);
        }
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
    if (c->in_body && c->hdr.body_len - c->body_got >= RBUF_SIZE) {
        uint64_t left = c->hdr.body_len - c->body_got;
        uint64_t want = left < (64u << 20) ? left : (64u << 20);
        if (body_reserve(c, want) == 0) {
            /* A buffer kept from a larger request is bigger than this body: never read past
             * the body, or the next request's header lands in it and the stream desyncs. */
            uint64_t room = c->body_cap - c->body_got;
            if (room > left) room = left;
            *buf = uv_buf_init((char *)c->body + c->body_got, (unsigned)room);
            return;
        }
        *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
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
        c->body_got += (uint64_t)nread;
        if (c->body_got == c->hdr.body_len) {
            dispatch(c);
            parse(c); /* rbuf is empty: applies backpressure or keeps reading */
        }
        return;
    }
    c->rpos = 0;
    c->rlen = (size_t)nread;
    c->s->stats.reads++;
    parse(c);
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
    uv_tcp_init(s->loop, &c->sock);
    c->sock.data = c;
    c->next = s->clients;
    if (s->clients) s->clients->prev = c;
    s->clients = c;
    s->stats.connections++;
    if (uv_accept(ls, (uv_stream_t *)&c->sock) != 0) {
        client_close(c);
        return;
    }
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
    dm_log(DM_LOG_VERBOSE, "Accepted %s", c->peer);
    reading(c, 1);
}

int mn_tcp_start(mn_tcp_server_t *s, uv_loop_t *loop, mn_region_t *region, const char *bind,
                 int port, const char *auth, char *err, size_t errlen)
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
    struct sockaddr_storage addr;
    int rc = strchr(bind, ':') ? uv_ip6_addr(bind, port, (struct sockaddr_in6 *)&addr)
                               : uv_ip4_addr(bind, port, (struct sockaddr_in *)&addr);
    if (rc) {
        snprintf(err, errlen, "bad bind address '%s': %s", bind, uv_strerror(rc));
        return rc;
    }
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
    for (mn_client_t *c = s->clients; c; c = c->next)
        client_close(c);
}
