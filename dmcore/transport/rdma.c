/* The `rdma` backend: one RC queue pair from one worker to one memory node, set up with
 * librdmacm, verbs posted with libibverbs (docs/DESIGN.md "Transports").
 *
 * - A batch (the verbs the batch layer groups for one node) becomes a run of work requests;
 *   every batch posted in one event-loop turn (by any coroutine of the worker) is queued and
 *   the queue goes out as ONE chain with ONE ibv_post_send at the end of the turn (a
 *   uv_check, or a uv_prepare for posts from timers and idle callbacks): doorbell batching
 *   across commands. Only the chain's last WR is signaled: RC completes in order, so that
 *   completion means every batch of the chain is done. Chaining changes no ordering: the
 *   WRs enter the one send queue in the order they would have been posted one by one.
 * - WRITEs up to the QP's max_inline_data go inline; other WRITEs, READs and the 8-byte
 *   atomic results use a per-connection registered staging ring (DM_RDMA_STAGING bytes,
 *   released in completion order); verbs longer than a quarter of the ring get their own
 *   registered bounce buffer. READ data and atomic results are copied into the caller's
 *   verb on completion, so no verb ever DMAs into caller memory.
 * - Verbs are checked against the region (DM_ERANGE, DM_EALIGN, DM_EINVAL) before posting,
 *   as the tcp backend's memory node does: a bad remote access would put the QP in error.
 *   MASKED_CAS is not offered (rdma-core has no masked atomics; the batch layer downgrades).
 * - Completions: a completion channel whose fd is watched by uv_poll on the worker's loop
 *   (get event, ack, re-arm, drain), plus an optional short busy-poll window from a uv_idle
 *   handle after each post/completion.
 * - Batches that do not fit in the send queue or the staging ring wait in a software FIFO.
 * - An error completion, a DISCONNECTED/DEVICE_REMOVAL event, a failed post or a batch
 *   outstanding longer than the timeout marks the connection broken: every outstanding and
 *   queued batch completes with DM_EIO and later posts return DM_EIO. The worker opens a new
 *   connection (pool/batch.c, base.failed).
 *
 * Callbacks run only from loop callbacks or from close(), never from inside post(). */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "dmkv/log.h"
#include "dmkv/rdma.h"
#include "dmkv/transport.h"
#include "dmkv/flush_hook.h"

#define VI_WR 0x1     /* the verb becomes a work request */
#define VI_INLINE 0x2 /* WRITE posted inline from the caller's buffer */
#define NO_OFF UINT64_MAX

static dm_rdma_counters_t counters;
#define COUNT(field, n) __atomic_add_fetch(&counters.field, (uint64_t)(n), __ATOMIC_RELAXED)

void dm_rdma_counters_get(dm_rdma_counters_t *out)
{
    out->post_send_calls = __atomic_load_n(&counters.post_send_calls, __ATOMIC_RELAXED);
    out->wrs_posted = __atomic_load_n(&counters.wrs_posted, __ATOMIC_RELAXED);
    out->wrs_signaled = __atomic_load_n(&counters.wrs_signaled, __ATOMIC_RELAXED);
    out->wrs_inline = __atomic_load_n(&counters.wrs_inline, __ATOMIC_RELAXED);
    out->batches_queued = __atomic_load_n(&counters.batches_queued, __ATOMIC_RELAXED);
    out->large_regs = __atomic_load_n(&counters.large_regs, __ATOMIC_RELAXED);
    out->cq_events = __atomic_load_n(&counters.cq_events, __ATOMIC_RELAXED);
    out->busy_polls = __atomic_load_n(&counters.busy_polls, __ATOMIC_RELAXED);
    out->conn_failures = __atomic_load_n(&counters.conn_failures, __ATOMIC_RELAXED);
}

typedef struct vinfo {
    uint64_t off;      /* staging ring offset, or NO_OFF */
    void *bounce;      /* own registered buffer for large verbs */
    struct ibv_mr *mr; /* registration of bounce */
    uint32_t flags;    /* VI_* */
} vinfo_t;

typedef struct rbatch {
    struct rbatch *next;
    uint64_t seq; /* wr_id of every WR of the batch */
    dm_verb_t *verbs;
    size_t n;
    dm_post_cb cb;
    void *arg;
    uint32_t nwr;        /* work requests */
    uint64_t send_by_us; /* dm_conn_t.send_by_us when posted: not rung after it */
    int status;          /* completed from the defer timer with this */
    uint64_t ring_bytes; /* staging bytes held, wrap-around waste included */
    uint64_t posted_us;
    vinfo_t vi[];
} rbatch_t;

typedef struct bq {
    rbatch_t *head, *tail;
} bq_t;

struct rdma_conn;

/* libuv handles live apart from the connection: they are freed by their close callbacks,
 * after the connection itself is gone. */
typedef struct rdma_handles {
    uv_poll_t cq_poll;          /* completion channel fd */
    uv_poll_t cm_poll;          /* rdma_cm event channel fd (disconnects) */
    uv_timer_t timer;           /* batch timeouts, while batches are outstanding */
    uv_timer_t defer;           /* completes batches that needed no WR; deferred failures */
    uv_idle_t idle;             /* busy-poll window */
    dm_flush_hook_t flush_hook; /* posts the turn's queued batches as one chain */
    int open;                   /* handles not yet closed */
    struct rdma_conn *c;
} rdma_handles_t;

