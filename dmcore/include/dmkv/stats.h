/* Hardware-independent counters: verbs, round trips (batches) and bytes per command type.
 * Every batch is charged to the command class of the operation that posted it. INFO's
 * "dmkv" section prints them. Counters are process-wide and updated with relaxed atomics. */
#ifndef DMKV_STATS_H
#define DMKV_STATS_H

#include <stdint.h>

typedef enum {
    DM_CLS_GET = 0, /* GET, MGET, EXISTS */
    DM_CLS_SET,     /* SET, MSET and variants */
    DM_CLS_DEL,     /* DEL, UNLINK */
    DM_CLS_SCAN,    /* SCAN, KEYS, DBSIZE */
    DM_CLS_ADMIN,   /* FLUSHALL, start-up, background work */
    DM_CLS_SPLIT,   /* RACE subtable and CHIME leaf splits, apart from the command that ran
                       into them (its class then counts the steady state) */
    DM_CLS_COUNT
} dm_cls_t;

typedef struct dm_cls_stats {
    uint64_t ops;           /* operations completed */
    uint64_t rtts;          /* batches waited for (one per dm_batch_exec): round trips */
    uint64_t async_batches; /* batches posted without waiting (unlocks, counters) */
    uint64_t verbs;         /* verbs posted */
    uint64_t bytes_read;
    uint64_t bytes_written;
} dm_cls_stats_t;

/* Name of a class as shown in INFO ("get", "set", ...). */
const char *dm_cls_name(dm_cls_t c);

/* Charge one finished command to class c (the gateway calls it once per command). */
void dm_stats_op(dm_cls_t c);

/* Snapshot of the process-wide counters of class c. */
void dm_stats_get(dm_cls_t c, dm_cls_stats_t *out);

/* Internal: charge one batch to class c, waited for (a round trip) or posted async. */
void dm_stats_batch(dm_cls_t c, int waited, uint64_t verbs, uint64_t bytes_read,
                    uint64_t bytes_written);

/* Reset all counters (CONFIG RESETSTAT). */
void dm_stats_reset(void);

#endif
