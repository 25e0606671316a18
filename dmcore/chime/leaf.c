/* CHIME leaves under their lock: lock + neighborhood read in one batch (masked CAS that
 * returns the vacancy bitmap, §4.2.1), finding a key, inserting with hopping (§2.3, §4.4),
 * leaf splits (§4.2.2, §4.4), settling and unlocking. Lock-free search is in search.c. */
#include <stdlib.h>
#include <string.h>

#include "chime_internal.h"
#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/fence.h"
#include "dmkv/lease.h"
#include "leaf_lock.h"

#define MAX_LOCK_TRIES 200000
#define MAX_FOLLOW 4096

static unsigned objs_of(const ch_geo_t *g)
{
    return g->groups * (g->nbhd + 1);
}

static dm_gaddr_t lock_addr(const ch_geo_t *g, dm_gaddr_t leaf)
{
    return leaf + g->lock_off;
}

static void drop_duplicates(dm_chime_lock_t *lk, const ch_geo_t *g, unsigned idx);

/* Add READs of entries [from, from+n) (circular) to b, with a replica: the group's replica
 * when from starts a group, else the one the run crosses (or replica 0 on wrap-around). */
void ch_read_run(const ch_geo_t *g, dm_batch_t *b, dm_gaddr_t leaf, uint8_t *img, uint8_t *have,
                 unsigned from, unsigned n)
{
    if (n > g->span) n = g->span;
    unsigned last = from + n - 1;
    uint32_t start =
        from % g->nbhd == 0 ? ch_replica_off(g, from / g->nbhd) : ch_entry_off(g, from);
    unsigned end1 = last < g->span ? last : g->span - 1;
    uint32_t stop = ch_entry_off(g, end1) + CH_OBJ;
    dm_batch_read(b, leaf + start, img + start, stop - start);
    memset(have + start / CH_OBJ, 1, (stop - start) / CH_OBJ);
    if (last >= g->span) {
        uint32_t stop2 = ch_entry_off(g, last - g->span) + CH_OBJ;
        if (stop2 > start) stop2 = start; /* the two runs met: the whole leaf is read */
        dm_batch_read(b, leaf, img, stop2);
        memset(have, 1, stop2 / CH_OBJ);
    }
}

/* The replica bytes of any group read into img. */
const uint8_t *ch_any_replica(const ch_geo_t *g, const uint8_t *img, const uint8_t *have)
{
    for (unsigned grp = 0; grp < g->groups; grp++)
        if (have[ch_replica_off(g, grp) / CH_OBJ]) return img + ch_replica_off(g, grp);
    return NULL;
}

/* Did a CAS (or masked CAS) verb succeed? */
static int cas_won(const dm_verb_t *v)
{
    if (v->op == DM_OP_MASKED_CAS)
        return (v->result & v->compare_mask) == (v->compare & v->compare_mask);
    return v->result == v->compare;
}

static uint64_t *guess_slot(dm_chime_t *c, dm_gaddr_t leaf)
{
    return &c->lockguess[(leaf >> 6) % 256];
}

/* A leaf this worker found locked by someone else within the last CONTENDED_US: an early
 * lock of it would hold a hot leaf through a turn wait, while others spin on it (YCSB-D's
 * newest leaf took 10-25% longer per operation so). */
#define CONTENDED_US 10000u

static void mark_contended(dm_chime_t *c, dm_gaddr_t leaf)
{
    c->busy_until[(leaf >> 6) % 256] = dm_now_us() + CONTENDED_US;
}

int ch_leaf_contended(const dm_chime_t *c, dm_gaddr_t leaf)
{
    return c->busy_until[(leaf >> 6) % 256] > dm_now_us();
}

/* Entries to read from home so that the first vacancy the lock word's bitmap vac shows is
 * among them, at least two neighborhoods: what read_hop_range would read next (§4.2.1).
 * With the bitmap this worker last saw, an insert reads its hop range with the lock; the
 * second neighborhood covers most hop ranges when the guess is stale or missing (leaves
 * fill to ~0.75 before a hop fails: one in five inserts found no vacancy in one
 * neighborhood and paid a round trip for the rest). */
static unsigned hop_guess(const ch_geo_t *g, unsigned home, uint32_t vac)
{
    for (unsigned d = 0; d < g->span; d++) {
        unsigned i = (home + d) % g->span;
        unsigned bit = ch_vac_bit(g, i);
        if (vac & (1u << bit)) continue;
        unsigned end = d + (ch_vac_hi(g, bit) + g->span - 1 - i) % g->span;
        return end + 1 > 2 * g->nbhd ? end + 1 : 2 * g->nbhd;
    }
    return g->span;
}

