/* The hybrid protocol between RACE and CHIME (hybrid.h). */
#include "hybrid.h"

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/env.h"
#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "dmkv/log.h"
#include "guard.h"
#include "roles.h"

#include <stdlib.h>
#include <string.h>

/* Wraps the caller's decide(): remembers whether RACE held the key, and (unlocked) vetoes a
 * write that would make an absent key present. */
typedef struct gate {
    dm_point_decide_fn decide;
    void *arg;
    int locked;
    int need_lock; /* vetoed because the key is absent */
    int seen_present;
    dm_kv_guard_set_t *gs;     /* WATCH guards of this coroutine (guard.h) */
    dm_kv_guard_t *guard;      /* this key's, when it has one not yet used */
    int conflict;              /* vetoed by the guard */
    const dm_range_lock_t *lk; /* the range lock held (locked mode) */
    int lock_expired;          /* vetoed: held too long to change presence safely, or the
                                  pending entry's ride failed (it may not be in the pool) */
    const int *ride_failed;    /* the locked attempt's ctx->ride_failed */
    int deleting;              /* a DEL's gate: a write makes a present key absent */
} gate_t;

/* The attempt now holds lk: its presence change also needs the rides of lk's writes to
 * have landed (ctx->ride_failed, reset when lk was taken). */
static void gate_hold(gate_t *g, dm_ctx_t *ctx, const dm_range_lock_t *lk)
{
    g->lk = lk;
    g->ride_failed = &ctx->ride_failed;
}

static void gate_init(gate_t *g, dm_point_decide_fn decide, void *arg, int locked, const void *key,
                      size_t klen)
{
    memset(g, 0, sizeof(*g));
    g->decide = decide;
    g->arg = arg;
    g->locked = locked;
    g->gs = kv_guard_current();
    g->guard = kv_guard_find(g->gs, key, klen);
    if (g->guard && g->guard->done) g->guard = NULL;
}

/* After a write: count it, and retire the key's guard. */
static int gate_done(gate_t *g, int rc)
{
    if (g->conflict) return DM_ECONFLICT;
    if (rc == 1 && g->gs) {
        g->gs->writes++;
        if (g->guard) g->guard->done = 1;
    }
    return rc;
}

static int gate_decide(void *p, const dm_kv_view_t *v)
{
    gate_t *g = p;
    g->seen_present = v != NULL;
    g->need_lock = 0;
    g->conflict = 0;
    if (g->guard) {
        int live = v && (v->expire_ms == 0 || v->expire_ms > dm_wall_ms());
        if ((live ? v->version : 0) != g->guard->version ||
            (live ? v->write_id : 0) != g->guard->write_id) {
            g->conflict = 1; /* the slot CAS would write over a change WATCH must see */
            g->gs->tripped = 1;
            return 0;
        }
    }
    int yes = g->decide ? g->decide(g->arg, v) : 1;
    if (yes && !v && !g->locked) {
        g->need_lock = 1;
        return 0;
    }
    /* The slot CAS follows within a round trip or two: a lock held so long that a waiter
     * could soon take its lease over must not change the key's presence any more. An
     * update of a present key does not change it and needs no lock (unlocked updates run
     * all the time): it goes on. Vetoing it too made a SET that found its key present
     * under a long-held lock give up after 8 such tries. */
    int changes_presence = g->deleting ? v != NULL : v == NULL;
    g->lock_expired = yes && changes_presence && g->lk &&
                      (!range_role()->lock_valid(g->lk) || (g->ride_failed && *g->ride_failed));
    if (g->lock_expired) return 0;
    /* The slot CAS that follows is this write's commit point: RACE marks it
     * (dm_batch_commit), and a write running ahead of earlier writes of its connection
     * waits for its turn there (coro.h). Locked writes waited before their lock. */
    return yes;
}

#define MAX_LOCKED_TRIES 8
#define MAX_EARLY_YIELDS 4
#define MAX_YIELDS 64

/* DMKV_EARLY_LOCK=0: a pipeline's inserts take their whole turn before the leaf lock, as
 * before early locks (the benchmark's reference and a test variant). */
static int parse_early_lock(const char *e)
{
    return !(e && strcmp(e, "0") == 0);
}

static int early_locks(void)
{
    static int on = -1;
    return dm_env_cached(&on, "DMKV_EARLY_LOCK", parse_early_lock);
}

static uint64_t repairs, early_yields, locked_first;

/* Writes of absent keys in a row on this thread (lock first past LOCK_FIRST_AFTER). */
static _Thread_local unsigned absent_run;
#define LOCK_FIRST_AFTER 16

/* DMKV_LOCK_FIRST: "auto" (the default) locks first after LOCK_FIRST_AFTER absent keys in a
 * row; "always" (tests: every write takes the path) whatever the run; "0" never
 * (docs/throughput.md "Loads lock first"). */
