/* ROLEX search (§3.4, §4.2): predict, read the window's leaves in one batch (LT positions), then
 * walk forward from the covering entry's leaf along its chain as far as the leaf whose keys reach
 * past the key. Starting there is safe: every key of the chain with an image >= the entry's low
 * is in that leaf or after it (rolex_internal.h, I(e)). Stopping is safe: the chain is sorted
 * across its leaves and keys only move forward in it (insert.c), so a key present throughout the
 * search is in that leaf or in one read before it. Keys sharing an image sit in one chain, from
 * the entry whose low is at or below their image on: the walk passes through all of them. */
#include "dmkv/rolex.h"

#include "dmkv/errors.h"

#include <stdlib.h>

#include "rolex_internal.h"

int dm_rolex_search(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len)
{
    if (!len) return DM_EINVAL;
    if (len > DM_ROLEX_KEY_MAX) return 0; /* never stored */
    rx_win_t w;
    int rc = rx_win_read(ctx, r, dm_rolex_image(key, len), 0, &w);
    if (rc) return rc;
    rx_probe_t pr; /* a long key's match is confirmed by its record (+1 RTT) */
    rx_probe_init(&pr, key, len);
    uint64_t p = w.j;
    const rx_leaf_t *l = &w.buf[p - w.a];
    rx_leaf_t fresh;
    for (unsigned hops = 0;; hops++) {
        rc = rx_probe_prepare(ctx, &pr, l, 1);
        if (rc) break;
        if (rx_leaf_find(l, &pr) >= 0) {
            rc = 1;
            break;
        }
        if (!l->next || rx_leaf_above(l, &pr)) break;
        if (hops >= RX_CHAIN_MAX) {
            rc = RX_CORRUPT("a chain of over %u hops", RX_CHAIN_MAX);
            break;
        }
        /* The next leaf from the window while the walk has read nothing since (a later
         * position was read later: chain order in time), else read now. */
        const rx_leaf_t *nx = l != &fresh ? rx_win_next(r, &w, &p) : NULL;
        if (nx) {
            l = nx;
            continue;
        }
        rc = rx_read_leaf(ctx, l->next, &fresh);
        if (rc) break;
        l = &fresh;
    }
    free(w.buf);
    rx_probe_free(&pr);
    rx_notice(ctx, r, w.model); /* after: the answer above stands (sync.c) */
    return rc;
}
