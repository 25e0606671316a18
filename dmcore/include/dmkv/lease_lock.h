/* A remote lock word held under a lease (docs/leases.md), for index structures whose
 * locks need no more than the word: SepHash's merge and directory locks, ROLEX's leaf
 * locks. CHIME's leaf lock carries vacancy bits in the same word and has its own
 * (chime/leaf.c ch_lock_leaf), by the same rules. */
#ifndef DMKV_LEASE_LOCK_H
#define DMKV_LEASE_LOCK_H

#include <stdint.h>

#include "dmkv/batch.h"
#include "dmkv/gaddr.h"
#include "dmkv/worker.h"

/* A lock taken: where, the word our CAS wrote (bit 0 set, a fresh lease token in bits
 * 1..31: dm_lease_token), and the end of the hold on this thread's monotonic clock, timed
 * from before the CAS was posted: no write under the lock may leave after it (give it
 * as the batch's send-by bound). */
typedef struct dm_lease_hold {
    dm_gaddr_t addr;
    uint64_t word;
    uint64_t until_us;
    uint64_t async_failures; /* dm_async_failures() just before the CAS was posted */
} dm_lease_hold_t;

/* One attempt at the 8-byte lock word at addr (0 = free): the CAS from 0, and when the
 * word read back is held by a holder this thread has seen unchanged for more than
 * lease_ms and has fenced (dm_lease_takeover_ready, dmkv/fence.h), the CAS from that word
 * (a takeover: *took_over = 1). behind (NULL: none) receives behind_len bytes read from
 * addr right behind each CAS, fenced (rdma: after the CAS), so a holder sees what the last
 * holder left. Returns 1 taken (*hd filled, its hold hold_ms long), 0 held by a live
 * holder (the caller waits and tries again), or DM_E* (the CAS's batch failed). */
int dm_lease_lock_try(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                      void *behind, uint32_t behind_len, dm_lease_hold_t *hd, int *took_over);

/* A READ of len bytes at `at` into buf, posted right behind a lock word's CAS. */
typedef struct dm_lease_read {
    dm_gaddr_t at;
    void *buf;
    uint32_t len;
} dm_lease_read_t;
/* dm_lease_lock_try with n (at most DM_LEASE_READS_MAX) reads of any addresses behind each
 * CAS instead of one of the lock word's own, each fenced (rdma: after the CAS), in the CAS's
 * batch: a holder reads what the last holder wrote anywhere under the lock with no round
 * trip more (ROLEX: the entry's leaf and the root's model word). extra (NULL: none): more
 * verbs for the same batch, behind the reads and fenced too (the point index's bucket reads
 * and a new block's WRITE: the hybrid protocol's "lock ‖ buckets"), sent when they fit;
 * *extra_fresh (may be NULL) is set to 1 when the lock was taken with them all on the lock
 * word's memory node (one node's verbs run in posting order: they count as read under the
 * lock), else 0. Same returns. */
#define DM_LEASE_READS_MAX 4u
int dm_lease_lock_try_reads(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                            const dm_lease_read_t *reads, unsigned n, const dm_batch_t *extra,
                            int *extra_fresh, dm_lease_hold_t *hd, int *took_over);

/* dm_lease_lock_try_reads until the lock is taken, waiting poll_us (microseconds) between
 * attempts, however long the word stays held by a live holder (a dead one's lease is taken
 * over). The coroutines of one thread that wait for one word queue in arrival order and only
 * the oldest polls the memory node (pool/lease_lock.c "fairness"). *waits (may be NULL) is
 * advanced once per wait. Returns 0 taken (*hd filled), or DM_E* (a CAS's batch failed). */
int dm_lease_lock_wait(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                       const dm_lease_read_t *reads, unsigned n, const dm_batch_t *extra,
                       int *extra_fresh, dm_lease_hold_t *hd, int *took_over, uint32_t poll_us,
                       uint64_t *waits);

/* Free the lock: CAS from our word to 0, posted without waiting and without a bound (a
 * taker's word differs, so it cannot free a taker's lock). Returns 0 or a posting error. */
int dm_lease_unlock(dm_ctx_t *ctx, const dm_lease_hold_t *hd);

/* For a caller that posts hd's unlock CAS itself (in one batch with its writes): call it
 * then, as dm_lease_unlock does, so that the fairness rule (dm_lease_turns_given) sees every
 * release. */
void dm_lease_unlocking(const dm_lease_hold_t *hd);

/* Fairness between threads and gateways: a thread that took one word right after freeing it
 * itself DM_LEASE_HANDOVERS_MAX times in a row leaves it alone for a few of its round trips
 * after its next unlock, and its attempts meanwhile return 0 (held), so other threads' polls
 * find it free (pool/lease_lock.c). The windows left so far in this process (INFO
 * lease_turns_given). */
uint64_t dm_lease_turns_given(void);

#endif
