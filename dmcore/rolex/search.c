/* ROLEX search (§3.4, §4.2): predict, read the predicted leaves in one batch, then the covering
 * leaf's synonym chain. */
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
        if (hops >= RX_CHAIN_MAX) return DM_ECORRUPT;
        rc = rx_read_leaf(ctx, l.next, &l);
    }
    return rc;
}
