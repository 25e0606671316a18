/* SCAN over CHIME leaves (docs/DESIGN.md "SCAN cursor"): whole leaves read lock-free and checked
 * (all NVs equal, every hop bitmap matches the entries' homes), keys sorted per leaf, the
 * sibling chain followed. Leaves never merge and splits only move keys right, so the address
 * of the next leaf is a complete cursor. A cursor stays below 2^53, so clients that keep it
 * as a double (JavaScript's node-redis) do not lose bits: the leaf's offset in 64-byte
 * units (34 bits: memory nodes up to 1 TiB), its node number (as many bits as the pool's
 * node count needs), and a keyed check of the rest (19 bits for one node, 11 for 256)
 * that rejects forged ones. A forged cursor that passes the check (one guess in 2^19 for
 * one node) names an address the gateway reads, but nothing read there is used unless every
 * replica carries that leaf's tag, a keyed hash of its address that only the pool's
 * gateways can compute (ch_leaf_tag): bytes a client wrote, or a real leaf's image copied
 * into a value, are refused as "invalid cursor" like a failed check. */
#include <stdlib.h>
#include <string.h>

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "leaf_lock.h"

#define MAX_TORN 256
#define REPAIR_AFTER 64 /* torn reads in one page before the leaf is locked and repaired */
/* A leaf that stays torn: a writer killed in the middle of a multi-verb write (a hop
 * chain cut short) can leave entries and hop bitmaps that disagree, with its lock still
 * held, and nothing takes that lease over unless someone locks the leaf: every SCAN
 * would give up on it. Lock it (waiting for a live holder; an expired lease is taken
 * over) and settle it, which rewrites an inconsistent image (ch_settle_locked). Only for
 * leaves the walk reached through the tree or a sibling pointer, never for the address a
 * cursor names. Returns 0 or DM_E*. */
static int repair_leaf(dm_ctx_t *ctx, dm_gaddr_t leaf)
{
    dm_chime_lock_t *lk = ch_lock_new(&ctx->w->chime->geo, "", 0, 1);
    if (!lk) return DM_ENOMEM;
    int took = 0;
    int rc = ch_lock_leaf(ctx, lk, leaf, &took);
    if (rc) {
        dm_chime_lock_free(lk);
        return rc;
    }
    rc = ch_settle_locked(ctx, lk, 0);
    if (ch_settle_lapsed(rc, lk)) rc = 0;  /* nothing written: the walk reads it again */
    int r2 = dm_chime_unlock(ctx, lk, -1); /* no key of its own: idx -1 */
    return rc < 0 ? rc : r2 == DM_ERETRY ? 0 : r2;
}

typedef struct lkey {
    uint8_t *key;
    uint32_t len;
    int pending;
} lkey_t;

static int lkey_cmp(const void *a, const void *b)
{
    const lkey_t *x = a, *y = b;
    return ch_key_cmp(x->key, x->len, y->key, y->len);
}

/* Append the keys of a whole-leaf image (checked untorn), sorted. DM_ERETRY when torn. */
static int take_leaf(dm_ctx_t *ctx, const uint8_t *img, dm_chime_key_t **keys, size_t *n,
                     size_t *cap, dm_gaddr_t *sib, dm_gaddr_t *fence)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    if (img[1] != 1) return DM_EINVAL; /* not a leaf: only a forged cursor gets here */
    if (!ch_leaf_consistent(g, img)) return DM_ERETRY;
    *sib = ch_u64(img + 8);
    *fence = ch_u64(img + 16);
    unsigned idx[CH_MAX_SPAN];
    uint8_t *k[CH_MAX_SPAN];
    uint32_t l[CH_MAX_SPAN];
    int m = ch_leaf_keys(ctx, g, img, idx, k, l);
    if (m < 0) return m;
    lkey_t lk[CH_MAX_SPAN];
    for (int i = 0; i < m; i++)
        lk[i] = (lkey_t){k[i], l[i], (img[ch_entry_off(g, idx[i]) + 1] & CH_F_PENDING) != 0};
    qsort(lk, (size_t)m, sizeof(*lk), lkey_cmp);
    /* A hop chain cut short leaves an entry twice (leaf.c write_dirty): return it once. */
    int u = 0;
    for (int i = 0; i < m; i++) {
        if (u && lkey_cmp(&lk[u - 1], &lk[i]) == 0) {
            lk[u - 1].pending &= lk[i].pending;
            free(lk[i].key);
            continue;
        }
        lk[u++] = lk[i];
    }
    m = u;
    if (*n + (size_t)m > *cap) {
        size_t nc = (*cap ? *cap * 2 : 64) + (size_t)m;
        dm_chime_key_t *nk = realloc(*keys, nc * sizeof(*nk));
        if (!nk) {
            for (int i = 0; i < m; i++)
                free(lk[i].key);
            return DM_ENOMEM;
        }
        *keys = nk;
        *cap = nc;
    }
    for (int i = 0; i < m; i++)
        (*keys)[(*n)++] = (dm_chime_key_t){lk[i].key, lk[i].len, lk[i].pending};
    return 0;
}

