/* Shared leaf holds: the inserts of one worker into one leaf under one lock (issue 11;
 * docs/throughput.md "shared holds").
 *
 * A pipeline of new keys that share a leaf (a sequential load: 30-60 consecutive keys per
 * leaf) used to take the leaf lock one insert after another: each waited for the previous
 * one's unlock, two round trips apiece. Sherman (SIGMOD'22 §4.3) combines lock holders of
 * one compute node; this is that idea for the coroutines of one worker thread:
 *
 *  - An insert whose connection has later commands in flight (dm_coro_more_behind) locks
 *    its leaf reading the whole leaf behind the lock CAS, and registers the hold here.
 *  - Later inserts of the worker into that leaf *join* it while it is open: no lock CAS,
 *    no read. Each places its pending entry in the hold's image (the canonical one: the
 *    thread is the only writer while it holds the lock) and posts the entries it changed
 *    at once (write_now); its slot CAS is its commit, in its connection's order as ever.
 *    It settles its entry in the image when it leaves; the hold's next write (a member's
 *    entry, or the last member's unlock, which writes the lock word back) carries it.
 *  - Every member keeps the hybrid protocol's rule: its entry is in the leaf, pending,
 *    before its slot CAS can land, and it changes presence only within the hold's lease
 *    (members share the lock's time: dm_chime_lock_valid of a member is the hold's).
 *  - A member whose entry does not fit closes the hold (no more joins). Alone, it splits
 *    as a lone holder would. With others in it, it splits under the hold (split_shared):
 *    both halves stay locked under the hold's lease, the members whose keys went right
 *    follow them into a second hold of the right leaf, and the others write nothing to the
 *    leaf until the split (and the separator's propagation) is done.
 *  - Joins are open for SHARE_JOIN_MS after the lock and for SHARE_MAX_JOINS members, so a
 *    hold cannot starve other workers and gateways of the leaf.
 *  - An insert that finds the leaf held by a hold it may not join (closed, or still being
 *    locked) and whose turn has not come waits for the hold's signal or its whole turn,
 *    whichever is first (dm_coro_wait_turn_or), holding nothing.
 *
 * Entries move under a member (another member's hop), so a member finds its entry again
 * by key when it settles. Only keys stored inline (≤ DM_CHIME_INLINE bytes) share: a long
 * key's entry points to a record, and finding it again would read records. */
#include "chime_internal.h"
#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/env.h"
#include "dmkv/errors.h"
#include "leaf_lock.h"

#include <stdlib.h>
#include <string.h>

#define SHARE_JOIN_MS 20u   /* joins are open this long after the lock was taken */
#define SHARE_MAX_JOINS 128 /* members of one hold, in all */
#define SHARE_CREDIT_MAX 16 /* holds nobody joined, in a row, before holds stop... */
#define SHARE_PROBE_EVERY 8 /* ... except one in this many inserts (sharing pays again?) */

typedef struct ch_group {
    dm_chime_lock_t *hold;     /* the lock as held in the pool: whole image, lock word */
    dm_gaddr_t leaf;           /* what it holds (or is locking) */
    unsigned members;          /* member handles not yet unlocked */
    dm_chime_lock_t *list;     /* ... linked by gnext */
    unsigned joined;           /* members ever */
    int forming;               /* its lock CAS is on its way */
    int closed;                /* no more joins (full, split, or expired) */
    int expired;               /* held past the lease: nothing more is written */
    int settles;               /* settled entries of members that left, not written yet
                                  (ch_share_unlock): the hold's next write carries them */
    int splitting;             /* a member splits the leaf: the others write nothing ... */
    struct ch_waiter *waiters; /* ... and wait here until it is done */
    ch_bound_t lo, hi;         /* lo <= key < hi: keys the leaf covers (group_covering) */
    dm_gaddr_t expect_next;    /* while forming: lo and hi are the parent's, which hold if
                                  the leaf's sibling is this once it is locked */
    struct ch_group *next;
} ch_group_t;

