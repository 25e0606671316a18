/* ROLEX as the range role, the locked path (docs/DESIGN.md "The hybrid index" and "ROLEX: the
 * path to a range engine"): a worker's handle, the covering chain head's lease held across
 * the hybrid protocol's steps, pending entries, settling.
 *
 * lock: the cached model gives the covering LT entry (no read; a synonym this handle
 * learned from an earlier walk, rolex/slt.c, when one starts closer to the key), then one
 * batch: the head's lease CAS with, fenced behind it, the start leaf, the root's model word
 * (a new model is noticed after the operation) and the point role's bucket reads (*fresh
 * when all went to the head's memory node: they count as read under the lock, as with
 * CHIME), 1 RTT; then the chain from that leaf up to the key's successor (1 RTT a hop),
 * whose leaves are learned. After a takeover the whole chain's pending entries are settled
 * first, as CHIME settles a leaf (and the start leaf read again). The command waits for its
 * whole turn before it locks (no early locks: a later command of the connection never holds
 * a chain an earlier one needs). lock_insert takes the lock alone (no shared holds).
 * mark_pending: the key's entry flagged RX_PENDING (inserted, shifting or splitting as
 * insert.c does, or flagged in place), its WRITEs riding with the point role's next batch
 * (ahead of its slot CAS: dm_ctx_ride_before), or sent at once when nothing rides.
 * unlock(present): 1 clears the flag, 0 removes the entry (and any copy a cut shift left
 * in the run), -1 leaves it; the WRITE and the lease's CAS posted together without
 * waiting. Nothing is written once the hold is no longer valid or a ride failed: the lease
 * goes back and the entry stays pending, for the next holder after a takeover or for
 * readers, who resolve it by the point index. */
#include "rolex_range.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/lease_lock.h"
#include "dmkv/superblock.h"

rr_counters_t rr_stats;

/* ---- the worker's handle ---- */

static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER; /* one new index per process */

rr_role_t *rr_of(dm_worker_t *w)
{
    return w->rolex;
}

void rr_note_model(const dm_rolex_t *r)
{
    rx_max(&rr_stats.model_version, r->hdr.version);
    __atomic_store_n(&rr_stats.lt_entries, r->hdr.entries, __ATOMIC_RELAXED);
}

/* The pool's recorded root, or a new empty one recorded now (node 0's rolex_root, CAS from
 * 0: dm_rolex_host_record). A gateway that loses the race to another gives its own index
 * back (never published) and opens the winner's. */
static int find_or_create(dm_ctx_t *ctx, dm_gaddr_t *root, uint64_t *secret)
{
    uint64_t sb[2] = {0, 0};
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), &sb[0], 8);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(cursor_secret)), &sb[1], 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    *secret = sb[1];
    if (sb[0]) {
        *root = sb[0];
        return 0;
    }
    pthread_mutex_lock(&create_mu); /* this process's other workers wait for the first */
    rc = dm_read_span(ctx, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), root, 8);
    if (!rc && !*root) {
        dm_gaddr_t mine;
        rc = rr_build_empty(ctx, &mine);
        if (!rc) rc = dm_rolex_host_record(ctx, mine);
        if (rc == DM_ECONFLICT) { /* another gateway's is recorded */
            rx_discard(ctx, mine);
            rc = dm_read_span(ctx, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), root, 8);
        } else if (!rc) {
            *root = mine;
        }
    }
    pthread_mutex_unlock(&create_mu);
    return rc;
}

int rr_attach(dm_ctx_t *ctx, dm_worker_t *w)
{
    rr_role_t *rr = calloc(1, sizeof(*rr));
    if (!rr) return DM_ENOMEM;
    dm_gaddr_t root = 0;
    int rc = find_or_create(ctx, &root, &rr->secret);
    if (!rc) rc = dm_rolex_open(ctx, root, &rr->r);
    if (!rc && rr->r->hdr.capacity > RR_CURSOR_LEAVES) rc = DM_EINVAL; /* cursors hold 2^26 */
    if (!rc) {
        rr_note_model(rr->r);
        rx_max(&rr_stats.leaves_seen, rr->r->hdr.primaries);
        rx_max(&rr_stats.leaf_capacity, rr->r->hdr.capacity);
    }
    if (!rc) w->rolex = rr;
    if (rc) {
        dm_rolex_close(rr->r);
        free(rr);
    }
    return rc;
}

