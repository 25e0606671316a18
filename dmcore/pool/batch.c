/* The batch layer: verbs grouped per memory node (one message, one doorbell each),
 * awaited together, charged to the operation's command class; connections reopened after a
 * failure; fire-and-forget batches; writes riding along with an operation's next batch. */
#include "dmkv/batch.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "dmkv/log.h"

/* Has the lease the ride's writes rely on ended? Then they are dropped, never posted late. */
static int ride_expired(const dm_ctx_t *ctx)
{
    if (!ctx->ride_until_us || dm_now_us() <= ctx->ride_until_us) return 0;
    dm_log(DM_LOG_WARNING, "a leaf lease ended before its writes were posted: dropped");
    return 1;
}

void dm_ctx_ride_start(dm_ctx_t *ctx, dm_batch_t *ride)
{
    ctx->ride = ride;
    ctx->ride_until_us = 0;
    ctx->ride_failed = 0;
}

int dm_ctx_ride_end(dm_ctx_t *ctx, dm_batch_t *r)
{
    ctx->ride = NULL;
    if (!r->n) return 0;
    if (ride_expired(ctx)) {
        r->n = 0;
        r->send_by_us = 0;
        ctx->ride_failed = 1;
        return DM_ERETRY;
    }
    r->send_by_us = dm_send_by_earlier(r->send_by_us, ctx->ride_until_us);
    int rc = dm_batch_exec(ctx, r);
    r->n = 0;
    r->send_by_us = 0;
    if (rc) ctx->ride_failed = 1;
    return rc;
}

int dm_ctx_ride_before(dm_ctx_t *ctx, const dm_batch_t *b)
{
    dm_batch_t *r = ctx->ride;
    if (!r || !r->n) return 0;
    int one_node = 1;
    for (unsigned i = 1; i < r->n; i++)
        one_node &= r->node[i] == r->node[0];
    for (unsigned i = 0; i < b->n; i++)
        one_node &= b->node[i] == r->node[0];
    if (one_node) return 0; /* one message: the node runs the ride first */
    return dm_ctx_ride_end(ctx, r);
}

static dm_verb_t *batch_add(dm_batch_t *b, dm_gaddr_t a, uint8_t op)
{
    if (b->n >= DM_BATCH_MAX) return NULL;
    dm_verb_t *v = &b->v[b->n];
    memset(v, 0, sizeof(*v));
    v->op = op;
    v->offset = dm_gaddr_off(a);
    b->node[b->n] = (uint8_t)dm_gaddr_node(a);
    b->n++;
    return v;
}

dm_verb_t *dm_batch_read(dm_batch_t *b, dm_gaddr_t a, void *buf, uint32_t len)
{
    dm_verb_t *v = batch_add(b, a, DM_OP_READ);
    if (v) {
        v->buf = buf;
        v->len = len;
    }
    return v;
}

dm_verb_t *dm_batch_write(dm_batch_t *b, dm_gaddr_t a, const void *buf, uint32_t len)
{
    dm_verb_t *v = batch_add(b, a, DM_OP_WRITE);
    if (v) {
        v->buf = (void *)buf;
        v->len = len;
    }
    return v;
}

dm_verb_t *dm_batch_cas(dm_batch_t *b, dm_gaddr_t a, uint64_t expect, uint64_t swap)
{
    dm_verb_t *v = batch_add(b, a, DM_OP_CAS);
    if (v) {
        v->len = 8;
        v->compare = expect;
        v->swap = swap;
    }
    return v;
}

void dm_batch_commit(dm_batch_t *b, dm_verb_t *v, uint64_t by_us)
{
    b->commit = (unsigned)(v - b->v) + 1;
    b->chain_from = b->commit;
    b->commit_by_us = by_us;
}

void dm_batch_commit_guarded(dm_batch_t *b, dm_verb_t *guard, dm_verb_t *v, uint64_t by_us)
{
    dm_batch_commit(b, v, by_us);
    b->chain_from = guard ? (unsigned)(guard - b->v) + 1 : 0;
}

dm_verb_t *dm_batch_faa(dm_batch_t *b, dm_gaddr_t a, uint64_t add)
{
    dm_verb_t *v = batch_add(b, a, DM_OP_FAA);
    if (v) {
        v->len = 8;
        v->compare = add;
    }
    return v;
}

/* Callers of the masked form need the connection's capabilities: resolved at exec time
 * would be too late for the caller's retry logic, so the batch records both forms and
 * dm_batch_exec downgrades to CAS where the node lacks DM_CAP_MASKED_CAS. */
dm_verb_t *dm_batch_masked_cas(dm_batch_t *b, dm_gaddr_t a, uint64_t expect, uint64_t cmask,
                               uint64_t swap, uint64_t smask, uint64_t guess)
{
    dm_verb_t *v = batch_add(b, a, DM_OP_MASKED_CAS);
    if (v) {
        v->len = 8;
        v->compare = expect;
        v->compare_mask = cmask;
        v->swap = swap;
        v->swap_mask = smask;
        v->result = guess; /* consumed by the CAS fallback */
    }
    return v;
}