typedef struct rdma_conn {
    dm_conn_t base;
    uv_loop_t *loop;
    rdma_handles_t *h;
    struct rdma_event_channel *cm_ch;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp_ch;
    struct ibv_cq *cq;
    int qp_created;
    struct ibv_mr *stage_mr;
    uint8_t *stage;
    uint64_t stage_size, ring_head, ring_used;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t sq_depth, sq_used, max_inline;
    uint64_t max_msg;
    int atomics;
    int fence_reads; /* IBV_SEND_FENCE on dm_verb_t.fence READs (use_fence) */
    uint64_t next_seq;
    bq_t outstanding; /* posted, in posting order */
    bq_t pending;     /* waiting for SQ/staging room */
    bq_t deferred;    /* need no WR: completed from the defer timer */
    int broken, closing, busy;
    uint32_t timeout_ms, busy_poll_us;
    uint64_t last_progress_us;
    struct ibv_send_wr *wrs; /* sq_depth entries, reused by every post */
    struct ibv_sge *sges;
    char peer[300];
} rdma_conn_t;

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint32_t env_u32(const char *name, uint32_t dflt)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    return *end ? dflt : (uint32_t)v;
}

static void bq_push(bq_t *q, rbatch_t *b)
{
    b->next = NULL;
    if (q->tail)
        q->tail->next = b;
    else
        q->head = b;
    q->tail = b;
}

static rbatch_t *bq_pop(bq_t *q)
{
    rbatch_t *b = q->head;
    if (b) {
        q->head = b->next;
        if (!q->head) q->tail = NULL;
        b->next = NULL;
    }
    return b;
}

/* ---- staging ring: allocations are released in FIFO order (RC completes in order) --- */

/* Reserve len bytes (rounded to 8) contiguous in the ring. Returns 0 with the offset and
 * the bytes charged (len + any skipped tail), or -1 when the ring has no room now. */
static int ring_alloc(rdma_conn_t *c, uint64_t len, uint64_t *off, uint64_t *charged)
{
    len = (len + 7) & ~(uint64_t)7;
    if (len > c->stage_size) return -1;
    uint64_t pos = c->ring_head, waste = 0;
    if (pos + len > c->stage_size) {
        waste = c->stage_size - pos;
        pos = 0;
    }
    if (c->ring_used + waste + len > c->stage_size) return -1;
    c->ring_used += waste + len;
    c->ring_head = pos + len == c->stage_size ? 0 : pos + len;
    *off = pos;
    *charged = waste + len;
    return 0;
}

/* ---- verb checks (same results as dm_region_exec on the memory node) ---- */

static int check_verb(rdma_conn_t *c, const dm_verb_t *v)
{
    uint64_t size = c->base.region_size;
    if (v->offset > size || v->len > size - v->offset) return DM_ERANGE;
    switch (v->op) {
    case DM_OP_READ:
    case DM_OP_WRITE:
        if (v->len > c->max_msg) return DM_EINVAL;
        return 0;
    case DM_OP_CAS:
    case DM_OP_FAA:
        break;
    case DM_OP_MASKED_CAS: /* not in caps: the batch layer sends CAS instead */
    default:
        return DM_EINVAL;
    }
    if (v->len != 8) return DM_EINVAL;
    if (v->offset & 7) return DM_EALIGN;
    if (!c->atomics) return DM_EINVAL;
    return 0;
}

static void free_bounces(rbatch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (b->vi[i].mr) ibv_dereg_mr(b->vi[i].mr);
        free(b->vi[i].bounce);
        b->vi[i].mr = NULL;
        b->vi[i].bounce = NULL;
    }
}

/* Give verb i its own registered buffer (verbs too large for the ring). WRITE data is
 * copied in now. Returns 0 or DM_ENOMEM. */
static int make_bounce(rdma_conn_t *c, rbatch_t *b, size_t i)
{
    dm_verb_t *v = &b->verbs[i];
    size_t sz = ((size_t)v->len + 4095) & ~(size_t)4095;
    void *p = aligned_alloc(4096, sz ? sz : 4096);
    if (!p) return DM_ENOMEM;
    struct ibv_mr *mr = ibv_reg_mr(c->pd, p, v->len, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
        free(p);
        return DM_ENOMEM;
    }
    if (v->op == DM_OP_WRITE) memcpy(p, v->buf, v->len);
    b->vi[i].bounce = p;
    b->vi[i].mr = mr;
    COUNT(large_regs, 1);
    return 0;
}

/* ---- handle (de)activation ---- */

/* Outstanding or queued batches keep the loop alive (cq_poll referenced) and the timeout
 * timer running; an idle connection does neither. */
static void update_activity(rdma_conn_t *c)
{
    rdma_handles_t *h = c->h;
    if (!h || c->closing) return;
    if (c->outstanding.head || c->pending.head) {
        uv_ref((uv_handle_t *)&h->cq_poll);
    } else {
        uv_unref((uv_handle_t *)&h->cq_poll);
        uv_timer_stop(&h->timer);
    }
}

/* ---- completion ---- */

/* Finish batch b: copy results out (status 0) or mark its WR verbs failed, free it and
 * call its callback. Ring and SQ accounting is the caller's. */