void rr_set_presence(dm_worker_t *w, dm_point_probe_fn probe)
{
    rr_role_t *rr = rr_of(w);
    if (rr) rr->presence = probe;
}

void rr_detach(dm_worker_t *w)
{
    rr_role_t *rr = w->rolex;
    w->rolex = NULL;
    if (!rr) return;
    dm_rolex_close(rr->r);
    free(rr);
}

/* ---- the lease ---- */

#define RR_WAIT_US 200 /* between tries on a held lock */

int rr_take(dm_ctx_t *ctx, dm_gaddr_t head, rx_hold_t *hd, const dm_lease_read_t *reads, unsigned n,
            const dm_batch_t *extra, int *extra_fresh, int *took_over, uint64_t *async_failures)
{
    uint64_t waits = 0;
    int rc = dm_lease_lock_wait(ctx, head, rx_lease_ms, rx_hold_ms, reads, n, extra, extra_fresh,
                                hd, took_over, RR_WAIT_US, &waits);
    if (waits) rr_count(&rr_stats.lock_waits, waits);
    if (rc) return rc;
    *async_failures = hd->async_failures; /* from before the hold's CAS (rr_hold_ok) */
    if (*took_over) rr_count(&rr_stats.takeovers, 1);
    return 0;
}

int rr_hold_ok(const rx_hold_t *hd, uint64_t async_failures)
{
    return dm_now_us() < hd->until_us && dm_async_failures() == async_failures;
}

/* Long entries of removed keys, their records freed after a chain's settle. */
typedef struct recs {
    rx_entry_t *v;
    size_t n, cap;
} recs_t;

static int recs_add(recs_t *s, const rx_entry_t *e)
{
    for (size_t i = 0; i < s->n; i++)
        if (rx_erec(&s->v[i]) == rx_erec(e)) return 0; /* a shift's copy: one record */
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        rx_entry_t *nv = realloc(s->v, cap * sizeof(*nv));
        if (!nv) return DM_ENOMEM;
        s->v = nv, s->cap = cap;
    }
    s->v[s->n++] = *e;
    return 0;
}

/* Free the records of s's entries that no entry of the chain at head names any more (a
 * copy left by a shift cut short may still; it keeps its record), then s. */
static void recs_free(dm_ctx_t *ctx, dm_gaddr_t head, recs_t *s)
{
    int rc = 0;
    for (dm_gaddr_t at = head; s->n && at && !rc;) {
        rx_leaf_t l;
        rc = rx_read_leaf(ctx, at, &l);
        for (unsigned i = 0; !rc && i < l.count; i++)
            for (size_t j = 0; rx_elong(&l.e[i]) && j < s->n; j++)
                if (rx_erec(&s->v[j]) == rx_erec(&l.e[i])) s->v[j] = s->v[--s->n];
        at = rc ? 0 : l.next;
    }
    for (size_t j = 0; !rc && j < s->n; j++) /* on an error: kept (a leak, never a reuse) */
        rx_rec_free(ctx, &s->v[j]);
    free(s->v);
}

/* Settle one leaf read under the lease (in l, at at): its keys probed, the leaf rewritten
 * when something changed. Entries removed, or DM_E* (DM_ETIMEDOUT: the hold ended first,
 * nothing written). Long keys are probed by their records' keys (1 RTT); removed long
 * entries go into dead. */
