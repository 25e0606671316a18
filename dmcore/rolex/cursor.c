/* SCAN cursors of the ROLEX range role (rolex_range.h; issue 12 item 5): a cursor names a
 * leaf by its number in the leaf region, below 2^53 so that clients keeping it as a double
 * lose no bit: the leaf number + 1 in the low RR_CURSOR_LEAF_BITS bits (0 stays "start"),
 * and above it a keyed check (XXH3 of the number and the index's root, seeded with the
 * pool's cursor_secret) in the 27 bits left. A forged cursor fails the check but for one
 * guess in 2^27, and even then names a leaf slot of the region (the number is checked
 * against its capacity): the gateway reads nothing but a leaf, whose checksum it checks. */
#include "rolex_range.h"

#include <xxhash.h>

#include "dmkv/errors.h"

#define RR_CURSOR_BITS 53                /* integers a double holds exactly */
#define RR_CURSOR_DOMAIN 0x5258435552ull /* "RXCUR": apart from CHIME's uses of the secret */

static uint64_t check_of(uint64_t secret, dm_gaddr_t root, uint64_t v)
{
    uint64_t in[2] = {v, root};
    unsigned bits = RR_CURSOR_BITS - RR_CURSOR_LEAF_BITS;
    return XXH3_64bits_withSeed(in, sizeof(in), secret ^ RR_CURSOR_DOMAIN) & ((1ull << bits) - 1);
}

uint64_t rr_cursor_of(uint64_t secret, dm_gaddr_t root, uint64_t leaf)
{
    uint64_t v = leaf + 1; /* attach refuses a region of more than RR_CURSOR_LEAVES leaves */
    return check_of(secret, root, v) << RR_CURSOR_LEAF_BITS | v;
}

int rr_cursor_leaf(uint64_t secret, dm_gaddr_t root, uint64_t capacity, uint64_t cur,
                   uint64_t *leaf)
{
    uint64_t v = cur & RR_CURSOR_LEAVES;
    if (cur >> RR_CURSOR_BITS || !v || v > capacity) return DM_EINVAL;
    if (cur >> RR_CURSOR_LEAF_BITS != check_of(secret, root, v)) return DM_EINVAL;
    *leaf = v - 1;
    return 0;
}