typedef struct ch_waiter {
    dm_wake_t wk;
    struct ch_waiter *next;
} ch_waiter_t;

/* DMKV_SHARE_LOCKS: 0 off (each insert locks alone, as before); "always" (tests) shares even
 * without later commands in flight; else on. */
static int parse_share_locks(const char *e)
{
    return e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "always") ? 2 : 1;
}

static int sharing(void)
{
    static int mode = -1;
    return dm_env_cached(&mode, "DMKV_SHARE_LOCKS", parse_share_locks);
}

static ch_group_t *group_of(dm_chime_t *c, dm_gaddr_t leaf)
{
    for (ch_group_t *gp = c->groups; gp; gp = gp->next)
        if (gp->leaf == leaf) return gp;
    return NULL;
}

/* Unregister gp (its hold is unlocked or was never taken) and wake its waiters. */
static void group_remove(dm_chime_t *c, ch_group_t *gp)
{
    /* Worth it when others joined: random keys rarely share a leaf, and a hold's whole-leaf
     * read (2.3 KB instead of a neighborhood) is then wasted. */
    if (gp->hold)
        c->share_credit = gp->joined > 1    ? SHARE_CREDIT_MAX
                          : c->share_credit ? c->share_credit - 1
                                            : 0;
    for (ch_group_t **pp = &c->groups; *pp; pp = &(*pp)->next)
        if (*pp == gp) {
            *pp = gp->next;
            break;
        }
    dm_coro_signal(gp->leaf); /* waiters may lock it now */
    free(gp);
}

/* Note that gp's leaf covers key (a lock or a validated descent said so): the leaf's low
 * bound is at most key, so key can stand for it. Keys over DM_CHIME_INLINE bytes are not
 * noted. */
static void note_covered(ch_group_t *gp, const void *key, size_t klen)
{
    if (klen > DM_CHIME_INLINE) return;
    if (gp->lo.len >= 0 && ch_key_cmp(gp->lo.key, (size_t)gp->lo.len, key, klen) <= 0) return;
    ch_bound_set(&gp->lo, key, klen);
}

static int joinable(const ch_group_t *gp)
{
    return !gp->forming && !gp->closed && gp->joined < SHARE_MAX_JOINS &&
           dm_now_us() - gp->hold->locked_us < (uint64_t)SHARE_JOIN_MS * 1000;
}

/* Whether the held leaf's sibling (in h's image) is want: nothing split it since a parent
 * that expects want was read (CHIME §4.2.3's sibling-based validation). */
static int sibling_is(const dm_chime_t *c, const dm_chime_lock_t *h, dm_gaddr_t want)
{
    const uint8_t *rep = ch_any_replica(&c->geo, h->img, h->have);
    return rep && ch_u64(rep + 8) == want;
}

/* Whether gp's leaf covers key by what the group knows: lo <= key < hi, where a hi not known
 * is the leaf's high fence (in the hold's image, which is the leaf as the pool has it:
 * nothing else changes a held leaf; its key from the worker's fence cache, else no). A
 * leaf's low bound never changes (leaves do not merge) and its high fence only by a split,
 * which the hold itself does (split_shared and ch_share_mark_pending adjust lo and hi). */
static int group_has(dm_chime_t *c, const ch_group_t *gp, const void *key, size_t klen)
{
    if (gp->lo.len < 0 || ch_key_cmp(key, klen, gp->lo.key, (size_t)gp->lo.len) < 0) return 0;
    if (gp->hi.len == CH_BOUND_INF) return 1;
    if (gp->hi.len >= 0) return ch_key_cmp(key, klen, gp->hi.key, (size_t)gp->hi.len) < 0;
    if (gp->forming) return 0;
    const uint8_t *rep = ch_any_replica(&c->geo, gp->hold->img, gp->hold->have);
    dm_gaddr_t fence = rep ? ch_u64(rep + 16) : 0;
    const uint8_t *fk;
    uint32_t fl;
    if (!rep) return 0;
    return !fence || (ch_fence_cached(c, fence, &fk, &fl) && ch_key_cmp(key, klen, fk, fl) < 0);
}