static int settle_leaf(dm_ctx_t *ctx, rr_role_t *rr, dm_gaddr_t at, rx_leaf_t *l, int all,
                       const rx_hold_t *hd, recs_t *dead)
{
    const uint8_t *keys[DM_ROLEX_SLOTS];
    const rx_entry_t *ents[DM_ROLEX_SLOTS];
    uint8_t *full[DM_ROLEX_SLOTS];
    size_t lens[DM_ROLEX_SLOTS];
    unsigned idx[DM_ROLEX_SLOTS], m = 0;
    for (unsigned i = 0; i < l->count; i++)
        if (all || (l->e[i].len & RX_PENDING)) {
            keys[m] = (const uint8_t *)l->e[i].key;
            ents[m] = &l->e[i];
            lens[m] = rx_elen(&l->e[i]);
            idx[m++] = i;
        }
    if (!m) return 0;
    if (!rr->presence) return DM_EINVAL;          /* set_presence comes right after attach */
    int rc = rx_entries_read(ctx, ents, m, full); /* long keys: their records (1 RTT) */
    if (rc) return rc;
    for (unsigned j = 0; j < m; j++)
        if (full[j]) keys[j] = full[j];
    uint8_t present[DM_ROLEX_SLOTS];
    rc = rr->presence(ctx, keys, lens, m, present, NULL);
    for (unsigned j = 0; j < m; j++)
        free(full[j]);
    if (rc) return rc;
    rx_leaf_t nl = *l;
    rx_entry_t gone[DM_ROLEX_SLOTS];
    unsigned keep = 0, j = 0, removed = 0;
    int changed = 0;
    for (unsigned i = 0; i < l->count; i++) {
        rx_entry_t e = l->e[i];
        if (j < m && idx[j] == i) {
            if (!present[j++]) {
                gone[removed++] = e;
                continue;
            }
            changed |= (e.len & RX_PENDING) != 0;
            e.len &= RX_LEN_MASK;
        }
        nl.e[keep++] = e;
    }
    if (!removed && !changed) return 0;
    memset(&nl.e[keep], 0, (DM_ROLEX_SLOTS - keep) * sizeof(nl.e[0]));
    nl.count = keep;
    dm_batch_t b;
    dm_batch_init(&b);
    b.send_by_us = hd->until_us; /* never after the hold: a taker may have rewritten it */
    rx_put_body(&b, at, &nl);
    rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    *l = nl;
    for (unsigned g = 0; g < removed; g++) /* freed once the walk is over (recs_free) */
        if (rx_elong(&gone[g]) && recs_add(dead, &gone[g])) return DM_ENOMEM;
    rr_count(&rr_stats.settled, m), rr_count(&rr_stats.removed, removed);
    return (int)removed;
}

int64_t rr_settle_chain(dm_ctx_t *ctx, rr_role_t *rr, dm_gaddr_t from, uint32_t label, int stretch,
                        int all, rx_hold_t *hd, uint64_t *async_failures, dm_gaddr_t *beyond)
{
    int64_t removed = 0;
    dm_gaddr_t at = from;
    recs_t dead = {NULL, 0, 0};
    if (beyond) *beyond = 0;
    for (unsigned hops = 0; at; hops++) {
        if (hops > RX_CHAIN_MAX) {
            free(dead.v);
            return RX_CORRUPT("a chain of over %u hops", RX_CHAIN_MAX);
        }
        /* A quarter of the hold left: give it back and take it again (1 RTT), so that the
         * next leaf's probe and write fit well inside it. */
        if (hd->until_us - dm_now_us() < (uint64_t)rx_hold_ms * 250 ||
            !rr_hold_ok(hd, *async_failures)) {
            int took;
            rx_unlock(ctx, hd);
            int rc = rr_take(ctx, hd->addr, hd, NULL, 0, NULL, NULL, &took, async_failures);
            if (rc) {
                free(dead.v); /* their records are kept: a leak, never a reuse */
                return rc;
            }
        }
        rx_leaf_t l;
        int rc = rx_read_leaf(ctx, at, &l);
        if (!rc && l.label != label) { /* another lock's leaf: not ours to write */
            if (stretch) {
                if (beyond) *beyond = at;
                break;
            }
            at = l.next;
            continue;
        }
        if (!rc) rc = settle_leaf(ctx, rr, at, &l, all, hd, &dead);
        if (rc == DM_ETIMEDOUT && !rr_hold_ok(hd, *async_failures)) continue; /* again */
        if (rc < 0) {
            free(dead.v);
            return rc;
        }
        removed += rc;
        at = l.next;
    }
    recs_free(ctx, from, &dead); /* under the lease still: no entry comes back meanwhile */
    return removed;
}

/* ---- the lock ---- */

static void lock_free(rr_lock_t *lk)
{
    rx_run_free(&lk->run);
    rx_probe_free(&lk->pr);
    free(lk->recbuf);
    free(lk);
}

/* Lock the chain covering key and read its run (see the file's comment), with the verbs of
 * extra (the point role's prefetch) in the lease's batch (*fresh: they count as read under
 * the lock). Returns 1 key has an entry, 0 not, DM_E*. */
