/* Process-wide per-class counters (relaxed atomics: they are statistics, not state). */
#include "dmkv/stats.h"

#include <string.h>

static dm_cls_stats_t stats[DM_CLS_COUNT];

const char *dm_cls_name(dm_cls_t c)
{
    static const char *names[DM_CLS_COUNT] = {"get", "set", "del", "scan", "admin", "split"};
    return (unsigned)c < DM_CLS_COUNT ? names[c] : "?";
}

void dm_stats_op(dm_cls_t c)
{
    __atomic_fetch_add(&stats[c].ops, 1, __ATOMIC_RELAXED);
}

void dm_stats_batch(dm_cls_t c, int waited, uint64_t verbs, uint64_t bytes_read,
                    uint64_t bytes_written)
{
    __atomic_fetch_add(waited ? &stats[c].rtts : &stats[c].async_batches, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats[c].verbs, verbs, __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats[c].bytes_read, bytes_read, __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats[c].bytes_written, bytes_written, __ATOMIC_RELAXED);
}

void dm_stats_get(dm_cls_t c, dm_cls_stats_t *out)
{
    out->ops = __atomic_load_n(&stats[c].ops, __ATOMIC_RELAXED);
    out->rtts = __atomic_load_n(&stats[c].rtts, __ATOMIC_RELAXED);
    out->async_batches = __atomic_load_n(&stats[c].async_batches, __ATOMIC_RELAXED);
    out->verbs = __atomic_load_n(&stats[c].verbs, __ATOMIC_RELAXED);
    out->bytes_read = __atomic_load_n(&stats[c].bytes_read, __ATOMIC_RELAXED);
    out->bytes_written = __atomic_load_n(&stats[c].bytes_written, __ATOMIC_RELAXED);
}

void dm_stats_reset(void)
{
    for (int c = 0; c < DM_CLS_COUNT; c++) {
        __atomic_store_n(&stats[c].ops, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&stats[c].rtts, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&stats[c].async_batches, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&stats[c].verbs, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&stats[c].bytes_read, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&stats[c].bytes_written, 0, __ATOMIC_RELAXED);
    }
}