typedef struct batch_wait {
    unsigned pending;
    int status;
    int yielded;
    dm_coro_t *co;
} batch_wait_t;

static void batch_done(void *arg, int conn_status)
{
    batch_wait_t *bw = arg;
    if (conn_status && !bw->status) bw->status = conn_status;
    if (--bw->pending == 0 && bw->yielded) dm_coro_resume(bw->co);
}

/* A masked CAS for a node without DM_CAP_MASKED_CAS becomes a plain CAS of the caller's
 * guess with the masked parts merged. */
static void downgrade_masked(dm_worker_t *w, unsigned node, dm_verb_t *t)
{
    if (t->op != DM_OP_MASKED_CAS || node >= w->n_nodes || !w->conns[node] ||
        (w->conns[node]->caps & DM_CAP_MASKED_CAS))
        return;
    uint64_t g = t->result;
    if ((g & t->compare_mask) != (t->compare & t->compare_mask))
        g = (g & ~t->compare_mask) | (t->compare & t->compare_mask);
    t->op = DM_OP_CAS;
    t->compare = g;
    t->swap = (g & ~t->swap_mask) | (t->swap & t->swap_mask);
}

/* Bytes b reads and writes (an atomic counts 8 each way), for INFO. */
static void batch_bytes(const dm_batch_t *b, uint64_t *rd, uint64_t *wr)
{
    *rd = *wr = 0;
    for (unsigned i = 0; i < b->n; i++) {
        if (b->v[i].op == DM_OP_READ)
            *rd += b->v[i].len;
        else if (b->v[i].op == DM_OP_WRITE)
            *wr += b->v[i].len;
        else
            *rd += 8, *wr += 8;
    }
}

/* Group b's verbs per node into tmp (keeping order). */
static unsigned group_by_node(dm_worker_t *w, dm_batch_t *b, dm_verb_t *tmp, unsigned *map,
                              unsigned *start, unsigned *count)
{
    unsigned nodes = 0, k = 0;
    unsigned order[DM_BATCH_MAX];
    uint8_t seen[DM_GADDR_MAX_NODES] = {0};
    for (unsigned i = 0; i < b->n; i++) {
        if (!seen[b->node[i]]) {
            seen[b->node[i]] = 1;
            order[nodes++] = b->node[i];
        }
    }
    for (unsigned j = 0; j < nodes; j++) {
        start[j] = k;
        for (unsigned i = 0; i < b->n; i++) {
            if (b->node[i] != order[j]) continue;
            tmp[k] = b->v[i];
            downgrade_masked(w, order[j], &tmp[k]);
            map[k++] = i;
        }
        count[j] = k - start[j];
        start[j] |= (unsigned)order[j] << 16;
    }
    return nodes;
}

/* Whether c, node's connection, executes its messages in order and chains commits
 * (DM_CAP_CHAIN), and is still the one in use. */
static int conn_chains(const dm_worker_t *w, unsigned node, const dm_conn_t *c)
{
    return c && !c->failed && !w->lost[node] && (c->caps & DM_CAP_CHAIN);
}

/* Drop r's ordering READs (dm_verb_t.order_only) that b needs no more: b's verbs are all on
 * the READ's node, whose connection executes its messages in order (DM_CAP_CHAIN), so b
 * lands after the connection's earlier batches anyway. One verb less per insert into a
 * shared CHIME hold (chime/share.c write_now). */
static void drop_order_reads(const dm_worker_t *w, dm_batch_t *r, const dm_batch_t *b)
{
    unsigned k = 0;
    for (unsigned i = 0; i < r->n; i++) {
        unsigned node = r->node[i];
        int drop = r->v[i].order_only && b->n > 0 && node < w->n_nodes &&
                   conn_chains(w, node, w->conns[node]);
        for (unsigned j = 0; drop && j < b->n; j++)
            drop = b->node[j] == node;
        if (drop) continue;
        r->v[k] = r->v[i];
        r->node[k] = r->node[i];
        k++;
    }
    r->n = k;
}

