/* Execute verbs against a memory region in this process: the software RNIC shared by the
 * local backend and dmkv-memnode's tcp server. */
#ifndef DMKV_REGION_EXEC_H
#define DMKV_REGION_EXEC_H

#include <stdint.h>

#include "dmkv/verbs.h"

/* Execute one verb against region [base, base + size). READ/WRITE copy with 8-byte-word
 * atomicity for aligned words (safe against concurrent threads); atomics need len 8 and
 * 8-byte alignment. Fills v->result for atomics. Returns 0, DM_ERANGE (outside the region),
 * DM_EALIGN (misaligned atomic) or DM_EINVAL (unknown op, bad length). */
int dm_region_exec(uint8_t *base, uint64_t size, dm_verb_t *v);

/* dm_region_exec for an executor that runs every verb of the region on one thread (the
 * memory node's tcp server): verbs are atomic with respect to each other because they run
 * one at a time, so no line locks. The locks serialized each 64-byte line's copy behind a
 * locked instruction, which kept the CPU from overlapping the cache misses of a verb's
 * lines: half the memory node's CPU under GET -P 16 (docs/throughput.md). */
int dm_region_exec_serial(uint8_t *base, uint64_t size, dm_verb_t *v);

#endif