static int lock_key(dm_ctx_t *ctx, const void *key, size_t klen, int existing,
                    const dm_batch_t *extra, int *fresh, rr_lock_t **out)
{
    rr_role_t *rr = rr_of(ctx->w);
    *out = NULL;
    if (!rr) return DM_EINVAL;
    if (klen > DM_ROLEX_KEY_MAX) {
        rr_count(&rr_stats.too_long, 1);
        if (!existing) return DM_ETOOBIG; /* nothing written: SET answers an error */
    }
    int keyless = klen > DM_ROLEX_KEY_MAX; /* a DEL of a key never stored: nothing to lock */
    rr_lock_t *lk = calloc(1, sizeof(*lk) + (keyless ? 0 : klen));
    if (!lk) return DM_ENOMEM;
    if (keyless) {
        lk->keyless = 1;
        *out = lk;
        return 0;
    }
    memcpy(lk->key, key, klen);
    lk->klen = klen;
    rx_probe_init(&lk->pr, lk->key, klen);
    lk->run.pr = &lk->pr;
    int rc = dm_coro_wait_turn(); /* no early lock: see the file's comment */
    uint64_t j = 0, x = dm_rolex_image(key, klen);
    if (!rc) rc = rx_cover(rr->r, x, &j); /* the covering LT entry, from the cached model */
    if (rc) {
        lock_free(lk);
        return rc;
    }
    rx_lt_t e = rr->r->lt[j];
    rx_slt_t bound; /* a closer start this handle learned */
    int learned = rx_slt_find(rr->r, &lk->pr, x, &rr->r->lt[j], &e, &bound);
    rx_run_t *c = &lk->run;
    c->v = malloc(8 * sizeof(rx_leaf_t)), c->ad = malloc(8 * sizeof(dm_gaddr_t));
    c->n = 1, c->cap = 8;
    if (!c->v || !c->ad) {
        lock_free(lk);
        return DM_ENOMEM;
    }
    /* The start leaf's lock (domain.c): the one this handle saw last for it, then whatever
     * the leaf's label and the key's place say; each try takes the lease with the start leaf,
     * the model word and the point role's reads behind its CAS: one round trip. */
    uint64_t start = e.leaf, head = rx_dom_guess(rr->r, e.leaf, e.head);
    rx_run_t walk = {0}; /* the stretches passed, in chain order: learned at the end */
    for (unsigned tries = 0;; tries++) {
        if (tries == RX_DOM_TRIES) rc = RX_CORRUPT("a cycle of labels"); /* of lock domains */
        if (rc) {
            rx_run_free(&walk);
            lock_free(lk);
            return rc;
        }
        c->n = 1, c->beyond = 0, c->beyond_lab = 0;
        c->ad[0] = rx_leaf_addr(rr->r, start);
        const dm_lease_read_t rd[2] = {{c->ad[0], &c->v[0], RX_LEAF_BYTES},
                                       {rr->r->root + RX_OFF_MODEL, &lk->model, 8}};
        rc = rr_take(ctx, rx_leaf_addr(rr->r, head), &lk->hd, rd, rr->r->pinned ? 1 : 2, extra,
                     fresh, &lk->took_over, &lk->async_failures);
        if (rc) continue;
        if (lk->took_over) /* its holder died: the pending entries of its leaves first */
            rc = (int)rr_settle_chain(ctx, rr, rx_leaf_addr(rr->r, head),
                                      rx_dom_label_of(rr->r, head), 0, 0, &lk->hd,
                                      &lk->async_failures, NULL);
        rc = rc < 0 ? rc : 0;
        lk->posted_us = lk->hd.until_us - (uint64_t)rx_hold_ms * 1000; /* the hold's start */
        if (!rc && (lk->took_over || !rx_leaf_ok(&c->v[0])))
            rc = rx_read_leaf(ctx, c->ad[0], &c->v[0]);
        uint64_t from = start;
        if (!rc) rc = rx_dom_read(ctx, rr->r, c, e.head, &start, &head);
        if (!rc) break;
        rc = rc < 0 ? rc : 0;
        rx_unlock(ctx, &lk->hd);
        /* Passed on (not a label's switch: that reads its start again): the walk keeps the
         * stretch, read in chain order before the next. */
        if (!rc && start != from && rx_run_append(&walk, c)) learned = -1;
    }
    /* The walk's leaves were each read after the one before, from e's leaf on (rx_slt_learn's
     * condition): the stretches passed, then the run. */
    const rx_run_t *seen = c;
    if (walk.n) seen = rx_run_append(&walk, c) ? NULL : &walk;
    if (learned >= 0 && seen)
        rx_slt_learn(rr->r, &e, learned ? &bound : NULL, seen->v, seen->ad, seen->n);
    if (seen) rx_ask_retrain(ctx, rr->r, seen->v, seen->n); /* a long chain: host.c */
    rx_run_free(&walk);
    unsigned k;
    *out = lk;
    return rx_run_find(c, &k) >= 0;
}