/* Acquire leaf's lock, reading `runs` of entries in the same batch (READs after the CAS on
 * the same connection execute after it). Takes over an expired lease (*took_over = 1; the
 * reads are then redone by the caller). The lease is timed by dmkv/lease.h's rules: the
 * word carries a fresh token, the hold is timed from before the CAS was posted, and a held
 * word is expired only once this thread has seen it unchanged for CH_LEASE_MS. */
int ch_lock_leaf(dm_ctx_t *ctx, dm_chime_lock_t *lk, dm_gaddr_t leaf, int *took_over)
{
    dm_chime_t *c = ctx->w->chime;
    const ch_geo_t *g = &c->geo;
    uint64_t *gs = guess_slot(c, leaf);
    uint64_t steal_from = 0;
    *took_over = 0;
    dm_coro_early_hold(leaf); /* from the CAS on: the thread's other commands see it taken */
    for (int tries = 0; tries < MAX_LOCK_TRIES; tries++) {
        uint64_t time_bits = (uint64_t)dm_lease_token() << 1;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v;
        if (steal_from) {
            v = dm_batch_cas(&b, lock_addr(g, leaf), steal_from,
                             (steal_from & ~0xffffffffull) | time_bits | 1);
        } else {
            v = dm_batch_masked_cas(&b, lock_addr(g, leaf), 0, 1, time_bits | 1, 0xffffffffull,
                                    *gs & ~1ull);
        }
        memset(lk->have, 0, objs_of(g));
        if (lk->want_whole) {
            dm_batch_read(&b, leaf, lk->img, g->lock_off);
            memset(lk->have, 1, objs_of(g));
        } else if (lk->spec >= 0) {
            /* Speculative (§4.3): the hot entry and the home entry only, 64 bytes. */
            uint32_t so = ch_entry_off(g, (unsigned)lk->spec), ho = ch_entry_off(g, lk->kh.home);
            dm_batch_read(&b, leaf + so, lk->img + so, CH_OBJ);
            dm_batch_read(&b, leaf + ho, lk->img + ho, CH_OBJ);
            lk->have[so / CH_OBJ] = lk->have[ho / CH_OBJ] = 1;
        } else {
            unsigned n = lk->want_hop ? hop_guess(g, lk->kh.home, ch_lock_vacancy(*gs)) : g->nbhd;
            ch_read_run(g, &b, leaf, lk->img, lk->have, lk->kh.home, n);
        }
        int with_extra = lk->extra && b.n + lk->extra->n <= DM_BATCH_MAX;
        int extra_here = with_extra; /* every extra verb on the lock's memory node */
        for (unsigned i = 0; with_extra && i < lk->extra->n; i++) {
            b.v[b.n] = lk->extra->v[i];
            b.node[b.n] = lk->extra->node[i];
            extra_here &= b.node[b.n] == b.node[0];
            b.n++;
        }
        for (unsigned i = 1; i < b.n; i++)
            b.v[i].fence = 1; /* the reads must see the leaf as locked by the CAS */
        uint64_t posted_us = dm_now_us(), async_failures = dm_async_failures();
        int rc = dm_batch_exec(ctx, &b);
        if (rc) {
            dm_coro_early_release();
            return rc;
        }
        uint64_t old = v->result;
        if (cas_won(v)) {
            lk->extra_fresh = extra_here;
            lk->leaf = leaf;
            lk->word = (old & ~0xffffffffull) | time_bits | 1;
            lk->remote_word = lk->word;
            lk->locked_us = posted_us;
            lk->async_failures = async_failures;
            dm_lease_forget(lock_addr(g, leaf));
            *gs = old & ~0xffffffffull;
            if (steal_from) {
                *took_over = 1;
                ch_count(&ch_stats.takeovers, 1);
            }
            return 0;
        }
        steal_from = 0;
        if (!ch_lock_held(old)) {
            *gs = old; /* the CAS fallback guessed the vacancy bits wrong: retry now */
            continue;
        }
        if (dm_lease_takeover_ready(ctx, lock_addr(g, leaf), old, CH_LEASE_MS)) {
            steal_from = old; /* the holder's late writes can no longer land */
            continue;
        }
        ch_count(&ch_stats.lock_waits, 1);
        if (!dm_coro_early_taken(leaf)) mark_contended(c, leaf); /* not by this thread */
        dm_coro_early_contend(leaf); /* a later command of this thread holding it gives way */
        if (dm_coro_turn_pending()) {
            /* Busy before our turn: wait for the turn instead of spinning (nothing held). */
            dm_coro_early_release();
            dm_coro_wait_turn();
            dm_coro_early_hold(leaf);
            continue;
        }
        if (tries < 32)
            dm_ctx_yield(ctx);
        else
            dm_ctx_sleep(ctx, 1000);
    }
    dm_coro_early_release();
    return DM_ETIMEDOUT;
}

