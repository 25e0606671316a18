/* The `tcp` backend, client side: one connection to dmkv-memnode, which executes our verbs
 * against its region (a software RNIC). Each posted batch becomes one VERBS request; the
 * requests posted in one event-loop turn (by all of the worker's coroutines) go out
 * together in one writev (doorbell batching: one writev instead of one per batch; without a
 * write request when the socket takes it all, dmkv/write_now.h),
 * flushed from a check handle after I/O callbacks and a prepare handle before the loop
 * polls. A verb posted without waiting (dm_batch_post_async: the key counter's FAA, an
 * unlock) may therefore leave after the client's reply, by up to one loop turn; a gateway
 * killed in between loses it (a counter off by one, a lease that must expire), as a
 * kill between the reply and the post always could. Replies come back in order and are matched to a
 * FIFO of outstanding batches, parsed incrementally (large READ payloads are received straight into
 * verb->buf). Connection loss, a protocol violation, or no progress for the timeout (default 10 s,
 * env DMKV_TCP_TIMEOUT_MS) fails every outstanding batch (DM_EIO / DM_ETIMEDOUT); later
 * posts fail with DM_EIO at once and base.failed tells the worker to open a new
 * connection (pool/batch.c). Never a hang. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "dmkv/log.h"
#include "dmkv/spares.h"
#include "dmkv/transport.h"
#include "dmkv/write_now.h"
#include "dmkv/flush_hook.h"
#include "tcp_internal.h"

#define RBUF_SIZE (64u << 10)     /* reply bytes read per call */
#define DIRECT_MIN (16u << 10)    /* READ payload remainders this big are read in place */
#define INLINE_WRITE (4u << 10)   /* WRITE payloads up to this are copied into the message */
#define DEFAULT_TIMEOUT_MS 10000u /* no reply progress for this long fails the connection */

typedef struct pending {
    uint32_t seq;
    dm_verb_t *verbs;
    size_t n;
    dm_post_cb cb;
    void *arg;
    struct pending *next;
    uint64_t send_by_us; /* dm_conn_t.send_by_us at post, 0 none */
    unsigned buf0, buf1; /* its buffers in the outbox until flushed: obufs[buf0, buf1) */
    unsigned blk;        /* its serialized block: oblocks[blk] */
    int refused;         /* past its send-by bound at flush: sent as a DM_OP_BREAK stand-in
                            (drop_late), completes with DM_ELATE */
} pending_t;

enum { RS_HDR, RS_RESULTS, RS_PAYLOAD };

typedef struct tcp_conn {
    dm_conn_t base;
    uv_loop_t *loop;
    union { /* port 0: a unix socket (pipe); both are uv_stream_t, handled through sock */
        uv_tcp_t sock;
        uv_pipe_t pipe;
    };
    uv_timer_t timer;
    pending_t *head, *tail; /* FIFO of outstanding batches */
    pending_t *unflushed;   /* the first of them still in the outbox, NULL none */
    uint32_t next_seq;
    int broken;       /* failed or closed: no more posts */
    int user_closed;  /* ops->close called */
    int handles_open; /* sock + timer until their close callbacks ran */
    int busy;         /* > 0 while inside a read callback */
    uint64_t timeout_ms, last_progress;
    int overdue; /* a timer tick found the deadline passed: failed on the next one */
    /* reply parser */
    int rs;
    uint8_t part[sizeof(dm_tcp_hdr_t)]; /* header or one result being assembled */
    size_t part_len;
    dm_tcp_hdr_t hdr;
    size_t vi;       /* RESULTS: next result; PAYLOAD: verb receiving bytes */
    uint64_t got;    /* PAYLOAD: bytes of verbs[vi] received */
    uint64_t expect; /* body bytes still to come for the current reply */
    /* outbox: requests posted this turn, written together by flush() */
    dm_flush_hook_t flush_hook;
    uv_buf_t *obufs;
    unsigned on, ocap;
    void **oblocks; /* serialized blocks to free once written */
    unsigned onb, obcap;
    uint64_t overbs; /* verbs in the outbox */
    /* kept for reuse: a post takes a batch record and a serialized block, ~2% of a SET's
       gateway CPU in malloc and free otherwise */
    dm_spares_t pspare; /* batch records */
    dm_spares_t wspare; /* serialized blocks of WIRE_SMALL bytes (from their header on) */
    uint8_t rbuf[RBUF_SIZE];
} tcp_conn_t;