static void complete_batch(rdma_conn_t *c, rbatch_t *b, int status)
{
    for (size_t i = 0; i < b->n; i++) {
        dm_verb_t *v = &b->verbs[i];
        vinfo_t *vi = &b->vi[i];
        if (!(vi->flags & VI_WR)) continue;
        if (status) {
            v->status = status;
            continue;
        }
        const uint8_t *local = vi->bounce          ? vi->bounce
                               : vi->off != NO_OFF ? c->stage + vi->off
                                                   : NULL;
        if (v->op == DM_OP_READ && local)
            memcpy(v->buf, local, v->len);
        else if ((v->op == DM_OP_CAS || v->op == DM_OP_FAA) && local)
            memcpy(&v->result, local, 8);
        v->status = 0;
    }
    free_bounces(b);
    dm_post_cb cb = b->cb;
    void *arg = b->arg;
    free(b);
    cb(arg, status);
}

static void conn_destroy(rdma_conn_t *c);

static void conn_unref(rdma_conn_t *c)
{
    if (--c->busy == 0 && c->closing) conn_destroy(c);
}

/* Move the QP to the error state so the device stops touching the staging memory. */
static void qp_to_error(rdma_conn_t *c)
{
    if (c->qp_created && c->id && c->id->qp) {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        ibv_modify_qp(c->id->qp, &a, IBV_QP_STATE);
    }
}

/* Mark the connection broken (why == NULL: quietly, on close) and complete every
 * outstanding, queued and deferred batch with status. */
static void fail_all(rdma_conn_t *c, int status, const char *why)
{
    if (!c->broken) {
        c->broken = 1;
        c->base.failed = 1;
        if (why) {
            COUNT(conn_failures, 1);
            dm_log(DM_LOG_WARNING, "rdma: connection to memory node %s failed: %s", c->peer, why);
        }
        qp_to_error(c);
    }
    c->busy++;
    for (;;) {
        rbatch_t *b = bq_pop(&c->outstanding);
        if (!b) b = bq_pop(&c->pending);
        if (!b) b = bq_pop(&c->deferred);
        if (!b) break;
        complete_batch(c, b, status);
    }
    c->sq_used = 0;
    c->ring_used = 0;
    c->ring_head = 0;
    update_activity(c);
    conn_unref(c);
}

/* ---- posting ---- */

enum { POST_OK = 0, POST_AGAIN = 1, POST_NONE = 2 };

static void on_defer(uv_timer_t *t);
static void after_post(rdma_conn_t *c);

/* Stage batch b at c->wrs[*k...]: staging ring space, work requests, SQ room (counted in
 * sq_used). Returns POST_OK (*k advanced), POST_NONE (every bounce failed: b has no WR
 * left, nothing staged) or POST_AGAIN (no room now; nothing changed). */
static int stage_batch(rdma_conn_t *c, rbatch_t *b, uint32_t *k)
{
    if (c->sq_used + b->nwr > c->sq_depth) return POST_AGAIN;
    uint64_t save_head = c->ring_head, save_used = c->ring_used;
    b->ring_bytes = 0;
    for (size_t i = 0; i < b->n; i++) {
        vinfo_t *vi = &b->vi[i];
        if (!(vi->flags & VI_WR) || (vi->flags & VI_INLINE) || vi->bounce) continue;
        dm_verb_t *v = &b->verbs[i];
        uint64_t need = v->op == DM_OP_READ || v->op == DM_OP_WRITE ? v->len : 8, off, got;
        if (ring_alloc(c, need, &off, &got) == 0) {
            vi->off = off;
            b->ring_bytes += got;
            continue;
        }
        if (c->outstanding.head || *k) {
            /* Room comes back as batches complete: undo and wait. */
            for (size_t j = 0; j < i; j++)
                b->vi[j].off = NO_OFF;
            c->ring_head = save_head;
            c->ring_used = save_used;
            return POST_AGAIN;
        }
        /* Nothing outstanding and still no room: this batch alone exceeds the ring. */
        int rc = make_bounce(c, b, i);
        if (rc) {
            vi->flags = 0;
            v->status = rc;
            b->nwr--;
        }
    }
    if (b->nwr == 0) { /* only possible when every bounce failed */
        c->ring_head = save_head;
        c->ring_used = save_used;
        return POST_NONE;
    }
    for (size_t i = 0; i < b->n; i++) {
        vinfo_t *vi = &b->vi[i];
        if (!(vi->flags & VI_WR)) continue;
        dm_verb_t *v = &b->verbs[i];
        struct ibv_send_wr *wr = &c->wrs[*k];
        struct ibv_sge *sge = &c->sges[*k];
        memset(wr, 0, sizeof(*wr));
        /* A READ that must see an earlier atomic of the chain (CHIME: the neighborhood READ
         * after the lock CAS) waits for it; only those pay for the fence (not on rxe: see
         * fence_reads). */
        if (v->op == DM_OP_READ && v->fence && c->fence_reads) wr->send_flags |= IBV_SEND_FENCE;
        wr->wr_id = b->seq;
        wr->next = &c->wrs[*k + 1];
        wr->sg_list = sge;
        wr->num_sge = 1;
        uint8_t *local = vi->bounce ? vi->bounce : vi->off != NO_OFF ? c->stage + vi->off : NULL;
        sge->addr = (uintptr_t)local;
        sge->lkey = vi->mr ? vi->mr->lkey : c->stage_mr->lkey;
        switch (v->op) {
        case DM_OP_READ:
        case DM_OP_WRITE:
            wr->opcode = v->op == DM_OP_READ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
            wr->wr.rdma.remote_addr = c->raddr + v->offset;
            wr->wr.rdma.rkey = c->rkey;
            sge->length = v->len;
            if (vi->flags & VI_INLINE) {
                sge->addr = (uintptr_t)v->buf;
                sge->lkey = 0;
                wr->send_flags |= IBV_SEND_INLINE;
            } else if (v->op == DM_OP_WRITE && !vi->bounce) {
                memcpy(local, v->buf, v->len);
            }
            break;
        default: /* CAS, FAA */
            wr->opcode =
                v->op == DM_OP_CAS ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr->wr.atomic.remote_addr = c->raddr + v->offset;
            wr->wr.atomic.rkey = c->rkey;
            wr->wr.atomic.compare_add = v->compare;
            wr->wr.atomic.swap = v->op == DM_OP_CAS ? v->swap : 0;
            sge->length = 8;
            break;
        }
        ++*k;
    }
    c->sq_used += b->nwr;
    return POST_OK;
}

