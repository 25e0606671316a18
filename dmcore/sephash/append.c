/* SepHash appends (SepHash §4.3 "RTT-reduced concurrency control"): insert, update and
 * delete are all one CAS of the first empty CurSegment entry, taken in order.
 *
 * Newest wins. Entries of a round are filled strictly in order: a writer CASes entry i
 * only after reading entries [0, i) full in the same round (its window, and before it the
 * sliding-window offset it remembered for that round), and the CAS expects entry i's exact
 * empty word, which the entry never holds again within an operation's life (the word's
 * block pointer would have to be freed and reused: DM_GRACE_US). So the last entry of a key
 * in a CurSegment is its newest version, and anything in the CurSegment is newer than the
 * MainSegment. Dead versions stay where they are until the segment's next merge, which
 * keeps only the newest entry of each key, drops tombstones and frees the dead versions'
 * blocks (merge.c).
 *
 * Conditional append (DM_SH_IF). The writer reads, in one batch, the meta word, every
 * CurSegment entry, the meta again and the key's MainSegment run, finds the key's newest
 * entry (0: none), compares it with expect, and CASes the first empty entry i expecting
 * the empty word it read there. If the CAS succeeds, entry i still held that word, so: no
 * merge happened since the read (a merge needs every entry full, and a later round
 * would have replaced entry i's word first), the MainSegment is the one read (only merges
 * replace it), entries [0, i) are the ones read (full entries do not change within a
 * round), and no entry after i was written (in order). The key's newest entry at the CAS
 * is therefore the one compared, and the append lands right behind it. If the CAS fails,
 * the read is redone: it fails with DM_ECONFLICT only once the newest entry really
 * changed. One change is not a write: a merge drops a tombstone, so a key read as deleted
 * (expect = the tombstone's token) reads as never written (0) after its segment merged,
 * and the conditional append fails although nothing was written (the caller reads again). */
#include "dmkv/sephash.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/kvblock.h"
#include "sephash_internal.h"

#define SH_MAX_ATTEMPTS 100000

/* Where the next unconditional append goes: reads the window at the offset remembered
 * for the segment's round, with the meta word before and after it (1 RTT). Returns 1 with
 * *m (the round), *i and *e (the first empty entry and its word), 0 to start again (stale
 * directory, a merge ran or is running, the window was full), or DM_E*. */
static int find_empty(dm_ctx_t *ctx, dm_sephash_t *h, const sh_loc_t *loc, uint64_t *m, unsigned *i,
                      uint64_t *e)
{
    sh_seg_cache_t *c = sh_cache(h, loc);
    if (!c) return DM_ENOMEM;
    /* Other coroutines of the worker update c while this one waits: keep what the window
     * was based on. */
    uint64_t round = c->round;
    unsigned off = round ? c->off : 0;
    if (off > SH_CUR_N - SH_WINDOW) off = SH_CUR_N - SH_WINDOW;
    uint64_t m1 = 0, m2 = 0, win[SH_WINDOW], posted_us = dm_now_us();
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, loc->seg, &m1, 8);
    dm_batch_read(&b, loc->seg + SH_CUR_ENTRY_OFF + 8ull * off, win, sizeof(win));
    dm_batch_read(&b, loc->seg, &m2, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (sh_meta_check(loc, m1)) return (rc = sh_refresh(ctx, h)) ? rc : 0;
    if (sh_round(m1) != sh_round(m2)) return 0;
    if (m1 & SH_META_LOCK) { /* a merge runs; or its holder died: take over once expired */
        rc = sh_merge(ctx, h, loc, m1);
        if (rc < 0) return rc;
        if (rc == 0) sh_pause(ctx);
        return 0;
    }
    if (sh_round(m1) != round) { /* merged since we were here: start at entry 0 */
        if (c->round == round) {
            c->round = sh_round(m1);
            c->fpt_ok = 0;
            c->off = 0;
        }
        if (off) return 0;
    }
    sh_cache_seen(c, sh_round(m1), posted_us);
    unsigned s = sh_meta_sign(m1);
    for (unsigned j = 0; j < SH_WINDOW; j++)
        if (sh_entry_sign(win[j]) == s) {
            *m = m1, *i = off + j, *e = win[j];
            return 1;
        }
    if (c->round == sh_round(m1) && c->off < off + SH_WINDOW) c->off = off + SH_WINDOW;
    if (off + SH_WINDOW >= SH_CUR_N) { /* full: merge it (or let whoever locked it first) */
        rc = sh_merge(ctx, h, loc, m1);
        if (rc < 0) return rc;
        if (rc == 0) sh_pause(ctx); /* another writer merges it */
    }
    return 0;
}

