/* The one place that names the concrete index engines (dmkv/index.h): RACE as the point
 * index, CHIME as the range index (docs/DESIGN.md). dm_kv_worker_create (kv.h) attaches a
 * worker through them; the worker itself knows no index, so pool/ does not depend on race/
 * or chime/. */
#include <stdio.h>

#include "dmkv/chime.h"
#include "dmkv/errors.h"
#include "dmkv/fence.h"
#include "dmkv/index.h"
#include "dmkv/kv.h"
#include "dmkv/race.h"
#include "keyq.h"

/* ---- RACE, the point index ---- */

static int race_attach(dm_ctx_t *ctx, dm_worker_t *w)
{
    return dm_race_attach(ctx, &w->race);
}

static void race_detach(dm_worker_t *w)
{
    dm_race_detach(w->race);
    w->race = NULL;
}

static dm_index_stat_t count_stat(const char *name, uint64_t u)
{
    return (dm_index_stat_t){.name = name, .u = u};
}

static dm_index_stat_t ratio_stat(const char *name, uint64_t a, uint64_t b, int decimals)
{
    return (dm_index_stat_t){
        .name = name, .d = b ? (double)a / (double)b : 0.0, .decimals = decimals};
}

static size_t race_stats(dm_index_stat_t *out)
{
    uint64_t splits, splitting, doublings, stranded, adopted, hits, dropped, blind;
    dm_race_split_stats(&splits, &splitting, &doublings);
    dm_race_stranded_stats(&stranded, &adopted);
    dm_race_addr_cache_stats(&hits, &dropped, &blind);
    size_t n = 0;
    out[n++] = count_stat("race_splits", splits);
    out[n++] = count_stat("race_splits_in_progress", splitting);
    out[n++] = count_stat("race_directory_doublings", doublings);
    out[n++] = count_stat("race_stranded_inserts", stranded);
    out[n++] = count_stat("race_stranded_adopted", adopted);
    out[n++] = count_stat("race_addr_cache_hits", hits);
    out[n++] = count_stat("race_addr_cache_dropped", dropped);
    out[n++] = count_stat("race_addr_cache_blind_sets", blind);
    return n;
}

static void race_cache_prefetch(dm_worker_t *w, const void *key, size_t klen)
{
    dm_race_addr_cache_prefetch(w->race, key, klen);
}

/* A key's slot: its share of a bucket, header included. */
static uint64_t race_key_bytes(void)
{
    return (DM_RACE_BUCKET + DM_RACE_SLOTS - 1) / DM_RACE_SLOTS;
}

static const dm_point_index_ops_t race_ops = {.name = "race",
                                              .attach = race_attach,
                                              .detach = race_detach,
                                              .count = dm_race_count,
                                              .flush = dm_race_flush,
                                              .recount = dm_race_recount,
                                              .stats = race_stats,
                                              .search = dm_race_search,
                                              .search_cached = dm_race_search_hot,
                                              .cache_prefetch = race_cache_prefetch,
                                              .set = dm_race_set_carry,
                                              .set_blind = dm_race_update_blind,
                                              .del = dm_race_delete_carry,
                                              .carry_release = dm_race_carry_release,
                                              .prefetch = dm_race_prefetch,
                                              .probe = dm_race_probe,
                                              .key_bytes = race_key_bytes,
                                              .scan = dm_race_scan};

/* ---- CHIME, the range index ---- */

/* CHIME settles pending entries by the point index's presence (dm_chime_presence_fn). */
static int chime_attach(dm_ctx_t *ctx, dm_worker_t *w)
{
    int rc = dm_chime_attach(ctx, &w->chime);
    if (!rc) dm_chime_set_presence(w->chime, dm_kv_point_index()->probe);
    return rc;
}

/* CHIME's leaf lock is the range role's opaque lock: handed out and taken back here. */
static dm_chime_lock_t *leaf_lock(dm_range_lock_t *lk)
{
    return (dm_chime_lock_t *)lk;
}

static const dm_chime_lock_t *leaf_lock_c(const dm_range_lock_t *lk)
{
    return (const dm_chime_lock_t *)lk;
}

static int chime_lock(dm_ctx_t *ctx, const void *key, size_t klen, int existing,
                      const dm_batch_t *extra, int *fresh, dm_range_lock_t **out)
{
    dm_chime_lock_t *lk = NULL;
    int rc = dm_chime_lock_with(ctx, key, klen, existing, extra, fresh, &lk);
    *out = (dm_range_lock_t *)lk;
    return rc;
}

static int chime_lock_insert(dm_ctx_t *ctx, const void *key, size_t klen, const dm_batch_t *extra,
                             int *fresh, dm_range_lock_t **out)
{
    dm_chime_lock_t *lk = NULL;
    int rc = dm_chime_lock_insert(ctx, key, klen, extra, fresh, &lk);
    *out = (dm_range_lock_t *)lk;
    return rc;
}

static int chime_mark_pending(dm_ctx_t *ctx, dm_range_lock_t *lk)
{
    return dm_chime_mark_pending(ctx, leaf_lock(lk));
}

static int chime_unlock(dm_ctx_t *ctx, dm_range_lock_t *lk, int present)
{
    return dm_chime_unlock(ctx, leaf_lock(lk), present);
}

static int chime_lock_valid(const dm_range_lock_t *lk)
{
    return dm_chime_lock_valid(leaf_lock_c(lk));
}