/* Post the queued batches, in order, as few chains as the SQ and the staging ring allow
 * (one, unless they are full): one ibv_post_send and one signaled WR per chain. Stops at
 * the first batch without room (completions kick again). Loop-callback context. */
static void kick_pending(rdma_conn_t *c)
{
    int posted = 0;
    while (c->pending.head && !c->broken && !c->closing) {
        uint64_t save_head = c->ring_head, save_used = c->ring_used;
        uint32_t save_sq = c->sq_used, k = 0;
        bq_t chain = {0};
        while (c->pending.head) {
            rbatch_t *b = c->pending.head;
            if (b->send_by_us && now_us() > b->send_by_us) {
                /* Its lease ended while it waited for room: never rung (no WR staged). */
                bq_pop(&c->pending);
                b->status = DM_ELATE;
                dm_conn_count_late(0);
                bq_push(&c->deferred, b);
                uv_timer_start(&c->h->defer, on_defer, 0, 0);
                continue;
            }
            int st = stage_batch(c, b, &k);
            if (st == POST_AGAIN) break;
            bq_pop(&c->pending);
            if (st == POST_OK) {
                bq_push(&chain, b);
            } else { /* no WR left: completed from the defer timer */
                bq_push(&c->deferred, b);
                uv_timer_start(&c->h->defer, on_defer, 0, 0);
            }
        }
        if (k == 0) {
            if (c->pending.head) COUNT(batches_queued, 1);
            break;
        }
        c->wrs[k - 1].next = NULL;
        c->wrs[k - 1].send_flags |= IBV_SEND_SIGNALED;
        int bounded = 0; /* tests (fault 'wire'): a lease holder's writes are in this chain */
        if (dm_fault_armed(DM_FAULT_WIRE))
            for (rbatch_t *b = chain.head; b && !bounded; b = b->next)
                bounded = b->send_by_us != 0;
        uint32_t wire_ms = bounded ? dm_fault_delay_ms(DM_FAULT_WIRE) : 0;
        if (wire_ms) usleep(wire_ms * 1000u); /* tests: it passed its check, then is late */
        struct ibv_send_wr *bad = NULL;
        int rc = ibv_post_send(c->id->qp, c->wrs, &bad);
        COUNT(post_send_calls, 1);
        if (rc) {
            c->ring_head = save_head;
            c->ring_used = save_used;
            c->sq_used = save_sq;
            dm_log(DM_LOG_WARNING, "rdma: ibv_post_send to %s: %s", c->peer, strerror(rc));
            if (chain.head) { /* back to the front, in order, to fail with the rest */
                chain.tail->next = c->pending.head;
                if (!c->pending.head) c->pending.tail = chain.tail;
                c->pending.head = chain.head;
            }
            fail_all(c, DM_EIO, "ibv_post_send failed");
            return;
        }
        dm_conn_count_message(&c->base, k);
        uint32_t inl = 0;
        for (uint32_t j = 0; j < k; j++)
            inl += (c->wrs[j].send_flags & IBV_SEND_INLINE) != 0;
        COUNT(wrs_posted, k);
        COUNT(wrs_signaled, 1);
        if (inl) COUNT(wrs_inline, inl);
        uint64_t now = now_us();
        rbatch_t *b;
        while ((b = bq_pop(&chain)) != NULL) {
            b->posted_us = now;
            bq_push(&c->outstanding, b);
        }
        posted = 1;
    }
    if (posted) after_post(c);
}

/* Poll the CQ dry and complete finished batches. Returns the number of completions. */
static int drain(rdma_conn_t *c)
{
    struct ibv_wc wc[32];
    int total = 0;
    c->busy++;
    while (!c->closing && c->cq) {
        int n = ibv_poll_cq(c->cq, 32, wc);
        if (n < 0) {
            if (!c->broken) fail_all(c, DM_EIO, "ibv_poll_cq failed");
            break;
        }
        if (n == 0) break;
        total += n;
        for (int j = 0; j < n && !c->closing; j++) {
            if (wc[j].status != IBV_WC_SUCCESS) {
                if (!c->broken) {
                    char why[128];
                    snprintf(why, sizeof(why), "work completion error: %s (vendor 0x%x)",
                             ibv_wc_status_str(wc[j].status), wc[j].vendor_err);
                    fail_all(c, DM_EIO, why);
                }
                continue;
            }
            rbatch_t *b;
            while (!c->closing && (b = c->outstanding.head) && b->seq <= wc[j].wr_id) {
                bq_pop(&c->outstanding);
                c->sq_used -= b->nwr;
                /* Copy out before the ring space can be reused: complete_batch copies
                 * first and the callback (which may post) runs last. */
                c->ring_used -= b->ring_bytes;
                complete_batch(c, b, 0);
            }
        }
    }
    if (total) c->last_progress_us = now_us();
    if (!c->closing) {
        kick_pending(c);
        update_activity(c);
    }
    conn_unref(c);
    return total;
}

