/* Remote allocation of KV blocks (docs/DESIGN.md "Memory node", "Reclamation").
 * Chunks (DM_CHUNK_SIZE bytes) are taken one-sidedly, round robin over the pool's nodes:
 * a returned range of the same size popped from the node's free-range stack (superblock.h
 * DM_FREE_*) when it has one, else by FAA on the node's alloc_ptr; blocks are carved from the
 * worker's current chunk: index structures (RACE subtables, CHIME nodes and records, whose
 * addresses are kept in 64-byte units) in 64-byte units, 64-byte aligned; KV blocks in
 * 32-byte units (a 16-byte key and a 32-byte value take 96 bytes, not 128). Freed blocks are
 * quarantined for DM_GRACE_US before this worker reuses them, so a slot CAS cannot succeed by ABA
 * (operations older than DM_OP_TIMEOUT_US restart, see dm_ctx_check). One allocator per worker; not
 * thread-safe. */
#ifndef DMKV_ALLOC_H
#define DMKV_ALLOC_H

#include <stdint.h>

#include "dmkv/worker.h"

#define DM_UNIT 64u               /* bytes per unit (and alignment) of dm_alloc_block */
#define DM_GRAIN 32u              /* bytes per unit of dm_alloc_kv_block (and of free lists) */
#define DM_GRACE_US 2000000u      /* quarantine of freed blocks, microseconds */
#define DM_OP_TIMEOUT_US 1000000u /* operations older than this restart */

/* The allocator of worker w (its chunks, free lists, free log and claims), empty: the
 * first allocation takes a chunk. NULL when out of memory. dm_alloc_destroy frees the
 * local state only, no verbs: hand the free space over first (dm_alloc_handoff), or a
 * survivor takes it over as a dead gateway's. */
dm_alloc_t *dm_alloc_create(dm_worker_t *w);
void dm_alloc_destroy(dm_alloc_t *a);

/* Allocate bytes (rounded up to 64-byte units, 64-byte aligned) of pool memory; may cost
 * one RTT (chunk FAA). Returns 0 and *out, or DM_ENOMEM when every memory node is full. */
int dm_alloc_block(dm_ctx_t *ctx, uint64_t bytes, dm_gaddr_t *out);
/* The same for a KV block: bytes rounded up to DM_GRAIN (32) and 32-byte aligned. */
int dm_alloc_kv_block(dm_ctx_t *ctx, uint64_t bytes, dm_gaddr_t *out);

/* Bytes a dm_alloc_kv_block of `bytes` takes from the pool: rounded to DM_GRAIN and, for a
 * large block, to its size class (an eighth of a doubling). */
uint64_t dm_alloc_kv_block_bytes(uint64_t bytes);
/* Bytes a dm_alloc_block of `bytes` names: rounded up to DM_UNIT (64). Free and report
 * such a block with this size: a smaller one files it under a size class below the one
 * it was taken from. */
static inline uint64_t dm_alloc_block_bytes(uint64_t bytes)
{
    uint64_t units = (bytes + DM_UNIT - 1) / DM_UNIT;
    return (units ? units : 1) * DM_UNIT;
}

/* A block that was allocated but never published (no slot or entry ever pointed to it, so
 * no reader can hold its address) is reusable at once. bytes as passed to dm_alloc_block. */
void dm_alloc_unused(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes);

/* Return a block; it is reused only after DM_GRACE_US. bytes as passed to dm_alloc_block. */
void dm_alloc_free(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes);
/* The same with its quarantine dated from unlinked_us: dm_now_us() read after the CAS that
 * unlinked the block completed (a clock read the caller already has), with no other free
 * of this worker in between (the free lists stay in time order). */
void dm_alloc_free_at(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes, uint64_t unlinked_us);

/* Pool-wide limit on the chunk bytes gateways may take (Redis's maxmemory; 0 = none),
 * stored in the superblock so every gateway obeys it. Returns 0 or DM_E*. */
int dm_pool_set_maxmemory(dm_ctx_t *ctx, uint64_t bytes);
/* Reads the limit and the chunk bytes taken so far from the superblock. */
int dm_pool_usage(dm_ctx_t *ctx, uint64_t *maxmemory, uint64_t *used);

/* Pool-wide memory, 1 RTT: *taken = bytes of ranges taken from the memory nodes (chunks and
 * extents, headers included: what maxmemory counts), *live = bytes in blocks allocated and
 * not freed (KV blocks, subtables, CHIME nodes and records; a block in quarantine or on a
 * free list is not live). live lags each gateway by up to a cron tick, and keeps what a
 * dead gateway allocated but never linked. Returns 0 or DM_E*. */
int dm_pool_memory(dm_ctx_t *ctx, uint64_t *taken, uint64_t *live);

/* Add this worker's net change of live bytes to the pool's counter (one FAA on node 0,
 * waited for when wait, else posted), and its change of free-list bytes to the process's
 * (dm_alloc_listed_bytes). Called by each gateway thread's cron and at its stop. Returns 0
 * or DM_E*. */
int dm_alloc_flush_live(dm_ctx_t *ctx, int wait);

