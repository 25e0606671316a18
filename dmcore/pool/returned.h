/* Returned blocks (issue 12, "freed ranges returned to the pool after the grace period";
 * docs/leases.md "Returned blocks"): a worker's free lists are its own, so a block freed
 * by one gateway could serve no other, and a gateway that started late ran out of memory
 * while the others held hundreds of megabytes free. A block that sat reusable and unused
 * past its quarantine is pushed onto its node's block_free stack (superblock.h), and any
 * worker takes one before a new chunk. Internal to dmcore/pool. */
#ifndef DMKV_POOL_RETURNED_H
#define DMKV_POOL_RETURNED_H

#include <stdint.h>

#include "dmkv/alloc.h"
#include "dmkv/gaddr.h"

/* "DKRETBLK": a returned block's dm_chunk_hdr_t magic (owner 0, next_free the link). */
#define DM_RETURNED_MAGIC 0x4b4c425445524b44ull
#define DM_RETURN_MIN_BYTES (16u << 10) /* smaller blocks stay on their worker's lists */
#define DM_REFILL_POPS_MAX 16u          /* returned blocks one refill pops before a new chunk */

/* Push [addr, addr + bytes) (64-byte aligned, at least DM_RETURN_MIN_BYTES, past its
 * quarantine: nobody reads it) on its node's stack: WRITE its header, then CAS the head
 * (2 RTTs, 3 on the first push of a call sequence without *head). *head: the node's head
 * word as last seen (0 unknown), updated. Returns 1 pushed, 0 contended (the block is
 * still the caller's), DM_E* (outcome unknown: the block is then left to the stack). */
int returned_push(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t bytes, uint64_t *head);

/* Pop a returned block from any node's stack: 1 and *start, *bytes (64-byte aligned),
 * 0 when every stack is empty (1 RTT), DM_E*. 3 RTTs when one is taken (Treiber pop: the
 * heads, the top's header, the CAS). */
int returned_take(dm_ctx_t *ctx, dm_gaddr_t *start, uint64_t *bytes);

/* The same on the node's log_free stack, which holds only free-log blocks a clean stop
 * gave back (free_log.h): the next log's opening takes one whole, where a block of the
 * block_free stack (or of the stopped gateway's handoff) would be cut into pieces a
 * gateway may die holding. Their bytes count in returned_bytes too. */
int returned_push_log(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t bytes);
int returned_take_log(dm_ctx_t *ctx, dm_gaddr_t *start, uint64_t *bytes);

#endif
