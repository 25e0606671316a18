/* The hybrid protocol (DESIGN.md "Keeping them consistent", NOTES.md §6): every change of a
 * key between absent and present in RACE happens under the CHIME lock of the leaf that
 * covers it, with the key's leaf entry present and flagged pending around the slot CAS.
 * Updates of a present key never touch CHIME. So CHIME ⊇ RACE at every instant. */
#ifndef DMKV_KV_HYBRID_H
#define DMKV_KV_HYBRID_H

#include "dmkv/race.h"

/* dm_race_set with the protocol: an update of a present key goes straight to RACE (3 RTTs);
 * when the key is absent and decide() wants it written, the write is redone under the leaf
 * lock with a pending entry (lock + neighborhood 1 RTT, pending entry 1 RTT, RACE insert,
 * unlock posted without waiting). Same arguments and results as dm_race_set. */
int dm_hybrid_set(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block, uint64_t block_len,
                  dm_race_decide_fn decide, void *arg, int keep_ttl, dm_race_item_t *old);

/* dm_race_delete with the protocol: lock the leaf (1 RTT); no entry means the key is absent
 * (0, nothing else read); else flag the entry pending (1 RTT), delete from RACE, remove the
 * entry with the unlock. Same arguments and results as dm_race_delete. */
int dm_hybrid_delete(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_decide_fn decide,
                     void *arg);

#endif