/* The hold that covers key, found without descending the inner nodes (joinable or not;
 * while it forms, its bounds are the parent's until its lock validates them, so only a
 * joinable one is joined: the others are waited for, as they would be had a descent found
 * them). NULL: none known, descend. */
static ch_group_t *group_covering(dm_chime_t *c, const void *key, size_t klen)
{
    for (ch_group_t *gp = c->groups; gp; gp = gp->next)
        if (group_has(c, gp, key, klen)) return gp;
    return NULL;
}

/* A member handle for key in gp (entry not looked up). NULL when out of memory. */
static dm_chime_lock_t *member_new(dm_chime_t *c, ch_group_t *gp, const void *key, size_t klen)
{
    dm_chime_lock_t *m = ch_lock_new(&c->geo, key, klen, 0);
    if (!m) return NULL;
    const dm_chime_lock_t *h = gp->hold;
    m->grp = gp;
    m->co = dm_coro_self();
    m->leaf = h->leaf;
    m->locked_us = h->locked_us; /* the lease is the hold's: dm_chime_lock_valid etc. */
    m->async_failures = h->async_failures;
    m->took_over = h->took_over;
    m->gnext = gp->list;
    gp->list = m;
    gp->members++;
    gp->joined++;
    return m;
}

/* Index of m's entry in the hold's image (it moves when others hop), or -1. */
static int member_entry(dm_ctx_t *ctx, const dm_chime_lock_t *m)
{
    const dm_chime_lock_t *h = m->grp->hold;
    return ch_find_entry(ctx, &ctx->w->chime->geo, h->img, h->have, &m->kh, m->key, m->klen);
}

/* Join gp for key when it covers it: the leaf's sibling is the one the parent on the path p
 * expects (no split since), or p is NULL and group_covering said so. 1 joined (entry
 * found), 0 joined (no entry), 2 not covered, DM_E*. */
static int join(dm_ctx_t *ctx, ch_group_t *gp, const ch_path_t *p, const void *key, size_t klen,
                dm_chime_lock_t **out)
{
    dm_chime_t *c = ctx->w->chime;
    if (p && !sibling_is(c, gp->hold, p->expect_next)) return 2;
    note_covered(gp, key, klen);
    dm_chime_lock_t *m = member_new(c, gp, key, klen);
    if (!m) return DM_ENOMEM;
    dm_coro_early_hold(gp->leaf);
    int idx = member_entry(ctx, m);
    if (idx < -1) {
        ch_share_unlock(ctx, m, -1);
        return idx;
    }
    m->idx = idx;
    ch_count(&ch_stats.share_joins, 1);
    *out = m;
    return idx >= 0;
}

/* Register a hold of p's leaf being locked (NULL: not worth it, or out of memory). */
static ch_group_t *group_start(dm_chime_t *c, const ch_path_t *p)
{
    if ((sharing() < 2 && !dm_coro_more_behind()) || group_of(c, p->leaf)) return NULL;
    if (sharing() < 2 && !c->share_credit && ++c->share_probe % SHARE_PROBE_EVERY) return NULL;
    /* A lock that waits for the whole turn first (leaf.c ch_lock_key) would keep the hold
     * forming, and its joiners waiting, that long: not shared. */
    if (dm_coro_turn_pending() && (dm_coro_early_taken(p->leaf) || ch_leaf_contended(c, p->leaf)))
        return NULL;
    ch_group_t *gp = calloc(1, sizeof(*gp));
    if (!gp) return NULL;
    gp->leaf = p->leaf;
    gp->forming = 1;
    gp->lo = p->lo;
    gp->hi = p->hi;
    gp->expect_next = p->expect_next;
    gp->next = c->groups;
    c->groups = gp;
    return gp;
}

