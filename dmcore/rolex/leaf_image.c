/* ROLEX leaf images (§3.3), pure: the checksum, the checks every reader runs on an image
 * read from the pool (where a torn write or a corrupt region may put any bytes), and the
 * ordered search of its entries. No verbs: tests/fuzz/fuzz_rolex.c runs these on any bytes. */
#include "dmkv/rolex.h"

#include <string.h>
#include <xxhash.h>

#include "rolex_internal.h"

/* The checksum covers what a locked writer rewrites, except itself: the paper's leaf
 * checksum, so that a reader never takes a half-written leaf (a WRITE is not atomic). */
uint64_t rx_leaf_sum(const rx_leaf_t *l)
{
    uint64_t h = XXH3_64bits_withSeed(&l->reserved, RX_LEAF_BYTES - 40,
                                      XXH3_64bits(&l->next, 16)); /* [40, 816), then [16, 32) */
    return h | 1; /* never 0: a zeroed leaf is torn */
}

int rx_leaf_ok(const rx_leaf_t *l)
{
    if (l->sum != rx_leaf_sum(l) || l->count > DM_ROLEX_SLOTS) return 0;
    for (unsigned i = 0; i < l->count; i++) /* every reader copies rx_elen bytes */
        if (rx_elen(&l->e[i]) > DM_ROLEX_KEY_MAX) return 0;
    return 1;
}

int rx_key_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : alen < blen ? -1 : alen > blen;
}

int rx_leaf_find(const rx_leaf_t *l, const void *key, size_t len)
{
    unsigned a = 0, b = (unsigned)l->count;
    while (a < b) {
        unsigned m = (a + b) / 2;
        int c = rx_key_cmp(l->e[m].key, rx_elen(&l->e[m]), key, len);
        if (c == 0) return (int)m;
        if (c < 0)
            a = m + 1;
        else
            b = m;
    }
    return -(int)a - 1;
}

int rx_leaf_above(const rx_leaf_t *l, const void *key, size_t len)
{
    const rx_entry_t *last = l->count ? &l->e[l->count - 1] : NULL;
    return last && rx_key_cmp(last->key, rx_elen(last), key, len) > 0;
}