#define SPARES_MAX 1024 /* as many as a worker has in flight: 50 clients x 16 pipelined */
#define WIRE_SMALL 1024 /* bytes: a serialized batch up to this size uses a kept block */
#define WIRE_HDR 16     /* before each block: its capacity (keeps the block 16-aligned) */

static pending_t *pend_new(tcp_conn_t *c)
{
    pending_t *p = dm_spares_take(&c->pspare);
    return p ? p : malloc(sizeof(*p));
}

static void pend_put(tcp_conn_t *c, pending_t *p)
{
    dm_spares_put(&c->pspare, p, SPARES_MAX);
}

/* A block for a serialized batch of n bytes (NULL when out of memory), after a header
 * holding its capacity: only blocks of WIRE_SMALL are kept. */
static uint8_t *wire_new(tcp_conn_t *c, size_t n)
{
    size_t cap = n <= WIRE_SMALL ? WIRE_SMALL : n;
    uint8_t *b = cap == WIRE_SMALL ? dm_spares_take(&c->wspare) : NULL;
    if (!b) b = malloc(WIRE_HDR + cap);
    if (!b) return NULL;
    memcpy(b, &cap, sizeof(cap)); /* a kept block's link overwrote it */
    return b + WIRE_HDR;
}

static void wire_put(tcp_conn_t *c, void *w)
{
    uint8_t *b = (uint8_t *)w - WIRE_HDR;
    size_t cap;
    memcpy(&cap, b, sizeof(cap));
    if (cap == WIRE_SMALL)
        dm_spares_put(&c->wspare, b, SPARES_MAX);
    else
        free(b);
}

/* Free c with what it keeps for reuse. */
static void conn_free(tcp_conn_t *c)
{
    dm_spares_free(&c->pspare);
    dm_spares_free(&c->wspare);
    free(c);
}

/* One coalesced message in flight: the blocks it carries are freed when it is written. */
typedef struct flush_req {
    uv_write_t req;
    unsigned nblocks;
    void *blocks[];
} flush_req_t;

static void on_handle_closed(uv_handle_t *h)
{
    tcp_conn_t *c = h->data;
    if (--c->handles_open == 0 && c->user_closed) conn_free(c);
}

static void outbox_drop(tcp_conn_t *c)
{
    for (unsigned i = 0; i < c->onb; i++)
        wire_put(c, c->oblocks[i]);
    c->on = c->onb = 0;
    c->overbs = 0;
    c->unflushed = NULL;
}

/* Mark c broken: close the socket first (libuv never touches a posted buffer after that),
 * then complete every outstanding batch with st. */
static void conn_fail(tcp_conn_t *c, int st)
{
    if (!c->broken) {
        c->broken = 1;
        c->base.failed = 1;
        uv_close((uv_handle_t *)&c->sock, on_handle_closed);
        uv_close((uv_handle_t *)&c->timer, on_handle_closed);
        dm_flush_hook_close(&c->flush_hook, on_handle_closed);
        outbox_drop(c);
        free(c->obufs);
        free(c->oblocks);
        c->obufs = NULL;
        c->oblocks = NULL;
        c->ocap = c->obcap = 0;
    }
    while (c->head) {
        pending_t *p = c->head;
        c->head = p->next;
        if (!c->head) c->tail = NULL;
        int pst = p->refused ? DM_ELATE : st; /* a stand-in never carried the verbs */
        for (size_t i = 0; i < p->n; i++)
            p->verbs[i].status = pst;
        p->cb(p->arg, pst);
        pend_put(c, p);
    }
}

static void on_write(uv_write_t *req, int status)
{
    tcp_conn_t *c = req->handle->data;
    flush_req_t *f = (flush_req_t *)req;
    for (unsigned i = 0; i < f->nblocks; i++)
        wire_put(c, f->blocks[i]);
    free(f);
    if (status < 0 && !c->broken) conn_fail(c, DM_EIO);
}

/* Complete batches that were never sent with st (DM_ELATE: refused for lateness). */
static void fail_unsent(tcp_conn_t *c, pending_t *late, int st)
{
    for (pending_t *p = late, *next; p; p = next) {
        next = p->next;
        for (size_t i = 0; i < p->n; i++)
            p->verbs[i].status = st;
        p->cb(p->arg, st);
        pend_put(c, p);
    }
}