/* Return a whole range to its node's free-range stack: hdr is the gaddr of the range's
 * dm_chunk_hdr_t, bytes its size, header included (multiple of 64). The header is
 * rewritten (owner 0 = free, link to the old top) before the head CAS publishes it, and
 * pool_used is credited with bytes (maxmemory counts taken ranges only). Only for ranges
 * no process uses: dmkv-pool-reclaim, offline. A few RTTs. Returns 0, DM_EINVAL (range
 * outside the node or misaligned), DM_ERETRY (head CAS kept failing) or a verb error. */
int dm_pool_push_free(dm_ctx_t *ctx, dm_gaddr_t hdr, uint64_t bytes);

/* Walk node's free-range stack: *ranges and *bytes (headers included) of the ranges on it;
 * with offs non-NULL, their header offsets in stack order (offs holds max entries).
 * 1 RTT per range; meaningful only while nobody pops or pushes. Returns 0, DM_ECORRUPT (a
 * bad header, a cycle or more than max ranges), DM_EINVAL (no such node) or DM_E*. */
int dm_pool_free_list(dm_ctx_t *ctx, unsigned node, uint64_t *offs, uint64_t max, uint64_t *ranges,
                      uint64_t *bytes);

/* This process's owner id, stamped in the header of every chunk it takes (random, nonzero;
 * gateways log it at start). */
uint64_t dm_alloc_owner_id(void);

/* ---- chunk tails of dead gateways (issue 12, docs/leases.md) ----
 * Each worker publishes its current bump region in its process's allocation record on the
 * pool: one word per worker holding a watermark (the first byte it has not reserved) and
 * the bytes left above it. It raises the watermark by CAS, DM_TAIL_STEP (128 KB) at a time,
 * before carving past it (1 RTT per MiB carved), so everything above a dead gateway's
 * watermarks was never handed out and can be taken over while the pool serves. */

/* Create this process's allocation record (one small range: 1-3 RTTs) so that its
 * workers' regions are registered from their next region on. Call once, before the clock
 * board publishes it (dm_clock_tick writes it into the superblock's alloc_board slot of
 * this process). Returns 0 or DM_E* (the process then runs unregistered, as before). */
int dm_alloc_register(dm_ctx_t *ctx);
/* This process's record (gaddr of its first entry), 0 before dm_alloc_register. */
dm_gaddr_t dm_alloc_record(void);
typedef struct dm_alloc_tail_stats {
    uint64_t regions_adopted;        /* regions taken over by this process */
    uint64_t bytes_adopted;          /* their bytes */
    uint64_t spare_bytes;            /* of those, kept here (the spare board was full) */
    uint64_t handoffs_adopted;       /* handoff blocks of stopped gateways taken over */
    uint64_t handoff_bytes_adopted;  /* the free bytes they listed */
    uint64_t board_taken;            /* tails this process took from the spare board */
    uint64_t free_logs_adopted;      /* free logs of dead gateways' workers taken over */
    uint64_t free_log_bytes_adopted; /* the quarantined blocks they held */
    uint64_t free_log_early_bytes;   /* of those, large blocks past their reuse horizon that
                                        no claim named (reusable, never reused) */
} dm_alloc_tail_stats_t;
/* Every cron tick of each gateway thread: write the blocks this worker freed since the last
 * tick into its free log in the pool and raise its reuse horizon (the first tick creates
 * the log: a 1 MiB block), so that a gateway that finds this one dead takes its quarantine
 * over (dm_alloc_adopt; docs/leases.md "A dead gateway's free blocks"). 1 RTT, none when
 * idle; one more after a watermark raise, to bring the registered reserve back down to
 * twice the last tick's carving, at least 16 KB (docs/leases.md "The reserve comes back
 * down"). Returns 0 or DM_E* (the entries are written at the next tick). */
int dm_alloc_log_tick(dm_ctx_t *ctx);
/* 1 when w's frees staged since its last free-log tick name FREE_LOG_EAGER_BYTES (64 KB) or
 * more, or a batch of claims staged ahead waits for a tick not started yet, and no tick
 * runs: the caller runs dm_alloc_log_tick now rather than at its timer's next tick, so a
 * death loses at most that much of what was freed (docs/leases.md "Large frees are written
 * at once") and a backlog finds its claims written ("Claims staged before they are
 * needed"). The allocator calls w->log_due when either happens. */
int dm_alloc_log_due(const dm_worker_t *w);
/* Watermarks this process brought down towards its carve points (dm_alloc_log_tick). */
uint64_t dm_alloc_reserve_trims(void);

/* Take over the regions registered in a dead gateway's record rec (from the superblock's
 * alloc_board, read by the clock board when it found the gateway dead): each nonzero entry
 * is CASed to 0 and, when the CAS wins, the space above its watermark goes to the spare
 * board (or this process's spares) for workers to carve before taking new chunks. Handoff
 * blocks (dm_alloc_handoff) are taken the same way, their blocks queued on ctx's worker's
 * lists; so are the blocks each worker's free log (dm_alloc_log_tick) says it freed and
 * cannot have reused (its reuse horizon is CASed to "taken"). *got: what this call took
 * (regions_adopted, bytes_adopted, handoffs_adopted, handoff_bytes_adopted,
 * free_logs_adopted, free_log_bytes_adopted, free_log_early_bytes; the other fields 0). A few RTTs,
 * plus one per 4096 handed blocks and one per 64 KB of free log. Returns 0, DM_ECORRUPT (rec is not
 * a record) or DM_E*. */
