/* ROLEX range query (§4.2, SCAN): the predicted leaves and the next ones in one batch, the
 * synonym chains of the covering leaf and those after it one batch per hop, then more
 * primaries a batch at a time if needed. A primary's chain
 * holds exactly the keys of its image range, so sorting each chain and concatenating in leaf order
 * is sorted. */
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

/* Append chain v's keys >= from (all when from is NULL), sorted, to out. Leaves read at
 * different instants can repeat a key (removed from one leaf and inserted into a later one
 * meanwhile): it is taken once. */
static int take_chain(const rx_leaf_t *v, unsigned n, const void *from, size_t flen, size_t max,
                      dm_rolex_key_t *out, size_t *got)
{
    rx_entry_t *e = malloc((size_t)n * DM_ROLEX_SLOTS * sizeof(*e));
    if (!e) return DM_ENOMEM;
    size_t m = 0;
    for (unsigned k = 0; k < n; k++)
        for (unsigned i = 0; i < v[k].count; i++)
            if (!from || rx_key_cmp(v[k].e[i].key, v[k].e[i].len, from, flen) >= 0)
                e[m++] = v[k].e[i];
    qsort(e, m, sizeof(*e), cmp_entry);
    for (size_t i = 0; i < m && *got < max; i++) {
        if (i && !cmp_entry(&e[i - 1], &e[i])) continue;
        out[*got].len = e[i].len;
        memcpy(out[*got].key, e[i].key, e[i].len);
        ++*got;
    }
    free(e);
    return 0;
}

/* Chains of heads[0..k) in order, keys >= from. */
static int take_leaves(dm_ctx_t *ctx, const rx_leaf_t *heads, unsigned k, const void *from,
                       size_t flen, size_t max, dm_rolex_key_t *out, size_t *got)
{
    rx_leaf_t *ch[DM_BATCH_MAX];
    unsigned n[DM_BATCH_MAX];
    int rc = rx_read_chains(ctx, heads, k, ch, n);
    if (rc) return rc;
    for (unsigned i = 0; i < k; i++) {
        if (!rc) rc = take_chain(ch[i], n[i], from, flen, max, out, got);
        from = NULL; /* later primaries hold larger images only */
        free(ch[i]);
    }
    return rc;
}

int dm_rolex_scan(dm_ctx_t *ctx, dm_rolex_t *r, const void *from, size_t len, size_t max,
                  dm_rolex_key_t *out, size_t *got)
{
    *got = 0;
    if (!max) return 0;
    uint64_t x = len ? dm_rolex_image(from, len) : 0, a, b;
    rx_window(r, x, &a, &b);
    rx_leaf_t *buf = malloc(DM_BATCH_MAX * sizeof(*buf));
    if (!buf) return DM_ENOMEM;
    /* The predicted leaves and the ones after them in the first batch (ROLEX §4.2: it "reads N
     * subsequent data" in the READ phase): about max / 8 leaves (leaves are 1/2 to full). */
    uint64_t last = r->hdr.primaries - 1;
    uint64_t e = b + max / (DM_ROLEX_SLOTS / 2) + 1;
    e = e > last ? last : e;
    e = e - a >= DM_BATCH_MAX ? a + DM_BATCH_MAX - 1 : e;
    int rc = rx_read_leaves(ctx, r, a, e, buf);
    uint64_t j = a;
    for (uint64_t i = a; !rc && i <= b; i++)
        if (buf[i - a].lo <= x) j = i;
    if (!rc && buf[j - a].lo > x) rc = DM_ECORRUPT; /* the model's bound failed */
    if (!rc)
        rc = take_leaves(ctx, &buf[j - a], (unsigned)(e - j + 1), len ? from : NULL, len, max, out,
                         got);
    for (uint64_t next = e + 1; !rc && *got < max && next <= last;) {
        uint64_t k = (max - *got) / (DM_ROLEX_SLOTS / 2) + 1, left = last + 1 - next;
        k = k > DM_BATCH_MAX ? DM_BATCH_MAX : k;
        k = k > left ? left : k;
        rc = rx_read_leaves(ctx, r, next, next + k - 1, buf);
        if (!rc) rc = take_leaves(ctx, buf, (unsigned)k, NULL, 0, max, out, got);
        next += k;
    }
    free(buf);
    return rc;
}
