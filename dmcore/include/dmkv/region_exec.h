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

#endif