/* Read leaves a[0..k) whole, in one batch (1 RTT). */
static int read_leaves(dm_ctx_t *ctx, const dm_gaddr_t *a, unsigned k, uint8_t **imgs)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    dm_batch_t b;
    dm_batch_init(&b);
    for (unsigned i = 0; i < k; i++)
        dm_batch_read(&b, a[i], imgs[i], g->lock_off);
    ch_count(&ch_stats.scan_rtts, 1);
    return dm_batch_exec(ctx, &b);
}

/* Is key past every key with prefix (greater than all of them)? A key greater than prefix
 * that does not start with it differs from it at some byte, upwards. */
static int past_prefix(const uint8_t *key, uint32_t len, const void *prefix, size_t plen)
{
    if (len >= plen && memcmp(key, prefix, plen) == 0) return 0;
    return ch_key_cmp(key, len, prefix, plen) > 0;
}

/* After a leaf whose keys (sorted) are keys[from, to) and whose high fence is fence: 0 when
 * no key with prefix can follow in a later leaf, 1 when one may (or it cannot be told
 * without a round trip: the walk then reads the next leaf, which tells). Later leaves hold
 * keys at or above the fence, which is above every key of this leaf: a key of it past the
 * prefix, or a cached fence past it, ends the prefix's run. Reading the fence key instead
 * cost a round trip per leaf of a MATCH page (docs/throughput.md "SCAN with MATCH"). */
static int prefix_may_follow(dm_chime_t *c, const dm_chime_key_t *keys, size_t from, size_t to,
                             dm_gaddr_t fence, const void *prefix, size_t plen)
{
    if (to > from && past_prefix(keys[to - 1].data, keys[to - 1].len, prefix, plen)) return 0;
    const uint8_t *fk;
    uint32_t fl;
    if (ch_fence_cached(c, fence, &fk, &fl) && past_prefix(fk, fl, prefix, plen)) return 0;
    return 1;
}

/* Does a leaf whose high fence is f end before prefix (every key it can hold < prefix)? */
static int ends_before(dm_ctx_t *ctx, dm_gaddr_t fence, const void *prefix, size_t plen, int *rc)
{
    uint8_t *fk;
    uint32_t fl;
    *rc = ch_fence_get(ctx, fence, &fk, &fl);
    return !*rc && ch_key_cmp(fk, fl, prefix, plen) <= 0;
}

