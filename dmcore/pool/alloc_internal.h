/* The allocator's entry points for the other files of dmcore/pool (tails.c: handoffs;
 * free_log.c: log blocks and taken-over logs). Implemented in alloc.c; not for use outside
 * dmcore/pool. */
#ifndef DMKV_POOL_ALLOC_INTERNAL_H
#define DMKV_POOL_ALLOC_INTERNAL_H

#include <stdint.h>

#include "dmkv/alloc.h"
#include "dmkv/gaddr.h"

/* Queue [addr, addr + bytes) on a's free lists, cut into class-sized pieces, each
 * quarantined from now and so in the free log (alloc.c): space handed over by a gateway
 * that stopped or taken from a dead one's log, or taken from the spare board or a
 * returned stack and too small for a region. */
void alloc_queue_quarantined(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes);

/* A free log's block (bytes, a multiple of 64): one a clean stop gave back (the nodes'
 * log_free stacks, returned.h) when there is one, else a new block. 0 and *out, or DM_E*. */
int alloc_take_log_block(dm_ctx_t *ctx, uint64_t bytes, dm_gaddr_t *out);

/* Give back a free log's block nobody reads any more (a clean stop): onto its node's
 * log_free stack whole; when the stack stays contended it is listed as reusable at once
 * (and so handed over with the lists). */
void alloc_put_log_block(dm_ctx_t *ctx, dm_gaddr_t blk, uint64_t bytes);

#endif