/* The first chained verb of p (a commit and what rides behind it), NULL none. */
static const dm_verb_t *first_chained(const pending_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->verbs[i].chain_tag) return &p->verbs[i];
    return NULL;
}

/* Rewrite late batch p's serialized block (it starts with the header and descriptors) as
 * a one-verb stand-in: a DM_OP_BREAK on its chain, so the memory node skips the later
 * commits of that chain this message carries (a later write of the client connection must
 * not land while an earlier one was held back: docs/throughput.md). Returns its buffer. */
static uv_buf_t stand_in(tcp_conn_t *c, const pending_t *p, const dm_verb_t *chained)
{
    uint8_t *w = c->oblocks[p->blk];
    dm_tcp_hdr_t h = {.magic = DM_TCP_MAGIC,
                      .type = DM_TCP_VERBS,
                      .seq = p->seq,
                      .count = 1,
                      .body_len = sizeof(dm_tcp_verb_t)};
    dm_tcp_verb_t tv = {
        .op = DM_OP_BREAK, .chain_tag = chained->chain_tag, .chain_epoch = chained->chain_epoch};
    memcpy(w, &h, sizeof(h));
    memcpy(w + sizeof(h), &tv, sizeof(tv));
    return uv_buf_init((char *)w, sizeof(h) + sizeof(tv));
}

/* Take the batches in the outbox whose send-by bound has passed out of it and of the FIFO
 * (never sent: their sequence numbers are skipped, the node answers the others in order);
 * returns them linked, for their callbacks once the write is out. A late batch with chained
 * verbs stays in the FIFO as a stand-in instead (stand_in). */
static pending_t *drop_late(tcp_conn_t *c)
{
    uint64_t now = 0;
    int any = 0;
    for (pending_t *p = c->unflushed; p && !any; p = p->next)
        if (p->send_by_us) {
            if (!now) now = dm_conn_now_us();
            any = now > p->send_by_us;
        }
    if (!any) return NULL;
    pending_t *prev = NULL;
    for (pending_t *p = c->head; p != c->unflushed; p = p->next)
        prev = p;
    unsigned wb = c->unflushed->buf0, wk = c->unflushed->blk;
    pending_t *late = NULL, **late_tail = &late;
    for (pending_t *p = c->unflushed, *next; p; p = next) {
        next = p->next;
        const dm_verb_t *chained = p->send_by_us && now > p->send_by_us ? first_chained(p) : NULL;
        if (chained) {
            dm_conn_count_late(1);
            c->overbs -= p->n - 1;
            p->refused = 1;
            c->obufs[wb++] = stand_in(c, p, chained);
            c->oblocks[wk++] = c->oblocks[p->blk];
            prev = p;
            continue;
        }
        if (p->send_by_us && now > p->send_by_us) {
            dm_conn_count_late(0);
            wire_put(c, c->oblocks[p->blk]);
            c->overbs -= p->n;
            if (prev)
                prev->next = next;
            else
                c->head = next;
            if (c->tail == p) c->tail = prev;
            p->next = NULL;
            *late_tail = p;
            late_tail = &p->next;
            continue;
        }
        memmove(&c->obufs[wb], &c->obufs[p->buf0], (p->buf1 - p->buf0) * sizeof(uv_buf_t));
        wb += p->buf1 - p->buf0;
        c->oblocks[wk++] = c->oblocks[p->blk];
        prev = p;
    }
    c->on = wb;
    c->onb = wk;
    return late;
}

/* Write everything posted since the last flush as one message (one writev), less the
 * batches past their send-by bound (refused: a lease holder's writes must not land after
 * its hold's end). */
