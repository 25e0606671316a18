/* The one place that names the concrete index engines (dmkv/index.h): RACE as the point
 * index, CHIME as the range index (docs/DESIGN.md). dm_kv_worker_create (kv.h) attaches a
 * worker through them; the worker itself knows no index, so pool/ does not depend on race/
 * or chime/. */
#include <stdio.h>
#include <strings.h>

#include "dmkv/chime.h"
#include "dmkv/errors.h"
#include "dmkv/fence.h"
#include "dmkv/index.h"
#include "dmkv/kv.h"
#include "dmkv/log.h"
#include "dmkv/superblock.h"
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
                                              .id = 1,
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
                                               .id = 1,
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

/* ---- the engines a pool can be made of: a new engine is one line here ---- */

static const dm_point_index_ops_t *const point_engines[] = {&race_ops};
static const dm_range_index_ops_t *const range_engines[] = {&chime_ops};
#define N_POINT (sizeof(point_engines) / sizeof(point_engines[0]))
#define N_RANGE (sizeof(range_engines) / sizeof(range_engines[0]))

static const dm_point_index_ops_t *point_sel = &race_ops;
static const dm_range_index_ops_t *range_sel = &chime_ops;

const dm_point_index_ops_t *dm_kv_point_index(void)
{
    return point_sel;
}

const dm_range_index_ops_t *dm_kv_range_index(void)
{
    return range_sel;
}

/* "race, ..." for error messages. */
static void engine_names(char *buf, size_t n, int point)
{
    size_t at = 0, count = point ? N_POINT : N_RANGE;
    buf[0] = 0;
    for (size_t i = 0; i < count && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? ", " : "",
                               point ? point_engines[i]->name : range_engines[i]->name);
}

int dm_kv_choose_engines(const char *point, const char *range, char *err, size_t errlen)
{
    const dm_point_index_ops_t *p = point_sel;
    const dm_range_index_ops_t *r = range_sel;
    char names[128];
    if (point) {
        p = NULL;
        for (size_t i = 0; i < N_POINT; i++)
            if (!strcasecmp(point, point_engines[i]->name)) p = point_engines[i];
        if (!p) {
            engine_names(names, sizeof(names), 1);
            snprintf(err, errlen, "Unknown point index '%s' (this build has: %s)", point, names);
            return -1;
        }
    }
    if (range) {
        r = NULL;
        for (size_t i = 0; i < N_RANGE; i++)
            if (!strcasecmp(range, range_engines[i]->name)) r = range_engines[i];
        if (!r) {
            engine_names(names, sizeof(names), 0);
            snprintf(err, errlen, "Unknown range index '%s' (this build has: %s)", range, names);
            return -1;
        }
    }
    point_sel = p;
    range_sel = r;
    return 0;
}

/* An engine's name from its id in a pool's record ("#7" when this build lacks it). */
static const char *point_name(unsigned id, char *buf, size_t n)
{
    for (size_t i = 0; i < N_POINT; i++)
        if (point_engines[i]->id == id) return point_engines[i]->name;
    snprintf(buf, n, "#%u, which this build does not have", id);
    return buf;
}

static const char *range_name(unsigned id, char *buf, size_t n)
{
    for (size_t i = 0; i < N_RANGE; i++)
        if (range_engines[i]->id == id) return range_engines[i]->name;
    snprintf(buf, n, "#%u, which this build does not have", id);
    return buf;
}

/* The pool's engines agree with this process's choice: recorded in the superblock by the
 * gateway that creates the pool (CAS from 0), checked by every one that joins it. A pool
 * made before the record existed (roots set, record 0) is RACE + CHIME. 1-2 RTTs. Returns
 * 0, or -1 with err saying which engines the pool has. */
static int agree_engines(dm_ctx_t *ctx, char *err, size_t errlen)
{
    static int told;
    const uint64_t want = point_sel->id | (uint64_t)range_sel->id << 8;
    const uint64_t legacy = race_ops.id | (uint64_t)chime_ops.id << 8;
    uint64_t rec = 0, roots[2] = {0, 0};
    int rc = 0, created = 0;
    for (int tries = 0; tries < 4 && !rec && !rc; tries++) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(engines)), &rec, 8);
        dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(race_root)), &roots[0], 8);
        dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(chime_root)), &roots[1], 8);
        rc = dm_batch_exec(ctx, &b);
        if (rc || rec) break;
        uint64_t mine = roots[0] || roots[1] ? legacy : want;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(engines)), 0, mine);
        rc = dm_batch_exec(ctx, &b);
        if (!rc && v->result == 0) rec = mine, created = mine == want && !roots[0] && !roots[1];
    }
    if (rc || !rec) {
        snprintf(err, errlen, "cannot read the pool's index engines: %s",
                 dm_strerror(rc ? rc : DM_ERETRY));
        return -1;
    }
    char b1[64], b2[64];
    const char *p = point_name((unsigned)(rec & 0xff), b1, sizeof(b1));
    const char *r = range_name((unsigned)((rec >> 8) & 0xff), b2, sizeof(b2));
    if (rec != want) {
        snprintf(err, errlen,
                 "the pool's index engines are %s (point) and %s (range), recorded when it was "
                 "created; this gateway was asked for %s and %s: start it with --point-index %s "
                 "--range-index %s, or use a new pool",
                 p, r, point_sel->name, range_sel->name, p, r);
        return -1;
    }
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        dm_log(DM_LOG_NOTICE, "index engines: %s (point) and %s (range), %s", p, r,
               created ? "recorded in the new pool" : "as recorded in the pool");
    return 0;
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
    if (agree_engines(&ctx, err, errlen)) {
        dm_worker_destroy(w);
        return NULL;
    }
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