/* ---- loop callbacks ---- */

static void on_cq_event(uv_poll_t *p, int status, int events)
{
    (void)events;
    rdma_handles_t *h = p->data;
    rdma_conn_t *c = h->c;
    if (!c) return;
    if (status < 0) {
        c->busy++;
        fail_all(c, DM_EIO, "completion channel poll failed");
        conn_unref(c);
        return;
    }
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    while (ibv_get_cq_event(c->comp_ch, &ev_cq, &ev_ctx) == 0) {
        ibv_ack_cq_events(ev_cq, 1);
        COUNT(cq_events, 1);
    }
    ibv_req_notify_cq(c->cq, 0);
    drain(c);
}

static void on_idle(uv_idle_t *i)
{
    rdma_handles_t *h = i->data;
    rdma_conn_t *c = h->c;
    if (!c) return;
    COUNT(busy_polls, 1);
    c->busy++;
    drain(c);
    if (!c->closing && (!c->outstanding.head || now_us() - c->last_progress_us > c->busy_poll_us))
        uv_idle_stop(&h->idle);
    conn_unref(c);
}

static void on_timer(uv_timer_t *t)
{
    rdma_handles_t *h = t->data;
    rdma_conn_t *c = h->c;
    if (!c) return;
    rbatch_t *b = c->outstanding.head;
    if (b && now_us() - b->posted_us > (uint64_t)c->timeout_ms * 1000u) {
        c->busy++;
        /* After this thread was stalled the completion may be in the CQ already. */
        drain(c);
        b = c->outstanding.head;
        if (!c->broken && !c->closing && b &&
            now_us() - b->posted_us > (uint64_t)c->timeout_ms * 1000u) {
            char why[96];
            snprintf(why, sizeof(why), "a batch got no completion within %u ms", c->timeout_ms);
            fail_all(c, DM_EIO, why);
        }
        conn_unref(c);
    } else if (!b) {
        uv_timer_stop(t);
    }
}

static void on_defer(uv_timer_t *t)
{
    rdma_handles_t *h = t->data;
    rdma_conn_t *c = h->c;
    if (!c) return;
    c->busy++;
    rbatch_t *b;
    while (!c->closing && (b = bq_pop(&c->deferred)))
        complete_batch(c, b, b->status);
    conn_unref(c);
}

/* End of the loop turn: post what the turn queued as one chain. */
static void flush(dm_flush_hook_t *hook)
{
    rdma_handles_t *h = hook->check.data;
    rdma_conn_t *c = h->c;
    if (!c) return;
    c->busy++;
    kick_pending(c);
    update_activity(c);
    conn_unref(c);
}

static void on_cm_event(uv_poll_t *p, int status, int events)
{
    (void)events;
    rdma_handles_t *h = p->data;
    rdma_conn_t *c = h->c;
    if (!c || status < 0) return;
    struct rdma_cm_event *ev;
    c->busy++;
    while (!c->closing && rdma_get_cm_event(c->cm_ch, &ev) == 0) {
        enum rdma_cm_event_type type = ev->event;
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
            type == RDMA_CM_EVENT_ADDR_CHANGE) {
            char why[96];
            snprintf(why, sizeof(why), "rdma_cm event %s", rdma_event_str(type));
            if (!c->broken) fail_all(c, DM_EIO, why);
        }
    }
    conn_unref(c);
}

/* Arm the timeout timer and the busy-poll window after a successful post. */
static void after_post(rdma_conn_t *c)
{
    rdma_handles_t *h = c->h;
    uv_ref((uv_handle_t *)&h->cq_poll);
    if (!uv_is_active((uv_handle_t *)&h->timer)) {
        uint64_t period = c->timeout_ms / 4 ? c->timeout_ms / 4 : 1;
        uv_timer_start(&h->timer, on_timer, period, period);
    }
    if (c->busy_poll_us) {
        c->last_progress_us = now_us();
        if (!uv_is_active((uv_handle_t *)&h->idle)) uv_idle_start(&h->idle, on_idle);
    }
}

