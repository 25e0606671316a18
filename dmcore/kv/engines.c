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

static const dm_point_index_ops_t race_ops = {.name = "race",
                                              .attach = race_attach,
                                              .detach = race_detach,
                                              .count = dm_race_count,
                                              .flush = dm_race_flush,
                                              .recount = dm_race_recount,
                                              .stats = race_stats};

/* ---- CHIME, the range index ---- */

/* CHIME settles pending entries by the point index's presence (dm_chime_presence_fn). */
static int race_presence(dm_ctx_t *ctx, const uint8_t *const *keys, const size_t *lens, unsigned n,
                         uint8_t *present)
{
    return dm_race_probe(ctx, keys, lens, n, present, NULL);
}

static int chime_attach(dm_ctx_t *ctx, dm_worker_t *w)
{
    int rc = dm_chime_attach(ctx, &w->chime);
    if (!rc) dm_chime_set_presence(w->chime, race_presence);
    return rc;
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
                                               .stats = chime_stats};

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
