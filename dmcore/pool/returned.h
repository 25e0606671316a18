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

/* Pop a returned block for a need of need bytes from any node's stacks: the class of need
 * rounded up and the larger ones, smallest first, whose blocks all hold need (but for
 * needs over the last class's size), then block_free (pools made before 2026-12-05: any
 * size; the caller checks *bytes). 1 and *start, *bytes (64-byte aligned), 0 when all those
 * stacks are empty (1 RTT), DM_E*. 3 RTTs when one is taken (Treiber pop: the heads, the
 * top's header, the CAS). */
int returned_take(dm_ctx_t *ctx, uint64_t need, dm_gaddr_t *start, uint64_t *bytes);

/* Push n (at most DM_RETURN_MANY_MAX) blocks at once, each [addr[i], addr[i] + bytes[i])
 * (64-byte aligned, at least DM_RETURN_MIN_BYTES, past its quarantine: nobody reads it) on
 * its node's stack of its class, its first 64 bytes the header and link: the blocks of one
 * stack as a chain, every link written in one batch and every stack's head CASed in the next (3
 * RTTs, and 2 more per round of contention, up to 8 rounds), where one block after another took 2
 * RTTs each. A worker claims in its free log the blocks it returns before it pushes them, and a
 * death between the claim and the push loses them; the window was 2 RTTs a block
 * (dm_alloc_return_idle returns up to 64 a call), now 3 in all. out[i]: 1 pushed, 0 not (still the
 * caller's: contended, or not pushable), DM_E* (outcome unknown: the block may be on its stack, so
 * it is not the caller's any more). Returns 0 or the DM_E* that ended the call. */
#define DM_RETURN_MANY_MAX 64
int returned_push_many(dm_ctx_t *ctx, const dm_gaddr_t *addr, const uint64_t *bytes, int *out,
                       size_t n);

/* Push one block on, or pop one from, its node's log_free stack, which holds only free-log
 * blocks a clean stop gave back (free_log.h): the next log's opening takes one whole, where
 * a block of the block_free stacks (or of the stopped gateway's handoff) would be cut into
 * pieces a gateway may die holding. Their bytes count in returned_bytes too. The push
 * (header WRITE, then the head's CAS: 3 RTTs) returns 1 pushed, 0 contended (still the
 * caller's), DM_EINVAL (not 64-byte aligned or too small) or DM_E* (outcome unknown: the
 * block may be on the stack); the pop returns as returned_take. */
int returned_push_log(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t bytes);
int returned_take_log(dm_ctx_t *ctx, dm_gaddr_t *start, uint64_t *bytes);

#endif