static int rdma_post(dm_conn_t *base, dm_verb_t *verbs, size_t n, dm_post_cb cb, void *arg)
{
    rdma_conn_t *c = (rdma_conn_t *)base;
    if (c->broken || c->closing) return DM_EIO;
    if (n > c->sq_depth) return DM_EINVAL;
    uint32_t late_ms =
        base->send_by_us && dm_fault_armed(DM_FAULT_LATE) ? dm_fault_delay_ms(DM_FAULT_LATE) : 0;
    if (late_ms) usleep(late_ms * 1000u);         /* tests: held back before the check */
    if (dm_conn_send_late(base)) return DM_ELATE; /* not rung */
    rbatch_t *b = malloc(sizeof(*b) + n * sizeof(vinfo_t));
    if (!b) return DM_ENOMEM;
    b->next = NULL;
    b->seq = ++c->next_seq;
    b->verbs = verbs;
    b->n = n;
    b->cb = cb;
    b->arg = arg;
    b->nwr = 0;
    b->send_by_us = base->send_by_us;
    b->status = 0;
    b->ring_bytes = 0;
    b->posted_us = 0;
    uint64_t large = c->stage_size / 4;
    for (size_t i = 0; i < n; i++) {
        dm_verb_t *v = &verbs[i];
        vinfo_t *vi = &b->vi[i];
        vi->off = NO_OFF;
        vi->bounce = NULL;
        vi->mr = NULL;
        vi->flags = 0;
        v->status = check_verb(c, v);
        if (v->status) continue;
        if ((v->op == DM_OP_READ || v->op == DM_OP_WRITE) && v->len == 0)
            continue; /* nothing to move */
        vi->flags = VI_WR;
        if (v->op == DM_OP_WRITE && v->len <= c->max_inline) {
            vi->flags |= VI_INLINE;
        } else if ((v->op == DM_OP_READ || v->op == DM_OP_WRITE) && v->len > large) {
            int rc = make_bounce(c, b, i);
            if (rc) {
                vi->flags = 0;
                v->status = rc;
                continue;
            }
        }
        b->nwr++;
    }
    if (b->nwr == 0) {
        bq_push(&c->deferred, b);
        uv_timer_start(&c->h->defer, on_defer, 0, 0);
        return 0;
    }
    /* Queued for the end of the turn, with whatever else the turn posts (a batch past its
     * send-by bound by then is not rung: kick_pending). */
    bq_push(&c->pending, b);
    dm_flush_hook_arm(&c->h->flush_hook);
    update_activity(c);
    return 0;
}

/* ---- teardown ---- */

static void handle_closed(uv_handle_t *hd)
{
    rdma_handles_t *h = hd->data;
    if (--h->open == 0) free(h);
}

static void conn_destroy(rdma_conn_t *c)
{
    rdma_handles_t *h = c->h;
    if (h) {
        h->c = NULL;
        uv_close((uv_handle_t *)&h->cq_poll, handle_closed);
        uv_close((uv_handle_t *)&h->cm_poll, handle_closed);
        uv_close((uv_handle_t *)&h->timer, handle_closed);
        uv_close((uv_handle_t *)&h->defer, handle_closed);
        uv_close((uv_handle_t *)&h->idle, handle_closed);
        dm_flush_hook_close(&h->flush_hook, handle_closed);
        c->h = NULL;
    }
    if (c->id) {
        if (c->qp_created) {
            rdma_disconnect(c->id);
            rdma_destroy_qp(c->id);
        }
    }
    if (c->stage_mr) ibv_dereg_mr(c->stage_mr);
    free(c->stage);
    if (c->cq) ibv_destroy_cq(c->cq);
    if (c->comp_ch) ibv_destroy_comp_channel(c->comp_ch);
    if (c->pd) ibv_dealloc_pd(c->pd);
    if (c->id) rdma_destroy_id(c->id);
    if (c->cm_ch) rdma_destroy_event_channel(c->cm_ch);
    free(c->wrs);
    free(c->sges);
    free(c);
}

static void rdma_close(dm_conn_t *base)
{
    rdma_conn_t *c = (rdma_conn_t *)base;
    if (c->closing) return;
    c->busy++;
    fail_all(c, DM_EIO, NULL);
    c->closing = 1;
    conn_unref(c);
}

static const dm_conn_ops_t rdma_ops = {.post = rdma_post, .close = rdma_close};

/* ---- connection set-up ---- */

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int ms_left(uint64_t deadline_us)
{
    uint64_t t = now_us();
    return t >= deadline_us ? 0 : (int)((deadline_us - t + 999) / 1000);
}

/* Wait for the next rdma_cm event until deadline; it must be `want`. For ESTABLISHED the
 * accept private data is copied into *acc. Returns 0 or -1 with a message in err. */
