/* ROLEX search (§3.4, §4.2): predict, read the predicted leaves in one batch, then the covering
 * leaf's synonym chain as far as the leaf whose keys reach past the key. Stopping there is safe:
 * the chain is sorted across its leaves and keys only move forward in it (insert.c), so a key
 * present throughout the search is in that leaf or in one read before it. */
#include "dmkv/rolex.h"

#include "dmkv/errors.h"

#include "rolex_internal.h"

int dm_rolex_search(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len)
{
    if (!len) return DM_EINVAL;
    if (len > DM_ROLEX_KEY_MAX) return 0; /* never stored */
    uint64_t j;
    rx_leaf_t l;
    int rc = rx_locate(ctx, r, dm_rolex_image(key, len), &j, &l);
    for (unsigned hops = 0; !rc; hops++) {
        if (rx_leaf_find(&l, key, len) >= 0) return 1;
        if (!l.next) return 0;
        const rx_entry_t *last = l.count ? &l.e[l.count - 1] : NULL;
        if (last && rx_key_cmp(last->key, last->len, key, len) > 0) return 0;
        if (hops >= RX_CHAIN_MAX) return DM_ECORRUPT;
        rc = rx_read_leaf(ctx, l.next, &l);
    }
    return rc;
}