void ch_unlock_unchanged(dm_ctx_t *ctx, dm_chime_lock_t *lk)
{
    dm_coro_early_release();
    ch_unlock_word(ctx, lk);
}

void ch_unlock_word(dm_ctx_t *ctx, const dm_chime_lock_t *lk)
{
    dm_batch_t b;
    dm_batch_init(&b);
    /* The word as it is in the pool (vacancy changes are written only with the unlock). */
    dm_batch_cas(&b, lock_addr(&ctx->w->chime->geo, lk->leaf), lk->remote_word,
                 lk->remote_word & ~0xffffffffull);
    dm_batch_post_async(ctx, &b);
}

/* Has this holder kept the lock so long that a waiter may take it over soon? */
int ch_hold_expired(const dm_chime_lock_t *lk)
{
    return lk->abandoned || dm_async_failures() != lk->async_failures ||
           dm_now_us() - lk->locked_us > (uint64_t)CH_HOLD_MAX_MS * 1000;
}

int dm_chime_lock_valid(const dm_chime_lock_t *lk)
{
    return !ch_hold_expired(lk);
}

uint64_t dm_chime_lock_posted_us(const dm_chime_lock_t *lk)
{
    return lk->locked_us;
}

uint64_t dm_chime_lock_hold_until(const dm_chime_lock_t *lk)
{
    return lk->locked_us + (uint64_t)CH_HOLD_MAX_MS * 1000;
}

uint64_t dm_chime_lock_leaf(const dm_chime_lock_t *lk)
{
    return lk->leaf;
}

uint64_t dm_chime_lock_sure_until(const dm_chime_lock_t *lk)
{
    return lk->took_over ? 0 : lk->locked_us + (uint64_t)CH_LEASE_MS * 1000;
}

int dm_chime_lock_in_doubt(const dm_chime_lock_t *lk)
{
    return dm_now_us() - lk->locked_us > (uint64_t)CH_LEASE_MS * 1000;
}

/* Find key among the entries read: index or -1. Reads long keys' records when their
 * 16-byte prefixes match (1 RTT). */
int ch_find_entry(dm_ctx_t *ctx, const ch_geo_t *g, const uint8_t *img, const uint8_t *have,
                  const ch_khash_t *kh, const void *key, size_t klen)
{
    dm_gaddr_t recs[16];
    unsigned idx[16], nrec = 0;
    for (unsigned j = 0; j < g->nbhd; j++) {
        unsigned i = (kh->home + j) % g->span;
        uint32_t off = ch_entry_off(g, i);
        const uint8_t *e = img + off;
        if (!have[off / CH_OBJ] || !ch_e_used(e) || e[6] != kh->home || ch_e_fp(e) != kh->fp)
            continue;
        int need;
        int r = ch_entry_cmp_key(e, key, klen, &need);
        if (r == 0) return (int)i;
        if (need && nrec < 16) {
            recs[nrec] = ch_u64(e + 8);
            idx[nrec++] = i;
        }
    }
    if (!nrec) return -1;
    uint8_t *keys[16];
    uint32_t lens[16];
    int rc = dm_keyrec_read(ctx, recs, nrec, DM_KV_MAX_KEY, NULL, keys, lens);
    if (rc) return rc;
    int found = -1;
    for (unsigned k = 0; k < nrec; k++) {
        if (found < 0 && ch_key_cmp(keys[k], lens[k], key, klen) == 0) found = (int)idx[k];
        free(keys[k]);
    }
    return found;
}

/* Read the rest of the leaf under the lock (1 RTT). */
static int read_whole(dm_ctx_t *ctx, dm_chime_lock_t *lk)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, lk->leaf, lk->img, g->lock_off);
    int rc = dm_batch_exec(ctx, &b);
    if (!rc) memset(lk->have, 1, objs_of(g));
    return rc;
}

void dm_chime_lock_free(dm_chime_lock_t *lk)
{
    dm_coro_early_release(); /* signals the thread's inserts waiting for it */
    free(lk);                /* key and image live in the same allocation */
}

