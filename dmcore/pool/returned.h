/* Returned blocks (issue 12, "freed ranges returned to the pool after the grace period";
 * docs/leases.md "Returned blocks"): a worker's free lists are its own, so a block freed
 * by one gateway could serve no other, and a gateway that started late ran out of memory
 * while the others held hundreds of megabytes free. A block that sat reusable and unused
 * past its quarantine is pushed onto a stack of its node (superblock.h), and any
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
#define DM_TAKE_RETURNED_POPS 4u        /* ...and one large write before it carves */

/* Stacks of returned blocks per node, one per size class (superblock.h block_free_class;
 * the allocator's large classes, 8 per doubling from 16 KiB): a taker pops from its own
 * class, whose every block fits it with less than an eighth to spare, then from the larger
 * ones. With one stack a pop gave whatever was on top, too small for a random large write
 * about half the time, and the write carved; with one stack per doubling, writes of the
 * lower half of a doubling cut its large blocks and the upper half carved
 * (sephash/it_pool_memory: 28 and 14.5 KB carved per 20-200 KB rewrite). */
#define DM_RETURNED_CLASSES 64

/* The class of a returned block of bytes (at least DM_RETURN_MIN_BYTES): the largest
 * class whose size is at most bytes, the last for 3.75 MiB and more. */
unsigned returned_class(uint64_t bytes);
/* The first class returned_take looks at for need bytes: need's class rounded up (the last
 * for needs over its size). */
unsigned returned_need_class(uint64_t need);

/* Push [addr, addr + bytes) (64-byte aligned, at least DM_RETURN_MIN_BYTES, past its
 * quarantine: nobody reads it) on its node's stack of its class: WRITE its header, then CAS
 * the head (2 RTTs, 3 on the first push of a call sequence without *head). *head: that
 * stack's head word as last seen (0 unknown: a caller resets it when the node or
 * returned_class changes), updated. Returns 1 pushed, 0 contended (the block is still the
 * caller's), DM_E* (outcome unknown: the block is then left to the stack). */
int returned_push(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t bytes, uint64_t *head);

/* Pop a returned block for a need of need bytes from any node's stacks: the class of need
 * rounded up and the larger ones, smallest first, whose blocks all hold need (but for
 * needs over the last class's size), then block_free (pools made before 2026-12-05: any
 * size; the caller checks *bytes). 1 and *start, *bytes (64-byte aligned), 0 when all those
 * stacks are empty (1 RTT), DM_E*. 3 RTTs when one is taken (Treiber pop: the heads, the
 * top's header, the CAS). */
int returned_take(dm_ctx_t *ctx, uint64_t need, dm_gaddr_t *start, uint64_t *bytes);

/* The same on the node's log_free stack, which holds only free-log blocks a clean stop
 * gave back (free_log.h): the next log's opening takes one whole, where a block of the
 * block_free stack (or of the stopped gateway's handoff) would be cut into pieces a
 * gateway may die holding. Their bytes count in returned_bytes too. */
int returned_push_log(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t bytes);
int returned_take_log(dm_ctx_t *ctx, dm_gaddr_t *start, uint64_t *bytes);

#endif