static int parse_lock_first(const char *e)
{
    return e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "always") ? 2 : 1;
}

static int lock_first(void)
{
    static int mode = -1;
    int m = dm_env_cached(&mode, "DMKV_LOCK_FIRST", parse_lock_first);
    return m == 2 || (m == 1 && absent_run >= LOCK_FIRST_AFTER);
}

uint64_t dm_kv_lock_first(void)
{
    return __atomic_load_n(&locked_first, __ATOMIC_RELAXED);
}

uint64_t dm_kv_early_yields(void)
{
    return __atomic_load_n(&early_yields, __ATOMIC_RELAXED);
}

uint64_t dm_kv_repairs(void)
{
    return __atomic_load_n(&repairs, __ATOMIC_RELAXED);
}

static void count_repair(const void *key, size_t klen, const char *what)
{
    __atomic_fetch_add(&repairs, 1, __ATOMIC_RELAXED);
    dm_log(DM_LOG_WARNING, "hybrid: repaired key '%.*s' (%zu bytes): %s",
           (int)(klen > 64 ? 64 : klen), (const char *)key, klen, what);
}

int dm_hybrid_reconcile(dm_ctx_t *ctx, const void *key, size_t klen)
{
    dm_range_lock_t *lk;
    int has_entry = range_role()->lock(ctx, key, klen, 0, NULL, NULL, &lk);
    if (has_entry < 0) return has_entry;
    const uint8_t *k = key;
    uint8_t present = 0;
    int rc = point_role()->probe(ctx, &k, &klen, 1, &present, NULL);
    if (rc) {
        range_role()->unlock(ctx, lk, -1);
        return rc;
    }
    if (present && !has_entry) {
        rc = range_role()->mark_pending(ctx, lk);
        if (rc) {
            range_role()->unlock(ctx, lk, -1);
            return rc;
        }
        count_repair(key, klen, "in RACE without a CHIME entry: entry inserted");
    } else if (!present && has_entry) {
        count_repair(key, klen, "CHIME entry without the key in RACE: entry removed");
    }
    rc = range_role()->unlock(ctx, lk, has_entry || present ? present : -1);
    return rc ? rc : present != has_entry;
}

/* After a presence change whose writes may have landed after a takeover: repair. */
static void reconcile_if_in_doubt(dm_ctx_t *ctx, int in_doubt, const void *key, size_t klen)
{
    if (!in_doubt) return;
    dm_log(DM_LOG_WARNING, "hybrid: a presence change completed past the leaf lease: reconciling");
    ctx->start_us = dm_now_us();
    dm_hybrid_reconcile(ctx, key, klen);
}

/* Lock key's range with the point role's first reads of the key (its prefetch: RACE's
 * buckets, SepHash's lookup) in the same batch, behind the lock CAS (carry->prefetched
 * when that ordering held: same memory node). Returns what the range role's lock
 * returns. */
static int lock_with_buckets(dm_ctx_t *ctx, const void *key, size_t klen, int existing,
                             const uint8_t *block, uint64_t block_len, dm_point_carry_t *carry,
                             dm_range_lock_t **lk)
{
    dm_batch_t pre;
    dm_batch_init(&pre);
    int fresh = 0;
    int have = point_role()->prefetch(ctx, &pre, key, klen, carry) == 0;
    /* A write that locked first has no block written yet: its WRITE goes with the lock too
     * (a block nothing names yet may be written at any time), when on the bucket reads'
     * memory node (else they could not count as read behind the lock: written with the
     * lookup instead). */
    int block_sent = 0;
    if (have && block && !carry->block && pre.n > 0 && pre.n < DM_BATCH_MAX &&
        dm_alloc_kv_block(ctx, point_role()->block_bytes(block_len), &carry->block) == 0) {
        carry->block_len = block_len;
        carry->block_unwritten = 1;
        block_sent = dm_gaddr_node(carry->block) == pre.node[0];
        if (block_sent) dm_batch_write(&pre, carry->block, block, (uint32_t)block_len);
    }
    const dm_range_index_ops_t *range = range_role();
    int rc = existing ? range->lock(ctx, key, klen, 1, have ? &pre : NULL, &fresh, lk)
                      : range->lock_insert(ctx, key, klen, have ? &pre : NULL, &fresh, lk);
    if (rc < 0) {
        /* Its WRITE may still land: quarantined, not reusable at once (carry_release). */
        if (block_sent) carry->block_posted = 1;
        return rc;
    }
    if (block_sent && fresh) carry->block_unwritten = 0;
    ctx->ride_failed = 0; /* what the range role's unlock reads is this hold's rides only */
    carry->prefetched = fresh;
    carry->read_us = range->lock_posted_us(*lk);
    carry->locked = 1;
    carry->sure_until_us = range->lock_sure_until(*lk);
    carry->commit_by_us = range->lock_hold_until(*lk);
    return rc;
}

