/* The one place that names the concrete index engines (dmkv/index.h): which a pool can be
 * made of (each engine's folder exports its role table: race/index_ops.c, chime/index_ops.c,
 * sephash/index_ops.c, rolex/index_ops.c),
 * which this process runs, and their record in the pool (docs/DESIGN.md). dm_kv_worker_create
 * (kv.h) attaches a worker through them; the worker itself knows no index, so pool/ does not
 * depend on race/ or chime/. */
#include <stdio.h>
#include <strings.h>

#include "dmkv/chime.h"
#include "dmkv/errors.h"
#include "dmkv/index.h"
#include "dmkv/kv.h"
#include "dmkv/log.h"
#include "dmkv/race.h"
#include "dmkv/rolex.h"
#include "dmkv/sephash.h"
#include "dmkv/superblock.h"
#include "keyq.h"

/* ---- the engines a pool can be made of: a new engine is one line here ---- */

/* Each list holds the engine descriptor that starts each role table (dm_index_engine_t):
 * a pointer to it is a pointer to its table. */
static const dm_index_engine_t *const point_engines[] = {&dm_race_point_index.engine,
                                                         &dm_sephash_point_index.engine};
static const dm_index_engine_t *const range_engines[] = {&dm_chime_range_index.engine,
                                                         &dm_rolex_range_index.engine};
#define N_POINT (sizeof(point_engines) / sizeof(point_engines[0]))
#define N_RANGE (sizeof(range_engines) / sizeof(range_engines[0]))

static const dm_point_index_ops_t *point_sel = &dm_race_point_index;
static const dm_range_index_ops_t *range_sel = &dm_chime_range_index;

const dm_point_index_ops_t *dm_kv_point_index(void)
{
    return point_sel;
}

const dm_range_index_ops_t *dm_kv_range_index(void)
{
    return range_sel;
}

/* The engine of list named name (any case), or NULL with err naming the list's engines. */
static const dm_index_engine_t *engine_named(const dm_index_engine_t *const *list, size_t n,
                                             const char *role, const char *name, char *err,
                                             size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(name, list[i]->name)) return list[i];
    int at = snprintf(err, errlen, "Unknown %s index '%s' (this build has:", role, name);
    for (size_t i = 0; i < n && at > 0 && (size_t)at < errlen; i++)
        at += snprintf(err + at, errlen - (size_t)at, "%s %s", i ? "," : "", list[i]->name);
    if (at > 0 && (size_t)at < errlen) snprintf(err + at, errlen - (size_t)at, ")");
    return NULL;
}

int dm_kv_choose_engines(const char *point, const char *range, char *err, size_t errlen)
{
    const dm_index_engine_t *p = &point_sel->engine, *r = &range_sel->engine;
    if (point && !(p = engine_named(point_engines, N_POINT, "point", point, err, errlen)))
        return -1;
    if (range && !(r = engine_named(range_engines, N_RANGE, "range", range, err, errlen)))
        return -1;
    point_sel = (const dm_point_index_ops_t *)p; /* the descriptor starts the table */
    range_sel = (const dm_range_index_ops_t *)r;
    return 0;
}

/* The name of the engine of list with number id ("#7, ..." when this build lacks it). */
static const char *engine_name(const dm_index_engine_t *const *list, size_t n, unsigned id,
                               char *buf, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (list[i]->id == id) return list[i]->name;
    snprintf(buf, len, "#%u, which this build does not have", id);
    return buf;
}

/* Select the engines of record rec (point id | range id << 8) when this build has both:
 * 0, or -1 (nothing changed). */
static int adopt_record(uint64_t rec)
{
    const dm_index_engine_t *p = NULL, *r = NULL;
    for (size_t i = 0; i < N_POINT; i++)
        if (point_engines[i]->id == (rec & 0xff)) p = point_engines[i];
    for (size_t i = 0; i < N_RANGE; i++)
        if (range_engines[i]->id == ((rec >> 8) & 0xff)) r = range_engines[i];
    if (!p || !r) return -1;
    point_sel = (const dm_point_index_ops_t *)p; /* the descriptor starts the table */
    range_sel = (const dm_range_index_ops_t *)r;
    return 0;
}