/* Post ctx's ride-along verbs with b (before b's, in one batch when they fit). */
static int exec_with_ride(dm_ctx_t *ctx, dm_batch_t *b)
{
    dm_batch_t *r = ctx->ride;
    ctx->ride = NULL;
    if (ride_expired(ctx)) {
        /* b may rely on the ride (a slot CAS behind its pending entry): not posted either;
         * the caller retries and finds its lease check failing. */
        r->n = 0;
        r->send_by_us = 0;
        ctx->ride_failed = 1;
        return DM_ERETRY;
    }
    drop_order_reads(ctx->w, r, b); /* the ride's bound still goes with b */
    if (r->n + b->n > DM_BATCH_MAX) {
        r->send_by_us = dm_send_by_earlier(r->send_by_us, ctx->ride_until_us);
        int rc = dm_batch_exec(ctx, r);
        r->n = 0;
        r->send_by_us = 0;
        if (rc) ctx->ride_failed = 1;
        return rc ? rc : dm_batch_exec(ctx, b);
    }
    dm_batch_t m;
    m.n = r->n + b->n;
    m.send_by_us = dm_send_by_earlier(b->send_by_us, ctx->ride_until_us);
    m.commit = b->commit ? b->commit + r->n : 0;
    m.chain_from = b->chain_from ? b->chain_from + r->n : 0;
    m.commit_by_us = b->commit_by_us;
    m.place = b->place;
    m.place_arg = b->place_arg;
    memcpy(m.v, r->v, r->n * sizeof(m.v[0]));
    memcpy(m.node, r->node, r->n);
    memcpy(m.v + r->n, b->v, b->n * sizeof(m.v[0]));
    memcpy(m.node + r->n, b->node, b->n);
    int rc = dm_batch_exec(ctx, &m);
    memcpy(b->v, m.v + r->n, b->n * sizeof(b->v[0]));
    if (rc == DM_EYIELD) { /* nothing posted: the ride goes out with dm_ctx_ride_end */
        ctx->ride = r;
        return rc;
    }
    r->n = 0;
    r->send_by_us = 0;
    if (rc) ctx->ride_failed = 1; /* which of the ride's verbs ran is unknown */
    return rc;
}

/* c->ops->post with the message's send-by bound (dm_conn_t.send_by_us). */
static int post_by(dm_conn_t *c, dm_verb_t *v, size_t n, dm_post_cb cb, void *arg,
                   uint64_t send_by_us)
{
    c->send_by_us = send_by_us;
    int rc = c->ops->post(c, v, n, cb, arg);
    c->send_by_us = 0;
    return rc;
}

/* At most one reconnect attempt a second per node while attempts fail; after one that
 * succeeded, the next may come 100 ms later. A fence cuts a holder's connections when its
 * lease is taken over (dmkv/fence.h), and the memory node spares connections younger than
 * 500 ms, so a fenced connection is replaced at once. With a 1 s gap after every attempt,
 * a second fence within a second of the last reconnect failed every command posted in the
 * rest of that second with "connection lost", though the node would take a new one. */
#define REDIAL_GAP_US 1000000u
#define REDIAL_AFTER_OPEN_US 100000u

/* A failed connection is closed from a timer callback: the caller may be running inside
 * one of its completion callbacks. */
typedef struct retired {
    uv_timer_t timer; /* first: the handle pointer is the struct's */
    dm_conn_t *conn;
} retired_t;

static void on_retired(uv_timer_t *t)
{
    retired_t *r = t->data;
    r->conn->ops->close(r->conn);
    uv_close((uv_handle_t *)&r->timer, (uv_close_cb)free);
}

static void retire_conn(dm_worker_t *w, dm_conn_t *c)
{
    retired_t *r = malloc(sizeof(*r));
    if (!r) return; /* leak the failed connection rather than close it under a callback */
    r->conn = c;
    uv_timer_init(w->loop, &r->timer);
    r->timer.data = r;
    uv_timer_start(&r->timer, on_retired, 0, 0);
}

static uint64_t redials; /* dm_pool_redials */

uint64_t dm_pool_redials(void)
{
    return __atomic_load_n(&redials, __ATOMIC_RELAXED);
}

/* The connection to node, opened again first when the backend gave up on it. */
static dm_conn_t *conn_for(dm_worker_t *w, unsigned node)
{
    if (node >= w->n_nodes) return NULL;
    dm_conn_t *c = w->conns[node];
    if (!c || !c->failed || !w->uris[node]) return c;
    uint64_t now = dm_now_us();
    if (now < w->redial_at_us[node]) return c;
    w->redial_at_us[node] = now + REDIAL_GAP_US;
    char err[256];
    dm_conn_t *n = dm_conn_open(w->loop, w->uris[node], node, err, sizeof(err));
    if (!n) {
        dm_log(DM_LOG_WARNING, "memory node %u (%s): reconnect failed: %s", node, w->uris[node],
               err);
        return c;
    }
    if (c && n->incarnation != c->incarnation) {
        /* The node restarted and its region is new: the directory, leaf and allocation
         * state this gateway holds describe memory that is gone, and writing into the new
         * region by them would corrupt it. Refuse it (DM_ELOST) until the old one is back. */
        if (w->lost[node] != n->incarnation)
            dm_log(DM_LOG_WARNING,
                   "memory node %u (%s) came back as a new incarnation (%016llx, was %016llx): "
                   "its data is gone; refusing it (restart the gateways after restoring the "
                   "pool)",
                   node, w->uris[node], (unsigned long long)n->incarnation,
                   (unsigned long long)c->incarnation);
        w->lost[node] = n->incarnation;
        n->ops->close(n);
        return c;
    }
    w->lost[node] = 0;
    w->redial_at_us[node] = now + REDIAL_AFTER_OPEN_US;
    retire_conn(w, c); /* failed: its batches have completed or will, with an error */
    w->conns[node] = n;
    __atomic_fetch_add(&redials, 1, __ATOMIC_RELAXED);
    dm_log(DM_LOG_NOTICE, "memory node %u (%s): reconnected", node, w->uris[node]);
    return n;
}