int dm_chime_lock_insert(dm_ctx_t *ctx, const void *key, size_t klen, const dm_batch_t *extra,
                         int *fresh, dm_chime_lock_t **out)
{
    dm_chime_t *c = ctx->w->chime;
    *out = NULL;
    if (fresh) *fresh = 0;
    if (klen > DM_CHIME_INLINE || !sharing())
        return ch_lock_key(ctx, key, klen, 0, extra, fresh, out);
    ch_path_t p;
    int have_path = 0;
    ch_group_t *gp;
    ch_find_memo_t memo = {0};
    for (int tries = 0;; tries++) {
        dm_gaddr_t leaf;
        int rc;
        gp = group_covering(c, key, klen); /* a hold of this worker: no descent needed */
        if (gp && joinable(gp)) {
            ch_count(&ch_stats.share_joins_direct, 1);
            return join(ctx, gp, NULL, key, klen, out);
        }
        if (gp) {
            leaf = gp->leaf; /* not open (yet): wait for it as for one a descent found */
        } else {
            rc = ch_find_leaf_again(ctx, key, klen, &p, &memo);
            if (rc) return rc;
            have_path = 1;
            leaf = p.leaf;
            gp = group_of(c, leaf);
            if (gp && joinable(gp)) {
                rc = join(ctx, gp, &p, key, klen, out);
                if (rc != 2) return rc;
                break; /* the cached parent is stale: the ordinary lock finds the way */
            }
        }
        if (!dm_coro_turn_pending()) {
            if (!gp || !gp->forming || tries >= 4) break; /* lock it: early holders give way */
            dm_ctx_yield(ctx); /* its lock CAS comes back within a round trip */
            continue;
        }
        if (tries >= 64 || (!gp && !dm_coro_early_taken(leaf))) break;
        /* The thread holds the leaf (a hold not open to us, or a lone lock): wait for it to
         * open or end, or for the whole turn, holding nothing. */
        rc = dm_coro_wait_turn_or(leaf);
        if (rc && rc != DM_EYIELD) return rc;
    }
    if (!have_path) { /* waited on a hold and gave up: the lock needs the path */
        int rc = ch_find_leaf_again(ctx, key, klen, &p, &memo);
        if (rc) return rc;
    }
    /* Registered while locking, so the thread's next inserts wait for it to form instead
     * of taking their whole turn. Keyed by the leaf the descent found; moved to the leaf
     * the lock took. */
    gp = group_start(c, &p);
    dm_chime_lock_t *h;
    int rc = ch_lock_key(ctx, key, klen, gp ? CH_LOCK_WHOLE : 0, extra, fresh, &h);
    if (!gp) {
        *out = rc < 0 ? NULL : h;
        return rc;
    }
    if (rc < 0) {
        group_remove(c, gp);
        return rc;
    }
    if (gp->leaf != h->leaf || !sibling_is(c, h, gp->expect_next))
        gp->lo.len = gp->hi.len = CH_BOUND_NONE; /* split since the parent was read */
    if (gp->leaf != h->leaf) {
        dm_coro_signal(gp->leaf);
        gp->leaf = h->leaf;
    }
    gp->hold = h;
    gp->forming = 0;
    note_covered(gp, key, klen); /* the lock found the leaf that covers it */
    dm_chime_lock_t *m = member_new(c, gp, key, klen);
    if (!m) {
        group_remove(c, gp);
        ch_unlock_unchanged(ctx, h);
        dm_chime_lock_free(h);
        return DM_ENOMEM;
    }
    m->idx = h->idx;
    ch_count(&ch_stats.share_holds, 1);
    dm_coro_signal(gp->leaf);
    *out = m;
    return rc;
}

/* Another member of m's hold has m's key (two connections inserting one key): its entry is
 * theirs too, so only the last of them settles it. */
static int key_shared(const dm_chime_lock_t *m)
{
    for (const dm_chime_lock_t *o = m->grp->list; o; o = o->gnext)
        if (o != m && o->klen == m->klen && memcmp(o->key, m->key, m->klen) == 0) return 1;
    return 0;
}

static void member_unlink(dm_chime_lock_t *m)
{
    for (dm_chime_lock_t **pp = &m->grp->list; *pp; pp = &(*pp)->gnext)
        if (*pp == m) {
            *pp = m->gnext;
            break;
        }
}