dm_chime_lock_t *ch_lock_new(const ch_geo_t *g, const void *key, size_t klen, int with_image)
{
    /* One allocation per locked operation: handle, leaf image (when wanted), key copy. */
    size_t img_bytes = with_image ? g->bytes : 0;
    dm_chime_lock_t *lk = calloc(1, sizeof(*lk) + img_bytes + klen);
    if (!lk) return NULL;
    lk->img = with_image ? (uint8_t *)(lk + 1) : NULL;
    lk->key = (uint8_t *)(lk + 1) + img_bytes;
    memcpy(lk->key, key, klen);
    lk->klen = klen;
    ch_hash_key(g, key, klen, &lk->kh);
    lk->idx = -1;
    lk->spec = -1;
    return lk;
}

/* Speculation under the lock: 1 when the hot entry holds the key (the leaf then covers it),
 * 0 after reading the neighborhood instead (1 more RTT), or DM_E*. */
static int check_speculation(dm_ctx_t *ctx, dm_chime_lock_t *lk)
{
    dm_chime_t *c = ctx->w->chime;
    unsigned spec = (unsigned)lk->spec;
    lk->spec = -1;
    ch_count(&ch_stats.hot_lookups, 1);
    const uint8_t *e = lk->img + ch_entry_off(&c->geo, spec);
    int rc = 0;
    if (ch_e_used(e) && e[6] == lk->kh.home && ch_e_fp(e) == lk->kh.fp) {
        int idx = ch_find_entry(ctx, &c->geo, lk->img, lk->have, &lk->kh, lk->key, lk->klen);
        if (idx < -1) return idx;
        rc = idx == (int)spec;
    }
    if (rc) {
        ch_count(&ch_stats.hot_hits, 1);
        return 1;
    }
    dm_batch_t b;
    dm_batch_init(&b);
    memset(lk->have, 0, objs_of(&c->geo));
    ch_read_run(&c->geo, &b, lk->leaf, lk->img, lk->have, lk->kh.home, c->geo.nbhd);
    rc = dm_batch_exec(ctx, &b);
    return rc ? rc : 0;
}

int dm_chime_lock_key(dm_ctx_t *ctx, const void *key, size_t klen, dm_chime_lock_t **out)
{
    return ch_lock_key(ctx, key, klen, 0, NULL, NULL, out);
}

int dm_chime_lock_existing(dm_ctx_t *ctx, const void *key, size_t klen, dm_chime_lock_t **out)
{
    return ch_lock_key(ctx, key, klen, CH_LOCK_EXISTING, NULL, NULL, out);
}

int dm_chime_lock_with(dm_ctx_t *ctx, const void *key, size_t klen, int existing,
                       const dm_batch_t *extra, int *fresh, dm_chime_lock_t **out)
{
    return ch_lock_key(ctx, key, klen, existing ? CH_LOCK_EXISTING : 0, extra, fresh, out);
}

