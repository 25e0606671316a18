/* The hybrid protocol (docs/DESIGN.md "Keeping them consistent", docs/NOTES.md §6): every change of
 * a key between absent and present in RACE happens under the CHIME lock of the leaf that covers it,
 * with the key's leaf entry present and flagged pending around the slot CAS. Updates of a present
 * key never touch CHIME. So CHIME ⊇ RACE at every instant. */
#ifndef DMKV_KV_HYBRID_H
#define DMKV_KV_HYBRID_H

#include "dmkv/index.h"

/* dm_race_set with the protocol: an update of a present key goes straight to RACE (3 RTTs);
 * when the key is absent and decide() wants it written, the write is redone under the leaf
 * lock with a pending entry (lock + neighborhood 1 RTT, pending entry 1 RTT, RACE insert,
 * unlock posted without waiting). Same arguments and results as dm_race_set. */
int dm_hybrid_set(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block, uint64_t block_len,
                  dm_point_decide_fn decide, void *arg, int keep_ttl, dm_point_item_t *old);

/* A SET that does not depend on the old value (no NX/XX/GET/KEEPTTL, no WATCH guard) of a
 * key whose slot this worker saw within DM_OP_TIMEOUT_US: one round trip (dm_race_update_blind:
 * WRITE the block ‖ CAS the slot). An update of a present key changes no presence, so CHIME is not
 * involved. Returns 1 written, 2 not taken (run dm_hybrid_set), or DM_E* (DM_EIO / DM_ETIMEDOUT:
 * outcome unknown). */
int dm_hybrid_set_blind(dm_ctx_t *ctx, const void *key, size_t klen, const uint8_t *block,
                        uint64_t block_len);

/* dm_race_delete with the protocol: lock the leaf (1 RTT), flag the key's entry pending
 * (1 RTT), delete from RACE, remove the entry with the unlock. Without an entry the RACE
 * delete still runs under the lock (1 RTT when RACE has no candidate): a key in RACE
 * without its entry breaks CHIME ⊇ RACE, and DEL is its repair (logged, INFO
 * hybrid_repairs). Same arguments and results as dm_race_delete. */
int dm_hybrid_delete(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_decide_fn decide,
                     void *arg);

/* Make key's CHIME entry agree with RACE under the leaf lock: RACE holds it and no entry →
 * a settled entry is inserted; an entry but RACE lacks it → removed; pending → settled.
 * Runs after a presence change whose writes completed so late that the lease may have been
 * taken over meanwhile (dm_chime_lock_in_doubt). 3-5 RTTs. Returns 1 when something was
 * repaired, 0 when they agreed, or DM_E*. */
int dm_hybrid_reconcile(dm_ctx_t *ctx, const void *key, size_t klen);

#endif