static void flush(dm_flush_hook_t *h)
{
    tcp_conn_t *c = h->check.data;
    if (c->broken || !c->on) return;
    int bounded = 0; /* tests (faults 'wire', 'late'): a lease holder's writes are in it */
    if (dm_fault_armed(DM_FAULT_WIRE) || dm_fault_armed(DM_FAULT_LATE))
        for (pending_t *p = c->unflushed; p && !bounded; p = p->next)
            bounded = p->send_by_us != 0;
    uint32_t late_ms = bounded ? dm_fault_delay_ms(DM_FAULT_LATE) : 0;
    if (late_ms) usleep(late_ms * 1000u); /* tests: held back before the check */
    pending_t *late = drop_late(c);
    c->unflushed = NULL;
    if (!c->on) {
        fail_unsent(c, late, DM_ELATE);
        return;
    }
    dm_conn_count_message(&c->base, c->overbs);
    c->overbs = 0;
    uint32_t wire_ms = bounded ? dm_fault_delay_ms(DM_FAULT_WIRE) : 0;
    if (wire_ms) usleep(wire_ms * 1000u); /* tests: it passed its check, then is late */
    unsigned nbufs = c->on;
    int rc = dm_write_now((uv_stream_t *)&c->sock, c->obufs, &nbufs);
    flush_req_t *f = NULL;
    int oom = 0;
    if (rc == 0) { /* the socket did not take it all: a write request for the rest */
        f = malloc(sizeof(*f) + c->onb * sizeof(void *));
        if (f) {
            f->nblocks = c->onb;
            memcpy(f->blocks, c->oblocks, c->onb * sizeof(void *));
            rc = uv_write(&f->req, (uv_stream_t *)&c->sock, c->obufs, nbufs, on_write);
        } else {
            rc = -1, oom = 1;
        }
    }
    if (rc != 0) { /* written whole (1), or failed: the blocks are done with */
        for (unsigned i = 0; i < c->onb; i++)
            wire_put(c, c->oblocks[i]);
        free(f);
    }
    c->on = c->onb = 0;
    if (rc < 0) conn_fail(c, oom ? DM_ENOMEM : DM_EIO);
    fail_unsent(c, late, DM_ELATE);
}

/* Room for nb more buffers and one more block in the outbox. */
static int outbox_reserve(tcp_conn_t *c, unsigned nb)
{
    if (c->on + nb > c->ocap) {
        unsigned cap = c->ocap ? c->ocap : 16;
        while (cap < c->on + nb)
            cap *= 2;
        uv_buf_t *b = realloc(c->obufs, cap * sizeof(*b));
        if (!b) return DM_ENOMEM;
        c->obufs = b, c->ocap = cap;
    }
    if (c->onb + 1 > c->obcap) {
        unsigned cap = c->obcap ? c->obcap * 2 : 16;
        void **b = realloc(c->oblocks, cap * sizeof(*b));
        if (!b) return DM_ENOMEM;
        c->oblocks = b, c->obcap = cap;
    }
    return 0;
}

static void on_timer(uv_timer_t *t)
{
    tcp_conn_t *c = t->data;
    if (!c->head) {
        uv_timer_stop(t);
        return;
    }
    if (uv_now(c->loop) - c->last_progress < c->timeout_ms) {
        c->overdue = 0;
        return;
    }
    /* Timers run before the loop polls for I/O: after this thread was stalled (a busy
     * machine, a long command), the reply may be waiting in the socket. Fail only if a
     * whole tick with an I/O poll in between still brought nothing. */
    if (!c->overdue) {
        c->overdue = 1;
        return;
    }
    dm_log(DM_LOG_WARNING, "memory node %u: no answer for %llu ms, dropping connection",
           c->base.node_id, (unsigned long long)c->timeout_ms);
    conn_fail(c, DM_ETIMEDOUT);
}

/* Pop the head batch and run its callback. */
static void complete_head(tcp_conn_t *c)
{
    pending_t *p = c->head;
    c->head = p->next;
    if (!c->head) {
        c->tail = NULL;
        uv_timer_stop(&c->timer);
    }
    c->rs = RS_HDR;
    c->part_len = 0;
    if (p->refused)
        for (size_t i = 0; i < p->n; i++)
            p->verbs[i].status = DM_ELATE;
    p->cb(p->arg, p->refused ? DM_ELATE : 0);
    pend_put(c, p);
}

/* Advance vi to the next READ with status 0 (it gets a payload), or complete the batch.
 * Returns 0 or DM_EIO. */
