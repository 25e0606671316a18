/* The key-value API the gateway calls: GET/SET/DEL/SCAN over the pool's index.
 * Today the index is RACE (race.h); CHIME joins it for order (issue 3) behind this same API.
 * Every call must run on a coroutine of ctx->w's thread (or on that thread outside any
 * coroutine, where it drives the loop itself). Keys and values are binary-safe. */
#ifndef DMKV_KV_H
#define DMKV_KV_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/worker.h"

#define DM_KV_MAX_KEY (512u << 20)   /* bytes, Redis's proto-max-bulk-len */
#define DM_KV_MAX_VALUE (512u << 20) /* bytes */

/* A value read from the pool; data is malloc'd (free with dm_value_free). */
typedef struct dm_value {
    uint8_t *data;
    size_t len;       /* bytes */
    uint64_t expire_ms; /* absolute wall-clock ms, 0 = no expiry */
} dm_value_t;

void dm_value_free(dm_value_t *v);

/* GET. Returns 1 and fills out when found (expired keys are absent), 0 when absent,
 * or a negative DM_E*. */
int dm_kv_get(dm_ctx_t *ctx, const void *key, size_t klen, dm_value_t *out);

/* SET flags. */
#define DM_SET_NX 0x1      /* only if absent */
#define DM_SET_XX 0x2      /* only if present */
#define DM_SET_KEEPTTL 0x4 /* keep the existing expiry */
#define DM_SET_GET 0x8     /* return the old value in *old */

/* SET key value with optional expiry (absolute wall-clock ms, 0 = none) and flags.
 * Returns 1 when written, 0 when NX/XX said no, or a negative DM_E* (DM_ENOMEM: pool
 * full; DM_EFULL: no free slot for a new key; nothing is changed on error).
 * With DM_SET_GET, *old receives the previous value (old->data NULL when absent). */
int dm_kv_set(dm_ctx_t *ctx, const void *key, size_t klen, const void *val, size_t vlen,
              uint64_t expire_ms, unsigned flags, dm_value_t *old);

/* DEL. Returns 1 when the key existed and was removed, 0 when absent, or DM_E*. */
int dm_kv_del(dm_ctx_t *ctx, const void *key, size_t klen);

/* EXISTS for one key: 1, 0 or DM_E*. */
int dm_kv_exists(dm_ctx_t *ctx, const void *key, size_t klen);

/* Number of keys in the pool (exact counter kept with FAA). Returns >= 0 or DM_E*. */
int64_t dm_kv_dbsize(dm_ctx_t *ctx);

/* Remove every key. Returns 0 or DM_E*. Concurrent writers may leave keys they wrote
 * during the flush (as with any concurrent FLUSHALL). */
int dm_kv_flushall(dm_ctx_t *ctx);

/* One key returned by SCAN (malloc'd bytes). */
typedef struct dm_key {
    uint8_t *data;
    size_t len;
} dm_key_t;

typedef struct dm_keylist {
    dm_key_t *keys;
    size_t n, cap;
} dm_keylist_t;

void dm_keylist_free(dm_keylist_t *l);

/* SCAN from cursor (0 = start): appends keys found to out and sets *next (0 = done).
 * count is a hint of how many keys to return (Redis semantics). A key present for the
 * whole iteration is returned at least once; a key absent for all of it never is.
 * Returns 0, DM_EINVAL for an invalid cursor, or DM_E*. */
int dm_kv_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, dm_keylist_t *out,
               uint64_t *next);

#endif
