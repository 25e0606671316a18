/* Chunk tails registered in the pool (issue 12, docs/leases.md "A dead gateway's chunk
 * tails"): each worker's current bump region is published as a watermark word in its
 * process's allocation record, so that a dead gateway's unused space can be taken over
 * online. Internal to dmcore/pool (alloc.c carves, tails.c adopts). */
#ifndef DMKV_POOL_TAILS_H
#define DMKV_POOL_TAILS_H

#include <stdint.h>

#include "dmkv/alloc.h"
#include "dmkv/gaddr.h"

#define DM_TAIL_ENTRIES 64 /* watermark words per record: workers per process */
/* Bytes reserved by one watermark CAS: at most this much of a dead worker's region is
 * lost (reserved, never carved). */
#define DM_TAIL_STEP (128u << 10)
#define DM_TAIL_LEFT_BITS 22 /* bytes above the watermark, in 64-byte units */
/* A record: this magic ("DKRECRD2"), DM_TAIL_ENTRIES entry words, then as many handoff
 * words (the gaddr of the free blocks a worker handed over at a clean stop, 0 = none), as
 * many reuse-horizon words and as many free-log words (free_log.h); a block of the
 * process's first region (not a range of its own: odd-sized ranges would clog the
 * free-range stacks). Records of the first format ("DKRECORD") end after the handoff words
 * and are still adopted. */
#define DM_TAIL_MAGIC 0x3244524345524b44ull
#define DM_TAIL_MAGIC_V1 0x44524f4345524b44ull
#define DM_TAIL_RECORD_WORDS_V1 (1 + 2 * DM_TAIL_ENTRIES)
#define DM_TAIL_RECORD_WORDS (1 + 4 * DM_TAIL_ENTRIES)
/* A handoff block: this magic ("DKHANDOF"), a count n, then n (gaddr, bytes) pairs. */
#define DM_HANDOFF_MAGIC 0x464f444e41484b44ull

/* An entry word: the watermark wm (first byte not reserved by the owner, 64-byte aligned)
 * and the bytes left above it in the region, both in 64-byte units; 0 = no region (never
 * had one, or taken over by a repairer). */
static inline uint64_t tail_word(dm_gaddr_t wm, uint64_t left)
{
    return (wm >> 6) << DM_TAIL_LEFT_BITS | (left >> 6);
}
static inline dm_gaddr_t tail_wm(uint64_t w)
{
    return (w >> DM_TAIL_LEFT_BITS) << 6;
}
static inline uint64_t tail_left(uint64_t w)
{
    return (w & ((1ull << DM_TAIL_LEFT_BITS) - 1)) << 6;
}

/* The entry index of a new allocator in this process's record, -1 when all are taken
 * (that allocator's regions are then never registered). */
int tails_entry_index(void);
/* The gaddr of entry idx in this process's record, 0 before dm_alloc_register ran. */
dm_gaddr_t tails_entry_addr(int idx);
/* The gaddr of worker idx's handoff word, 0 before dm_alloc_register ran. */
dm_gaddr_t tails_handoff_addr(int idx);
/* The gaddr of worker idx's reuse-horizon word and free-log word (free_log.h), 0 before
 * dm_alloc_register ran. */
dm_gaddr_t tails_horizon_addr(int idx);
dm_gaddr_t tails_log_addr(int idx);
/* Set this process's record (dm_alloc_register). */
void tails_set_record(dm_gaddr_t rec);

#define DM_SPARE_SLOTS 16 /* words of the superblock's spare_board */

/* Take a chunk tail from the pool's spare board (superblock.h spare_board) by CAS: 1 and
 * *start, *bytes set; 0 when the board is empty; DM_E*. 1 RTT, 2 when one is taken. */
int tails_board_take(dm_ctx_t *ctx, dm_gaddr_t *start, uint64_t *bytes);

/* Regions adopted from dead gateways and not yet used, process-wide (thread-safe): pop
 * one (1, *start and *bytes set; 0 when none), push one. */
int tails_pop_spare(dm_gaddr_t *start, uint64_t *bytes);
void tails_push_spare(dm_gaddr_t start, uint64_t bytes);

#endif