/* Post n verbs at v to node's connection, cb(arg) on completion. Returns 0, or the error
 * (DM_ELOST: the node came back empty; DM_EINVAL: no connection) with every verb's status
 * set to it, and cb never called. */
static int post_to_node(dm_worker_t *w, unsigned node, dm_verb_t *v, unsigned n, dm_post_cb cb,
                        void *arg, uint64_t send_by_us)
{
    int rc = DM_EINVAL;
    dm_conn_t *c = conn_for(w, node);
    if (c && w->lost[node])
        rc = DM_ELOST;
    else if (c)
        rc = post_by(c, v, n, cb, arg, send_by_us);
    for (unsigned i = 0; rc && i < n; i++)
        v[i].status = rc;
    return rc;
}

/* Wait (yield, or run the loop outside a coroutine) until bw's messages completed. */
static void batch_wait(dm_worker_t *w, batch_wait_t *bw)
{
    if (!bw->pending) return;
    if (bw->co) {
        bw->yielded = 1;
        dm_coro_yield_on("a batch's replies from a memory node");
    } else {
        while (bw->pending)
            uv_run(w->loop, UV_RUN_ONCE);
    }
}

static uint64_t chains_posted, chains_skipped; /* dm_chain_stats */

/* A batch that the transport refused whole for lateness (DM_ELATE on every verb: a lease
 * holder's send-by bound passed before it left) ran nothing: DM_ERETRY, as when the bound
 * is found passed before posting (exec_with_ride). The caller searches again and finds its
 * hold lapsed, then locks again (kv/hybrid.c), instead of answering an error. A batch
 * refused only in part (two nodes) keeps DM_ELATE: some of it ran. */
static int refused_as_retry(const dm_batch_t *b, int rc)
{
    if (rc != DM_ELATE) return rc;
    for (unsigned i = 0; i < b->n; i++)
        if (b->v[i].status != DM_ELATE) return rc;
    return DM_ERETRY;
}

/* dm_batch_exec of a batch whose verbs all go to one node (the usual case): posted in
 * place, no copy into per-node groups and back. */
static int post_one_node(dm_ctx_t *ctx, dm_batch_t *b, unsigned node, const dm_chain_pos_t *chain,
                         int *refused)
{
    dm_worker_t *w = ctx->w;
    for (unsigned i = 0; i < b->n; i++)
        downgrade_masked(w, node, &b->v[i]); /* the caller sees the verb that executed */
    batch_wait_t bw = {.pending = 1, .status = 0, .yielded = 0, .co = dm_coro_self()};
    int rc = post_to_node(w, node, b->v, b->n, batch_done, &bw, b->send_by_us);
    *refused = rc != 0; /* the transport took none of it: nothing was sent */
    if (rc) return refused_as_retry(b, rc);
    if (chain) { /* a chained commit: later ones may follow it from now on */
        __atomic_fetch_add(&chains_posted, 1, __ATOMIC_RELAXED);
        dm_coro_commit_posted(chain);
    }
    batch_wait(w, &bw);
    int first = bw.status;
    for (unsigned i = 0; i < b->n && !first; i++)
        first = b->v[i].status;
    return refused_as_retry(b, first);
}

/* How long a batch is posted again after its connection failed: past one redial gap, so
 * a reconnect is tried at least once more (conn_for). */
#define POST_RETRY_US (REDIAL_GAP_US + 500000u)
#define POST_RETRY_PAUSE_US 20000u

static uint64_t post_retries; /* dm_post_retries */

uint64_t dm_post_retries(void)
{
    return __atomic_load_n(&post_retries, __ATOMIC_RELAXED);
}

/* 1 when b is READs only, outside a lease holder's bound: posting it again has no effect
 * but its answer. */
static int reads_only(const dm_batch_t *b)
{
    if (b->commit || b->send_by_us) return 0;
    for (unsigned i = 0; i < b->n; i++)
        if (b->v[i].op != DM_OP_READ) return 0;
    return 1;
}

static int commit_late(dm_batch_t *b);