/* Members post what they change at once, never riding with a later batch: a hop may move
 * an entry another member placed, and a write posted later carries the newest bytes of its
 * entries only, so every change must be posted before the next one can be made (posted in
 * order on the connection, an entry is then never missing from the pool, only twice). The
 * member's slot CAS must still come after its entry: an 8-byte READ of the leaf rides with
 * its RACE batch instead (same message when one memory node holds both, else waited for,
 * dm_ctx_ride_before; it completes after the write posted before it on that connection).
 * Where that connection executes its messages in order (tcp with chains) and the RACE batch
 * goes to the leaf's node, the batch layer drops the READ (dm_verb_t.order_only). */
static int write_now(dm_ctx_t *ctx, dm_chime_lock_t *m, dm_chime_lock_t *h)
{
    dm_batch_t *ride = ctx->ride;
    m->grp->settles = 0; /* every dirty object goes: the settles too */
    if (!ride || ride->n + 1 > DM_BATCH_MAX) {
        ctx->ride = NULL;
        int rc = ch_write_dirty(ctx, h, 0, 1); /* no ride: wait for the write */
        ctx->ride = ride;
        return rc;
    }
    int rc = ch_write_dirty(ctx, h, 0, 0);
    if (rc) return rc;
    dm_batch_read(ride, h->leaf, &m->order_word, sizeof(m->order_word))->order_only = 1;
    ctx->ride_until_us = h->locked_us + (uint64_t)CH_HOLD_MAX_MS * 1000;
    return 0;
}

/* Wait while a member splits m's leaf (split_shared): the hold's image changes under it,
 * and m may move to the right half's hold. */
static void wait_split(dm_ctx_t *ctx, const dm_chime_lock_t *m)
{
    while (m->grp->splitting) {
        ch_waiter_t w;
        memset(&w, 0, sizeof(w));
        w.next = m->grp->waiters;
        m->grp->waiters = &w;
        dm_worker_park(ctx->w, &w.wk, "a shared hold's split (chime)");
    }
}

static void split_done(dm_ctx_t *ctx, ch_group_t *gp)
{
    gp->splitting = 0;
    for (ch_waiter_t *w = gp->waiters, *next; w; w = next) {
        next = w->next;
        dm_worker_wake(ctx->w, &w->wk);
    }
    gp->waiters = NULL;
}

/* The last member left gp: write the lock word back (vacancy bits) and unlock. The hold's
 * handle is the group's, not the running coroutine's: the coroutine's early hold is its own
 * member handle's (released with it), so nothing here releases it. A split that empties
 * one half runs this on the splitter, which stays a member of the other half and must stay
 * woundable (else an earlier command of its thread that needs that leaf waits for it until
 * the lease ends: it_shared_holds, no takeover). */
static int group_end(dm_ctx_t *ctx, ch_group_t *gp)
{
    dm_chime_lock_t *h = gp->hold;
    int expired = gp->expired, rc = 0;
    group_remove(ctx->w->chime, gp);
    if (expired)
        ch_unlock_word(ctx, h);
    else
        rc = ch_write_dirty(ctx, h, 1, 0);
    free(h); /* key and image share its allocation (ch_lock_new) */
    return rc;
}

/* m's entry does not fit and others are in the hold: split the leaf under the hold rather
 * than leave and come back once the hold ends (each split then cost the pipeline's later
 * inserts a yield, a wait for their whole turn and a lock apiece: about 25 yields per split
 * in a sequential load, docs/throughput.md "Splits under a shared hold"). Both halves stay
 * locked under the hold's lease (ch_split_locked with a right handle); the members whose
 * keys the separator sends right follow their entries into a second hold, of the right
 * leaf; the others write nothing meanwhile (wait_split), since the split writes both leaves
 * whole from the image. Posted in order on the leaf's connection, their earlier entry writes
 * land before the split's, and the right leaf is written before the left one drops the keys
 * that moved: an entry is never missing from the pool (CHIME ⊇ RACE), only twice for a
 * moment, as in a lone split. 0: m is in the hold that covers its key, its entry not yet
 * placed; DM_EYIELD: not split (separator too long), leave and come back; DM_E*. */
