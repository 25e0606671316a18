/* Per-thread active-expiry queue: keys this worker gave an expiry (SET EX/PX/EXAT/PXAT,
 * SETEX, PSETEX, EXPIRE & co, GETEX, RENAME/COPY of a volatile key), ordered by expiry
 * time in a binary min-heap. The cron tick (server/cron.c) removes due keys with
 * dm_kv_del_expired, which deletes a key only if it is still expired (a key rewritten
 * meanwhile, by any gateway, is left alone). Only the owning thread touches its heap. */
#ifndef GW_SERVER_EXPIRY_TRACK_H
#define GW_SERVER_EXPIRY_TRACK_H

#include <stddef.h>
#include <stdint.h>

#include "server/thread.h"

#define GW_EXPIRY_TRACK_MAX (1u << 20) /* entries per thread; beyond it keys expire lazily */

/* Remember that key (klen bytes) expires at expire_ms (absolute wall-clock ms; 0: no-op).
 * Must run on th's thread. Silently drops the entry when the heap is full or out of
 * memory (the key then only expires lazily: reads never return it). */
void gw_expiry_track(gw_thread_t *th, const void *key, size_t klen, uint64_t expire_ms);

/* Pop one entry due at now_ms or earlier into *key / *klen (malloc'd, caller frees).
 * Returns 1 when one was popped, 0 when none is due. */
int gw_expiry_pop_due(gw_thread_t *th, uint64_t now_ms, char **key, size_t *klen);

/* Free th's heap (thread shutdown). */
void gw_expiry_free(gw_thread_t *th);

#endif