/* post_one_node; a batch whose connection failed (a fence cut it, the node restarted) is
 * posted again on the next connection until POST_RETRY_US passed, when that is safe:
 *  - the transport refused it (the connection was known failed): nothing of it was sent,
 *    so any batch, but a chained commit (its place in the chain is gone) or one whose
 *    commit was placed (dm_batch_place: placing again could skip an entry); a commit is
 *    checked against its by_us bound before each post, and a lease holder's batch
 *    against its send-by bound (post_by);
 *  - it failed in flight: only READs outside a lease (their effect is nothing); whether
 *    writes executed is unknown, so they fail as before.
 * A command then waits for the redial instead of answering "connection lost". */
static int exec_one_node(dm_ctx_t *ctx, dm_batch_t *b, unsigned node, const dm_chain_pos_t *chain)
{
    int refused;
    int rc = post_one_node(ctx, b, node, chain, &refused);
    if (rc != DM_EIO || chain || b->place || ctx->w->stopping)
        return rc; /* the usual path, or a stop: nothing more */
    int reads = reads_only(b);
    if (!refused && !reads) return rc;
    uint64_t give_up = dm_now_us() + POST_RETRY_US;
    while (dm_now_us() < give_up) {
        dm_conn_t *c = conn_for(ctx->w, node); /* redials when the gap allows */
        if (ctx->w->lost[node]) return post_one_node(ctx, b, node, NULL, &refused); /* DM_ELOST */
        if (!c || c->failed) {
            dm_ctx_sleep(ctx, POST_RETRY_PAUSE_US);
            continue;
        }
        if (b->commit && commit_late(b)) return DM_ERETRY;
        for (unsigned i = 0; i < b->n; i++)
            b->v[i].status = 0;
        __atomic_fetch_add(&post_retries, 1, __ATOMIC_RELAXED);
        rc = post_one_node(ctx, b, node, NULL, &refused);
        if (rc != DM_EIO || (!refused && !reads)) return rc;
    }
    return rc;
}

void dm_chain_stats(uint64_t *posted, uint64_t *skipped)
{
    *posted = __atomic_load_n(&chains_posted, __ATOMIC_RELAXED);
    *skipped = __atomic_load_n(&chains_skipped, __ATOMIC_RELAXED);
}

const dm_conn_t *dm_chain_conn(const dm_worker_t *w, const dm_chain_pos_t *on)
{
    const dm_conn_t *c = on->node < w->n_nodes ? w->conns[on->node] : NULL;
    return c && c->serial == on->conn_serial && !c->failed ? c : NULL;
}

int dm_chain_intact(const dm_worker_t *w, const dm_chain_pos_t *p)
{
    const dm_conn_t *c = dm_chain_conn(w, p);
    return c && dm_chain_epoch_current(c, p);
}

/* Whether b's commit must not go out any more (dm_batch_commit's by_us passed): its verb
 * then fails with DM_ERETRY. */
static int commit_late(dm_batch_t *b)
{
    if (!b->commit_by_us || dm_now_us() <= b->commit_by_us) return 0;
    b->v[b->commit - 1].status = DM_ERETRY; /* the word it expects is too old to trust */
    return 1;
}

int dm_batch_commit_chains(const dm_ctx_t *ctx, unsigned node)
{
    const dm_worker_t *w = ctx->w;
    return dm_coro_chain_tag() && node < w->n_nodes && conn_chains(w, node, w->conns[node]);
}

/* The commit turn of b's commit CAS, to node: chained (returns the tag, *pos filled but its
 * epoch) when node's connection has DM_CAP_CHAIN and the coroutine a turn hook, else after
 * the whole turn (returns 0). Returns -1 when the connection changed while waiting, DM_EYIELD
 * when an early lock's holder gave the wait up (dmkv/coro.h). */
static int commit_turn(dm_worker_t *w, unsigned node, dm_chain_pos_t *pos)
{
    dm_conn_t *c = conn_for(w, node);
    if (!conn_chains(w, node, c)) return dm_coro_wait_turn(); /* 0 or DM_EYIELD */
    *pos = (dm_chain_pos_t){.node = node, .conn_serial = c->serial};
    int tag = dm_coro_wait_commit(pos);
    if (tag < 0) return tag;
    c = w->conns[node]; /* the wait may have yielded: a reconnect replaces the connection */
    if (!c || c->serial != pos->conn_serial || c->failed) return -1;
    pos->tag = (uint8_t)tag;
    pos->epoch = tag ? c->chain_epoch[tag] : 0;
    return tag;
}

/* Tag b's verbs from its commit on (the commit CAS and whatever rides behind it: an
 * insert's header READ and key-count FAA) with chain position (tag, epoch): when the CAS
 * fails or is skipped, the memory node skips them too, so a batch posted again never
 * counts twice. tag 0 untags them. */
static void chain_tail(dm_batch_t *b, int tag, uint16_t epoch)
{
    for (unsigned i = b->chain_from - 1; i < b->n; i++) {
        b->v[i].chain_tag = (uint8_t)tag;
        b->v[i].chain_epoch = tag ? epoch : 0;
    }
}

