/* The one place that names the concrete index engines (dmkv/index.h): which a pool can be
 * made of (each engine's folder exports its role table: race/index_ops.c, chime/index_ops.c),
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
#include "dmkv/superblock.h"
#include "keyq.h"

/* ---- the engines a pool can be made of: a new engine is one line here ---- */

static const dm_point_index_ops_t *const point_engines[] = {&dm_race_point_index};
static const dm_range_index_ops_t *const range_engines[] = {&dm_chime_range_index};
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
    const uint64_t legacy = dm_race_point_index.id | (uint64_t)dm_chime_range_index.id << 8;
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
    if (!rc) range->set_presence(w, point->probe);
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