/* Where a conditional append's commit CAS goes: its lookup's first empty entry, or past
 * it over the entries this worker's own CASes have since found full with other keys'
 * fingerprints (sh_seg_cache_t.kf_*). Such an entry stays full for the rest of the round,
 * and its key is not ours, so the lookup's newest entry is still the key's newest when the
 * CAS lands at the entry after them: the in-order argument of the header holds as if the
 * lookup had read them. Chosen at posting time (dm_batch_commit_place), after this
 * connection's earlier commits went out, so pipelined appends to one segment take
 * consecutive entries instead of all losing the same one. */
typedef struct sh_place {
    dm_ctx_t *ctx;
    dm_sephash_t *h;
    const sh_loc_t *loc;
    const sh_look_t *lk;
    uint64_t look_us;  /* when lk's reads were posted (monotonic µs) */
    unsigned i;        /* the entry placed (lk->first_empty until placed) */
    uint64_t e;        /* its empty word, as lk read it */
    uint64_t at_us;    /* when placed: the CAS's posting */
    int busy;          /* entry i marked busy in the segment's cache */
    int read_ok;       /* cur_now holds the CurSegment as read right after the CAS */
    uint64_t *cur_now; /* SH_CUR_N words */
} sh_place_t;

/* Whether c knows entry t full at now in round (see SH_KNOWN_WINDOW_US). */
static int known_full(const sh_seg_cache_t *c, uint64_t round, unsigned t, uint64_t now)
{
    return c->kf_round == round && c->kf_us[t] && now - c->kf_us[t] < SH_KNOWN_WINDOW_US;
}

static int busy(const sh_seg_cache_t *c, unsigned t)
{
    return c->kf_busy[t / 64] >> (t % 64) & 1;
}

#define SH_PLACE_WAITS 8 /* outcomes an append waits for before it places regardless */

static void place_commit(dm_verb_t *v, void *arg)
{
    sh_place_t *p = arg;
    const sh_look_t *lk = p->lk;
    unsigned t = lk->first_empty;
    sh_seg_cache_t *c = sh_cache(p->h, p->loc);
    if (p->busy && c) { /* placed again (a post refused before it left): not our own wait */
        c->kf_busy[p->i / 64] &= ~(1ull << (p->i % 64));
        p->busy = 0;
    }
    /* Not for a lookup older than an operation (a lock's hold can keep it longer). */
    int trust = c && dm_now_us() - p->look_us < DM_OP_TIMEOUT_US;
    for (int waits = 0; trust;) {
        /* Past entries known full with other keys; not past one known full with our
         * fingerprint (CASed and lost: looked up again). An entry another append of this
         * worker is posted to: its outcome first (it is in flight, so it comes). */
        uint64_t now = dm_now_us();
        t = lk->first_empty;
        while (t + 1 < SH_CUR_N && known_full(c, lk->round, t, now) && c->kf_fp[t] != p->loc->fp)
            t++;
        if (!busy(c, t) || waits++ == SH_PLACE_WAITS) break;
        sh_place_waiter_t me = {.next = p->h->place_waiters};
        p->h->place_waiters = &me;
        dm_worker_park(p->ctx->w, &me.wk, "another append's outcome (sephash)");
        c = sh_cache(p->h, p->loc); /* reset meanwhile if the slot moved on */
        trust = c && dm_now_us() - p->look_us < DM_OP_TIMEOUT_US;
    }
    p->at_us = dm_now_us();
    p->i = t;
    p->e = lk->cur[t];
    if (c && !busy(c, t)) {
        c->kf_busy[t / 64] |= 1ull << (t % 64);
        p->busy = 1;
    }
    v->offset = dm_gaddr_off(p->loc->seg + SH_CUR_ENTRY_OFF + 8ull * t);
    v->compare = p->e;
}