/* Whether a CAS of b's chained part (a guard, the commit, what follows) ran and did not
 * match: the memory node then skipped the rest of the chain (an insert's commit has a
 * header guard before its slot CAS, race/ops.c header_guard). */
static int chained_cas_lost(const dm_batch_t *b)
{
    for (unsigned i = b->chain_from - 1; i < b->n; i++) {
        const dm_verb_t *v = &b->v[i];
        if (v->status) continue;
        if (v->op == DM_OP_CAS && v->result != v->compare) return 1;
        if (v->op == DM_OP_MASKED_CAS &&
            (v->result & v->compare_mask) != (v->compare & v->compare_mask))
            return 1;
    }
    return 0;
}

/* dm_batch_exec of a batch on one node that carries a commit CAS (dm_batch_commit): after
 * the commit turn, chained where the node's connection chains. When the memory node skipped
 * the CAS (an earlier commit of its chain failed) the worker moves the chain's epoch on and
 * the batch goes out again after a new turn: its writes are idempotent (a fresh block's
 * WRITE, the CAS of the same word, a pending entry), and the caller sees only the outcome.
 * Verbs behind a CAS that lost (not skipped) come back DM_ESKIPPED: the caller's to read. */
static int exec_commit(dm_ctx_t *ctx, dm_batch_t *b, unsigned node)
{
    dm_worker_t *w = ctx->w;
    dm_verb_t *cv = &b->v[b->commit - 1];
    for (;;) {
        dm_chain_pos_t pos;
        int tag = commit_turn(w, node, &pos);
        if (tag == DM_EYIELD) return tag;
        if (tag < 0) continue;
        if (commit_late(b)) return DM_ERETRY;
        if (b->place) b->place(cv, b->place_arg);
        const uint64_t expect = cv->compare;
        /* Fault commit_miss: sent with a word the slot cannot hold, so it fails and breaks
         * its chain, and goes out again below as a skipped one does. */
        int missed = tag && dm_fault_delay_ms(DM_FAULT_COMMIT_MISS) != 0;
        chain_tail(b, tag, tag ? pos.epoch : 0);
        cv->compare = missed ? ~expect : expect;
        int rc = exec_one_node(ctx, b, node, tag ? &pos : NULL);
        /* The chain's first verb skipped: an earlier commit of the chain failed (a guard
         * that lost skips the commit CAS behind it: the caller's to handle). */
        int skipped = b->v[b->chain_from - 1].status == DM_ESKIPPED;
        /* The CAS ran (won or lost): what rode behind it and was skipped is not an error. */
        if (tag && rc == DM_ESKIPPED && !skipped) {
            rc = 0;
            for (unsigned i = 0; i < b->n && !rc; i++)
                if (b->v[i].status != DM_ESKIPPED) rc = b->v[i].status;
        }
        int failed = rc || skipped || chained_cas_lost(b);
        cv->compare = expect;
        chain_tail(b, 0, 0);
        if (!tag || !failed) return rc;
        /* Its chain is broken from here on: later commits posted on it were skipped. New
         * ones get the next epoch, and the commits of this client connection see their
         * positions as no longer intact (dm_chain_intact). */
        dm_conn_t *c = w->conns[node];
        if (c && c->serial == pos.conn_serial && c->chain_epoch[tag] == pos.epoch)
            c->chain_epoch[tag]++;
        dm_coro_commit_posted(NULL);
        if (!skipped && !(missed && !rc)) return rc; /* a lost CAS: the caller's */
        if (skipped) __atomic_fetch_add(&chains_skipped, 1, __ATOMIC_RELAXED);
        /* Not run until the next post completes: a commit turn that ends in DM_EYIELD or a
         * late bound leaves them so (an insert's FAA then reads as not counted). */
        for (unsigned i = 0; i < b->n; i++)
            b->v[i].status = DM_ESKIPPED;
        uint64_t rd, wr;
        batch_bytes(b, &rd, &wr);
        dm_stats_batch(ctx->cls, 1, b->n, rd, wr); /* one more round trip */
    }
}

