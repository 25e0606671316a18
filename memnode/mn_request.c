/* One connection's tcp-transport request stream (mn_request.h). */
#include "mn_request.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/errors.h"
#include "dmkv/log.h"
#include "dmkv/region_exec.h"
#include "dmkv/superblock.h"
#include "dmkv/verbs.h"

#define BODY_KEEP (1u << 20) /* body buffers up to this are kept for the next request */
#define MN_REPLY_KEEP 2048u  /* replies this big or smaller come from a thread's spares */
#define REPLY_SPARES 1024u   /* spares kept per thread (2 MiB) */

/* This thread's spare replies of MN_REPLY_KEEP bytes, linked through their first bytes. */
static _Thread_local mn_reply_t *spare_head;
static _Thread_local unsigned spare_n;

void mn_reply_free(mn_reply_t *r)
{
    if (!r) return;
    if (r->cap != MN_REPLY_KEEP || spare_n >= REPLY_SPARES) {
        free(r);
        return;
    }
    memcpy(r->data, &spare_head, sizeof(spare_head));
    spare_head = r;
    spare_n++;
}

/* Allocate a reply with a header for (type, status, seq, count) and body_len body bytes.
 * NULL when out of memory. */
static mn_reply_t *reply_new(uint8_t type, int status, uint32_t seq, uint32_t count,
                             uint64_t body_len)
{
    uint64_t len = sizeof(dm_tcp_hdr_t) + body_len;
    mn_reply_t *r;
    if (len <= MN_REPLY_KEEP && spare_head) {
        r = spare_head;
        memcpy(&spare_head, r->data, sizeof(spare_head));
        spare_n--;
    } else {
        size_t cap = len <= MN_REPLY_KEEP ? MN_REPLY_KEEP : (size_t)len;
        r = malloc(sizeof(*r) + cap);
        if (!r) return NULL;
        r->cap = cap;
    }
    r->len = len;
    dm_tcp_hdr_t h = {.magic = DM_TCP_MAGIC,
                      .type = type | DM_TCP_REPLY,
                      .status = (int16_t)status,
                      .seq = seq,
                      .count = count,
                      .body_len = body_len};
    memcpy(r->data, &h, sizeof(h));
    return r;
}

/* Reply with an error message; the stream is failed (the connection closes once that
 * reply is written). */
