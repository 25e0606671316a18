/* Internal side of the WATCH write guards (kv.h dm_kv_guard_*). */
#ifndef DMKV_KV_GUARD_H
#define DMKV_KV_GUARD_H

#include "dmkv/kv.h"

/* The guard set of the calling coroutine, or NULL. */
dm_kv_guard_set_t *kv_guard_current(void);
/* key's guard in s (s may be NULL), or NULL. */
dm_kv_guard_t *kv_guard_find(dm_kv_guard_set_t *s, const void *key, size_t klen);

#endif