int rr_lock(dm_ctx_t *ctx, const void *key, size_t klen, int existing, const dm_batch_t *extra,
            int *fresh, dm_range_lock_t **out)
{
    if (fresh) *fresh = 0;
    rr_lock_t *lk;
    int rc = lock_key(ctx, key, klen, existing, extra, fresh, &lk);
    *out = (dm_range_lock_t *)(void *)lk;
    return rc;
}

int rr_lock_insert(dm_ctx_t *ctx, const void *key, size_t klen, const dm_batch_t *extra, int *fresh,
                   dm_range_lock_t **out)
{
    return rr_lock(ctx, key, klen, 0, extra, fresh, out); /* alone: no shared holds */
}

int rr_lock_valid(const dm_range_lock_t *l)
{
    const rr_lock_t *lk = rr_clk(l);
    return !lk->keyless && !lk->abandoned && rr_hold_ok(&lk->hd, lk->async_failures);
}

uint64_t rr_lock_posted_us(const dm_range_lock_t *l)
{
    const rr_lock_t *lk = rr_clk(l);
    return lk->keyless ? dm_now_us() : lk->posted_us;
}

uint64_t rr_lock_hold_until(const dm_range_lock_t *l)
{
    return rr_clk(l)->keyless ? 0 : rr_clk(l)->hd.until_us;
}

uint64_t rr_lock_sure_until(const dm_range_lock_t *l)
{
    const rr_lock_t *lk = rr_clk(l);
    return lk->keyless || lk->took_over ? 0 : rr_lock_posted_us(l) + (uint64_t)rx_lease_ms * 1000;
}

int rr_lock_in_doubt(const dm_range_lock_t *l)
{
    return dm_now_us() - rr_lock_posted_us(l) > (uint64_t)rx_lease_ms * 1000;
}

uint64_t rr_lock_range(const dm_range_lock_t *l)
{
    return rr_clk(l)->hd.addr;
}

/* b's WRITEs with the point role's next batch when something rides (never after the hold:
 * ride_until_us), else now. */
static int send_writes(dm_ctx_t *ctx, rr_lock_t *lk, dm_batch_t *b)
{
    if (!b->n) return 0;
    dm_batch_t *ride = ctx->ride;
    if (ride && ride->n + b->n <= DM_BATCH_MAX) {
        ctx->ride_until_us = lk->hd.until_us;
        for (unsigned i = 0; i < b->n; i++) {
            ride->v[ride->n] = b->v[i];
            ride->node[ride->n++] = b->node[i];
        }
        return 0;
    }
    b->send_by_us = lk->hd.until_us;
    return dm_batch_exec(ctx, b);
}