static int next_payload(tcp_conn_t *c, size_t from)
{
    pending_t *p = c->head;
    for (c->vi = from; c->vi < p->n; c->vi++) {
        dm_verb_t *v = &p->verbs[c->vi];
        if (v->op == DM_OP_READ && v->status == 0 && v->len > 0) {
            c->rs = RS_PAYLOAD;
            c->got = 0;
            return 0;
        }
    }
    if (c->expect != 0) return DM_EIO;
    complete_head(c);
    return 0;
}

/* A whole reply header is in c->part. Returns 0 or DM_EIO on a protocol violation. */
static int got_header(tcp_conn_t *c)
{
    memcpy(&c->hdr, c->part, sizeof(c->hdr));
    c->part_len = 0;
    pending_t *p = c->head;
    const dm_tcp_hdr_t *h = &c->hdr;
    size_t n = p && p->refused ? 1 : p ? p->n : 0; /* a stand-in carried one DM_OP_BREAK */
    if (h->magic != DM_TCP_MAGIC || h->type != (DM_TCP_VERBS | DM_TCP_REPLY) || h->status || !p ||
        h->seq != p->seq || h->count != n || h->body_len < n * sizeof(dm_tcp_result_t) ||
        h->body_len - n * sizeof(dm_tcp_result_t) > DM_TCP_MAX_BATCH_BYTES)
        return DM_EIO;
    c->expect = h->body_len - n * sizeof(dm_tcp_result_t);
    c->vi = 0;
    c->rs = RS_RESULTS;
    if (n == 0) return next_payload(c, 0);
    return 0;
}

/* A whole result for verbs[vi] is at src (c->part, or the bytes read). */
static int got_result(tcp_conn_t *c, const uint8_t *src)
{
    dm_tcp_result_t r;
    memcpy(&r, src, sizeof(r));
    c->part_len = 0;
    pending_t *p = c->head;
    if (r.status > 0 || r.status < -64) return DM_EIO;
    if (p->refused) { /* the stand-in's own result: the batch's verbs never went out */
        if (c->expect != 0) return DM_EIO;
        complete_head(c);
        return 0;
    }
    dm_verb_t *v = &p->verbs[c->vi];
    v->status = r.status;
    v->result = r.result;
    if (v->op == DM_OP_READ && r.status == 0) {
        if (v->len > c->expect) return DM_EIO;
        c->expect -= v->len;
    }
    if (++c->vi < p->n) return 0;
    return next_payload(c, 0);
}

/* Payload bytes for verbs[vi] were stored; advance. */
static int payload_advance(tcp_conn_t *c, size_t k)
{
    c->got += k;
    if (c->got < c->head->verbs[c->vi].len) return 0;
    return next_payload(c, c->vi + 1);
}

/* Feed received bytes to the parser. Stops early when a callback closed the connection.
 * Returns 0 or DM_EIO. */
static int feed(tcp_conn_t *c, const uint8_t *d, size_t len)
{
    while (len && !c->broken) {
        if (c->rs == RS_RESULTS && c->part_len == 0 && len >= sizeof(dm_tcp_result_t)) {
            /* whole results in the bytes read: taken from there, not through c->part */
            if (got_result(c, d) != 0) return DM_EIO;
            d += sizeof(dm_tcp_result_t), len -= sizeof(dm_tcp_result_t);
            continue;
        }
        if (c->rs == RS_PAYLOAD) {
            dm_verb_t *v = &c->head->verbs[c->vi];
            size_t k = v->len - c->got < len ? (size_t)(v->len - c->got) : len;
            memcpy((uint8_t *)v->buf + c->got, d, k);
            d += k, len -= k;
            if (payload_advance(c, k)) return DM_EIO;
            continue;
        }
        size_t want = c->rs == RS_HDR ? sizeof(dm_tcp_hdr_t) : sizeof(dm_tcp_result_t);
        size_t k = want - c->part_len < len ? want - c->part_len : len;
        memcpy(c->part + c->part_len, d, k);
        c->part_len += k;
        d += k, len -= k;
        if (c->part_len < want) continue;
        if ((c->rs == RS_HDR ? got_header(c) : got_result(c, c->part)) != 0) return DM_EIO;
    }
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    tcp_conn_t *c = h->data;
    (void)suggested;
    if (c->rs == RS_PAYLOAD && c->head) {
        dm_verb_t *v = &c->head->verbs[c->vi];
        uint64_t left = v->len - c->got;
        if (left >= DIRECT_MIN) {
            *buf = uv_buf_init((char *)v->buf + c->got, (unsigned)left);
            return;
        }
    }
    *buf = uv_buf_init((char *)c->rbuf, RBUF_SIZE);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    tcp_conn_t *c = s->data;
    if (c->broken) return;
    if (nread < 0) {
        conn_fail(c, DM_EIO);
        return;
    }
    if (nread == 0) return;
    (*dm_conn_activity())++;
    c->last_progress = uv_now(c->loop);
    c->overdue = 0;
    c->busy++;
    int rc;
    if ((uint8_t *)buf->base == c->rbuf)
        rc = feed(c, c->rbuf, (size_t)nread);
    else
        rc = payload_advance(c, (size_t)nread); /* landed in place (on_alloc) */
    c->busy--;
    if (rc && !c->broken) {
        dm_log(DM_LOG_WARNING, "memory node %u: malformed reply, dropping connection",
               c->base.node_id);
        conn_fail(c, DM_EIO);
    }
}

