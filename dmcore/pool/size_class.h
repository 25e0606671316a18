/* The allocator's large size classes, shared by the allocator (alloc.c) and the stacks of
 * returned blocks (returned.c): above DM_SIZE_CLASS_EXACT grains, 8 classes per doubling. */
#ifndef DMKV_POOL_SIZE_CLASS_H
#define DMKV_POOL_SIZE_CLASS_H

#include <stdint.h>

#define DM_SIZE_CLASS_EXACT 512 /* grains: every size up to this is a class of its own */
#define DM_SIZE_CLASS_STEPS 8   /* large classes per doubling */

/* The large class of units grains (units > DM_SIZE_CLASS_EXACT): its index from 0 (the
 * class of 512 grains and a step), units rounded up to a class size (up) or down, and that
 * size in *rounded (grains, may be NULL). */
static inline uint64_t dm_size_class_large(uint64_t units, int up, uint64_t *rounded)
{
    unsigned k = 63u - (unsigned)__builtin_clzll(units);        /* 2^k <= units < 2^(k+1), k >= 9 */
    uint64_t step = 1ull << (k - 3);                            /* an eighth of the doubling */
    uint64_t q = up ? (units + step - 1) / step : units / step; /* 8..16 */
    if (q == 16) k++, q = 8;
    if (rounded) *rounded = q << (k - 3);
    return (uint64_t)(k - 9) * DM_SIZE_CLASS_STEPS + (q - 8);
}

#endif