/* The CAS placed by p completed (or failed): entry p->i is no longer busy; the appends
 * waiting for an outcome look again. */
static void place_done(sh_place_t *p)
{
    if (!p->busy) return;
    p->busy = 0;
    sh_seg_cache_t *c = sh_cache(p->h, p->loc);
    if (c) c->kf_busy[p->i / 64] &= ~(1ull << (p->i % 64));
    sh_place_waiter_t *pw = p->h->place_waiters;
    p->h->place_waiters = NULL;
    while (pw) {
        sh_place_waiter_t *next = pw->next;
        dm_worker_wake(p->ctx->w, &pw->wk);
        pw = next;
    }
}

/* Record what a CAS placed at p->i found: full in the round (won: our word w; lost: the
 * winner's, unless the round moved on), as of its posting. */
static void note_outcome(const sh_place_t *p, uint64_t w, const dm_verb_t *v, unsigned s)
{
    sh_seg_cache_t *c = sh_cache(p->h, p->loc);
    if (!c) return;
    if (c->kf_round != p->lk->round) {
        c->kf_round = p->lk->round;
        memset(c->kf_us, 0, sizeof(c->kf_us));
    }
    /* The CurSegment read behind the CAS: an entry of the other sign was filled in the
     * lookup's round (every entry had its sign when the round began) and stays full to
     * its end. Read in a later round, it may not have been: but then a CAS placed from it
     * runs later still, outside the lookup's round, and fails on its old empty word. */
    for (unsigned t = 0; p->read_ok && t < SH_CUR_N; t++)
        if (sh_entry_sign(p->cur_now[t]) != s) {
            c->kf_us[t] = p->at_us;
            c->kf_fp[t] = sh_entry_fp(p->cur_now[t]);
        }
    /* Entry i from the CAS itself: the read behind it has no fence (rdma may run it
     * before the CAS's effect shows). */
    uint64_t full = v->result == p->e ? w : v->result;
    if (sh_entry_sign(full) == s) return;
    c->kf_us[p->i] = p->at_us;
    c->kf_fp[p->i] = sh_entry_fp(full);
}

int dm_sephash_append(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen,
                      dm_gaddr_t block, uint64_t block_len, unsigned flags, uint64_t expect,
                      uint64_t *version)
{
    return dm_sephash_append_commit(ctx, h, key, klen, block, block_len, flags, expect, NULL,
                                    version);
}