int dm_batch_exec(dm_ctx_t *ctx, dm_batch_t *b)
{
    dm_worker_t *w = ctx->w;
    if (ctx->ride && ctx->ride->n) return exec_with_ride(ctx, b);
    if (b->n == 0) return 0;
    uint64_t rd, wr;
    batch_bytes(b, &rd, &wr);
    dm_stats_batch(ctx->cls, 1, b->n, rd, wr);
    unsigned one = 1;
    for (unsigned i = 1; i < b->n && one; i++)
        one = b->node[i] == b->node[0];
    if (b->commit && b->chain_from && one) return exec_commit(ctx, b, b->node[0]);
    if (b->commit) {
        /* Two nodes' messages have no order, or a guarded commit lacks its guard: no chain. */
        int rc = dm_coro_wait_turn();
        if (rc) return rc;
        if (commit_late(b)) return DM_ERETRY;
        if (b->place) b->place(&b->v[b->commit - 1], b->place_arg);
    }
    if (one) return exec_one_node(ctx, b, b->node[0], NULL);
    dm_verb_t tmp[DM_BATCH_MAX];
    unsigned map[DM_BATCH_MAX], start[DM_BATCH_MAX], count[DM_BATCH_MAX];
    unsigned nodes = group_by_node(w, b, tmp, map, start, count);

    batch_wait_t bw = {.pending = nodes, .status = 0, .yielded = 0, .co = dm_coro_self()};
    for (unsigned j = 0; j < nodes; j++) {
        unsigned s = start[j] & 0xffff;
        int rc = post_to_node(w, start[j] >> 16, &tmp[s], count[j], batch_done, &bw, b->send_by_us);
        if (rc) {
            if (!bw.status) bw.status = rc;
            bw.pending--;
        }
    }
    batch_wait(w, &bw);
    int first = bw.status;
    for (unsigned k = 0; k < b->n; k++) {
        dm_verb_t *dst = &b->v[map[k]];
        dst->status = tmp[k].status;
        dst->result = tmp[k].result;
        /* A masked CAS sent as a plain CAS is judged by what was sent (result == compare):
         * the caller sees the verb that executed, not the one it asked for. */
        dst->op = tmp[k].op;
        dst->compare = tmp[k].compare;
        dst->swap = tmp[k].swap;
        if (dst->status && !first) first = dst->status;
    }
    return refused_as_retry(b, first);
}

void dm_bulk_init(dm_bulk_t *k)
{
    k->b = k->inline_b;
    k->n = 0;
    k->cap = 1;
    k->inline_b[0] = &k->first;
}

#define BULK_LOOKBACK 8 /* batches searched for one to the same node with room */

dm_batch_t *dm_bulk_for(dm_bulk_t *k, dm_gaddr_t a)
{
    uint8_t node = (uint8_t)dm_gaddr_node(a);
    for (unsigned j = k->n; j > 0 && j + BULK_LOOKBACK > k->n; j--) {
        dm_batch_t *b = k->b[j - 1];
        if (b->n < DM_BATCH_MAX && b->node[0] == node) return b;
    }
    if (k->n == k->cap) {
        unsigned cap = 2 * k->cap + 6;
        dm_batch_t **nb = malloc(cap * sizeof(*nb));
        if (!nb) return NULL;
        memcpy(nb, k->b, k->n * sizeof(*nb));
        if (k->b != k->inline_b) free(k->b);
        k->b = nb;
        k->cap = cap;
    }
    dm_batch_t *b = k->n == 0 ? &k->first : malloc(sizeof(*b));
    if (!b) return NULL;
    dm_batch_init(b);
    b->node[0] = node; /* for the search above while it is empty */
    k->b[k->n++] = b;
    return b;
}

int dm_bulk_exec(dm_ctx_t *ctx, dm_bulk_t *k)
{
    dm_worker_t *w = ctx->w;
    unsigned j0 = 0;
    if (k->n && ((ctx->ride && ctx->ride->n) || k->n == 1)) {
        /* A lone batch is a plain dm_batch_exec; a ride goes with the first batch, as
         * dm_batch_exec sends it (one round trip more when others follow). */
        int rc = dm_batch_exec(ctx, k->b[j0++]);
        if (rc) return rc;
    }
    batch_wait_t bw = {.pending = 0, .status = 0, .yielded = 0, .co = dm_coro_self()};
    for (unsigned j = j0; j < k->n; j++) { /* each batch goes to one node (dm_bulk_for) */
        dm_batch_t *b = k->b[j];
        uint64_t rd, wr;
        batch_bytes(b, &rd, &wr);
        dm_stats_batch(ctx->cls, j == j0, b->n, rd, wr);
        for (unsigned i = 0; i < b->n; i++)
            downgrade_masked(w, b->node[0], &b->v[i]);
        bw.pending++;
        int rc = post_to_node(w, b->node[0], b->v, b->n, batch_done, &bw, b->send_by_us);
        if (rc) {
            if (!bw.status) bw.status = rc;
            bw.pending--;
        }
    }
    batch_wait(w, &bw);
    int first = bw.status;
    for (unsigned j = j0; j < k->n && !first; j++)
        for (unsigned i = 0; i < k->b[j]->n && !first; i++)
            first = k->b[j]->v[i].status;
    return first;
}

void dm_bulk_free(dm_bulk_t *k)
{
    for (unsigned j = 1; j < k->n; j++)
        free(k->b[j]);
    if (k->b != k->inline_b) free(k->b);
    dm_bulk_init(k);
}

/* A fire-and-forget batch owns copies of its verbs and WRITE payloads. */
typedef struct async_batch {
    unsigned pending, nodes;
    uint64_t send_by_us;
    unsigned start[DM_BATCH_MAX], count[DM_BATCH_MAX]; /* as group_by_node made them */
    dm_verb_t verbs[];
} async_batch_t;