int dm_alloc_adopt(dm_ctx_t *ctx, dm_gaddr_t rec, dm_alloc_tail_stats_t *got);

/* At a clean stop, once no operation runs on ctx's worker: write what the worker holds
 * free (its free lists and quarantine, the rest of its region below the watermark, the
 * process's spare regions) into a handoff block named in its record, so that the gateway
 * that next claims this process's clock-board slot takes it over (dm_alloc_adopt) instead
 * of the space staying taken. The lists are emptied. *pieces, *bytes: what was handed
 * over. 2-3 RTTs. Returns 0 or DM_E* (what was gathered is then lost, as before). */
int dm_alloc_handoff(dm_ctx_t *ctx, uint64_t *pieces, uint64_t *bytes);

/* This process's counts of chunk tails, free lists and free logs taken over from dead
 * gateways (INFO), relaxed atomics. */
void dm_alloc_tail_stats(dm_alloc_tail_stats_t *s);
/* Bytes of the chunk tails waiting on the pool's spare board (taken over from dead
 * gateways, not carved yet), 1 RTT. Returns 0 or DM_E*. */
int dm_pool_spare_board_bytes(dm_ctx_t *ctx, uint64_t *bytes);

/* Return to the pool the blocks of ctx's worker (16 KB and over) that sat reusable and
 * unused for a second past their quarantine: pushed on their node's returned-block stack,
 * where any gateway's worker takes them before a new chunk (issue 12: a gateway's free
 * lists served no other gateway). Called by the gateway's cron on each worker; at most 64
 * blocks, 2 RTTs each. Returns 0 or DM_E*. */
int dm_alloc_return_idle(dm_ctx_t *ctx);
/* Bytes on the pool's returned-block stacks (superblock returned_bytes), 1 RTT. Returns 0
 * or DM_E*. */
int dm_pool_returned_bytes(dm_ctx_t *ctx, uint64_t *bytes);
/* Blocks this process returned to the pool, and took from it (INFO). */
void dm_alloc_returned_stats(uint64_t *returned, uint64_t *taken);

/* Bytes in this process's free lists (quarantined or reusable), all workers, as of each
 * worker's last cron tick (dm_alloc_flush_live). */
uint64_t dm_alloc_listed_bytes(void);
/* Bytes of those claimed ahead of use (small blocks claimed in a batch, docs/leases.md "Claims
 * in batches that grow"), INFO allocator_claimed_ahead_bytes: what a death of this process
 * loses of its lists besides the names window. Flushed as dm_alloc_listed_bytes is. */
uint64_t dm_alloc_claimed_ahead_bytes(void);
/* Bytes of those in no free log (INFO allocator_unlogged_free_bytes): a death of this
 * process loses them, as no repairer can know they were free. Flushed as
 * dm_alloc_listed_bytes is. */
uint64_t dm_alloc_unlogged_free_bytes(void);
/* Bytes this process's workers freed (dm_alloc_free, dm_alloc_free_at), ever, as of each
 * worker's last cron tick: a death loses what was freed in its last tens of milliseconds
 * (docs/leases.md), so a test's bound on that follows this rate. */
uint64_t dm_alloc_freed_bytes(void);
/* Bytes left to carve in this process's workers' current regions, as of each worker's
 * last cron tick (their chunks' unused rest: taken from the pool, free for this process). */
uint64_t dm_alloc_region_bytes(void);
/* Bytes of this process's free logs in the pool (dm_alloc_log_tick: 1 MiB per worker). */
uint64_t dm_alloc_free_log_bytes(void);
/* Allocations that found the pool full and waited (at most DM_GRACE_US) for one of their
 * worker's quarantined blocks instead of failing with DM_ENOMEM. */
uint64_t dm_alloc_oom_waits(void);

/* Blocks this process claimed in its free logs before reusing or returning them: large
 * ones, and small ones freed a names window before the horizon (docs/leases.md "Claims",
 * "Names"), INFO allocator_claims. */
uint64_t dm_alloc_claims(void);
/* Reuses that waited for a free-log tick to write their claim (one or two round trips),
 * INFO allocator_claim_waits: a backlog of old blocks reused fast should wait about once
 * (docs/leases.md "Claims staged before they are needed"). */
uint64_t dm_alloc_claim_waits(void);

/* Bytes this worker has taken from the pool in chunks, and bytes in quarantine/free. */
uint64_t dm_alloc_chunk_bytes(const dm_alloc_t *a);

/* DM_ERETRY when ctx's operation has run past DM_OP_TIMEOUT_US (it must restart before
 * its next CAS), else 0. */
int dm_ctx_check(const dm_ctx_t *ctx);

#endif