int rr_mark_pending(dm_ctx_t *ctx, dm_range_lock_t *l)
{
    rr_lock_t *lk = rr_lk(l);
    if (lk->keyless) return DM_ETOOBIG;
    if (!rr_lock_valid(l)) return DM_ERETRY;
    rr_role_t *rr = rr_of(ctx->w);
    dm_batch_t b;
    dm_batch_init(&b);
    unsigned k;
    int pos = rx_run_find(&lk->run, &k);
    if (pos >= 0) { /* pending from a dead gateway or an earlier attempt, or a present key */
        rx_entry_t *e = &lk->run.v[k].e[pos];
        if (e->len & RX_PENDING) return 0;
        e->len |= RX_PENDING;
        rx_put_body(&b, lk->run.ad[k], &lk->run.v[k]);
        return send_writes(ctx, lk, &b);
    }
    /* A long key's record lands before the leaf WRITEs that name it: first in b (which may
     * ride: the ride keeps b's order) on the leaves' node, else its own batch, waited for. */
    dm_gaddr_t rec = 0;
    int rc = 0;
    if (lk->klen > DM_ROLEX_INLINE) {
        free(lk->recbuf);
        lk->recbuf = NULL;
        rc = rx_rec_stage(ctx, rr->r, &b, lk->key, lk->klen, &rec, &lk->recbuf);
    }
    if (!rc) rc = rx_run_add(ctx, rr->r, &b, &lk->run, RX_PENDING, rec);
    if (!rc && !rr_lock_valid(l)) rc = DM_ERETRY; /* a split's FAA ran long: nothing sent */
    int sent = !rc;
    if (!rc) rc = send_writes(ctx, lk, &b);
    /* Given up with nothing sent: the record goes back (quarantined). Sent, or riding, the
     * entry names it: it goes with the entry (unlock, settle). */
    if (rec && rc && (!sent || rc == DM_ERETRY)) rx_rec_give_back(ctx, rec, lk->klen);
    return rc;
}

int rr_unlock(dm_ctx_t *ctx, dm_range_lock_t *l, int present)
{
    rr_lock_t *lk = rr_lk(l);
    if (lk->keyless) {
        free(lk);
        return 0;
    }
    rr_role_t *rr = rr_of(ctx->w);
    if (ctx->ride_failed) lk->abandoned = 1; /* which of its writes landed is unknown */
    if (!rr_lock_valid(l)) {
        rx_unlock(ctx, &lk->hd); /* may have been taken over: touch nothing */
        if (rr) rx_notice(ctx, rr->r, lk->model);
        lock_free(lk);
        return DM_ERETRY;
    }
    /* A cut of the start leaf's stretch into a lock domain of its own (domain.c), with half
     * the hold left: what it reads, before b points into the run. */
    int cut = 0;
    uint64_t held;
    if (rr && rx_dom_cutting() && !rx_leaf_no(rr->r, lk->hd.addr, &held) &&
        lk->hd.until_us > dm_now_us() + (uint64_t)rx_hold_ms * 500)
        cut = rx_dom_cut_read(ctx, rr->r, &lk->run, held);
    dm_batch_t b;
    dm_batch_init(&b);
    b.send_by_us = lk->hd.until_us;
    unsigned k;
    int pos;
    if (present == 1 && (pos = rx_run_find(&lk->run, &k)) >= 0 &&
        (lk->run.v[k].e[pos].len & RX_PENDING)) {
        lk->run.v[k].e[pos].len &= RX_LEN_MASK;
        rx_put_body(&b, lk->run.ad[k], &lk->run.v[k]);
    }
    /* Every copy goes (a shift cut short leaves the moved key in two leaves); a long key's
     * copies name one record, freed once after. */
    rx_entry_t gone[DM_BATCH_MAX];
    unsigned dropped = 0;
    while (present == 0 && b.n < DM_BATCH_MAX - 2 && (pos = rx_run_find(&lk->run, &k)) >= 0) {
        gone[dropped++] = lk->run.v[k].e[pos];
        rx_run_drop(&b, &lk->run, k, (unsigned)pos);
    }
    if (cut > 0 && b.n + (unsigned)cut < DM_BATCH_MAX) rx_dom_cut_write(rr->r, &b, &lk->run, cut);
    dm_batch_cas(&b, lk->hd.addr, lk->hd.word, 0);
    dm_lease_unlocking(&lk->hd);
    int rc = dm_batch_post_async(ctx, &b);
    for (unsigned g = 0; !rc && g < dropped; g++) {   /* posted: quarantined past the WRITEs */
        int again = rx_run_names(&lk->run, &gone[g]); /* a copy left: it keeps the record */
        for (unsigned h = 0; h < g && !again; h++)
            again = rx_erec(&gone[h]) == rx_erec(&gone[g]);
        if (!again) rx_rec_free(ctx, &gone[g]);
    }
    if (rr) rx_notice(ctx, rr->r, lk->model); /* a new model: loaded after the unlock */
    if (rr) rr_note_model(rr->r);
    lock_free(lk);
    return rc;
}

void rr_lock_forget(dm_range_lock_t *l)
{
    lock_free(rr_lk(l));
}