static uint64_t async_failures; /* process-wide: workers may be gone when a batch completes */

uint64_t dm_async_failures(void)
{
    return __atomic_load_n(&async_failures, __ATOMIC_RELAXED);
}

static void async_done(void *arg, int conn_status)
{
    if (conn_status && conn_status != DM_ELATE)
        __atomic_add_fetch(&async_failures, 1, __ATOMIC_RELAXED);
    async_batch_t *ab = arg;
    if (--ab->pending == 0) free(ab);
}

/* Post ab's verbs, node by node; returns the first error (DM_ERETRY when every node's part
 * was refused for lateness: nothing ran, refused_as_retry). */
static int async_send(dm_worker_t *w, async_batch_t *ab)
{
    ab->pending = ab->nodes + 1; /* +1 held while posting: local may complete synchronously */
    int first = 0;
    unsigned refused = 0, nodes = ab->nodes; /* ab may be freed by the last async_done */
    for (unsigned j = 0; j < nodes; j++) {
        unsigned s = ab->start[j] & 0xffff;
        int rc = post_to_node(w, ab->start[j] >> 16, &ab->verbs[s], ab->count[j], async_done, ab,
                              ab->send_by_us);
        if (rc) {
            /* refused as late: past its holder's bound, which stops writing by itself */
            if (rc != DM_ELATE) __atomic_add_fetch(&async_failures, 1, __ATOMIC_RELAXED);
            ab->pending--;
            if (!first) first = rc;
            refused += rc == DM_ELATE;
        }
    }
    async_done(ab, 0);
    return refused == nodes && first == DM_ELATE ? DM_ERETRY : first;
}

/* A batch held back by the 'posted' fault point (tests: a slow network for one message). */
typedef struct held_batch {
    uv_timer_t timer; /* first: the handle pointer is the struct's */
    dm_worker_t *w;
    async_batch_t *ab;
    struct held_batch *next, **prev; /* in w->held */
} held_batch_t;

static void held_unlink(held_batch_t *h)
{
    *h->prev = h->next;
    if (h->next) h->next->prev = h->prev;
}

static void on_held_batch(uv_timer_t *t)
{
    held_batch_t *h = t->data;
    held_unlink(h);
    async_send(h->w, h->ab);
    uv_close((uv_handle_t *)&h->timer, (uv_close_cb)free);
}

static void held_closed(uv_handle_t *t)
{
    held_batch_t *h = t->data;
    free(h->ab);
    free(h);
}

void dm_batch_drop_held(dm_worker_t *w)
{
    while (w->held) {
        held_batch_t *h = w->held;
        held_unlink(h);
        uv_close((uv_handle_t *)&h->timer, held_closed);
    }
}

int dm_batch_post_async(dm_ctx_t *ctx, dm_batch_t *b)
{
    dm_worker_t *w = ctx->w;
    if (b->n == 0) return 0;
    dm_verb_t tmp[DM_BATCH_MAX];
    unsigned map[DM_BATCH_MAX], start[DM_BATCH_MAX], count[DM_BATCH_MAX];
    uint64_t rd, wr;
    batch_bytes(b, &rd, &wr);
    unsigned nodes = group_by_node(w, b, tmp, map, start, count);
    dm_stats_batch(ctx->cls, 0, b->n, rd, wr);
    async_batch_t *ab = malloc(sizeof(*ab) + b->n * sizeof(dm_verb_t) + wr);
    if (!ab) return DM_ENOMEM;
    memcpy(ab->verbs, tmp, b->n * sizeof(dm_verb_t));
    ab->send_by_us = b->send_by_us;
    uint8_t *data = (uint8_t *)&ab->verbs[b->n];
    for (unsigned k = 0; k < b->n; k++) {
        dm_verb_t *v = &ab->verbs[k];
        if (v->op == DM_OP_WRITE) {
            memcpy(data, v->buf, v->len);
            v->buf = data;
            data += v->len;
        } else if (v->op == DM_OP_READ) {
            free(ab);
            return DM_EINVAL;
        }
    }
    ab->nodes = nodes;
    memcpy(ab->start, start, nodes * sizeof(start[0]));
    memcpy(ab->count, count, nodes * sizeof(count[0]));
    uint32_t delay_ms = dm_fault_delay_ms(DM_FAULT_POSTED);
    if (delay_ms) {
        held_batch_t *h = malloc(sizeof(*h));
        if (h) {
            h->w = w;
            h->ab = ab;
            h->next = w->held;
            h->prev = &w->held;
            if (w->held) w->held->prev = &h->next;
            w->held = h;
            uv_timer_init(w->loop, &h->timer);
            h->timer.data = h;
            uv_timer_start(&h->timer, on_held_batch, delay_ms, 0);
            return 0;
        }
    }
    return async_send(w, ab);
}
