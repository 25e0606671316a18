/* Lock-free point search in CHIME (§4.4 "Search"): a speculative single-entry READ when the
 * hotspot buffer knows where the key was (§4.3), else a neighborhood READ checked at three
 * levels (§4.1), then sibling-based cache and half-split validation (§4.2.3). */
#include <stdlib.h>
#include <string.h>

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "leaf_lock.h"

#define MAX_TRIES 256

/* 1 when entry idx of leaf holds key (pending in *pending), 0 when not, or DM_E*. */
static int speculate(dm_ctx_t *ctx, dm_gaddr_t leaf, unsigned idx, const ch_khash_t *kh,
                     const void *key, size_t klen, int *pending)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    uint8_t e[CH_OBJ];
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, leaf + ch_entry_off(g, idx), e, CH_OBJ);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    /* One entry never straddles a line: it is read whole (level 2 holds trivially). */
    if (!ch_e_used(e) || e[6] != kh->home || ch_e_fp(e) != kh->fp) return 0;
    int need, r = ch_entry_cmp_key(e, key, klen, &need);
    if (need) {
        dm_gaddr_t rec = ch_u64(e + 8);
        uint8_t *k;
        uint32_t l;
        rc = dm_keyrec_read(ctx, &rec, 1, DM_KV_MAX_KEY, NULL, &k, &l);
        if (rc) return rc;
        r = ch_key_cmp(k, l, key, klen);
        free(k);
    }
    if (r != 0) return 0;
    *pending = (e[1] & CH_F_PENDING) != 0;
    return 1;
}

/* A signature of the neighborhood read: the leaf and the version byte (NV:4 | EV:4) of
 * every object read. */
static uint64_t neighborhood_sig(const ch_geo_t *g, dm_gaddr_t leaf, const uint8_t *img,
                                 const uint8_t *have)
{
    uint64_t h = leaf * 0x9e3779b97f4a7c15ull;
    for (unsigned o = 0; o < g->groups * (g->nbhd + 1); o++)
        if (have[o]) h = (h ^ ((uint64_t)o << 8 | img[o * CH_OBJ])) * 0x100000001b3ull;
    return h ? h : 1;
}

static int search(dm_ctx_t *ctx, const void *key, size_t klen, int *pending, uint64_t *sig);

int dm_chime_search(dm_ctx_t *ctx, const void *key, size_t klen, int *pending)
{
    return search(ctx, key, klen, pending, NULL);
}

int dm_chime_watch_sig(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *sig)
{
    int pending;
    *sig = 0;
    int rc = search(ctx, key, klen, &pending, sig);
    return rc < 0 ? rc : 0;
}

static int search(dm_ctx_t *ctx, const void *key, size_t klen, int *pending, uint64_t *sig)
{
    dm_chime_t *c = ctx->w->chime;
    const ch_geo_t *g = &c->geo;
    ch_khash_t kh;
    ch_hash_key(g, key, klen, &kh);
    uint8_t *img = malloc(g->bytes);
    uint8_t have[CH_MAX_OBJS];
    if (!img) return DM_ENOMEM;
    *pending = 0;
    int rc = DM_ERETRY, fresh = 0;
    for (int tries = 0; tries < MAX_TRIES; tries++) {
        ch_path_t p;
        rc = ch_find_leaf(ctx, key, klen, fresh, &p);
        if (rc) break;
        dm_gaddr_t leaf = p.leaf;
        int spec = sig ? -1 : ch_hot_find(c, leaf, kh.home, kh.fp);
        if (spec >= 0) {
            ch_count(&ch_stats.hot_lookups, 1);
            rc = speculate(ctx, leaf, (unsigned)spec, &kh, key, klen, pending);
            if (rc) {
                if (rc == 1) {
                    ch_count(&ch_stats.hot_hits, 1);
                    ch_hot_touch(c, leaf, (unsigned)spec, kh.fp);
                }
                break;
            }
        }
        for (int moves = 0; moves < MAX_TRIES; moves++) {
            dm_batch_t b;
            dm_batch_init(&b);
            memset(have, 0, sizeof(have));
            ch_read_run(g, &b, leaf, img, have, kh.home, g->nbhd);
            rc = dm_batch_exec(ctx, &b);
            if (rc) goto out;
            rc = ch_leaf_check(g, img, have, (int)kh.home);
            if (rc == DM_ERETRY) {
                dm_ctx_yield(ctx); /* a node or hop-range write was in flight */
                continue;
            }
            if (rc) goto out;
            const uint8_t *rep = ch_any_replica(g, img, have);
            if (sig) *sig = neighborhood_sig(g, leaf, img, have);
            int idx = ch_find_entry(ctx, g, img, have, &kh, key, klen);
            if (idx < -1 || !rep) {
                rc = idx < -1 ? idx : DM_ECORRUPT;
                goto out;
            }
            if (idx >= 0) {
                *pending = (img[ch_entry_off(g, (unsigned)idx) + 1] & CH_F_PENDING) != 0;
                ch_hot_touch(c, leaf, (unsigned)idx, kh.fp);
                rc = 1;
                goto out;
            }
            dm_gaddr_t sib = ch_u64(rep + 8), fence = ch_u64(rep + 16);
            if (sib == p.expect_next) {
                rc = 0;
                goto out;
            }
            if (p.from_cache && !fresh) {
                ch_cache_drop(c, p.parent);
                if (!p.parent) c->root = 0;
                fresh = 1;
                rc = DM_ERETRY;
                break;
            }
            uint8_t *fk;
            uint32_t fl;
            if (!fence) {
                rc = 0;
                goto out;
            }
            rc = ch_fence_get(ctx, fence, &fk, &fl);
            if (rc) goto out;
            if (ch_key_cmp(key, klen, fk, fl) < 0) {
                rc = 0;
                goto out;
            }
            ch_repair_half_split(ctx, leaf, sib, fk, fl); /* best effort: the move works */
            leaf = sib;                                   /* half-split: the key moved right */
        }
        if (rc != DM_ERETRY) break;
    }
out:
    free(img);
    return rc;
}