static int wait_cm(rdma_conn_t *c, enum rdma_cm_event_type want, uint64_t deadline,
                   dm_rdma_accept_t *acc, char *err, size_t errlen)
{
    struct pollfd pfd = {.fd = c->cm_ch->fd, .events = POLLIN};
    int rc;
    do {
        rc = poll(&pfd, 1, ms_left(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc <= 0) {
        snprintf(err, errlen, "rdma %s: no answer within %d ms waiting for %s", c->peer,
                 DM_RDMA_CONNECT_TIMEOUT_MS, rdma_event_str(want));
        return -1;
    }
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(c->cm_ch, &ev)) {
        snprintf(err, errlen, "rdma %s: rdma_get_cm_event: %s", c->peer, strerror(errno));
        return -1;
    }
    if (ev->event != want) {
        const char *hint = "";
        if (ev->event == RDMA_CM_EVENT_REJECTED)
            hint = " (no dmkv rdma listener there, or a protocol version mismatch)";
        else if (ev->event == RDMA_CM_EVENT_ADDR_ERROR)
            hint = " (is the address on an RDMA device? rxe needs `rdma link add`)";
        snprintf(err, errlen, "rdma %s: %s (status %d) while waiting for %s%s", c->peer,
                 rdma_event_str(ev->event), ev->status, rdma_event_str(want), hint);
        rdma_ack_cm_event(ev);
        return -1;
    }
    if (acc) {
        const void *pd = ev->param.conn.private_data;
        if (!pd || ev->param.conn.private_data_len < sizeof(*acc)) {
            snprintf(err, errlen, "rdma %s: the peer sent no dmkv accept data", c->peer);
            rdma_ack_cm_event(ev);
            return -1;
        }
        memcpy(acc, pd, sizeof(*acc));
    }
    rdma_ack_cm_event(ev);
    return 0;
}

/* Whether READs that must see the batch's earlier atomics get IBV_SEND_FENCE. Not on
 * Soft-RoCE (rxe, vendor id 0xffffff): on the Linux 6.1 guest's rxe a fenced READ behind a
 * CAS stalled its QP (tests/rdma/test_rdma_verbs.c test_fence_stress: within
 * seconds; no completion, no error, a later doorbell did not wake it; CI's "a batch got no
 * completion within 10000 ms"), and rxe needs no fence for this: one responder task
 * executes a QP's requests in PSN order, so the READ sees the CAS. Hardware RNICs keep the
 * fence (Sherman and CHIME post it too). DMKV_RDMA_FENCE=1 or 0 overrides (tests). */
static int use_fence(const struct ibv_device_attr *a)
{
    const char *e = getenv("DMKV_RDMA_FENCE");
    if (e && (e[0] == '0' || e[0] == '1')) return e[0] == '1';
    return a->vendor_id != 0xffffffu;
}

/* Create the QP, asking for DM_RDMA_INLINE_WANT inline bytes and settling for less. */
static int create_qp(rdma_conn_t *c, uint32_t depth)
{
    static const uint32_t inl[] = {DM_RDMA_INLINE_WANT, 128, 64, 0};
    for (size_t i = 0; i < sizeof(inl) / sizeof(inl[0]); i++) {
        struct ibv_qp_init_attr qa;
        memset(&qa, 0, sizeof(qa));
        qa.send_cq = c->cq;
        qa.recv_cq = c->cq;
        qa.qp_type = IBV_QPT_RC;
        qa.sq_sig_all = 0;
        qa.cap.max_send_wr = depth;
        qa.cap.max_recv_wr = 1;
        qa.cap.max_send_sge = 1;
        qa.cap.max_recv_sge = 1;
        qa.cap.max_inline_data = inl[i];
        if (rdma_create_qp(c->id, c->pd, &qa) == 0) {
            c->qp_created = 1;
            c->sq_depth = qa.cap.max_send_wr < depth ? qa.cap.max_send_wr : depth;
            c->max_inline = qa.cap.max_inline_data < inl[i] ? qa.cap.max_inline_data : inl[i];
            return 0;
        }
    }
    return -1;
}

dm_conn_t *dm_rdma_open(uv_loop_t *loop, const char *host, int port, char *err, size_t errlen)
{
    rdma_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->loop = loop;
    c->base.ops = &rdma_ops;
    c->base.caps = 0; /* no masked atomics in rdma-core */
    c->timeout_ms = env_u32("DMKV_RDMA_TIMEOUT_MS", DM_RDMA_TIMEOUT_MS);
    if (c->timeout_ms == 0) c->timeout_ms = DM_RDMA_TIMEOUT_MS;
    c->busy_poll_us = env_u32("DMKV_RDMA_BUSY_POLL_US", DM_RDMA_BUSY_POLL_US);
    snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
    uint64_t deadline = now_us() + (uint64_t)DM_RDMA_CONNECT_TIMEOUT_MS * 1000u;
    struct addrinfo *ai = NULL;

    c->cm_ch = rdma_create_event_channel();
    if (!c->cm_ch) {
        snprintf(err, errlen,
                 "rdma %s: rdma_create_event_channel: %s (no RDMA device, or rdma_ucm not "
                 "loaded?)",
                 c->peer, strerror(errno));
        goto fail;
    }
    if (rdma_create_id(c->cm_ch, &c->id, c, RDMA_PS_TCP)) {
        snprintf(err, errlen, "rdma %s: rdma_create_id: %s", c->peer, strerror(errno));
        goto fail;
    }
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai) {
        snprintf(err, errlen, "rdma %s: cannot resolve host: %s", c->peer, gai_strerror(gai));
        goto fail;
    }
    if (rdma_resolve_addr(c->id, NULL, ai->ai_addr, ms_left(deadline))) {
        snprintf(err, errlen, "rdma %s: rdma_resolve_addr: %s", c->peer, strerror(errno));
        goto fail;
    }
    if (wait_cm(c, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, NULL, err, errlen)) goto fail;
    if (rdma_resolve_route(c->id, ms_left(deadline))) {
        snprintf(err, errlen, "rdma %s: rdma_resolve_route: %s", c->peer, strerror(errno));
        goto fail;
    }
    if (wait_cm(c, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, NULL, err, errlen)) goto fail;

    struct ibv_context *ctx = c->id->verbs;
    struct ibv_device_attr dattr;
    struct ibv_port_attr pattr;
    if (ibv_query_device(ctx, &dattr) || ibv_query_port(ctx, c->id->port_num, &pattr)) {
        snprintf(err, errlen, "rdma %s: cannot query device %s", c->peer,
                 ibv_get_device_name(ctx->device));
        goto fail;
    }
    c->atomics = dattr.atomic_cap != IBV_ATOMIC_NONE;
    c->fence_reads = use_fence(&dattr);
    c->max_msg = pattr.max_msg_sz ? pattr.max_msg_sz : UINT32_MAX;
    uint32_t depth = DM_RDMA_SQ_DEPTH;
    if ((int)depth > dattr.max_qp_wr) depth = (uint32_t)dattr.max_qp_wr;
    int cqe = (int)depth + 16;
    if (cqe > dattr.max_cqe) cqe = dattr.max_cqe;
    c->pd = ibv_alloc_pd(ctx);
    c->comp_ch = c->pd ? ibv_create_comp_channel(ctx) : NULL;
    c->cq = c->comp_ch ? ibv_create_cq(ctx, cqe, c, c->comp_ch, 0) : NULL;
    if (!c->cq) {
        snprintf(err, errlen, "rdma %s: cannot allocate PD/CQ on %s: %s", c->peer,
                 ibv_get_device_name(ctx->device), strerror(errno));
        goto fail;
    }
    if (create_qp(c, depth)) {
        snprintf(err, errlen, "rdma %s: rdma_create_qp: %s", c->peer, strerror(errno));
        goto fail;
    }
    c->stage_size = DM_RDMA_STAGING;
    c->stage = aligned_alloc(4096, c->stage_size);
    c->stage_mr =
        c->stage ? ibv_reg_mr(c->pd, c->stage, c->stage_size, IBV_ACCESS_LOCAL_WRITE) : NULL;
    c->wrs = calloc(c->sq_depth, sizeof(*c->wrs));
    c->sges = calloc(c->sq_depth, sizeof(*c->sges));
    if (!c->stage_mr || !c->wrs || !c->sges) {
        snprintf(err, errlen, "rdma %s: cannot register %u bytes of staging memory: %s", c->peer,
                 DM_RDMA_STAGING, strerror(errno));
        goto fail;
    }
    /* Local ACK timeout 4.096 us * 2^16 = 268 ms, 7 retries: a dead peer surfaces as a
     * RETRY_EXC error completion in about 2 s (the batch timeout is the backstop). */
    uint8_t ack_timeout = 16;
    rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
                    sizeof(ack_timeout));

    dm_rdma_hello_t hello = {.magic = htobe32(DM_RDMA_MAGIC),
                             .version = htobe16(DM_RDMA_PROTO_VERSION),
                             .holder = htobe16(dm_holder_id())};
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = &hello;
    cp.private_data_len = sizeof(hello);
    cp.initiator_depth = (uint8_t)(dattr.max_qp_init_rd_atom < 16 ? dattr.max_qp_init_rd_atom : 16);
    cp.responder_resources = (uint8_t)(dattr.max_qp_rd_atom < 16 ? dattr.max_qp_rd_atom : 16);
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    if (rdma_connect(c->id, &cp)) {
        snprintf(err, errlen, "rdma %s: rdma_connect: %s", c->peer, strerror(errno));
        goto fail;
    }
    dm_rdma_accept_t acc;
    if (wait_cm(c, RDMA_CM_EVENT_ESTABLISHED, deadline, &acc, err, errlen)) goto fail;
    if (be32toh(acc.magic) != DM_RDMA_MAGIC || be16toh(acc.version) != DM_RDMA_PROTO_VERSION) {
        snprintf(err, errlen,
                 "rdma %s: %s: peer speaks dmkv rdma protocol magic 0x%x version %u, want "
                 "version %u",
                 c->peer, dm_strerror(DM_EPROTO), be32toh(acc.magic), be16toh(acc.version),
                 DM_RDMA_PROTO_VERSION);
        goto fail;
    }
    c->raddr = be64toh(acc.addr);
    c->rkey = be32toh(acc.rkey);
    c->base.region_size = be64toh(acc.size);
    c->base.incarnation = be64toh(acc.incarnation);
    if (be16toh(acc.flags) & DM_RDMA_ACCEPT_FENCES) c->base.caps |= DM_CAP_FENCE;

    if (set_nonblock(c->cm_ch->fd) || set_nonblock(c->comp_ch->fd) || ibv_req_notify_cq(c->cq, 0)) {
        snprintf(err, errlen, "rdma %s: cannot set up completion notification", c->peer);
        goto fail;
    }
    rdma_handles_t *h = calloc(1, sizeof(*h));
    if (!h) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    h->c = c;
    c->h = h;
    uv_poll_init(loop, &h->cq_poll, c->comp_ch->fd);
    uv_poll_init(loop, &h->cm_poll, c->cm_ch->fd);
    uv_timer_init(loop, &h->timer);
    uv_timer_init(loop, &h->defer);
    uv_idle_init(loop, &h->idle);
    dm_flush_hook_init(loop, &h->flush_hook, flush, h);
    h->open = 7; /* the hook is two handles */
    h->cq_poll.data = h->cm_poll.data = h->timer.data = h->defer.data = h->idle.data = h;
    uv_poll_start(&h->cq_poll, UV_READABLE, on_cq_event);
    uv_poll_start(&h->cm_poll, UV_READABLE, on_cm_event);
    /* Idle connections do not keep the loop alive; outstanding batches do (cq_poll is
     * referenced while any batch is posted or queued). */
    uv_unref((uv_handle_t *)&h->cq_poll);
    uv_unref((uv_handle_t *)&h->cm_poll);
    freeaddrinfo(ai);
    return &c->base;

fail:
    if (ai) freeaddrinfo(ai);
    c->closing = 1;
    conn_destroy(c);
    return NULL;
}