/* The pool's engines agree with this process's choice: recorded in the superblock by the
 * gateway that creates the pool (CAS from 0), checked by every one that joins it. A pool
 * made before the record existed (roots set, record 0) is RACE + CHIME. adopt (the offline
 * tools): a pool's recorded engines replace this process's choice instead of being refused.
 * 1-2 RTTs. Returns 0, or -1 with err saying which engines the pool has. */
static int agree_engines(dm_ctx_t *ctx, int adopt, char *err, size_t errlen)
{
    static int told;
    const uint64_t want = point_sel->engine.id | (uint64_t)range_sel->engine.id << 8;
    uint64_t rec = 0, roots[2] = {0, 0};
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(engines)), &rec, 8);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(race_root)), &roots[0], 8);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(chime_root)), &roots[1], 8);
    int rc = dm_batch_exec(ctx, &b);
    int created = 0;
    if (!rc && !rec) {
        /* Not recorded: a new pool gets ours, an old one what it was made of. */
        int old_pool = roots[0] || roots[1];
        uint64_t mine =
            old_pool ? dm_race_point_index.engine.id | (uint64_t)dm_chime_range_index.engine.id << 8
                     : want;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(engines)), 0, mine);
        rc = dm_batch_exec(ctx, &b);
        if (!rc) rec = v->result ? v->result : mine; /* lost: another gateway's record */
        created = !rc && !v->result && !old_pool;
    }
    if (rc) {
        snprintf(err, errlen, "cannot read the pool's index engines: %s", dm_strerror(rc));
        return -1;
    }
    if (adopt && rec != want) adopt_record(rec);
    const uint64_t chosen = point_sel->engine.id | (uint64_t)range_sel->engine.id << 8;
    char b1[64], b2[64];
    const char *p = engine_name(point_engines, N_POINT, (unsigned)(rec & 0xff), b1, sizeof(b1));
    const char *r =
        engine_name(range_engines, N_RANGE, (unsigned)((rec >> 8) & 0xff), b2, sizeof(b2));
    if (rec != chosen) {
        snprintf(err, errlen,
                 "the pool's index engines are %s (point) and %s (range), recorded when it was "
                 "created; this gateway was asked for %s and %s: start it with --point-index %s "
                 "--range-index %s, or use a new pool",
                 p, r, point_sel->engine.name, range_sel->engine.name, p, r);
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

/* dm_kv_worker_create; adopt as for agree_engines. */
static dm_worker_t *worker_create(uv_loop_t *loop, const char *const *uris, unsigned n, int adopt,
                                  char *err, size_t errlen)
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
    if (agree_engines(&ctx, adopt, err, errlen)) {
        dm_worker_destroy(w);
        return NULL;
    }
    const dm_point_index_ops_t *point = dm_kv_point_index();
    int rc = point->attach(&ctx, w);
    if (rc) {
        snprintf(err, errlen, "cannot attach to the point index (%s): %s", point->engine.name,
                 dm_strerror(rc));
        dm_worker_destroy(w);
        return NULL;
    }
    const dm_range_index_ops_t *range = dm_kv_range_index();
    rc = range->attach(&ctx, w);
    if (rc) {
        snprintf(err, errlen, "cannot attach to the range index (%s): %s", range->engine.name,
                 dm_strerror(rc));
        dm_worker_destroy(w);
        return NULL;
    }
    range->set_presence(w, point->probe);
    return w;
}

dm_worker_t *dm_kv_worker_create(uv_loop_t *loop, const char *const *uris, unsigned n, char *err,
                                 size_t errlen)
{
    return worker_create(loop, uris, n, 0, err, errlen);
}

int dm_kv_run_offline(const char *const *uris, unsigned n, int (*fn)(dm_ctx_t *ctx, void *arg),
                      void *arg)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    dm_worker_t *w = worker_create(&loop, uris, n, 1, err, sizeof(err));
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