static int split_shared(dm_ctx_t *ctx, dm_chime_lock_t *m)
{
    dm_chime_t *c = ctx->w->chime;
    ch_group_t *gp = m->grp;
    dm_chime_lock_t *h = gp->hold;
    dm_chime_lock_t *r = ch_lock_new(&c->geo, m->key, m->klen, 1);
    ch_group_t *rg = calloc(1, sizeof(*rg));
    if (!r || !rg) {
        free(r);
        free(rg);
        return DM_ENOMEM;
    }
    uint8_t sep[DM_CHIME_SEP_MAX];
    uint32_t sl = 0;
    gp->splitting = 1;
    dm_batch_t *ride = ctx->ride; /* nothing of the split may wait for m's RACE batch */
    ctx->ride = NULL;
    int rc = ch_split_locked(ctx, h, r, sep, &sl);
    ctx->ride = ride;
    if (!r->leaf) { /* not split: the hold goes on as it was, or it lapsed (h expired) */
        free(r);    /* never a lock: nothing registered for it */
        free(rg);
        split_done(ctx, gp);
        return rc == DM_EFULL ? DM_EYIELD : rc;
    }
    gp->settles = 0; /* both halves were written whole from the image */
    rg->hold = r;
    rg->leaf = r->leaf;
    rg->hi = gp->hi; /* the right leaf: [sep, what the leaf had); the left one: [.., sep) */
    rg->lo.len = CH_BOUND_NONE;
    if (gp->lo.len >= 0 && ch_key_cmp(gp->lo.key, (size_t)gp->lo.len, sep, sl) >= 0) {
        note_covered(rg, gp->lo.key, (size_t)gp->lo.len); /* a key noted went right */
        gp->lo.len = CH_BOUND_NONE;
    }
    note_covered(rg, sep, sl);
    ch_bound_set(&gp->hi, sep, sl);
    rg->next = c->groups;
    c->groups = rg;
    for (dm_chime_lock_t **pp = &gp->list; *pp;) { /* members follow their keys */
        dm_chime_lock_t *o = *pp;
        if (ch_key_cmp(o->key, o->klen, sep, sl) < 0) {
            pp = &o->gnext;
            continue;
        }
        *pp = o->gnext;
        o->gnext = rg->list;
        rg->list = o;
        gp->members--;
        rg->members++;
        rg->joined++;
        o->grp = rg;
        o->leaf = r->leaf;
        o->idx = -1; /* found again by key when it is needed */
        dm_coro_early_move(o->co, r->leaf);
    }
    ch_count(&ch_stats.share_splits, 1);
    int lapsed = ch_hold_expired(h); /* r's too: the same lease */
    gp->closed = rg->closed = lapsed;
    gp->expired = rg->expired = lapsed;
    split_done(ctx, gp);
    dm_coro_signal(gp->leaf);
    dm_coro_signal(rg->leaf);
    /* m is in one of the two, so at most one is left without members. */
    int erc = gp->members == 0 ? group_end(ctx, gp) : rg->members == 0 ? group_end(ctx, rg) : 0;
    if (lapsed) return DM_ERETRY;
    return rc ? rc : erc;
}

