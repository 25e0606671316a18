/* Remote allocation of KV blocks (DESIGN.md "Memory node", "Reclamation").
 * Chunks (DM_CHUNK_SIZE bytes) are taken one-sidedly by FAA on a memory node's alloc_ptr,
 * round robin over the pool's nodes; blocks of 64-byte units are carved from the worker's
 * current chunk. Freed blocks are quarantined for DM_GRACE_US before this worker reuses
 * them, so a slot CAS cannot succeed by ABA (operations older than DM_OP_TIMEOUT_US
 * restart, see dm_ctx_check). One allocator per worker; not thread-safe. */
#ifndef DMKV_ALLOC_H
#define DMKV_ALLOC_H

#include <stdint.h>

#include "dmkv/worker.h"

#define DM_UNIT 64u               /* bytes per allocation unit (RACE slot length unit) */
#define DM_GRACE_US 2000000u      /* quarantine of freed blocks, microseconds */
#define DM_OP_TIMEOUT_US 1000000u /* operations older than this restart */

dm_alloc_t *dm_alloc_create(dm_worker_t *w);
void dm_alloc_destroy(dm_alloc_t *a);

/* Allocate bytes (rounded up to 64-byte units) of pool memory; may cost one RTT (chunk
 * FAA). Returns 0 and *out, or DM_ENOMEM when every memory node is full. */
int dm_alloc_block(dm_ctx_t *ctx, uint64_t bytes, dm_gaddr_t *out);

/* Return a block; it is reused only after DM_GRACE_US. bytes as passed to dm_alloc_block. */
void dm_alloc_free(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes);

/* Pool-wide limit on the chunk bytes gateways may take (Redis's maxmemory; 0 = none),
 * stored in the superblock so every gateway obeys it. Returns 0 or DM_E*. */
int dm_pool_set_maxmemory(dm_ctx_t *ctx, uint64_t bytes);
/* Reads the limit and the chunk bytes taken so far from the superblock. */
int dm_pool_usage(dm_ctx_t *ctx, uint64_t *maxmemory, uint64_t *used);

/* This process's owner id, stamped in the header of every chunk it takes (random, nonzero;
 * gateways log it at start). */
uint64_t dm_alloc_owner_id(void);

/* Bytes this worker has taken from the pool in chunks, and bytes in quarantine/free. */
uint64_t dm_alloc_chunk_bytes(const dm_alloc_t *a);

/* DM_ERETRY when ctx's operation has run past DM_OP_TIMEOUT_US (it must restart before
 * its next CAS), else 0. */
int dm_ctx_check(const dm_ctx_t *ctx);

#endif