int ch_lock_key(dm_ctx_t *ctx, const void *key, size_t klen, int flags, const dm_batch_t *extra,
                int *extra_fresh, dm_chime_lock_t **out)
{
    dm_chime_t *c = ctx->w->chime;
    int speculate = flags & CH_LOCK_EXISTING;
    *out = NULL;
    if (extra_fresh) *extra_fresh = 0;
    dm_chime_lock_t *lk = ch_lock_new(&c->geo, key, klen, 1);
    if (!lk) return DM_ENOMEM;
    lk->extra = extra;
    lk->want_hop = !speculate; /* SET: a new key needs its hop range */
    lk->want_whole = (flags & CH_LOCK_WHOLE) != 0;
    int rc = 0, fresh = 0;
    ch_path_t p;
    ch_find_memo_t memo = {0}; /* after a turn wait: the same path while the cache holds */
    for (int attempt = 0; attempt < MAX_FOLLOW; attempt++) {
        rc = fresh ? ch_find_leaf(ctx, key, klen, 1, &p)
                   : ch_find_leaf_again(ctx, key, klen, &p, &memo);
        if (rc) break;
        if (dm_coro_turn_pending() &&
            (dm_coro_early_taken(p.leaf) || ch_leaf_contended(c, p.leaf))) {
            /* Another command of this thread holds or is locking that leaf, or it was
             * found busy lately: an early lock would only queue behind them, or hold a hot
             * leaf through a turn wait. Take the whole turn first, holding nothing, and
             * find the leaf again (an earlier SET may split it meanwhile). */
            dm_coro_wait_turn();
            attempt--;
            continue;
        }
        dm_gaddr_t leaf = p.leaf;
        int covered = 0, retry_fresh = 0;
        for (int moves = 0; moves < MAX_FOLLOW && !rc; moves++) {
            int took_over;
            lk->spec = speculate && attempt == 0 && moves == 0
                           ? ch_hot_find(c, leaf, lk->kh.home, lk->kh.fp)
                           : -1;
            rc = ch_lock_leaf(ctx, lk, leaf, &took_over);
            if (rc) break;
            lk->took_over |= took_over;
            if (lk->spec >= 0 && !took_over) {
                int sidx = lk->spec;
                rc = check_speculation(ctx, lk);
                if (rc < 0) {
                    ch_unlock_unchanged(ctx, lk);
                    break;
                }
                if (rc == 1) {
                    lk->idx = sidx;
                    ch_hot_touch(c, lk->leaf, (unsigned)lk->idx, lk->kh.fp);
                    if (extra_fresh) *extra_fresh = lk->extra_fresh;
                    lk->extra = NULL;
                    *out = lk;
                    return 1;
                }
            }
            lk->spec = -1;
            if (took_over) {
                rc = ch_settle_locked(ctx, lk, 0); /* its locker died: settle, then go on */
                if (rc < 0) {
                    ch_unlock_unchanged(ctx, lk);
                    if (ch_settle_lapsed(rc, lk)) rc = 0; /* lock again */
                    break;
                }
                rc = 0;
            }
            const uint8_t *rep = ch_any_replica(&c->geo, lk->img, lk->have);
            dm_gaddr_t sib = rep ? ch_u64(rep + 8) : 0;
            dm_gaddr_t fence = rep ? ch_u64(rep + 16) : 0;
            if (!rep) {
                rc = DM_ECORRUPT;
                break;
            }
            if (sib == p.expect_next) {
                covered = 1; /* sibling-based validation (§4.2.3): nothing split since */
                break;
            }
            if (p.from_cache && !fresh) {
                /* Cache validation failed: the cached parent is stale. */
                ch_unlock_unchanged(ctx, lk);
                ch_cache_drop(c, p.parent);
                if (!p.parent) c->root = 0;
                retry_fresh = 1;
                break;
            }
            /* Half-split (§4.2.3): the key may have moved right; the leaf's high fence says. */
            uint8_t *fk = NULL;
            uint32_t fl = 0;
            if (fence) rc = ch_fence_get(ctx, fence, &fk, &fl);
            if (rc) {
                ch_unlock_unchanged(ctx, lk);
                break;
            }
            if (fence && ch_key_cmp(key, klen, fk, fl) >= 0 && sib) {
                ch_unlock_unchanged(ctx, lk);
                ch_repair_half_split(ctx, leaf, sib, fk, fl); /* best effort: the move works */
                leaf = sib;
                continue;
            }
            covered = 1;
            break;
        }
        if (rc) break;
        if (covered) {
            int idx = ch_find_entry(ctx, &c->geo, lk->img, lk->have, &lk->kh, key, klen);
            if (idx < -1) {
                rc = idx;
                ch_unlock_unchanged(ctx, lk);
                break;
            }
            lk->idx = idx;
            if (idx >= 0) drop_duplicates(lk, &c->geo, (unsigned)idx);
            if (idx >= 0) ch_hot_touch(c, lk->leaf, (unsigned)idx, lk->kh.fp);
            if (extra_fresh) *extra_fresh = lk->extra_fresh;
            lk->extra = NULL;
            *out = lk;
            return idx >= 0;
        }
        fresh = retry_fresh;
    }
    dm_chime_lock_free(lk);
    return rc ? rc : DM_ERETRY;
}

/* Mark entry i changed (EV+1 once per write) for the next entry write. */
void ch_touch(dm_chime_lock_t *lk, const ch_geo_t *g, unsigned i)
{
    uint32_t o = ch_entry_off(g, i) / CH_OBJ;
    if (!lk->dirty[o]) ch_e_bump(lk->img + o * CH_OBJ);
    lk->dirty[o] = 1;
}

/* Recompute the vacancy bit covering entry i from what is known (unknown entries count as
 * possibly empty: a 0 bit only makes an inserter read further). */
static void update_vacancy(dm_chime_lock_t *lk, const ch_geo_t *g, unsigned i)
{
    unsigned bit = ch_vac_bit(g, i);
    unsigned lo = ch_vac_lo(g, bit), hi = ch_vac_hi(g, bit);
    int full = 1;
    for (unsigned k = lo; k < hi; k++) {
        uint32_t off = ch_entry_off(g, k);
        if (!lk->have[off / CH_OBJ] || !ch_e_used(lk->img + off)) full = 0;
    }
    uint64_t mask = 1ull << (32 + bit);
    lk->word = full ? lk->word | mask : lk->word & ~mask;
}

