/* ROLEX range query (§3.4): the covering leaf from the predicted ones, its synonym chain,
 * then the next primary leaves a batch at a time. A primary's chain holds exactly the keys
 * of its image range, so sorting each chain and concatenating in leaf order is sorted. */
#include "dmkv/rolex.h"

#include "dmkv/errors.h"

#include <stdlib.h>
#include <string.h>

#include "rolex_internal.h"

static int cmp_entry(const void *a, const void *b)
{
    const rx_entry_t *x = a, *y = b;
    return rx_key_cmp(x->key, x->len, y->key, y->len);
}

/* Append primary leaf l's chain keys >= from (all when from is NULL), sorted, to out. */
static int take_chain(dm_ctx_t *ctx, const rx_leaf_t *l, const void *from, size_t flen, size_t max,
                      dm_rolex_key_t *out, size_t *got)
{
    rx_leaf_t *v;
    unsigned n;
    int rc = rx_read_chain(ctx, l, 0, &v, NULL, &n);
    if (rc) return rc;
    rx_entry_t *e = malloc((size_t)n * DM_ROLEX_SLOTS * sizeof(*e));
    if (!e) {
        free(v);
        return DM_ENOMEM;
    }
    size_t m = 0;
    for (unsigned k = 0; k < n; k++)
        for (unsigned i = 0; i < v[k].count; i++)
            if (!from || rx_key_cmp(v[k].e[i].key, v[k].e[i].len, from, flen) >= 0)
                e[m++] = v[k].e[i];
    qsort(e, m, sizeof(*e), cmp_entry);
    for (size_t i = 0; i < m && *got < max; i++) {
        out[*got].len = e[i].len;
        memcpy(out[*got].key, e[i].key, e[i].len);
        ++*got;
    }
    free(e);
    free(v);
    return 0;
}

int dm_rolex_scan(dm_ctx_t *ctx, dm_rolex_t *r, const void *from, size_t len, size_t max,
                  dm_rolex_key_t *out, size_t *got)
{
    *got = 0;
    if (!max) return 0;
    uint64_t j;
    rx_leaf_t l;
    int rc = rx_locate(ctx, r, len ? dm_rolex_image(from, len) : 0, &j, &l);
    if (!rc) rc = take_chain(ctx, &l, len ? from : NULL, len, max, out, got);
    /* The following leaves: about (max - got) / 8 per batch (leaves are 1/2 to full). */
    rx_leaf_t *buf = malloc(32 * sizeof(*buf));
    if (!buf) return DM_ENOMEM;
    for (uint64_t next = j + 1; !rc && *got < max && next < r->hdr.primaries;) {
        uint64_t k = (max - *got) / (DM_ROLEX_SLOTS / 2) + 1, left = r->hdr.primaries - next;
        k = k > 32 ? 32 : k;
        k = k > left ? left : k;
        rc = rx_read_leaves(ctx, r, next, next + k - 1, buf);
        for (uint64_t i = 0; !rc && i < k && *got < max; i++)
            rc = take_chain(ctx, &buf[i], NULL, 0, max, out, got);
        next += k;
    }
    free(buf);
    return rc;
}
