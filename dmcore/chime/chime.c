/* CHIME attach/create, geometry, statistics and the whole-tree settle (FLUSHALL). */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"
#include "leaf_lock.h"

static unsigned create_span = DM_CHIME_SPAN, create_nbhd = DM_CHIME_NBHD;

int dm_chime_set_create_geometry(unsigned span, unsigned nbhd)
{
    if (nbhd < 2 || nbhd > 16 || span % nbhd || span < 2 * nbhd || span > CH_MAX_SPAN)
        return DM_EINVAL;
    create_span = span;
    create_nbhd = nbhd;
    return 0;
}

static uint64_t geo_word(unsigned span, unsigned nbhd)
{
    return span | ((uint64_t)nbhd << 16) | CH_GEO_TAGGED;
}

/* An empty leaf: valid replicas, no sibling, no fence, unlocked, every group vacant, its
 * tag, made the root by a CAS of the root word from `expect` (0: a new pool). *won: the CAS
 * won. */
static int create_root(dm_ctx_t *ctx, const dm_chime_t *c, uint64_t expect, int *won)
{
    const ch_geo_t *g = &c->geo;
    uint8_t *img = calloc(1, g->bytes);
    if (!img) return DM_ENOMEM;
    for (unsigned grp = 0; grp < g->groups; grp++)
        img[ch_replica_off(g, grp) + 1] = 1;
    dm_gaddr_t a = 0;
    int rc = dm_alloc_block(ctx, g->bytes, &a);
    if (!rc) {
        ch_stamp_leaf(c, img, a);
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, a, img, g->bytes);
        rc = dm_batch_exec(ctx, &b);
    }
    if (!rc) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v =
            dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(chime_root)), expect, ch_root_word(0, a));
        rc = dm_batch_exec(ctx, &b);
        if (won) *won = !rc && v->result == expect;
        if (!rc && v->result != expect) dm_alloc_free(ctx->w->alloc, a, g->bytes); /* lost */
    }
    free(img);
    return rc;
}

int dm_chime_attach(dm_ctx_t *ctx, dm_chime_t **out)
{
    dm_chime_t *c = calloc(1, sizeof(*c));
    if (!c) return DM_ENOMEM;
    ctx->w->chime = c;
    dm_superblock_t sb;
    int rc = 0;
    for (int step = 0; step < 3 && !rc; step++) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make(0, 0), &sb, sizeof(sb));
        rc = dm_batch_exec(ctx, &b);
        c->secret = sb.cursor_secret; /* the cursor check's and the leaf tags' key */
        if (rc || sb.chime_root) break;
        if (!sb.chime_geo) {
            /* Geometry first, so every gateway builds leaves of one shape. */
            dm_batch_init(&b);
            dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(chime_geo)), 0,
                         geo_word(create_span, create_nbhd));
            rc = dm_batch_exec(ctx, &b);
            continue;
        }
        ch_geo_init(&c->geo, sb.chime_geo & 0xffff, (sb.chime_geo >> 16) & 0xffff);
        rc = create_root(ctx, c, 0, NULL);
    }
    if (!rc && !sb.chime_root) rc = DM_ECORRUPT;
    if (rc) {
        ctx->w->chime = NULL;
        free(c);
        return rc;
    }
    unsigned span = sb.chime_geo & 0xffff, nbhd = (sb.chime_geo >> 16) & 0xffff;
    if (nbhd < 2 || nbhd > 16 || span % nbhd || span > CH_MAX_SPAN) {
        ctx->w->chime = NULL;
        free(c);
        return DM_ECORRUPT;
    }
    ch_geo_init(&c->geo, span, nbhd);
    c->tagged = (sb.chime_geo & CH_GEO_TAGGED) != 0;
    while ((1u << c->node_bits) < ctx->w->n_nodes)
        c->node_bits++; /* every gateway of a pool lists the same memory nodes */
    c->root = sb.chime_root;
    *out = c;
    return 0;
}

int dm_chime_reset(dm_ctx_t *ctx)
{
    dm_chime_t *c = ctx->w->chime;
    int rc = ch_read_root(ctx); /* c->root: the word to replace */
    if (rc) return rc;
    int won = 0;
    rc = create_root(ctx, c, c->root, &won);
    if (rc) return rc;
    if (!won) return DM_ERETRY; /* the root moved: a gateway is using the pool */
    ch_cache_clear(c);
    c->root = 0; /* read again at the next descent */
    return 0;
}

void dm_chime_set_presence(dm_chime_t *c, dm_chime_presence_fn fn)
{
    c->presence = fn;
}

void dm_chime_detach(dm_chime_t *c)
{
    if (!c) return;
    ch_cache_clear(c);
    for (unsigned i = 0; i < CH_FENCE_SLOTS; i++)
        free(c->fence[i].key);
    free(c);
}

void dm_chime_get_stats(dm_chime_stats_t *o)
{
    ch_counters_t *s = &ch_stats;
#define LOAD(x) __atomic_load_n(&s->x, __ATOMIC_RELAXED)
    o->cache_nodes = LOAD(cache_nodes);
    o->cache_bytes = LOAD(cache_bytes);
    o->hotspot_lookups = LOAD(hot_lookups);
    o->hotspot_hits = LOAD(hot_hits);
    o->leaf_splits = LOAD(leaf_splits);
    o->inner_splits = LOAD(inner_splits);
    o->roots = LOAD(roots);
    o->scan_pages = LOAD(scan_pages);
    o->scan_rtts = LOAD(scan_rtts);
    o->lock_waits = LOAD(lock_waits);
    o->lease_takeovers = LOAD(takeovers);
    o->right_moves = LOAD(right_moves);
    o->sep_repairs = LOAD(sep_repairs);
    o->shared_holds = LOAD(share_holds);
    o->shared_joins = LOAD(share_joins);
    o->shared_joins_direct = LOAD(share_joins_direct);
    o->shared_splits = LOAD(share_splits);
#undef LOAD
}

int64_t dm_chime_settle_all(dm_ctx_t *ctx)
{
    dm_chime_t *c = ctx->w->chime;
    ch_path_t p;
    int rc = ch_find_leaf(ctx, "", 0, 1, &p);
    if (rc) return rc;
    int64_t removed = 0;
    int lapses = 0;
    for (dm_gaddr_t leaf = p.leaf; leaf;) {
        dm_chime_lock_t *lk = ch_lock_new(&c->geo, "", 0, 1);
        if (!lk) return DM_ENOMEM;
        int took;
        rc = ch_lock_leaf(ctx, lk, leaf, &took);
        if (!rc) rc = ch_settle_locked(ctx, lk, 1);
        if (ch_settle_lapsed(rc, lk) && ++lapses < 8) {
            ch_unlock_unchanged(ctx, lk); /* nothing written: this leaf again */
            dm_chime_lock_free(lk);
            continue;
        }
        if (rc >= 0) {
            removed += rc;
            leaf = ch_u64(lk->img + 8); /* replica 0: the sibling */
            rc = dm_chime_unlock(ctx, lk, -1);
        } else {
            dm_chime_lock_free(lk); /* lease expiry frees the lock */
        }
        if (rc < 0) return rc;
    }
    return removed;
}
