/* ROLEX as the range role, the whole-index operations: a new empty index, FLUSHALL's settle
 * of every chain, reset (dmkv-index-rebuild), the offline walk of its objects
 * (dmkv-pool-reclaim) and INFO's statistics. */
#include "rolex_range.h"

#include <stdlib.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"

#define RR_LEAVES_DEFAULT 16384u /* leaves of a new index: 13 MB, some 150k-250k keys */

int rr_build_empty(dm_ctx_t *ctx, dm_gaddr_t *root)
{
    /* DMKV_ROLEX_LEAVES: the leaf region's room (leaves of 816 bytes, 16 keys each); a full
     * region fails inserts with DM_ENOMEM (the region does not grow: docs/DESIGN.md). */
    const char *e = getenv("DMKV_ROLEX_LEAVES");
    uint64_t leaves = e && *e ? strtoull(e, NULL, 10) : RR_LEAVES_DEFAULT;
    if (leaves < 2) leaves = 2;
    if (leaves > RR_CURSOR_LEAVES) leaves = RR_CURSOR_LEAVES;
    dm_rolex_cfg_t cfg = {.eps = 1, .fill = 12, .spare = leaves - 1, .node0 = 1};
    return dm_rolex_build(ctx, NULL, NULL, 0, &cfg, root);
}

int64_t rr_settle_all(dm_ctx_t *ctx)
{
    rr_role_t *rr = rr_of(ctx->w);
    if (!rr) return DM_EINVAL;
    int64_t removed = 0;
    for (uint64_t h = 0; h < rr->r->hdr.primaries; h++) {
        rx_hold_t hd;
        uint64_t af;
        int took;
        dm_gaddr_t head = rx_leaf_addr(rr->r, h);
        int rc = rr_take(ctx, head, &hd, NULL, &took, &af);
        if (rc) return rc;
        int64_t n = rr_settle_chain(ctx, rr, head, 1, &hd, &af);
        rx_unlock(ctx, &hd);
        if (n < 0) return n;
        removed += n;
    }
    return removed;
}

int rr_reset(dm_ctx_t *ctx)
{
    rr_role_t *rr = rr_of(ctx->w);
    if (!rr) return DM_EINVAL;
    /* Offline: a new empty index replaces the recorded one in node 0's rolex_root (CAS from
     * the old root). The old one is left to dmkv-pool-reclaim; a memory node hosting it goes
     * on retraining it until it restarts (mn_retrainer reads rolex_root once). */
    dm_gaddr_t old = rr->r->root, root;
    int rc = rr_build_empty(ctx, &root);
    if (rc) return rc;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *cas = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), old, root);
    rc = dm_batch_exec(ctx, &b);
    if (!rc && cas->result != old) rc = DM_ECONFLICT;
    dm_rolex_t *nr = NULL;
    if (!rc) rc = dm_rolex_open(ctx, root, &nr);
    if (rc) return rc;
    dm_rolex_close(rr->r);
    rr->r = nr;
    rr_note_model(nr);
    return 0;
}

int rr_objects(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg)
{
    dm_gaddr_t root = 0;
    int rc = dm_read_span(ctx, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), &root, 8);
    if (rc || !root) return rc;
    dm_rolex_t *r;
    rc = dm_rolex_open(ctx, root, &r);
    if (rc) return rc;
    /* Three blocks: leaves never leave their region, models never leave their arena. */
    rc = fn(arg, root, dm_alloc_block_bytes(RX_ROOT_BYTES));
    if (!rc) rc = fn(arg, r->hdr.region, dm_alloc_block_bytes(r->hdr.capacity * RX_LEAF_BYTES));
    if (!rc) rc = fn(arg, r->hdr.arena, dm_alloc_block_bytes(2 * rx_slot_bytes(r->hdr.capacity)));
    dm_rolex_close(r);
    return rc;
}

size_t rr_stats_get(dm_index_stat_t *out)
{
    dm_rolex_stats_t s;
    dm_rolex_stats(&s);
    rr_counters_t c;
    c.model_version = __atomic_load_n(&rr_stats.model_version, __ATOMIC_RELAXED);
    c.lt_entries = __atomic_load_n(&rr_stats.lt_entries, __ATOMIC_RELAXED);
    c.leaves_seen = __atomic_load_n(&rr_stats.leaves_seen, __ATOMIC_RELAXED);
    c.lock_waits = __atomic_load_n(&rr_stats.lock_waits, __ATOMIC_RELAXED);
    c.takeovers = __atomic_load_n(&rr_stats.takeovers, __ATOMIC_RELAXED);
    c.settled = __atomic_load_n(&rr_stats.settled, __ATOMIC_RELAXED);
    c.removed = __atomic_load_n(&rr_stats.removed, __ATOMIC_RELAXED);
    c.scan_leaves = __atomic_load_n(&rr_stats.scan_leaves, __ATOMIC_RELAXED);
    c.too_long = __atomic_load_n(&rr_stats.too_long, __ATOMIC_RELAXED);
    size_t n = 0;
    out[n++] = dm_index_count("rolex_model_version", c.model_version);
    out[n++] = dm_index_count("rolex_lt_entries", c.lt_entries);
    out[n++] = dm_index_count("rolex_leaves_seen", c.leaves_seen);
    out[n++] = dm_index_count("rolex_models_noticed", s.models_noticed);
    out[n++] = dm_index_count("rolex_model_loads", s.model_loads);
    out[n++] = dm_index_count("rolex_model_load_failures", s.model_load_failures);
    out[n++] = dm_index_count("rolex_lock_waits", c.lock_waits);
    out[n++] = dm_index_count("rolex_lease_takeovers", c.takeovers);
    out[n++] = dm_index_count("rolex_entries_settled", c.settled);
    out[n++] = dm_index_count("rolex_entries_removed", c.removed);
    out[n++] = dm_index_count("rolex_scan_leaves", c.scan_leaves);
    out[n++] = dm_index_count("rolex_keys_too_long", c.too_long);
    return n;
}