/* Check a batch against the protocol limits. Returns 0, DM_EINVAL or DM_ETOOBIG. */
static int check_batch(const dm_verb_t *verbs, size_t n, uint64_t *inline_bytes, size_t *big_writes)
{
    if (n > DM_TCP_MAX_VERBS) return DM_ETOOBIG;
    uint64_t rd = 0, wr = 0;
    *inline_bytes = 0;
    *big_writes = 0;
    for (size_t i = 0; i < n; i++) {
        const dm_verb_t *v = &verbs[i];
        if (v->op != DM_OP_READ && v->op != DM_OP_WRITE) continue;
        if (v->len > DM_TCP_MAX_IO) return DM_ETOOBIG;
        if (v->len && !v->buf) return DM_EINVAL;
        if (v->op == DM_OP_READ) {
            rd += v->len;
        } else {
            wr += v->len;
            if (v->len <= INLINE_WRITE)
                *inline_bytes += v->len;
            else
                (*big_writes)++;
        }
    }
    return rd > DM_TCP_MAX_BATCH_BYTES || wr > DM_TCP_MAX_BATCH_BYTES ? DM_ETOOBIG : 0;
}

/* Serialize verbs into block (header, descriptors, small WRITE payloads) and bufs (small payloads
 * copied, big ones by reference, in verb order). Returns the number of bufs. */
static unsigned serialize(uint8_t *block, const dm_verb_t *verbs, size_t n, uint32_t seq,
                          uint64_t body_len, uv_buf_t *bufs)
{
    dm_tcp_hdr_t h = {.magic = DM_TCP_MAGIC,
                      .type = DM_TCP_VERBS,
                      .seq = seq,
                      .count = (uint32_t)n,
                      .body_len = body_len};
    uint8_t *out = block, *seg = block;
    memcpy(out, &h, sizeof(h));
    out += sizeof(h);
    for (size_t i = 0; i < n; i++) {
        const dm_verb_t *v = &verbs[i];
        dm_tcp_verb_t tv = {.op = v->op,
                            .chain_tag = v->chain_tag,
                            .chain_epoch = v->chain_epoch,
                            .len = v->len,
                            .offset = v->offset,
                            .compare = v->compare,
                            .swap = v->swap,
                            .compare_mask = v->compare_mask,
                            .swap_mask = v->swap_mask};
        memcpy(out, &tv, sizeof(tv));
        out += sizeof(tv);
    }
    unsigned nb = 0;
    for (size_t i = 0; i < n; i++) {
        const dm_verb_t *v = &verbs[i];
        if (v->op != DM_OP_WRITE || v->len == 0) continue;
        if (v->len <= INLINE_WRITE) {
            memcpy(out, v->buf, v->len);
            out += v->len;
            continue;
        }
        if (out > seg) bufs[nb++] = uv_buf_init((char *)seg, (unsigned)(out - seg));
        bufs[nb++] = uv_buf_init((char *)v->buf, v->len);
        seg = out;
    }
    if (out > seg) bufs[nb++] = uv_buf_init((char *)seg, (unsigned)(out - seg));
    return nb;
}