int dm_chime_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix, size_t plen,
                  dm_chime_key_t **keys, size_t *n, size_t *cap, uint64_t *next)
{
    dm_chime_t *c = ctx->w->chime;
    dm_gaddr_t leaf;
    int rc;
    *next = 0;
    ch_path_t p = {0};
    int seeking = cursor == 0 && plen; /* the first leaf must not end before the prefix */
    if (cursor == 0) {
        /* A stale cache (even a cached root that was a leaf) is caught below: the first
         * leaf then ends before the prefix. */
        rc = ch_find_leaf(ctx, prefix ? prefix : "", prefix ? plen : 0, 0, &p);
        if (rc) return rc;
        leaf = p.leaf;
    } else if ((rc = ch_cursor_leaf(c, ctx->w->n_nodes, cursor, &leaf)) != 0) {
        return rc;
    }
    enum { MAX_GUESS = 8 };
    uint8_t *imgs[MAX_GUESS + 1];
    uint8_t *buf = malloc((MAX_GUESS + 1) * (size_t)c->geo.bytes); /* one per call */
    if (!buf) return DM_ENOMEM;
    for (unsigned i = 0; i <= MAX_GUESS; i++)
        imgs[i] = buf + i * (size_t)c->geo.bytes;
    size_t got = 0;
    /* Where the walk is in key order, to guess the next leaves from the cached parent. */
    const uint8_t *pos = prefix;
    size_t poslen = prefix ? plen : 0;
    int known_pos = cursor == 0, torn = 0, refreshed = 0;
    const dm_gaddr_t first = leaf; /* a cursor's leaf is never repaired: it may be forged */
    while (!rc && leaf && got < count) {
        dm_gaddr_t a[MAX_GUESS + 1] = {leaf};
        unsigned k = 1;
        /* Leaves hold ~0.6 x span keys: the ones after leaf this page still needs, guessed
         * from the cached parents and read in the same batch (a page in one RTT). Before
         * the walk has a key (a cursor), the parent is found by the leaf's address. */
        size_t per_leaf = c->geo.span * 3 / 5; /* got < count here */
        size_t more = (count - got + per_leaf - 1) / per_leaf - 1;
        unsigned max = more < MAX_GUESS ? (unsigned)more : MAX_GUESS;
        const uint8_t *at = known_pos && got ? pos : NULL;
        if (max) k += ch_cached_next_leaves(c, at, poslen, leaf, a + 1, max);
        if (max && k == 1 && at && !refreshed) {
            /* The cached parent does not list this leaf (split since, or evicted): read it
             * again (1 RTT) rather than walk the chain a leaf per RTT. */
            ch_path_t fp;
            refreshed = 1;
            if (ch_find_leaf(ctx, at, poslen, 1, &fp) == 0)
                k += ch_cached_next_leaves(c, at, poslen, leaf, a + 1, max);
        }
        rc = read_leaves(ctx, a, k, imgs);
        for (unsigned j = 0; !rc && j < k; j++) {
            if (j > 0 && a[j] != leaf) break; /* the chain is not what the cache guessed */
            size_t before = *n;
            dm_gaddr_t sib = 0, fence = 0;
            if (cursor && a[j] == first && c->tagged && !ch_leaf_tag_ok(c, imgs[j], first)) {
                rc = DM_EINVAL; /* no leaf of this pool: a forged cursor (the MAC guessed) */
                break;
            }
            rc = take_leaf(ctx, imgs[j], keys, n, cap, &sib, &fence);
            if (rc == DM_ERETRY && ++torn < MAX_TORN) {
                rc = 0; /* torn by a write in flight: read this leaf again */
                if (torn % REPAIR_AFTER == 0 && (cursor == 0 || a[j] != first))
                    rc = repair_leaf(ctx, a[j]); /* torn for good? (see repair_leaf) */
                else
                    dm_ctx_yield(ctx);
                break;
            }
            if (rc) break;
            got += *n - before;
            if (*n > before) {
                pos = (*keys)[*n - 1].data;
                poslen = (*keys)[*n - 1].len;
                known_pos = 1;
            }
            /* A leaf with a key at or above prefix does not end before it: the fence is
             * read (1 RTT) only for a leaf of smaller keys alone. */
            int below = seeking &&
                        (*n == before ||
                         ch_key_cmp((*keys)[*n - 1].data, (*keys)[*n - 1].len, prefix, plen) < 0);
            if (below && fence && p.from_cache && ends_before(ctx, fence, prefix, plen, &rc)) {
                /* A stale cached parent sent the seek too far left (leaves it does not
                 * know split off to the right): drop it and descend again, fresh. */
                pos = prefix; /* the keys it pointed into go now */
                poslen = plen;
                while (*n > before)
                    free((*keys)[--*n].data);
                ch_cache_drop(c, p.parent);
                if (!rc) rc = ch_find_leaf(ctx, prefix, plen, 1, &p);
                leaf = p.leaf;
                seeking = 0;
                break;
            }
            seeking = 0;
            if (plen && fence && !prefix_may_follow(c, *keys, before, *n, fence, prefix, plen))
                sib = 0;
            leaf = sib;
            if (!leaf || got >= count) break;
        }
    }
    if (!rc) *next = ch_cursor_of(c, leaf);
    ch_count(&ch_stats.scan_pages, 1);
    free(buf);
    return rc;
}

int dm_chime_random_cursor(dm_ctx_t *ctx, uint64_t *cursor)
{
    dm_chime_t *c = ctx->w->chime;
    int rc = ch_read_root(ctx);
    if (rc) return rc;
    dm_gaddr_t a = ch_root_addr(c->root);
    for (unsigned lvl = ch_root_level(c->root); lvl >= 1; lvl--) {
        ch_inner_t *n = ch_cache_get(c, a);
        if (!n && (rc = ch_inner_read(ctx, a, &n)) != 0) return rc;
        a = n->child[(unsigned)rand() % n->count];
    }
    *cursor = ch_cursor_of(c, a);
    return 0;
}
