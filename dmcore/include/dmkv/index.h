/* The two index roles of the hybrid protocol (issue 14, docs/DESIGN.md "Index engines"):
 * a point index (RACE today: search, set, delete of one key) and a range index (CHIME
 * today: ordered scans, leaf locks with leases, pending entries). This header is the seam
 * through which the KV layer and the gateway reach the engines for what does not depend
 * on which engine runs: attaching a worker, counting, recounting and flushing keys, and
 * statistics for INFO. kv/engines.c is the one file that fills these tables with concrete engines.
 *
 * Not behind the seam yet (the next step of issue 14): the data path itself (search,
 * set with a decide callback, delete, probe, leaf lock, mark pending, settle), which
 * kv/hybrid.c still calls by the engines' own names. */
#ifndef DMKV_INDEX_H
#define DMKV_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/worker.h"

/* One statistic as INFO prints it: "name:value". decimals 0: the counter u; otherwise
 * the ratio d printed with that many decimals. */
typedef struct dm_index_stat {
    const char *name; /* the INFO field, engine prefix included ("race_splits") */
    uint64_t u;
    double d;
    int decimals;
} dm_index_stat_t;

#define DM_INDEX_STATS_MAX 32 /* room a caller of stats() needs */

typedef struct dm_point_index_ops {
    const char *name; /* "race" */
    /* Attach w to the pool's index (creating it on a new pool): 0 or DM_E*. */
    int (*attach)(dm_ctx_t *ctx, dm_worker_t *w);
    void (*detach)(dm_worker_t *w);
    /* Keys in the index (DBSIZE), or DM_E*. */
    int64_t (*count)(dm_ctx_t *ctx);
    /* Remove every key (FLUSHALL's first half): keys removed, or DM_E*. */
    int64_t (*flush)(dm_ctx_t *ctx);
    /* Count the keys again and set the counter (a dead gateway's counter updates that
     * never landed): the drift corrected (found - counter) in *drift. Returns 0,
     * DM_ERETRY (keys kept coming and going: try later) or DM_E*. */
    int (*recount)(dm_ctx_t *ctx, int64_t *drift);
    /* Process-wide statistics into out[0..DM_INDEX_STATS_MAX): how many. */
    size_t (*stats)(dm_index_stat_t *out);
} dm_point_index_ops_t;

typedef struct dm_range_index_ops {
    const char *name; /* "chime" */
    int (*attach)(dm_ctx_t *ctx, dm_worker_t *w);
    void (*detach)(dm_worker_t *w);
    /* Settle every pending entry and drop entries the point index no longer has
     * (FLUSHALL's second half: the range index stays a superset of the point index).
     * Returns the entries removed or DM_E*. */
    int64_t (*settle_all)(dm_ctx_t *ctx);
    size_t (*stats)(dm_index_stat_t *out);
} dm_range_index_ops_t;

/* The engines this process runs (kv/engines.c). */
const dm_point_index_ops_t *dm_kv_point_index(void);
const dm_range_index_ops_t *dm_kv_range_index(void);

#endif