/* WRITE the dirty entries (one verb per run of adjacent dirty objects; several batches
 * only for huge hop ranges) plus, optionally, the lock word (Sherman's combined write:
 * same connection, in order).
 * Order: a hop moves an entry forward (circularly) from k to e and may refill k, so e's
 * run must be written before k's: runs go out in reverse circular order, starting just
 * before the widest clean gap. A chain cut short (connection lost after a prefix executed)
 * then leaves an entry twice, which lookups and SCAN tolerate, never nowhere. */
int ch_write_dirty(dm_ctx_t *ctx, dm_chime_lock_t *lk, int unlock, int wait)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    unsigned objs = objs_of(g);
    unsigned rs[CH_MAX_OBJS], rn[CH_MAX_OBJS], nr = 0;
    for (unsigned o = 0; o < objs; o++) {
        if (!lk->dirty[o]) continue;
        unsigned end = o;
        while (end + 1 < objs && lk->dirty[end + 1])
            end++;
        rs[nr] = o;
        rn[nr++] = end - o + 1;
        o = end;
    }
    unsigned first = 0, widest = 0; /* first run in circular order: after the widest gap */
    for (unsigned j = 0; j < nr; j++) {
        unsigned prev_end = j ? rs[j - 1] + rn[j - 1] : rs[nr - 1] + rn[nr - 1];
        unsigned gap = (rs[j] + objs - prev_end) % objs;
        if (gap > widest) widest = gap, first = j;
    }
    /* Nothing of this hold leaves the process after its end (dm_conn_t.send_by_us). */
    uint64_t send_by = lk->locked_us + (uint64_t)CH_HOLD_MAX_MS * 1000;
    dm_batch_t b;
    dm_batch_init(&b);
    b.send_by_us = send_by;
    int rc = 0;
    for (unsigned k = 0; k < nr && !rc; k++) {
        unsigned j = (first + nr - 1 - k) % nr;
        if (b.n == DM_BATCH_MAX - 1) {
            rc = dm_batch_exec(ctx, &b);
            dm_batch_init(&b);
            b.send_by_us = send_by;
        }
        dm_batch_write(&b, lk->leaf + rs[j] * CH_OBJ, lk->img + rs[j] * CH_OBJ, rn[j] * CH_OBJ);
    }
    memset(lk->dirty, 0, sizeof(lk->dirty));
    if (rc) return rc;
    if (unlock) { /* by CAS: a holder whose lease was taken over must not free the taker's */
        dm_batch_cas(&b, lock_addr(g, lk->leaf), lk->remote_word, lk->word & ~0xffffffffull);
        *guess_slot(ctx->w->chime, lk->leaf) = lk->word & ~0xffffffffull; /* vacancy as left */
    }
    if (wait && ctx->ride && b.n + ctx->ride->n <= DM_BATCH_MAX) {
        /* Ride along with the caller's next batch (the RACE write): one RTT saved, but
         * dropped if this hold has ended by the time that batch is posted. */
        ctx->ride_until_us = send_by;
        for (unsigned i = 0; i < b.n; i++) {
            ctx->ride->v[ctx->ride->n] = b.v[i];
            ctx->ride->node[ctx->ride->n++] = b.node[i];
        }
        return 0;
    }
    return wait ? dm_batch_exec(ctx, &b) : dm_batch_post_async(ctx, &b);
}

static unsigned dist(const ch_geo_t *g, unsigned from, unsigned to)
{
    return (to + g->span - from) % g->span;
}

/* A hop chain cut short can leave the moved entry at both ends (write_dirty): byte-equal
 * copies of entry idx (key, home, record, everything but version and bitmap). Clear them
 * with this holder's next write, so a DEL leaves no phantom behind. */
static void drop_duplicates(dm_chime_lock_t *lk, const ch_geo_t *g, unsigned idx)
{
    const uint8_t *e = lk->img + ch_entry_off(g, idx);
    unsigned home = e[6];
    for (unsigned d = 0; d < g->nbhd; d++) {
        unsigned i = (home + d) % g->span;
        uint32_t off = ch_entry_off(g, i);
        uint8_t *x = lk->img + off;
        if (i == idx || !lk->have[off / CH_OBJ] || !ch_e_used(x) ||
            memcmp(x + 4, e + 4, CH_OBJ - 4) != 0)
            continue;
        x[1] = 0;
        memset(x + 4, 0, CH_OBJ - 4);
        uint8_t *eh = lk->img + ch_entry_off(g, home);
        uint16_t bm = (uint16_t)((ch_e_bitmap(eh) & ~(1u << d)) | (1u << dist(g, home, idx)));
        ch_e_set_bitmap(eh, bm);
        ch_touch(lk, g, i);
        ch_touch(lk, g, home);
        update_vacancy(lk, g, i);
    }
}

