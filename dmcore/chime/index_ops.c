/* CHIME as the range role (dmkv/index.h): the table kv/engines.c lists. */
#include "dmkv/chime.h"
#include "dmkv/fence.h"
#include "dmkv/index.h"

static int chime_attach(dm_ctx_t *ctx, dm_worker_t *w)
{
    return dm_chime_attach(ctx, &w->chime);
}

/* CHIME settles pending entries by the point index's presence (dm_chime_presence_fn). */
static void chime_set_presence(dm_worker_t *w, dm_point_probe_fn probe)
{
    dm_chime_set_presence(w->chime, probe);
}

static void chime_detach(dm_worker_t *w)
{
    dm_chime_detach(w->chime);
    w->chime = NULL;
}

static size_t chime_stats(dm_index_stat_t *out)
{
    dm_chime_stats_t s = {0};
    dm_chime_get_stats(&s);
    size_t n = 0;
    out[n++] = dm_index_count("chime_cache_nodes", s.cache_nodes);
    out[n++] = dm_index_count("chime_cache_bytes", s.cache_bytes);
    out[n++] = dm_index_count("chime_hotspot_lookups", s.hotspot_lookups);
    out[n++] = dm_index_count("chime_hotspot_hits", s.hotspot_hits);
    out[n++] = dm_index_ratio("chime_hotspot_hit_rate", s.hotspot_hits, s.hotspot_lookups, 4);
    out[n++] = dm_index_count("chime_leaf_splits", s.leaf_splits);
    out[n++] = dm_index_count("chime_inner_splits", s.inner_splits);
    out[n++] = dm_index_count("chime_new_roots", s.roots);
    out[n++] = dm_index_count("chime_scan_pages", s.scan_pages);
    out[n++] = dm_index_ratio("chime_rtts_per_scan_page", s.scan_rtts, s.scan_pages, 2);
    out[n++] = dm_index_count("chime_lock_waits", s.lock_waits);
    out[n++] = dm_index_count("chime_lease_takeovers", s.lease_takeovers);
    out[n++] = dm_index_count("chime_lease_fences", dm_fence_count());
    out[n++] = dm_index_count("chime_right_moves", s.right_moves);
    out[n++] = dm_index_count("chime_separator_repairs", s.sep_repairs);
    out[n++] = dm_index_count("chime_shared_holds", s.shared_holds);
    out[n++] = dm_index_count("chime_shared_joins", s.shared_joins);
    out[n++] = dm_index_count("chime_shared_joins_direct", s.shared_joins_direct);
    out[n++] = dm_index_count("chime_shared_splits", s.shared_splits);
    return n;
}

const dm_range_index_ops_t dm_chime_range_index = {.engine = {"chime", 1},
                                                   .attach = chime_attach,
                                                   .set_presence = chime_set_presence,
                                                   .detach = chime_detach,
                                                   .settle_all = dm_chime_settle_all,
                                                   .stats = chime_stats,
                                                   .lock = dm_chime_lock_with,
                                                   .lock_insert = dm_chime_lock_insert,
                                                   .mark_pending = dm_chime_mark_pending,
                                                   .unlock = dm_chime_unlock,
                                                   .lock_valid = dm_chime_lock_valid,
                                                   .lock_in_doubt = dm_chime_lock_in_doubt,
                                                   .lock_sure_until = dm_chime_lock_sure_until,
                                                   .lock_hold_until = dm_chime_lock_hold_until,
                                                   .lock_posted_us = dm_chime_lock_posted_us,
                                                   .lock_range = dm_chime_lock_leaf,
                                                   .search = dm_chime_search,
                                                   .scan = dm_chime_scan,
                                                   .random_cursor = dm_chime_random_cursor,
                                                   .watch_sig = dm_chime_watch_sig,
                                                   .key_bytes = dm_chime_key_bytes,
                                                   .reset = dm_chime_reset,
                                                   .objects = dm_chime_objects};