int ch_share_mark_pending(dm_ctx_t *ctx, dm_chime_lock_t *m)
{
    dm_chime_t *c = ctx->w->chime;
    const ch_geo_t *g = &c->geo;
    for (int splits = 0;; splits++) {
        wait_split(ctx, m);
        ch_group_t *gp = m->grp;
        dm_chime_lock_t *h = gp->hold;
        if (ch_hold_expired(h)) return DM_ERETRY;
        int idx = member_entry(ctx, m);
        if (idx < -1) return idx;
        if (idx >= 0) { /* pending from a dead gateway, or from an attempt that gave way */
            m->idx = idx;
            uint8_t *e = h->img + ch_entry_off(g, (unsigned)idx);
            if (e[1] & CH_F_PENDING) return 0;
            e[1] |= CH_F_PENDING;
            ch_touch(h, g, (unsigned)idx);
            return write_now(ctx, m, h);
        }
        /* The hold's key fields are the placing member's for this synchronous step only. */
        h->kh = m->kh;
        h->key = m->key;
        h->klen = m->klen;
        h->rec = 0;
        h->idx = -1;
        int rc = ch_hop_insert(h, g, CH_F_PENDING);
        if (rc < 0) return rc;
        if (rc == 1) {
            m->idx = h->idx;
            ch_hot_touch(c, h->leaf, (unsigned)m->idx, m->kh.fp);
            return write_now(ctx, m, h);
        }
        gp->closed = 1;
        if (gp->members > 1) {
            if (splits >= 16) return DM_EYIELD; /* cannot happen with span >= 2 * nbhd */
            rc = split_shared(ctx, m);
            if (rc) return rc;
            continue; /* place it in the half that covers it */
        }
        /* Alone: split as a lone holder does, from a whole read of the leaf. Settles of
         * members that left and are not written yet would be dropped with the image: they
         * are written first, with the failed hop's moves (each a complete move, as
         * split_shared writes them too). Otherwise the moves are simply dropped. */
        if (gp->settles) {
            gp->settles = 0;
            dm_batch_t *ride = ctx->ride;
            ctx->ride = NULL;
            rc = ch_write_dirty(ctx, h, 0, 1);
            ctx->ride = ride;
            if (rc) return rc;
        }
        memset(h->dirty, 0, sizeof(h->dirty));
        dm_gaddr_t before = h->leaf;
        dm_batch_t *ride = ctx->ride; /* joins reopen below: nothing of ours may ride */
        ctx->ride = NULL;
        rc = ch_mark_pending_own(ctx, h);
        ctx->ride = ride;
        gp->hi.len = CH_BOUND_NONE; /* split: the image's fence says */
        if (h->leaf != before) {
            dm_coro_signal(gp->leaf);
            gp->leaf = h->leaf;
            gp->lo.len = CH_BOUND_NONE; /* the right half: what was noted may be left of it */
            dm_coro_early_hold(h->leaf);
        }
        m->leaf = h->leaf;
        if (rc == 0) {
            note_covered(gp, m->key, m->klen);
            m->idx = h->idx;
            gp->closed = 0; /* split and placed: the leaf that covers the key is open again */
            dm_coro_signal(gp->leaf);
        }
        return rc;
    }
}

int ch_share_unlock(dm_ctx_t *ctx, dm_chime_lock_t *m, int present)
{
    wait_split(ctx, m);
    ch_group_t *gp = m->grp;
    dm_chime_lock_t *h = gp->hold;
    int rc = 0;
    member_unlink(m);
    gp->members--;
    if (ctx->ride_failed) h->abandoned = 1; /* moves that rode may be half done: write none */
    if (gp->expired || ch_hold_expired(h)) {
        gp->expired = gp->closed = 1; /* may have been taken over: write nothing more */
        rc = DM_ERETRY;
    } else if (present >= 0 && !key_shared(m)) {
        int idx = member_entry(ctx, m);
        if (idx >= 0) {
            h->idx = idx;
            h->klen = m->klen;
            ch_settle_entry(ctx, h, present);
            gp->settles = 1;
        }
    }
    /* The settled entry is written with the hold's next write: another member's pending
     * entry (write_now) or the last member's unlock (group_end), one leaf write for many
     * settles. Until then the pool holds it pending, which every reader resolves by the
     * point index (the hybrid protocol's rule); if the hold lapses first it stays pending
     * until the next holder or a SCAN settles it. */
    if (gp->members == 0) {
        int erc = group_end(ctx, gp);
        if (!rc) rc = erc;
    }
    dm_chime_lock_free(m);
    return rc;
}