static void fail(mn_req_t *q, uint8_t type, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(mn_req_t *q, uint8_t type, int status, const char *fmt, ...)
{
    char text[DM_TCP_MAX_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    dm_log(DM_LOG_NOTICE, "Client %s: %s; closing the connection", q->peer, text);
    if (q->state != MN_REQ_OK) return;
    q->state = MN_REQ_FAILED;
    size_t n = strlen(text);
    mn_reply_t *r = reply_new(type, status, q->hdr.seq, 0, n);
    if (!r) {
        q->state = MN_REQ_CLOSE;
        return;
    }
    memcpy(r->data + sizeof(dm_tcp_hdr_t), text, n);
    q->send(q->arg, r);
}

/* Check a request header before its body is read. Returns 0, or fails the stream. */
static int check_header(mn_req_t *q)
{
    const dm_tcp_hdr_t *h = &q->hdr;
    if (h->magic != DM_TCP_MAGIC) {
        fail(q, DM_TCP_ERROR, DM_EPROTO, "bad magic 0x%08x: not the dmkv tcp protocol", h->magic);
        return -1;
    }
    switch (h->type) {
    case DM_TCP_HELLO:
        if (q->hello_done) {
            fail(q, DM_TCP_ERROR, DM_EINVAL, "HELLO sent twice");
            return -1;
        }
        if (h->body_len < sizeof(dm_tcp_hello_t) ||
            h->body_len > sizeof(dm_tcp_hello_t) + DM_TCP_MAX_TOKEN) {
            fail(q, DM_TCP_HELLO, DM_EINVAL, "malformed HELLO (body %llu bytes)",
                 (unsigned long long)h->body_len);
            return -1;
        }
        return 0;
    case DM_TCP_VERBS:
    case DM_TCP_STATS:
        if (!q->hello_done) {
            fail(q, DM_TCP_ERROR, DM_EPROTO, "request before HELLO");
            return -1;
        }
        if (h->type == DM_TCP_STATS) {
            if (h->body_len) {
                fail(q, DM_TCP_ERROR, DM_EINVAL, "STATS with a body");
                return -1;
            }
            return 0;
        }
        if (h->count > DM_TCP_MAX_VERBS || h->body_len < h->count * sizeof(dm_tcp_verb_t) ||
            h->body_len - h->count * sizeof(dm_tcp_verb_t) > DM_TCP_MAX_BATCH_BYTES) {
            fail(q, DM_TCP_ERROR, DM_ETOOBIG, "VERBS over the limits (%u verbs, %llu bytes)",
                 h->count, (unsigned long long)h->body_len);
            return -1;
        }
        return 0;
    default:
        fail(q, DM_TCP_ERROR, DM_EINVAL, "unknown request type %u", h->type);
        return -1;
    }
}

static void do_hello(mn_req_t *q, const uint8_t *body)
{
    const mn_req_env_t *e = q->env;
    dm_tcp_hello_t hb;
    memcpy(&hb, body, sizeof(hb));
    /* The version first: the rest of the body's layout depends on it. */
    if (hb.version != DM_TCP_PROTO_VERSION) {
        fail(q, DM_TCP_HELLO, DM_EPROTO,
             "protocol version %u not supported (this memory node speaks %u)", hb.version,
             DM_TCP_PROTO_VERSION);
        return;
    }
    if (hb.token_len != q->hdr.body_len - sizeof(hb)) {
        fail(q, DM_TCP_HELLO, DM_EINVAL, "malformed HELLO (token length %u)", hb.token_len);
        return;
    }
    size_t alen = strlen(e->auth);
    if (alen) {
        /* Compare without an early exit so timing does not leak the token's prefix. */
        unsigned diff = hb.token_len != alen;
        const uint8_t *tok = body + sizeof(hb);
        for (size_t i = 0; i < alen; i++)
            diff |= (unsigned)(e->auth[i] ^ (i < hb.token_len ? tok[i] : 0));
        if (diff) {
            fail(q, DM_TCP_HELLO, DM_EAUTH, "invalid auth token");
            return;
        }
    }
    mn_reply_t *r = reply_new(DM_TCP_HELLO, 0, q->hdr.seq, 0, sizeof(dm_tcp_hello_reply_t));
    if (!r) {
        q->state = MN_REQ_CLOSE;
        return;
    }
    dm_tcp_hello_reply_t hr = {
        .version = DM_TCP_PROTO_VERSION,
        .caps = DM_CAP_MASKED_CAS | DM_CAP_CHAIN | (e->fences ? DM_CAP_FENCE : 0u),
        .region_size = e->region->size,
        .incarnation = ((const dm_superblock_t *)e->region->base)->incarnation};
    memcpy(r->data + sizeof(dm_tcp_hdr_t), &hr, sizeof(hr));
    q->hello_done = 1;
    q->holder = hb.holder;
    dm_log(DM_LOG_VERBOSE, "Client %s: HELLO accepted (holder %u)", q->peer, (unsigned)hb.holder);
    q->send(q->arg, r);
}

static void do_stats(mn_req_t *q)
{
    const mn_req_env_t *e = q->env;
    mn_reply_t *r = reply_new(DM_TCP_STATS, 0, q->hdr.seq, 0, sizeof(dm_tcp_stats_t));
    if (!r) {
        q->state = MN_REQ_CLOSE;
        return;
    }
    dm_tcp_stats_t st = *e->stats;
    st.region_size = e->region->size;
    st.alloc_ptr =
        __atomic_load_n((uint64_t *)(e->region->base + DM_SB_OFF(alloc_ptr)), __ATOMIC_RELAXED);
    if (e->fill_stats) e->fill_stats(e->arg, &st);
    memcpy(r->data + sizeof(dm_tcp_hdr_t), &st, sizeof(st));
    q->send(q->arg, r);
}

static int in_region(const mn_region_t *rg, uint64_t off, uint64_t len)
{
    return off <= rg->size && len <= rg->size - off;
}

/* Whether a chained verb that ran failed: an error, or an atomic compare that did not match. */
static int chain_failed(const dm_verb_t *v)
{
    if (v->status) return 1;
    if (v->op == DM_OP_CAS) return v->result != v->compare;
    if (v->op == DM_OP_MASKED_CAS)
        return (v->result & v->compare_mask) != (v->compare & v->compare_mask);
    return 0;
}

/* Test only (env tear_len, tear_nth): the tear_nth WRITE of tear_len bytes lands its first
 * line only, and the process dies there, as a SIGKILL between two lines of the copy. */
static void tear(const mn_req_env_t *e, mn_region_t *rg, const dm_verb_t *v)
{
    static uint64_t seen;
    if (++seen != e->tear_nth) return;
    uint64_t n = 64 - v->offset % 64;
    dm_log(DM_LOG_WARNING, "test mode: killed in the middle of a %llu-byte WRITE at %#llx",
           (unsigned long long)v->len, (unsigned long long)v->offset);
    memcpy(rg->base + v->offset, v->buf, n < v->len ? n : v->len);
    raise(SIGKILL);
}

static void do_verbs(mn_req_t *q, const uint8_t *desc)
{
    const mn_req_env_t *e = q->env;
    mn_region_t *rg = e->region;
    uint32_t n = q->hdr.count;
    /* Pass 1: payload sizes must match the body; READ bytes bound the reply. */
    uint64_t writes = 0, reads = 0;
    for (uint32_t i = 0; i < n; i++) {
        dm_tcp_verb_t tv;
        memcpy(&tv, desc + i * sizeof(tv), sizeof(tv));
        if ((tv.op == DM_OP_READ || tv.op == DM_OP_WRITE) && tv.len > DM_TCP_MAX_IO) {
            fail(q, DM_TCP_ERROR, DM_ETOOBIG, "verb %u: length %u over the limit", i, tv.len);
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
    if (writes != q->hdr.body_len - (uint64_t)n * sizeof(dm_tcp_verb_t) ||
        reads > DM_TCP_MAX_BATCH_BYTES) {
        fail(q, DM_TCP_ERROR, DM_EINVAL,
             "VERBS body does not match its verbs (%llu WRITE bytes, %llu READ bytes)",
             (unsigned long long)writes, (unsigned long long)reads);
        return;
    }
    mn_reply_t *r =
        reply_new(DM_TCP_VERBS, 0, q->hdr.seq, n, (uint64_t)n * sizeof(dm_tcp_result_t) + reads);
    if (!r) {
        fail(q, DM_TCP_ERROR, DM_ENOMEM, "out of memory for a %llu-byte reply",
             (unsigned long long)reads);
        return;
    }
    /* Pass 2: execute in order (line-locked once a thread of this node touches the region). */
    int locked = mn_exec_gate_enter(&rg->gate);
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
        uint32_t *broken = tv.chain_tag ? &q->chain_broken[tv.chain_tag] : NULL;
        if (broken && *broken == (uint32_t)tv.chain_epoch + 1 && !e->chain_no_skip)
            v.status = DM_ESKIPPED; /* an earlier verb of its chain failed: not run */
        else if (tv.op == DM_OP_BREAK)
            v.status = DM_ELATE; /* a batch the gateway held back: its chain breaks here */
        else if ((tv.op == DM_OP_READ || tv.op == DM_OP_WRITE) && !in_region(rg, tv.offset, tv.len))
            v.status = DM_ERANGE;
        else {
            /* A WRITE is logged first, so that a kill halfway through it is completed by the
             * next start instead of leaving a torn leaf or bucket (mn_region_wal_begin). */
            int logged = tv.op == DM_OP_WRITE && mn_region_wal_begin(rg, tv.offset, v.buf, tv.len);
            if (tv.op == DM_OP_WRITE && tv.len == e->tear_len) tear(e, rg, &v);
            v.status = locked ? dm_region_exec(rg->base, rg->size, &v)
                              : dm_region_exec_serial(rg->base, rg->size, &v);
            if (logged) mn_region_wal_end(rg);
        }
        if (broken && v.status != DM_ESKIPPED && chain_failed(&v))
            *broken = (uint32_t)tv.chain_epoch + 1;
        if (tv.op == DM_OP_READ && v.status == 0) {
            rdata += tv.len;
            e->stats->bytes_read += tv.len;
        } else if (tv.op == DM_OP_WRITE && v.status == 0) {
            e->stats->bytes_written += tv.len;
        }
        dm_tcp_result_t tr = {.status = v.status, .result = v.result};
        memcpy(res + i * sizeof(tr), &tr, sizeof(tr));
    }
    mn_exec_gate_leave(&rg->gate);
    /* READs that did not run (a chain skipped them) carry no payload: the body is what ran. */
    uint64_t body = (uint64_t)(rdata - (r->data + sizeof(dm_tcp_hdr_t)));
    if (body != r->len - sizeof(dm_tcp_hdr_t)) {
        r->len = sizeof(dm_tcp_hdr_t) + body;
        memcpy(r->data + offsetof(dm_tcp_hdr_t, body_len), &body, sizeof(body));
    }
    e->stats->verbs += n;
    e->stats->batches++;
    q->send(q->arg, r);
}

/* A whole request is here: its header in q, its body at body (q->body, or where the
 * caller's bytes hold all of it; never NULL). Execute it and reset the parser. */
static void dispatch(mn_req_t *q, const uint8_t *body)
{
    switch (q->hdr.type) {
    case DM_TCP_HELLO:
        do_hello(q, body);
        break;
    case DM_TCP_STATS:
        do_stats(q);
        break;
    default:
        do_verbs(q, body);
        break;
    }
    q->in_body = 0;
    q->hgot = 0;
    q->body_got = 0;
    if (q->body_cap > BODY_KEEP) {
        free(q->body);
        q->body = NULL;
        q->body_cap = 0;
    }
}

/* Make room for at least want more body bytes (capped at the body's length), growing
 * geometrically. Returns 0 or -1 when out of memory. */
static int body_reserve(mn_req_t *q, uint64_t want)
{
    uint64_t need = q->body_got + want;
    if (need <= q->body_cap) return 0;
    uint64_t cap = q->body_cap ? q->body_cap * 2 : 4096;
    if (cap < need) cap = need;
    if (cap > q->hdr.body_len) cap = q->hdr.body_len;
    uint8_t *nb = realloc(q->body, cap);
    if (!nb) return -1;
    q->body = nb;
    q->body_cap = cap;
    return 0;
}

/* Header complete: validate, then dispatch at once if there is no body. Returns 1 when a
 * request ran. */
static int header_done(mn_req_t *q)
{
    memcpy(&q->hdr, q->hbuf, sizeof(q->hdr));
    if (check_header(q)) return 0;
    q->in_body = 1;
    q->body_got = 0;
    if (q->hdr.body_len) return 0;
    static const uint8_t none[1]; /* the verbs' parser adds offsets to the body */
    dispatch(q, none);
    return 1;
}

void mn_req_init(mn_req_t *q, const mn_req_env_t *env, const char *peer,
                 void (*send)(void *arg, mn_reply_t *r), void *arg)
{
    memset(q, 0, sizeof(*q));
    q->env = env;
    q->peer = peer;
    q->send = send;
    q->arg = arg;
}

void mn_req_free(mn_req_t *q)
{
    free(q->body);
    q->body = NULL;
    q->body_cap = 0;
}

size_t mn_req_feed(mn_req_t *q, const uint8_t *d, size_t len)
{
    size_t used = 0;
    while (used < len && q->state == MN_REQ_OK) {
        size_t avail = len - used;
        if (!q->in_body) {
            size_t k = sizeof(q->hbuf) - q->hgot < avail ? sizeof(q->hbuf) - q->hgot : avail;
            memcpy(q->hbuf + q->hgot, d + used, k);
            q->hgot += k;
            used += k;
            if (q->hgot < sizeof(q->hbuf)) continue;
            if (header_done(q)) break; /* ran one (no body) */
            if (q->state == MN_REQ_OK && q->hdr.body_len <= len - used) {
                /* The whole body is in these bytes: run it where it lies (copying it first
                 * was 8% of the memory node's instructions per verb). */
                const uint8_t *body = d + used;
                used += q->hdr.body_len;
                dispatch(q, body);
                break;
            }
        } else {
            uint64_t left = q->hdr.body_len - q->body_got;
            size_t k = left < avail ? (size_t)left : avail;
            if (body_reserve(q, k)) {
                fail(q, DM_TCP_ERROR, DM_ENOMEM, "out of memory for a request body");
                break;
            }
            memcpy(q->body + q->body_got, d + used, k);
            q->body_got += k;
            used += k;
            if (q->body_got == q->hdr.body_len) {
                dispatch(q, q->body);
                break;
            }
        }
    }
    return used;
}

uint64_t mn_req_body_missing(const mn_req_t *q)
{
    return q->state == MN_REQ_OK && q->in_body ? q->hdr.body_len - q->body_got : 0;
}

uint8_t *mn_req_body_room(mn_req_t *q, uint64_t want, uint64_t *room)
{
    *room = 0;
    uint64_t left = mn_req_body_missing(q);
    if (!left) return NULL;
    if (want > left) want = left;
    if (body_reserve(q, want)) return NULL;
    /* A buffer kept from a larger request is bigger than this body: never read past the
     * body, or the next request's header lands in it and the stream desyncs. */
    uint64_t r = q->body_cap - q->body_got;
    *room = r > left ? left : r;
    return q->body + q->body_got;
}

void mn_req_body_got(mn_req_t *q, uint64_t n)
{
    q->body_got += n;
    if (q->body_got == q->hdr.body_len) dispatch(q, q->body);
}