/* Place a new entry for lk's key by hopping (§2.3). Needs entries [home, e] in img, e the
 * first empty one. Returns 1 placed (entries marked dirty), 0 hop failed, or DM_E*. */
int ch_hop_insert(dm_chime_lock_t *lk, const ch_geo_t *g, unsigned flags)
{
    unsigned home = lk->kh.home, e = g->span;
    for (unsigned d = 0; d < g->span; d++) {
        unsigned i = (home + d) % g->span;
        uint32_t off = ch_entry_off(g, i);
        if (!lk->have[off / CH_OBJ]) return DM_EINVAL; /* caller bug: range not read */
        if (!ch_e_used(lk->img + off)) {
            e = i;
            break;
        }
    }
    if (e == g->span) return 0;
    while (dist(g, home, e) >= g->nbhd) {
        int moved = 0;
        for (unsigned back = g->nbhd - 1; back >= 1 && !moved; back--) {
            unsigned k = (e + g->span - back) % g->span;
            uint8_t *ek = lk->img + ch_entry_off(g, k);
            unsigned hk = ek[6];
            if (!ch_e_used(ek) || dist(g, hk, e) >= g->nbhd || dist(g, hk, k) > dist(g, hk, e))
                continue;
            /* Move k's occupant to e; bitmaps stay with their positions. */
            uint8_t *ee = lk->img + ch_entry_off(g, e);
            memcpy(ee + 4, ek + 4, CH_OBJ - 4);
            ee[1] = ek[1];
            ek[1] = 0;
            memset(ek + 4, 0, CH_OBJ - 4);
            uint8_t *eh = lk->img + ch_entry_off(g, hk);
            uint16_t bm = ch_e_bitmap(eh);
            bm = (uint16_t)((bm & ~(1u << dist(g, hk, k))) | (1u << dist(g, hk, e)));
            ch_e_set_bitmap(eh, bm);
            ch_touch(lk, g, e);
            ch_touch(lk, g, k);
            ch_touch(lk, g, hk);
            update_vacancy(lk, g, e);
            update_vacancy(lk, g, k);
            e = k;
            moved = 1;
        }
        if (!moved) return 0;
    }
    uint8_t *ne = lk->img + ch_entry_off(g, e);
    uint8_t ver = ne[0];
    uint16_t own = ch_e_bitmap(ne);
    ch_entry_fill(ne, &lk->kh, lk->key, lk->klen, lk->rec, flags);
    ne[0] = ver;
    ch_e_set_bitmap(ne, own);
    uint8_t *eh = lk->img + ch_entry_off(g, home);
    ch_e_set_bitmap(eh, (uint16_t)(ch_e_bitmap(eh) | (1u << dist(g, home, e))));
    ch_touch(lk, g, e);
    ch_touch(lk, g, home);
    update_vacancy(lk, g, e);
    lk->idx = (int)e;
    return 1;
}

/* Make sure entries [home, first empty] are all in img (hopping may move any of them):
 * the vacancy bitmap from the lock word says how far to read (§4.2.1). Returns 0, 1 when
 * the leaf is full (then read whole), or DM_E*. */
static int read_hop_range(dm_ctx_t *ctx, dm_chime_lock_t *lk)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    unsigned home = lk->kh.home;
    uint32_t vac = ch_lock_vacancy(lk->word);
    for (int round = 0; round < 4; round++) {
        unsigned end = g->span; /* distance of the last entry to read */
        for (unsigned d = 0; d < g->span && end == g->span; d++) {
            unsigned i = (home + d) % g->span;
            uint32_t off = ch_entry_off(g, i);
            if (lk->have[off / CH_OBJ]) {
                if (!ch_e_used(lk->img + off)) end = d;
            } else if (!(vac & (1u << ch_vac_bit(g, i)))) {
                unsigned hi = ch_vac_hi(g, ch_vac_bit(g, i)); /* end of its group */
                end = d + (hi + g->span - 1 - i) % g->span;
            }
        }
        if (end == g->span) break; /* no vacancy anywhere */
        int missing = 0;
        for (unsigned d = 0; d <= end; d++)
            missing |= !lk->have[ch_entry_off(g, (home + d) % g->span) / CH_OBJ];
        if (!missing) return 0; /* [home, end] known and end is empty */
        dm_batch_t b;
        dm_batch_init(&b);
        ch_read_run(g, &b, lk->leaf, lk->img, lk->have, home, end + 1);
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        vac = ch_vacancy_of_known(g, lk->img, lk->have, vac);
    }
    int rc = read_whole(ctx, lk);
    if (rc) return rc;
    for (unsigned i = 0; i < g->span; i++)
        if (!ch_e_used(lk->img + ch_entry_off(g, i))) return 0;
    return 1;
}