static int tcp_post(dm_conn_t *base, dm_verb_t *verbs, size_t n, dm_post_cb cb, void *arg)
{
    tcp_conn_t *c = (tcp_conn_t *)base;
    if (c->broken) {
        for (size_t i = 0; i < n; i++)
            verbs[i].status = DM_EIO;
        return DM_EIO;
    }
    if (dm_conn_send_late(base)) return DM_ELATE; /* not sent */
    uint64_t inline_bytes;
    size_t big;
    int rc = check_batch(verbs, n, &inline_bytes, &big);
    if (rc) return rc;
    uint64_t body_len = n * sizeof(dm_tcp_verb_t);
    for (size_t i = 0; i < n; i++)
        if (verbs[i].op == DM_OP_WRITE) body_len += verbs[i].len;
    size_t block = sizeof(dm_tcp_hdr_t) + n * sizeof(dm_tcp_verb_t) + (size_t)inline_bytes;
    pending_t *p = pend_new(c);
    uint8_t *w = p ? wire_new(c, block) : NULL;
    if (!w || outbox_reserve(c, (unsigned)(2 * big + 1))) {
        if (p) pend_put(c, p);
        if (w) wire_put(c, w);
        return DM_ENOMEM;
    }
    uint32_t seq = c->next_seq++;
    dm_flush_hook_arm(&c->flush_hook);
    *p = (pending_t){.seq = seq,
                     .verbs = verbs,
                     .n = n,
                     .cb = cb,
                     .arg = arg,
                     .send_by_us = base->send_by_us,
                     .buf0 = c->on,
                     .blk = c->onb};
    c->on += serialize(w, verbs, n, seq, body_len, c->obufs + c->on);
    p->buf1 = c->on;
    c->oblocks[c->onb++] = w;
    c->overbs += n;
    if (!c->unflushed) c->unflushed = p;
    if (c->tail) {
        c->tail->next = p;
    } else {
        c->head = p;
        c->last_progress = uv_now(c->loop);
        uv_timer_start(&c->timer, on_timer, 1000, 1000);
    }
    c->tail = p;
    return 0;
}

static void tcp_close(dm_conn_t *base)
{
    tcp_conn_t *c = (tcp_conn_t *)base;
    if (c->user_closed) return;
    c->user_closed = 1;
    conn_fail(c, DM_EIO);
    if (c->handles_open == 0 && c->busy == 0) conn_free(c);
}

static const dm_conn_ops_t tcp_ops = {.post = tcp_post, .close = tcp_close};

dm_conn_t *dm_tcp_open(uv_loop_t *loop, const char *host, int port, char *err, size_t errlen)
{
    /* libuv writes with writev(): a peer that vanished must not kill us with SIGPIPE. */
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
    dm_tcp_hello_reply_t hr;
    int fd = dm_tcp_connect_hello(host, port, &hr, err, errlen);
    if (fd < 0) return NULL;
    tcp_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->base.ops = &tcp_ops;
    c->base.caps = hr.caps & (DM_CAP_MASKED_CAS | DM_CAP_FENCE | DM_CAP_CHAIN);
    c->base.region_size = hr.region_size;
    c->base.incarnation = hr.incarnation;
    c->loop = loop;
    c->next_seq = 1;
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    const char *t = getenv("DMKV_TCP_TIMEOUT_MS");
    if (t && atol(t) > 0) c->timeout_ms = (uint64_t)atol(t);
    if (port == 0)
        uv_pipe_init(loop, &c->pipe, 0);
    else
        uv_tcp_init(loop, &c->sock);
    uv_timer_init(loop, &c->timer);
    dm_flush_hook_init(loop, &c->flush_hook, flush, c);
    c->sock.data = c;
    c->timer.data = c;
    c->handles_open = 4;
    int rc = port == 0 ? uv_pipe_open(&c->pipe, fd) : uv_tcp_open(&c->sock, fd);
    if (rc == 0) rc = uv_read_start((uv_stream_t *)&c->sock, on_alloc, on_read);
    if (rc) {
        char name[DM_TCP_NAME_LEN];
        dm_tcp_node_name(host, port, name, sizeof(name));
        snprintf(err, errlen, "memory node %s: cannot watch the socket: %s", name, uv_strerror(rc));
        if (uv_fileno((uv_handle_t *)&c->sock, &(uv_os_fd_t){0}) != 0)
            close(fd); /* not adopted by libuv */
        tcp_close(&c->base);
        return NULL;
    }
    return &c->base;
}
