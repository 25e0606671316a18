/* Leaf split under the leaf lock (CHIME §4.2.2, §4.4): the split key is the median of the
 * keys that blocked the hop (the key's neighborhood) plus the new key, moved to the nearby
 * position whose separator is shortest (suffix truncation: Redis keys share long prefixes,
 * docs/NOTES.md §2.9). Keys inserted in ascending or descending order (counters,
 * timestamps, a loader's pipeline of consecutive keys arriving slightly out of order) split
 * at the new key instead, so that leaves filled in key order stay full rather than half
 * full (a B-tree's rightmost split): a new key beyond every key of the leaf does so, and
 * marks the half it lands in with an order hint (replica byte 2); a leaf with the hint does
 * so for a new key among its top (bottom) quarter. A random insert starts such a run only
 * when it is the leaf's largest or smallest key, and the run rarely lasts: random inserts
 * split 2% more often, ordered ones 38% less (docs/throughput.md "Memory per key"). The new right
 * leaf is written first (unreachable until the old one points to it), then the old leaf
 * with a node write (NV+1), then the separator goes up. */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "leaf_lock.h"

typedef struct skey {
    uint8_t *key;
    uint32_t len;
    unsigned idx;
} skey_t;

static int skey_cmp(const void *a, const void *b)
{
    const skey_t *x = a, *y = b;
    return ch_key_cmp(x->key, x->len, y->key, y->len);
}

void ch_rebuild_bitmaps(const ch_geo_t *g, uint8_t *img)
{
    for (unsigned h = 0; h < g->span; h++)
        ch_e_set_bitmap(img + ch_entry_off(g, h), 0);
    for (unsigned i = 0; i < g->span; i++) {
        const uint8_t *e = img + ch_entry_off(g, i);
        if (!ch_e_used(e)) continue;
        unsigned h = e[6];
        uint8_t *eh = img + ch_entry_off(g, h);
        unsigned d = (i + g->span - h) % g->span;
        ch_e_set_bitmap(eh, (uint16_t)(ch_e_bitmap(eh) | (1u << d)));
    }
}

void ch_set_nv(const ch_geo_t *g, uint8_t *img, unsigned nv)
{
    unsigned objs = g->groups * (g->nbhd + 1);
    for (unsigned o = 0; o < objs; o++)
        img[o * CH_OBJ] = (uint8_t)((nv << 4) | (img[o * CH_OBJ] & 15));
}

/* A record read after its entry may have been freed and, past the grace period, reused for
 * another key: it must hash to the entry's home and fingerprint and start with its 16
 * inline bytes. */
static int record_matches(const ch_geo_t *g, const uint8_t *e, const uint8_t *key, uint32_t len)
{
    ch_khash_t kh;
    ch_hash_key(g, key, len, &kh);
    return len > 16 && kh.fp == ch_e_fp(e) && (uint8_t)kh.home == e[6] && !memcmp(e + 16, key, 16);
}

int ch_leaf_keys(dm_ctx_t *ctx, const ch_geo_t *g, const uint8_t *img, unsigned *idx,
                 uint8_t **keys, uint32_t *lens)
{
    unsigned n = 0, nrec = 0;
    dm_gaddr_t recs[CH_MAX_SPAN];
    unsigned recpos[CH_MAX_SPAN];
    for (unsigned i = 0; i < g->span; i++) {
        const uint8_t *e = img + ch_entry_off(g, i);
        if (!ch_e_used(e)) continue;
        idx[n] = i;
        keys[n] = NULL;
        if (e[7] == CH_KLEN_RECORD) {
            recs[nrec] = ch_u64(e + 8);
            recpos[nrec++] = n;
        } else if (e[7] > DM_CHIME_INLINE) {
            /* No leaf holds this: a forged cursor's "leaf" (the length would copy past the
             * entry, out of the image). */
            for (unsigned k = 0; k < n; k++)
                free(keys[k]);
            return DM_EINVAL;
        } else {
            keys[n] = malloc(e[7] ? e[7] : 1);
            if (!keys[n]) goto oom;
            memcpy(keys[n], e + 8, e[7]);
            lens[n] = e[7];
        }
        n++;
    }
    if (nrec) {
        uint8_t *rk[CH_MAX_SPAN];
        uint32_t rl[CH_MAX_SPAN];
        int rc = dm_keyrec_read(ctx, recs, nrec, DM_KV_MAX_KEY, NULL, rk, rl);
        if (rc) {
            for (unsigned k = 0; k < n; k++)
                free(keys[k]);
            return rc;
        }
        int stale = 0;
        for (unsigned k = 0; k < nrec; k++) {
            keys[recpos[k]] = rk[k];
            lens[recpos[k]] = rl[k];
            stale |= !record_matches(g, img + ch_entry_off(g, idx[recpos[k]]), rk[k], rl[k]);
        }
        if (stale) {
            for (unsigned k = 0; k < n; k++)
                free(keys[k]);
            return DM_ERETRY;
        }
    }
    return (int)n;
oom:
    for (unsigned k = 0; k < n; k++)
        free(keys[k]);
    return DM_ENOMEM;
}

