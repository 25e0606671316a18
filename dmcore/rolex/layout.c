/* ROLEX bulk build and handles (§3.2, §4.1 training; §3.3 leaves): lays out primary leaves and
 * their synonym chains in one leaf region and writes the model region. */
#include "dmkv/rolex.h"

#include "dmkv/alloc.h"
#include "dmkv/errors.h"

#include <stdlib.h>
#include <string.h>

#include "rolex_internal.h"

#define RX_EPS_MAX 16u /* window of 2 eps + 2 leaves fits one batch */

static void fill_leaf(rx_leaf_t *l, uint64_t lo, const char *const *keys, const size_t *lens,
                      size_t from, size_t to)
{
    memset(l, 0, sizeof(*l));
    l->lo = lo;
    for (size_t i = from; i < to; i++) {
        l->e[i - from].len = (uint16_t)lens[i];
        memcpy(l->e[i - from].key, keys[i], lens[i]);
    }
    l->count = to - from;
}

int dm_rolex_build(dm_ctx_t *ctx, const char *const *keys, const size_t *lens, size_t n,
                   const dm_rolex_cfg_t *cfg, dm_gaddr_t *root)
{
    unsigned eps = cfg && cfg->eps ? cfg->eps : 1;
    unsigned fill = cfg && cfg->fill ? cfg->fill : 12;
    if (eps > RX_EPS_MAX || fill > DM_ROLEX_SLOTS) return DM_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!lens[i]) return DM_EINVAL;
        if (lens[i] > DM_ROLEX_KEY_MAX) return DM_ETOOBIG;
        if (i && rx_key_cmp(keys[i - 1], lens[i - 1], keys[i], lens[i]) >= 0) return DM_EINVAL;
    }
    /* Primary j holds keys [start[j], start[j + 1]): a new one starts once fill keys are in
     * and the image changes, so equal images share a chain. */
    size_t *start = malloc((n + 2) * sizeof(*start));
    if (!start) return DM_ENOMEM;
    uint64_t L = 0, S = 0;
    start[L++] = 0;
    for (size_t i = 1; i < n; i++)
        if (i - start[L - 1] >= fill &&
            dm_rolex_image(keys[i], lens[i]) != dm_rolex_image(keys[i - 1], lens[i - 1]))
            start[L++] = i;
    start[L] = n;
    for (uint64_t j = 0; j < L; j++) {
        size_t k = start[j + 1] - start[j];
        S += k > DM_ROLEX_SLOTS ? (k - 1) / DM_ROLEX_SLOTS : 0;
    }
    uint64_t cap = L + S + (cfg && cfg->spare ? cfg->spare : L + 64);
    uint64_t *lo = malloc(L * sizeof(*lo));
    rx_seg_t *segs = malloc(L * sizeof(*segs));
    rx_leaf_t *leaves = calloc(L + S, sizeof(*leaves));
    int rc = DM_ENOMEM;
    if (!lo || !segs || !leaves) goto out;
    dm_gaddr_t region, rt;
    rc = dm_alloc_block(ctx, cap * RX_LEAF_BYTES, &region);
    if (rc) goto out;
    uint64_t syn = L; /* next synonym leaf */
    for (uint64_t j = 0; j < L; j++) {
        lo[j] = j ? dm_rolex_image(keys[start[j]], lens[start[j]]) : 0;
        size_t s = start[j], e = start[j + 1];
        rx_leaf_t *l = &leaves[j];
        for (;;) {
            size_t to = e - s > DM_ROLEX_SLOTS ? s + DM_ROLEX_SLOTS : e;
            fill_leaf(l, lo[j], keys, lens, s, to);
            s = to;
            if (s == e) break;
            l->next = region + syn * RX_LEAF_BYTES;
            l->sum = rx_leaf_sum(l);
            l = &leaves[syn++];
        }
        l->sum = rx_leaf_sum(l);
    }
    uint64_t ns = rx_train(lo, L, eps, segs);
    rx_hdr_t h = {RX_MAGIC, 1, L, ns, eps, region, L + S, cap};
    dm_rolex_t r = {0, h, segs};
    for (uint64_t j = 0; j < L; j++) { /* the bound holds with the reader's arithmetic */
        uint64_t a, b;
        rx_window(&r, lo[j], &a, &b);
        if (j < a || j > b) {
            rc = DM_ECORRUPT;
            goto out;
        }
    }
    rc = dm_write_span(ctx, region, leaves, (L + S) * RX_LEAF_BYTES);
    if (rc) goto out;
    rc = dm_alloc_block(ctx, RX_HDR_BYTES + RX_SEG_BYTES * ns, &rt);
    if (rc) goto out;
    rc = dm_write_span(ctx, rt + RX_HDR_BYTES, segs, RX_SEG_BYTES * ns);
    if (!rc) rc = dm_write_span(ctx, rt, &h, sizeof(h)); /* the magic last */
    if (!rc) *root = rt;
out:
    free(start), free(lo), free(segs), free(leaves);
    return rc;
}

int dm_rolex_open(dm_ctx_t *ctx, dm_gaddr_t root, dm_rolex_t **out)
{
    dm_rolex_t *r = calloc(1, sizeof(*r));
    if (!r) return DM_ENOMEM;
    r->root = root;
    int rc = dm_read_span(ctx, root, &r->hdr, sizeof(r->hdr));
    if (!rc && (r->hdr.magic != RX_MAGIC || !r->hdr.primaries || !r->hdr.segments ||
                r->hdr.segments > r->hdr.primaries || r->hdr.eps > RX_EPS_MAX))
        rc = DM_ECORRUPT;
    if (!rc) {
        r->segs = malloc(r->hdr.segments * sizeof(*r->segs));
        rc = r->segs
                 ? dm_read_span(ctx, root + RX_HDR_BYTES, r->segs, RX_SEG_BYTES * r->hdr.segments)
                 : DM_ENOMEM;
    }
    if (rc) {
        dm_rolex_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

void dm_rolex_close(dm_rolex_t *r)
{
    if (!r) return;
    free(r->segs);
    free(r);
}

int dm_rolex_leaf_counts(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t *primaries, uint64_t *synonyms)
{
    uint64_t used;
    int rc = dm_read_span(ctx, r->root + RX_OFF_ALLOC, &used, 8);
    if (rc) return rc;
    *primaries = r->hdr.primaries;
    *synonyms = (used < r->hdr.capacity ? used : r->hdr.capacity) - r->hdr.primaries;
    return 0;
}
