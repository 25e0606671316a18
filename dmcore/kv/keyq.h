/* Per-worker queues of writes to the same key (internal to dmcore/kv).
 * Writes to one key from one worker run one at a time, so they do not race each other's
 * slot CAS (redis-benchmark's 50 clients on one key would otherwise retry endlessly).
 * A run of queued plain SETs is combined: only the last one is written and the others
 * complete with it, linearized just before its slot CAS (which happens while they wait,
 * and no reader can observe a value between them). Writes from other gateways still
 * meet at the slot CAS. */
#ifndef DMKV_KV_KEYQ_H
#define DMKV_KV_KEYQ_H

#include <stdint.h>

#include "dmkv/worker.h"

typedef struct dm_keyq dm_keyq_t;

/* One write waiting for, or holding, its key. */
typedef struct dm_keyq_entry {
    dm_wake_t wake;
    uint64_t hash;   /* XXH3 of the key: the bucket */
    const void *key; /* the key itself (keys that share a hash are still different keys) */
    size_t klen;
    int blind;                    /* a plain SET: may be combined with later plain SETs */
    int absorbed;                 /* completed by a later SET of the run */
    int result;                   /* the result to report when absorbed */
    struct dm_keyq_entry *next;   /* queue order */
    struct dm_keyq_entry *riders; /* SETs this one completes */
} dm_keyq_entry_t;

/* A worker's per-key queues (SETs of one key in arrival order), empty; NULL when out of
 * memory. Destroy only when no entry is queued. */
dm_keyq_t *dm_keyq_create(void);
void dm_keyq_destroy(dm_keyq_t *q);

/* Wait until e may write its key. Returns 1 when e must do its write, 0 when it was
 * absorbed by a later plain SET (e->result holds what to report). */
int dm_keyq_enter(dm_worker_t *w, dm_keyq_entry_t *e);

/* e's write finished with result rc: complete its riders, hand the key on. */
void dm_keyq_leave(dm_worker_t *w, dm_keyq_entry_t *e, int rc);

#endif