/* A locked attempt whose pending entry was not written (mark_pending's rc < 0)
 * ends: the ride goes out, the lock is released. When the hold outlived its bound first (a
 * split that ran long, a late reply: DM_ERETRY) nothing visible changed, so it returns 0
 * with g->lock_expired and the caller locks again, as after gate_decide's veto, instead of
 * answering "operation restarted too often" (test_chime test_slow_split). */
static int end_unwritten(dm_ctx_t *ctx, gate_t *g, dm_range_lock_t *lk, dm_batch_t *ride, int rc)
{
    int lapsed = rc == DM_ERETRY && !range_role()->lock_valid(lk);
    dm_ctx_ride_end(ctx, ride);
    range_role()->unlock(ctx, lk, -1);
    if (lapsed) g->lock_expired = 1;
    return lapsed ? 0 : rc;
}

/* One locked attempt of a SET of an absent key: lock (‖ RACE buckets), pending entry ‖ RACE
 * slot CAS, unlock posted without waiting (docs/throughput.md "A new key in 3 round trips"). */
static int set_locked(dm_ctx_t *ctx, gate_t *g, const void *key, size_t klen, uint8_t *block,
                      uint64_t block_len, int keep_ttl, dm_point_item_t *old,
                      dm_point_carry_t *carry, uint64_t *leaf)
{
    dm_range_lock_t *lk;
    int rc = lock_with_buckets(ctx, key, klen, 0, block, block_len, carry, &lk);
    if (rc < 0) return rc;
    *leaf = range_role()->lock_range(lk);
    dm_batch_t ride;
    dm_batch_init(&ride);
    /* The pending entry's WRITE goes with RACE's next batch, ahead of the slot CAS in one
     * message when both are on one memory node (else alone first: dm_ctx_ride_before);
     * whatever still rides when RACE returns goes out before the unlock (never past the
     * lease: dm_ctx_ride_end). */
    dm_ctx_ride_start(ctx, &ride);
    /* No entry yet: insert it pending. An entry that exists means RACE may hold the key
     * already (an update), or it is pending from a dead gateway: settled below either way. */
    rc = rc == 0 ? range_role()->mark_pending(ctx, lk) : 0;
    if (rc < 0) return end_unwritten(ctx, g, lk, &ride, rc);
    g->locked = 1;
    gate_hold(g, ctx, lk);
    dm_fault_point(ctx, DM_FAULT_LOCKED);
    ctx->start_us = dm_now_us(); /* a fresh RACE operation: the lock wait does not count */
    rc = point_role()->set(ctx, key, klen, block, block_len, gate_decide, g, keep_ttl, old, carry);
    dm_ctx_ride_end(ctx, &ride);
    g->lk = NULL;
    int present = rc == 1 ? 1 : rc == 0 ? g->seen_present : -1;
    int in_doubt = rc == 1 && range_role()->lock_in_doubt(lk);
    range_role()->unlock(ctx, lk, present); /* a failed unlock leaves the lease to expire */
    reconcile_if_in_doubt(ctx, in_doubt, key, klen);
    return rc;
}

int dm_hybrid_set(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block, uint64_t block_len,
                  dm_point_decide_fn decide, void *arg, int keep_ttl, dm_point_item_t *old)
{
    gate_t g;
    gate_init(&g, decide, arg, 0, key, klen);
    /* The block the unlocked attempt wrote is kept for the locked one (one WRITE). */
    dm_point_carry_t carry;
    memset(&carry, 0, sizeof(carry));
    /* After a run of writes that all found their keys absent (a load), lock first: the
     * unlocked attempt would only find the key absent too, and its reads, posted before the
     * lock, would be read again under it. The lock's batch then carries the bucket reads
     * and the block's WRITE: an insert in 2 round trips instead of 3 (one fewer batch). The
     * locked attempt decides everything the unlocked one does; a key found present ends
     * the run. */
    int rc = 0;
    if (lock_first()) {
        g.need_lock = 1;
        __atomic_fetch_add(&locked_first, 1, __ATOMIC_RELAXED);
    } else {
        rc = point_role()->set(ctx, key, klen, block, block_len, gate_decide, &g, keep_ttl, old,
                               &carry);
    }
    if (rc == 0 && g.need_lock) {
        /* A SET of a pipeline locks the leaf before its turn and waits for the turn at its
         * slot CAS, holding the lock; it gives way (DM_EYIELD: unlocked, nothing visible
         * changed) when an earlier command needs the lock or the turn is long in coming,
         * then locks again after its whole turn (dmkv/coro.h "Early locks"). */
        if (!early_locks()) dm_coro_wait_turn();
        int yields = 0;
        for (int tries = 0; tries < MAX_LOCKED_TRIES; tries++) {
            if (old) free(old->block), old->block = NULL;
            g.lock_expired = 0;
            uint64_t leaf = 0;
            rc = set_locked(ctx, &g, key, klen, block, block_len, keep_ttl, old, &carry, &leaf);
            if (rc == DM_EYIELD) {
                /* Holding nothing, wait for the turn or until this thread's hold of the leaf
                 * ends or opens (a shared hold: chime/share.c), then lock again. */
                __atomic_fetch_add(&early_yields, 1, __ATOMIC_RELAXED);
                /* A yield is not a failed try: the next lock comes no later than the whole
                 * turn after MAX_EARLY_YIELDS of them. Past MAX_YIELDS (a hold that other
                 * connections' members keep full) they count, so the loop ends. */
                if (yields < MAX_YIELDS) tries--;
                int wrc =
                    ++yields < MAX_EARLY_YIELDS ? dm_coro_wait_turn_or(leaf) : dm_coro_wait_turn();
                if (wrc && wrc != DM_EYIELD) {
                    rc = wrc;
                    break;
                }
                continue;
            }
            if (!(rc == 0 && g.lock_expired)) break;
            rc = DM_ERETRY;
        }
        if (rc == DM_EYIELD) rc = DM_ERETRY; /* gave way MAX_YIELDS times and more */
    }
    if (rc >= 0 && g.seen_present)
        absent_run = 0;
    else if (rc >= 0 && absent_run < LOCK_FIRST_AFTER)
        absent_run++;
    point_role()->carry_release(ctx, &carry);
    return gate_done(&g, rc);
}