int dm_sephash_append_commit(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen,
                             dm_gaddr_t block, uint64_t block_len, unsigned flags, uint64_t expect,
                             dm_sephash_commit_t *cm, uint64_t *version)
{
    unsigned len = flags & DM_SH_TOMBSTONE ? 0 : sh_len_units(block_len);
    /* expect was read by this operation: younger than any freed block's quarantine. */
    if ((flags & DM_SH_IF) && dm_ctx_check(ctx)) return DM_ERETRY;
    sh_look_t *o = NULL;          /* a lookup of our own, from the first that needs one */
    const sh_look_t *keep = NULL; /* a lookup still good after a lost CAS (placed past it) */
    uint64_t keep_us = 0;
    unsigned kept = 0;
    int rc = DM_ERETRY, attempt;
    for (attempt = 0; attempt < SH_MAX_ATTEMPTS; attempt++) {
        if (attempt) h->st.retries++;
        uint64_t t0 = dm_now_us(), m = 0, e = 0; /* set by find_empty when it returns 1 */
        unsigned i = 0;
        sh_loc_t loc;
        const sh_look_t *lk = NULL;
        if (flags & DM_SH_IF) {
            lk = keep ? keep : cm && !attempt ? cm->look : NULL;
            if (keep) {
                t0 = keep_us;
                keep = NULL;
            } else if (lk) { /* the caller's, made by this operation */
                t0 = cm->look_us;
            } else {
                if (!o && !(o = malloc(sizeof(*o)))) {
                    rc = DM_ENOMEM;
                    break;
                }
                if ((rc = sh_lookup(ctx, h, key, klen, 1, o))) break;
                free(o->block);
                o->block = NULL;
                lk = o;
            }
            if (sh_version(lk->newest) != expect) {
                rc = DM_ECONFLICT;
                break;
            }
            loc = lk->loc, m = lk->round, i = lk->first_empty;
            if (i == SH_CUR_N) {
                if ((rc = sh_merge(ctx, h, &loc, m)) < 0) break;
                if (rc == 0) sh_pause(ctx); /* another writer merges it */
                continue;
            }
            e = lk->cur[i];
        } else {
            sh_locate(h, key, klen, &loc);
            rc = find_empty(ctx, h, &loc, &m, &i, &e);
            if (rc < 0) break;
            if (rc == 0) continue;
        }
        /* The CAS's expected word must be younger than any block's quarantine. */
        if (dm_now_us() - t0 > DM_OP_TIMEOUT_US) continue;
        unsigned s = sh_meta_sign(m);
        uint64_t w = sh_entry(!s, len, sh_dep(loc.lo, sh_meta_ld(m)), block, loc.fp);
        static const uint8_t one = 1;
        const unsigned node = dm_gaddr_node(loc.seg);
        dm_batch_t b;
        if (cm && cm->img && !cm->written && dm_gaddr_node(block) != node) {
            /* Another node's block: written and acknowledged before the CAS is sent. */
            dm_batch_init(&b);
            dm_batch_write(&b, block, cm->img, (uint32_t)block_len);
            if ((rc = dm_batch_exec(ctx, &b))) break;
            cm->written = 1;
        }
        dm_batch_init(&b);
        /* The block on the same node, then the filter byte, before the CAS in one message
         * (verbs to one node run in order): no reader sees the entry without them. */
        /* Sent only once its status says so: a batch refused before it was posted (its
         * turn gave way, its bound passed) wrote nothing. */
        dm_verb_t *wv = NULL;
        if (cm && cm->img && !cm->written) {
            wv = dm_batch_write(&b, block, cm->img, (uint32_t)block_len);
            if (wv) wv->status = DM_EIO;
        }
        dm_batch_write(&b, loc.seg + SH_CUR_FILTER_OFF + 256ull * s + loc.fp, &one, 1);
        dm_verb_t *v = dm_batch_cas(&b, loc.seg + SH_CUR_ENTRY_OFF + 8ull * i, e, w);
        uint64_t cur_now[SH_CUR_N]; /* filled by the read below: not zeroed per attempt */
        sh_place_t pl = {.ctx = ctx,
                         .h = h,
                         .loc = &loc,
                         .lk = lk,
                         .look_us = t0,
                         .i = i,
                         .e = e,
                         .cur_now = cur_now};
        /* Never chained: appends to one segment all CAS its first empty entry, so a
         * pipeline's appends lose to each other often, and a lost chained commit makes the
         * memory node skip every later one of the connection (posted again, and lost
         * again: 33 round trips per insert in a pipelined load; 4.9 unchained, 2.9 placed
         * too). Unchained, a commit goes out once the connection's earlier ones
         * completed, and its place is chosen knowing their outcomes. */
        if (cm && cm->by_us) {
            dm_batch_commit_guarded(&b, NULL, v, cm->by_us);
            if (lk) dm_batch_commit_place(&b, place_commit, &pl);
        }
        /* The counter with the CAS when its header is on this node (taken back below if
         * the CAS lost): one round trip less per insert and delete. */
        dm_verb_t *fv = cm && cm->count && dm_gaddr_node(h->root) == node
                            ? sh_live_count_with(&b, h, cm->count)
                            : NULL;
        /* Behind the CAS, the CurSegment as it is then: what the next append (ours, if
         * this CAS lost) places past. 1 KB more per append, no round trip. */
        dm_verb_t *rv =
            b.place ? dm_batch_read(&b, loc.seg + SH_CUR_ENTRY_OFF, cur_now, sizeof(cur_now))
                    : NULL;
        /* A ride (the range role's pending entry) lands before the entry CAS. */
        rc = cm ? dm_ctx_ride_before(ctx, &b) : 0;
        if (!rc) rc = dm_batch_exec(ctx, &b);
        pl.read_ok = rv && rv->status == 0;
        if (pl.at_us) i = pl.i, e = pl.e; /* placed at posting */
        if (!rc && pl.at_us) note_outcome(&pl, w, v, s);
        place_done(&pl);
        if (wv && wv->status == 0) cm->written = 1;
        if (fv && fv->status == 0 && (rc || v->result != e))
            sh_live_count_post(ctx, h, -cm->count); /* on rc, as if the CAS lost */
        if (rc) break;
        sh_seg_cache_t *c = sh_cache(h, &loc);
        int same = c && c->round == sh_round(m);
        if (v->result == e) {
            if (same && c->off < i + 1) c->off = i + 1;
            if (version) *version = sh_version(w);
            rc = 0;
            /* The header on another node: posted after the CAS won, not waited for (a
             * commit batch is one node's). */
            if (cm && cm->count && !fv && dm_gaddr_node(h->root) != node)
                sh_live_count_post(ctx, h, cm->count);
            break;
        }
        if (same && sh_entry_sign(v->result) != s && c->off < i + 1)
            c->off = i + 1; /* taken in this round */
        /* Taken by another key in the lookup's round: the lookup still holds, placed past
         * it (a few times; then, or for our fingerprint, it is read again). */
        if (pl.at_us && sh_entry_sign(v->result) != s && sh_entry_fp(v->result) != loc.fp &&
            i + 1 < SH_CUR_N && ++kept <= 8) {
            keep = lk;
            keep_us = t0;
        }
    }
    if (attempt == SH_MAX_ATTEMPTS) rc = DM_ERETRY;
    free(o);
    return rc;
}

int dm_sephash_put(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, const void *val,
                   size_t vlen, unsigned flags, uint64_t expect, uint64_t *version)
{
    if (flags & DM_SH_TOMBSTONE) vlen = 0;
    uint64_t bytes = dm_kvblock_size(klen, vlen, 0);
    uint8_t *buf = malloc(bytes);
    if (!buf) return DM_ENOMEM;
    dm_kvblock_build(buf, key, klen, val, vlen, 0, 0);
    dm_gaddr_t addr;
    int rc = dm_alloc_kv_block(ctx, dm_sephash_block_bytes(bytes), &addr);
    if (!rc) {
        rc = dm_write_span(ctx, addr, buf, bytes);
        if (!rc) rc = dm_sephash_append(ctx, h, key, klen, addr, bytes, flags, expect, version);
        /* Never in an entry: reusable at once. (After DM_EIO the CAS may have landed: the
         * block is then kept, possibly leaked.) */
        if (rc == DM_ECONFLICT || rc == DM_EFULL || rc == DM_ENOMEM || rc == DM_ERETRY)
            dm_alloc_unused(ctx->w->alloc, addr, dm_sephash_block_bytes(bytes));
    }
    free(buf);
    return rc;
}