/* Shortest separator s with maxleft < s <= minright: minright cut after its first byte
 * that differs from maxleft. */
static uint32_t sep_len(const skey_t *l, const skey_t *r)
{
    uint32_t i = 0;
    while (i < l->len && i < r->len && l->key[i] == r->key[i])
        i++;
    return i + 1 <= r->len ? i + 1 : r->len;
}

/* Split position in sorted keys k[0..n): left = [0, p), right = [p, n). */
static unsigned pick_split(const skey_t *k, unsigned n, const skey_t *median)
{
    unsigned target = 0;
    while (target < n && ch_key_cmp(k[target].key, k[target].len, median->key, median->len) < 0)
        target++;
    if (target < 1) target = 1;
    if (target > n - 1) target = n - 1;
    unsigned best = target, radius = n / 4;
    uint32_t best_len = sep_len(&k[target - 1], &k[target]);
    for (unsigned d = 1; d <= radius; d++) {
        unsigned cand[2] = {target - d, target + d};
        for (int s = 0; s < 2; s++) {
            unsigned p = cand[s];
            if (p < 1 || p > n - 1 || p > target + radius) continue;
            uint32_t l = sep_len(&k[p - 1], &k[p]);
            if (l < best_len) {
                best_len = l;
                best = p;
            }
        }
    }
    return best;
}

/* The median of the blocking keys (the neighborhood's) and the new key. */
static skey_t hop_median(const ch_geo_t *g, const dm_chime_lock_t *lk, skey_t *k, unsigned n)
{
    skey_t c[CH_MAX_SPAN + 1];
    unsigned m = 0;
    for (unsigned j = 0; j < n; j++) {
        unsigned d = (k[j].idx + g->span - lk->kh.home) % g->span;
        if (d < g->nbhd) c[m++] = k[j];
    }
    c[m].key = lk->key;
    c[m].len = (uint32_t)lk->klen;
    m++;
    qsort(c, m, sizeof(*c), skey_cmp);
    return c[m / 2];
}

/* Append the writes of a leaf image (and of a fence record, if recbuf) to b: the image,
 * then its lock word. held: the lock word we hold there (the word is then set by CAS from
 * it: never over a taker's lock), 0 for a leaf nobody can reach yet (a WRITE). */
static void add_leaf_write(dm_batch_t *b, const ch_geo_t *g, dm_gaddr_t a, const uint8_t *img,
                           const uint64_t *word, uint64_t held, dm_gaddr_t rec,
                           const uint8_t *recbuf, uint32_t recbytes)
{
    if (recbuf) dm_batch_write(b, rec, recbuf, recbytes);
    dm_batch_write(b, a, img, g->lock_off);
    if (held)
        dm_batch_cas(b, a + g->lock_off, held, *word);
    else
        dm_batch_write(b, a + g->lock_off, word, 8);
}

/* Write a leaf image and its lock word in one batch (add_leaf_write). */
static int write_leaf(dm_ctx_t *ctx, const ch_geo_t *g, dm_gaddr_t a, const uint8_t *img,
                      const uint64_t *word, uint64_t held, dm_gaddr_t rec, const uint8_t *recbuf,
                      uint32_t recbytes, uint64_t send_by_us)
{
    dm_batch_t b;
    dm_batch_init(&b);
    b.send_by_us = send_by_us; /* the hold's end: never lands after a takeover */
    add_leaf_write(&b, g, a, img, word, held, rec, recbuf, recbytes);
    return dm_batch_exec(ctx, &b);
}