int dm_hybrid_set_blind(dm_ctx_t *ctx, const void *key, size_t klen, const uint8_t *block,
                        uint64_t block_len)
{
    /* The slot CAS is this write's commit point: it waits for its turn (coro.h). */
    return point_role()->set_blind(ctx, key, klen, block, block_len);
}

/* One DEL attempt under the leaf lock. */
static int delete_locked_with(dm_ctx_t *ctx, gate_t *g, const void *key, size_t klen,
                              dm_point_carry_t *carry)
{
    dm_range_lock_t *lk;
    int rc = lock_with_buckets(ctx, key, klen, 1, NULL, 0, carry, &lk);
    if (rc < 0) return rc;
    if (rc == 0) {
        /* CHIME ⊇ RACE says no entry, no key; a key there anyway (a violation) goes now,
         * still under the lock: RACE has no candidate for a truly absent key (1 RTT). */
        gate_hold(g, ctx, lk);
        ctx->start_us = dm_now_us();
        rc = point_role()->del(ctx, key, klen, gate_decide, g, carry);
        g->lk = NULL;
        if (rc == 1) count_repair(key, klen, "in RACE without a CHIME entry: deleted by DEL");
        range_role()->unlock(ctx, lk, -1);
        return rc;
    }
    dm_batch_t ride;
    dm_batch_init(&ride);
    dm_ctx_ride_start(ctx, &ride); /* the pending flag's WRITE goes with RACE's first READ */
    rc = range_role()->mark_pending(ctx, lk);
    if (rc < 0) return end_unwritten(ctx, g, lk, &ride, rc);
    gate_hold(g, ctx, lk);
    dm_fault_point(ctx, DM_FAULT_LOCKED);
    ctx->start_us = dm_now_us();
    rc = point_role()->del(ctx, key, klen, gate_decide, g, carry);
    dm_ctx_ride_end(ctx, &ride);
    g->lk = NULL;
    int present = rc == 1 ? 0 : rc == 0 ? g->seen_present : -1;
    int in_doubt = rc == 1 && range_role()->lock_in_doubt(lk);
    range_role()->unlock(ctx, lk, present);
    reconcile_if_in_doubt(ctx, in_doubt, key, klen);
    return rc;
}

/* delete_locked_with a carry of its own, released whatever the outcome (what the point
 * role's prefetch kept in it). */
static int delete_locked(dm_ctx_t *ctx, gate_t *g, const void *key, size_t klen)
{
    dm_point_carry_t carry;
    memset(&carry, 0, sizeof(carry));
    int rc = delete_locked_with(ctx, g, key, klen, &carry);
    point_role()->carry_release(ctx, &carry);
    return rc;
}

int dm_hybrid_delete(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_decide_fn decide,
                     void *arg)
{
    gate_t g;
    gate_init(&g, decide, arg, 1, key, klen);
    g.deleting = 1;
    dm_coro_wait_turn(); /* before the leaf lock, as in dm_hybrid_set */
    int rc = DM_ERETRY;
    for (int tries = 0; tries < MAX_LOCKED_TRIES; tries++) {
        g.lock_expired = 0;
        rc = delete_locked(ctx, &g, key, klen);
        if (!(rc == 0 && g.lock_expired)) return gate_done(&g, rc);
    }
    return rc;
}