static int chime_lock_in_doubt(const dm_range_lock_t *lk)
{
    return dm_chime_lock_in_doubt(leaf_lock_c(lk));
}

static uint64_t chime_lock_sure_until(const dm_range_lock_t *lk)
{
    return dm_chime_lock_sure_until(leaf_lock_c(lk));
}

static uint64_t chime_lock_hold_until(const dm_range_lock_t *lk)
{
    return dm_chime_lock_hold_until(leaf_lock_c(lk));
}

static uint64_t chime_lock_posted_us(const dm_range_lock_t *lk)
{
    return dm_chime_lock_posted_us(leaf_lock_c(lk));
}

static uint64_t chime_lock_range(const dm_range_lock_t *lk)
{
    return dm_chime_lock_leaf(leaf_lock_c(lk));
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
    out[n++] = count_stat("chime_cache_nodes", s.cache_nodes);
    out[n++] = count_stat("chime_cache_bytes", s.cache_bytes);
    out[n++] = count_stat("chime_hotspot_lookups", s.hotspot_lookups);
    out[n++] = count_stat("chime_hotspot_hits", s.hotspot_hits);
    out[n++] = ratio_stat("chime_hotspot_hit_rate", s.hotspot_hits, s.hotspot_lookups, 4);
    out[n++] = count_stat("chime_leaf_splits", s.leaf_splits);
    out[n++] = count_stat("chime_inner_splits", s.inner_splits);
    out[n++] = count_stat("chime_new_roots", s.roots);
    out[n++] = count_stat("chime_scan_pages", s.scan_pages);
    out[n++] = ratio_stat("chime_rtts_per_scan_page", s.scan_rtts, s.scan_pages, 2);
    out[n++] = count_stat("chime_lock_waits", s.lock_waits);
    out[n++] = count_stat("chime_lease_takeovers", s.lease_takeovers);
    out[n++] = count_stat("chime_lease_fences", dm_fence_count());
    out[n++] = count_stat("chime_right_moves", s.right_moves);
    out[n++] = count_stat("chime_separator_repairs", s.sep_repairs);
    out[n++] = count_stat("chime_shared_holds", s.shared_holds);
    out[n++] = count_stat("chime_shared_joins", s.shared_joins);
    return n;
}

static const dm_range_index_ops_t chime_ops = {.name = "chime",
                                               .attach = chime_attach,
                                               .detach = chime_detach,
                                               .settle_all = dm_chime_settle_all,
                                               .stats = chime_stats,
                                               .lock = chime_lock,
                                               .lock_insert = chime_lock_insert,
                                               .mark_pending = chime_mark_pending,
                                               .unlock = chime_unlock,
                                               .lock_valid = chime_lock_valid,
                                               .lock_in_doubt = chime_lock_in_doubt,
                                               .lock_sure_until = chime_lock_sure_until,
                                               .lock_hold_until = chime_lock_hold_until,
                                               .lock_posted_us = chime_lock_posted_us,
                                               .lock_range = chime_lock_range,
                                               .search = dm_chime_search,
                                               .scan = dm_chime_scan,
                                               .random_cursor = dm_chime_random_cursor,
                                               .watch_sig = dm_chime_watch_sig,
                                               .key_bytes = dm_chime_key_bytes,
                                               .reset = dm_chime_reset};

const dm_point_index_ops_t *dm_kv_point_index(void)
{
    return &race_ops;
}

const dm_range_index_ops_t *dm_kv_range_index(void)
{
    return &chime_ops;
}

/* ---- a worker with both ---- */

static void detach(dm_worker_t *w)
{
    dm_kv_point_index()->detach(w);
    dm_kv_range_index()->detach(w);
    dm_keyq_destroy(w->keyq);
    w->keyq = NULL;
}

dm_worker_t *dm_kv_worker_create(uv_loop_t *loop, const char *const *uris, unsigned n, char *err,
                                 size_t errlen)
{
    dm_worker_t *w = dm_worker_create(loop, uris, n, err, errlen);
    if (!w) return NULL;
    w->detach = detach;
    w->keyq = dm_keyq_create();
    if (!w->keyq) {
        snprintf(err, errlen, "out of memory");
        dm_worker_destroy(w);
        return NULL;
    }
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    const dm_point_index_ops_t *point = dm_kv_point_index();
    int rc = point->attach(&ctx, w);
    if (rc) {
        snprintf(err, errlen, "cannot attach to the point index (%s): %s", point->name,
                 dm_strerror(rc));
        dm_worker_destroy(w);
        return NULL;
    }
    const dm_range_index_ops_t *range = dm_kv_range_index();
    rc = range->attach(&ctx, w);
    if (rc) {
        snprintf(err, errlen, "cannot attach to the range index (%s): %s", range->name,
                 dm_strerror(rc));
        dm_worker_destroy(w);
        return NULL;
    }
    return w;
}

int dm_kv_run_offline(const char *const *uris, unsigned n, int (*fn)(dm_ctx_t *ctx, void *arg),
                      void *arg)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    dm_worker_t *w = dm_kv_worker_create(&loop, uris, n, err, sizeof(err));
    if (!w) {
        fprintf(stderr, "%s\n", err);
        uv_loop_close(&loop);
        return -1;
    }
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    int rc = fn(&ctx, arg);
    dm_worker_destroy(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}