int ch_split_locked(dm_ctx_t *ctx, dm_chime_lock_t *lk, dm_chime_lock_t *rk, uint8_t *sep_out,
                    uint32_t *sl_out)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    unsigned idx[CH_MAX_SPAN];
    uint8_t *keys[CH_MAX_SPAN];
    uint32_t lens[CH_MAX_SPAN];
    dm_fault_point(ctx, DM_FAULT_SPLIT);
    int n = ch_leaf_keys(ctx, g, lk->img, idx, keys, lens);
    if (n < 0) return n;
    int rc = 0;
    uint8_t *right = NULL, *left = NULL, *recbuf = NULL;
    skey_t k[CH_MAX_SPAN];
    for (int i = 0; i < n; i++)
        k[i] = (skey_t){keys[i], lens[i], idx[i]};
    if (n < 2) {
        rc = DM_EFULL; /* cannot happen with span >= 2 * nbhd */
        goto out;
    }
    qsort(k, (size_t)n, sizeof(*k), skey_cmp);
    skey_t nk = {(uint8_t *)lk->key, (uint32_t)lk->klen, 0};
    unsigned r = 0; /* the new key's rank: k[0..r) below it */
    while (r < (unsigned)n && skey_cmp(&k[r], &nk) < 0)
        r++;
    const uint8_t *sep;
    uint32_t sl;
    unsigned order = ch_any_replica(g, lk->img, lk->have)[2], quarter = (unsigned)n / 4;
    unsigned lorder = 0, rorder = 0;   /* the order hints the two halves get */
    unsigned slack = (unsigned)n / 16; /* room left for keys that arrive a little late */
    if (r == (unsigned)n || (order == CH_ORDER_ASC && r > 0 && r >= (unsigned)n - quarter)) {
        /* ascending: k[p..n) and the new key go right */
        unsigned p = r > slack ? r - slack : 1;
        sl = p < r ? sep_len(&k[p - 1], &k[p]) : sep_len(&k[r - 1], &nk);
        sep = p < r ? k[p].key : nk.key;
        rorder = CH_ORDER_ASC;
    } else if (r == 0 || (order == CH_ORDER_DESC && r <= quarter)) {
        /* descending: k[0..p) and the new key stay left */
        unsigned p = r + slack < (unsigned)n ? r + slack : (unsigned)n - 1;
        sl = p > r ? sep_len(&k[p - 1], &k[p]) : sep_len(&nk, &k[r]);
        sep = k[p].key;
        lorder = CH_ORDER_DESC;
    } else {
        skey_t med = hop_median(g, lk, k, (unsigned)n);
        unsigned p = pick_split(k, (unsigned)n, &med);
        sl = sep_len(&k[p - 1], &k[p]);
        sep = k[p].key;
    }
    if (sl > DM_CHIME_SEP_MAX) {
        rc = DM_EFULL; /* keys share a prefix longer than a separator may be */
        goto out;
    }
    uint32_t recbytes;
    recbuf = dm_keyrec_build(sep, sl, &recbytes);
    right = malloc(g->bytes);
    left = malloc(g->bytes); /* lk->img stays as the pool has it until both writes are done */
    dm_gaddr_t ra = 0, rec = 0;
    if (!recbuf || !right || !left) {
        rc = DM_ENOMEM;
        goto out;
    }
    rc = dm_alloc_block(ctx, g->bytes, &ra);
    if (!rc) rc = dm_alloc_block(ctx, recbytes, &rec);
    if (rc) goto out;
    /* Right leaf: the keys >= sep at their own positions, the old sibling and fence. */
    memcpy(right, lk->img, g->bytes);
    memcpy(left, lk->img, g->bytes);
    for (int j = 0; j < n; j++) {
        int go_right = ch_key_cmp(k[j].key, k[j].len, sep, sl) >= 0;
        uint8_t *e = (go_right ? left : right) + ch_entry_off(g, k[j].idx);
        e[1] = 0;
        memset(e + 4, 0, CH_OBJ - 4);
    }
    ch_rebuild_bitmaps(g, right);
    ch_rebuild_bitmaps(g, left);
    unsigned nv = (ch_nv(lk->img[0]) + 1) & 15;
    ch_set_nv(g, right, 0);
    ch_set_nv(g, left, nv);
    for (unsigned grp = 0; grp < g->groups; grp++) {
        uint8_t *rr = right + ch_replica_off(g, grp), *lr = left + ch_replica_off(g, grp);
        rr[1] = lr[1] = 1;
        rr[2] = (uint8_t)rorder;
        lr[2] = (uint8_t)lorder;
        ch_put_u64(lr + 8, ra);
        ch_put_u64(lr + 16, rec);
    }
    ch_stamp_leaf(ctx->w->chime, right, ra); /* a new leaf: its own tag */
    ch_stamp_leaf(ctx->w->chime, left, lk->leaf);
    int key_right = ch_key_cmp(lk->key, lk->klen, sep, sl) >= 0;
    uint64_t held = lk->word & 0xffffffffull;
    /* A shared hold (rk) keeps both halves: its members' entries are in both. */
    uint64_t rword = ((uint64_t)ch_vacancy_of(g, right) << 32) | (key_right || rk ? held : 0);
    uint64_t lword = ((uint64_t)ch_vacancy_of(g, left) << 32) | (key_right && !rk ? 0 : held);
    if (!dm_chime_lock_valid(lk)) {
        rc = DM_ERETRY; /* held too long: a waiter may take the lease over before we write */
        dm_alloc_unused(ctx->w->alloc, ra, g->bytes); /* never linked */
        dm_alloc_unused(ctx->w->alloc, rec, recbytes);
        goto out;
    }
    uint64_t send_by = dm_chime_lock_posted_us(lk) + (uint64_t)CH_HOLD_MAX_MS * 1000;
    if (dm_gaddr_node(ra) == dm_gaddr_node(lk->leaf) && dm_gaddr_node(rec) == dm_gaddr_node(ra)) {
        /* One node runs a message's verbs in order: the right leaf and its fence record
         * land before the old leaf points to them, in one round trip. Failing, the
         * outcome of both is unknown: nothing more is written from this hold, and the new
         * leaf and record stay allocated (the old leaf may point to them). */
        dm_batch_t b;
        dm_batch_init(&b);
        b.send_by_us = send_by; /* the hold's end: never lands after a takeover */
        add_leaf_write(&b, g, ra, right, &rword, 0, rec, recbuf, recbytes);
        add_leaf_write(&b, g, lk->leaf, left, &lword, lk->remote_word, 0, NULL, 0);
        if ((rc = dm_batch_exec(ctx, &b))) lk->abandoned = 1;
    } else if ((rc = write_leaf(ctx, g, ra, right, &rword, 0, rec, recbuf, recbytes, send_by))) {
        /* Over two nodes, two round trips. The right leaf failing leaves the old one as it
         * was (and lk->img with it): the hold goes on. Unreachable, but the write may have
         * run: quarantined, not reused at once. */
        dm_alloc_free(ctx->w->alloc, ra, g->bytes);
        dm_alloc_free(ctx->w->alloc, rec, recbytes);
    } else if ((rc = write_leaf(ctx, g, lk->leaf, left, &lword, lk->remote_word, 0, NULL, 0,
                                send_by))) {
        /* The old leaf's write failing leaves its outcome unknown: nothing more may be
         * written from this hold (a write of the old image would drop the keys that moved). */
        lk->abandoned = 1;
    }
    if (rc) goto out;
    ch_fence_note(ctx->w->chime, rec, sep, sl); /* the left leaf's new high fence */
    ch_count(&ch_stats.leaf_splits, 1);
    dm_gaddr_t left_addr = lk->leaf;
    if (rk) { /* both halves stay held: lk the left one, rk the right one, one lease */
        memcpy(sep_out, sep, sl);
        *sl_out = sl;
        memcpy(rk->img, right, g->bytes);
        rk->leaf = ra;
        rk->word = rk->remote_word = rword;
        rk->locked_us = lk->locked_us;
        rk->async_failures = lk->async_failures;
        rk->took_over = lk->took_over; /* the right half's keys were under the same lease */
        memset(rk->have, 1, g->groups * (g->nbhd + 1));
        rk->idx = -1;
        memset(lk->dirty, 0, sizeof(lk->dirty)); /* the left leaf was written whole */
        key_right = 0;
    }
    memcpy(lk->img, key_right ? right : left, g->bytes); /* the hold goes on in the key's half */
    if (key_right) {
        lk->leaf = ra;
        dm_coro_early_hold(ra); /* an early lock moves with it */
        lk->word = rword;
        lk->remote_word = rword;
    } else {
        lk->word = lword;
        lk->remote_word = lword;
    }
    memset(lk->have, 1, g->groups * (g->nbhd + 1));
    lk->idx = -1;
    /* Still holding the key's leaf: parents are locked only bottom-up, so no deadlock. */
    dm_fault_point(ctx, DM_FAULT_PROPAGATE);
    rc = ch_propagate(ctx, 1, left_addr, sep, sl, ra);
out:
    for (int i = 0; i < n; i++)
        free(keys[i]);
    free(right);
    free(left);
    free(recbuf);
    return rc;
}
