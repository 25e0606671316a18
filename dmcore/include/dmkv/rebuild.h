/* Checking and rebuilding the range index from the point index (HStore's recovery idea,
 * shared/papers/NOTES.md §3; issue 14 item 5). The hybrid protocol keeps range ⊇ point:
 * every key the point index (RACE) holds has a range index (CHIME) entry. These walks find
 * where that fails and repair it, for a pool whose range index was lost or is suspected
 * damaged. The point index is the source of truth: it holds the values.
 *
 * OFFLINE: run only while no gateway uses the pool (dmkv-index-rebuild). A running
 * gateway's inserts and deletes would be counted as mismatches, and gateways keep the old
 * tree cached after dm_kv_range_drop. */
#ifndef DMKV_REBUILD_H
#define DMKV_REBUILD_H

#include <stdint.h>

#include "dmkv/worker.h"

typedef struct dm_kv_index_report {
    uint64_t point_keys;    /* live keys walked in the point index (expired ones left out) */
    uint64_t range_entries; /* entries walked in the range index (check only) */
    uint64_t missing;       /* point keys without an entry: found (check) or added (rebuild) */
    uint64_t orphans;       /* entries whose key the point index lacks: found or removed */
} dm_kv_index_report_t;

/* Walk both indexes and count what disagrees, changing nothing: every point key is looked
 * up in the range index (lock-free search, 1-2 RTTs each), every range entry's key is
 * probed in the point index (2 RTTs per 32 keys). Returns 0 (see rep) or DM_E*. */
int dm_kv_check_indexes(dm_ctx_t *ctx, dm_kv_index_report_t *rep);

/* Make the range index agree with the point index: every point key gets its entry (under
 * its leaf lock, as the hybrid protocol's repair does: kv/hybrid.c dm_hybrid_reconcile,
 * 3-5 RTTs per key), then every entry whose key the point index lacks is removed (leaf by
 * leaf, dm_chime_settle_all). rep->range_entries stays 0. Returns 0 or DM_E*. */
int dm_kv_rebuild_range(dm_ctx_t *ctx, dm_kv_index_report_t *rep);

/* Throw the range index away: an empty tree replaces it (dm_chime_reset), as if it had
 * been lost. SCAN returns nothing until dm_kv_rebuild_range; point operations go on.
 * Returns 0, DM_ERETRY (the tree changed meanwhile: a gateway is running), or DM_E*. */
int dm_kv_range_drop(dm_ctx_t *ctx);

#endif