int dm_chime_mark_pending(dm_ctx_t *ctx, dm_chime_lock_t *lk)
{
    return lk->grp ? ch_share_mark_pending(ctx, lk) : ch_mark_pending_own(ctx, lk);
}

int ch_mark_pending_own(dm_ctx_t *ctx, dm_chime_lock_t *lk)
{
    dm_chime_t *c = ctx->w->chime;
    const ch_geo_t *g = &c->geo;
    if (ch_hold_expired(lk)) return DM_ERETRY;
    if (lk->idx >= 0) {
        uint8_t *e = lk->img + ch_entry_off(g, (unsigned)lk->idx);
        if (e[1] & CH_F_PENDING) return 0;
        e[1] |= CH_F_PENDING;
        ch_touch(lk, g, (unsigned)lk->idx);
        return ch_write_dirty(ctx, lk, 0, 1);
    }
    if (lk->klen > DM_CHIME_INLINE && !lk->rec) {
        int rc = dm_keyrec_write(ctx, lk->key, lk->klen, &lk->rec);
        if (rc) return rc;
    }
    for (int splits = 0; splits < 16; splits++) {
        int rc = read_hop_range(ctx, lk);
        if (rc < 0) return rc;
        if (rc == 0) {
            rc = ch_hop_insert(lk, g, CH_F_PENDING);
            if (rc < 0) return rc;
            if (rc == 1) {
                if (ch_hold_expired(lk)) return DM_ERETRY;
                ch_hot_touch(c, lk->leaf, (unsigned)lk->idx, lk->kh.fp);
                return ch_write_dirty(ctx, lk, 0, 1);
            }
            /* The hop failed: forget the local moves (the whole read below replaces them). */
            memset(lk->dirty, 0, sizeof(lk->dirty));
        }
        dm_cls_t cls = ctx->cls; /* charged to splits, not to the command */
        ctx->cls = DM_CLS_SPLIT;
        rc = read_whole(ctx, lk);
        if (!rc) rc = ch_split_locked(ctx, lk, NULL, NULL, NULL);
        ctx->cls = cls;
        if (rc) return rc;
    }
    return DM_EFULL;
}

void ch_settle_entry(dm_ctx_t *ctx, dm_chime_lock_t *lk, int present)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    if (lk->idx < 0 || present < 0) return;
    unsigned i = (unsigned)lk->idx;
    uint8_t *e = lk->img + ch_entry_off(g, i);
    if (present) {
        if (e[1] & CH_F_PENDING) {
            e[1] &= (uint8_t)~CH_F_PENDING;
            ch_touch(lk, g, i);
        }
        return;
    }
    unsigned home = e[6];
    dm_gaddr_t rec = e[7] == CH_KLEN_RECORD ? ch_u64(e + 8) : 0;
    e[1] = 0;
    memset(e + 4, 0, CH_OBJ - 4);
    uint8_t *eh = lk->img + ch_entry_off(g, home);
    ch_e_set_bitmap(eh, (uint16_t)(ch_e_bitmap(eh) & ~(1u << dist(g, home, i))));
    ch_touch(lk, g, i);
    ch_touch(lk, g, home);
    update_vacancy(lk, g, i);
    if (rec) dm_alloc_free(ctx->w->alloc, rec, dm_keyrec_bytes(lk->klen));
    ch_hot_forget(ctx->w->chime, lk->leaf, i);
}

int dm_chime_unlock(dm_ctx_t *ctx, dm_chime_lock_t *lk, int present)
{
    if (lk->grp) return ch_share_unlock(ctx, lk, present);
    if (ctx->ride_failed) lk->abandoned = 1; /* moves that rode may be half done: write none */
    if (ch_hold_expired(lk)) {
        ch_unlock_unchanged(ctx, lk); /* may have been taken over: touch nothing */
        dm_chime_lock_free(lk);
        return DM_ERETRY;
    }
    ch_settle_entry(ctx, lk, present);
    int rc = ch_write_dirty(ctx, lk, 1, 0);
    dm_chime_lock_free(lk);
    return rc;
}
