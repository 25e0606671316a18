/* Fencing a lease holder at a memory node before taking its lease over (docs/leases.md
 * "Fencing"). A holder's writes that left its process before its hold ended can still
 * arrive late (a retransmitting network, a thread stopped between its last check and the
 * socket write or doorbell). A gateway about to take a lease over first asks the memory
 * node that holds the locked object to cut every connection of the holder (the holder id
 * is in the lease token, dmkv/lease.h): whatever the holder sent and the node had not
 * executed is then dropped, and what it sends later is past its send-by bound and never
 * leaves it. */
#ifndef DMKV_FENCE_H
#define DMKV_FENCE_H

#include <stdint.h>

#include "dmkv/worker.h"

#define DM_FENCE_WAIT_MS 1000 /* longest wait for the node's ack, milliseconds */

/* Have memory node `node` cut the connections of holder (a holder id, dm_holder_id) and
 * wait for its ack: a request word claimed by CAS in the node's fence mailbox
 * (dm_superblock_t.fence_box), then its ack polled about every millisecond (the node scans
 * the mailbox after the tcp request that wrote it, and every MN_FENCE_POLL_MS when it has an
 * rdma listener). A few round trips; only lease takeovers pay them. Returns 0 when
 * the node cut them (also: holder 0 or our own id, nothing to cut; a node without
 * DM_CAP_FENCE, an older memnode or the in-process local pool, whose connections cannot
 * deliver late), DM_ETIMEDOUT when no ack came within DM_FENCE_WAIT_MS (the caller must
 * not take the lease over now), or a verb error. */
int dm_fence_holder(dm_ctx_t *ctx, unsigned node, uint16_t holder);

/* A waiter just read the lock word at addr as `word` (held): 1 when it may take the lease
 * over now, else 0 (keep waiting). Now means: this thread has seen exactly that word there
 * for more than lease_ms (dm_lease_observed_us, dmkv/lease.h), and the holder's
 * connections to addr's memory node are cut (dm_fence_holder), once per word per thread:
 * the thread's other coroutines that find the same word while one fences wait for it. */
int dm_lease_takeover_ready(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t word, uint32_t lease_ms);

/* Fences carried out by this process (INFO dmkv chime_lease_fences). Thread-safe. */
uint64_t dm_fence_count(void);

#endif
