/* ROLEX leaves (§3.3): addresses, checksums, ordered entries, and the reads of predicted
 * leaves and synonym chains. */
#include "dmkv/rolex.h"

#include "dmkv/errors.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "rolex_internal.h"

#define RX_TORN_TRIES 1000 /* re-reads of a leaf whose checksum fails before DM_ECORRUPT */

dm_gaddr_t rx_leaf_addr(const dm_rolex_t *r, uint64_t i)
{
    return r->hdr.region + i * RX_LEAF_BYTES;
}

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
    return l->sum == rx_leaf_sum(l) && l->count <= DM_ROLEX_SLOTS;
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
        int c = rx_key_cmp(l->e[m].key, l->e[m].len, key, len);
        if (c == 0) return (int)m;
        if (c < 0)
            a = m + 1;
        else
            b = m;
    }
    return -(int)a - 1;
}

int rx_read_leaves(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t a, uint64_t b, rx_leaf_t *out)
{
    if (b < a || b - a >= DM_BATCH_MAX) return DM_EINVAL;
    for (int t = 0; t < RX_TORN_TRIES; t++) {
        dm_batch_t bt;
        dm_batch_init(&bt);
        for (uint64_t i = a; i <= b; i++)
            dm_batch_read(&bt, rx_leaf_addr(r, i), &out[i - a], RX_LEAF_BYTES);
        int rc = dm_batch_exec(ctx, &bt);
        if (rc) return rc;
        int torn = 0;
        for (uint64_t i = a; i <= b; i++)
            torn |= !rx_leaf_ok(&out[i - a]);
        if (!torn) return 0;
    }
    return DM_ECORRUPT;
}

int rx_read_leaf(dm_ctx_t *ctx, dm_gaddr_t at, rx_leaf_t *out)
{
    for (int t = 0; t < RX_TORN_TRIES; t++) {
        int rc = dm_read_span(ctx, at, out, RX_LEAF_BYTES);
        if (rc) return rc;
        if (rx_leaf_ok(out)) return 0;
    }
    return DM_ECORRUPT;
}

int rx_read_chain(dm_ctx_t *ctx, const rx_leaf_t *first, dm_gaddr_t first_at, rx_leaf_t **out,
                  dm_gaddr_t **addrs, unsigned *n)
{
    unsigned cap = 4, k = 1;
    rx_leaf_t *v = malloc(cap * sizeof(*v));
    dm_gaddr_t *ad = malloc(cap * sizeof(*ad));
    if (!v || !ad) {
        free(v), free(ad);
        return DM_ENOMEM;
    }
    v[0] = *first;
    ad[0] = first_at;
    while (v[k - 1].next) {
        if (k >= RX_CHAIN_MAX) {
            free(v), free(ad);
            return DM_ECORRUPT;
        }
        if (k == cap) {
            cap *= 2;
            rx_leaf_t *nv = realloc(v, cap * sizeof(*v));
            if (nv) v = nv;
            dm_gaddr_t *na = realloc(ad, cap * sizeof(*ad));
            if (na) ad = na;
            if (!nv || !na) {
                free(v), free(ad);
                return DM_ENOMEM;
            }
        }
        ad[k] = v[k - 1].next;
        int rc = rx_read_leaf(ctx, ad[k], &v[k]);
        if (rc) {
            free(v), free(ad);
            return rc;
        }
        k++;
    }
    *out = v;
    *n = k;
    if (addrs)
        *addrs = ad;
    else
        free(ad);
    return 0;
}

/* The last leaf of the window whose low image is <= x covers x (rx_window's bound). */
int rx_locate(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t x, uint64_t *leaf, rx_leaf_t *out)
{
    uint64_t a, b;
    rx_window(r, x, &a, &b);
    rx_leaf_t *buf = malloc((b - a + 1) * sizeof(*buf)); /* coroutine stacks are small */
    if (!buf) return DM_ENOMEM;
    int rc = rx_read_leaves(ctx, r, a, b, buf);
    if (rc) {
        free(buf);
        return rc;
    }
    uint64_t j = a;
    for (uint64_t i = a; i <= b; i++)
        if (buf[i - a].lo <= x) j = i;
    rc = buf[j - a].lo > x ? DM_ECORRUPT : 0; /* else the model's bound failed */
    *leaf = j;
    *out = buf[j - a];
    free(buf);
    return rc;
}

/* The chains of k primaries (k <= DM_BATCH_MAX) read level by level: one batch per hop for
 * all of them, so a scan pays 1 RTT per level, not per synonym leaf. out[i] is malloc'd
 * (n[i] leaves, heads[i] first); on error none is left allocated. */
int rx_read_chains(dm_ctx_t *ctx, const rx_leaf_t *heads, unsigned k, rx_leaf_t **out, unsigned *n)
{
    unsigned cap[DM_BATCH_MAX];
    int rc = k > DM_BATCH_MAX ? DM_EINVAL : 0;
    for (unsigned i = 0; i < k && i < DM_BATCH_MAX; i++)
        out[i] = NULL;
    for (unsigned i = 0; !rc && i < k; i++) {
        cap[i] = 2, n[i] = 1;
        out[i] = malloc(cap[i] * sizeof(rx_leaf_t));
        if (out[i])
            out[i][0] = heads[i];
        else
            rc = DM_ENOMEM;
    }
    for (unsigned hop = 0; !rc; hop++) {
        dm_batch_t b;
        dm_batch_init(&b);
        unsigned who[DM_BATCH_MAX];
        for (unsigned i = 0; !rc && i < k; i++) {
            dm_gaddr_t next = out[i][n[i] - 1].next;
            if (!next) continue;
            if (n[i] == cap[i]) {
                rx_leaf_t *nv = realloc(out[i], 2 * cap[i] * sizeof(rx_leaf_t));
                if (!nv) {
                    rc = DM_ENOMEM;
                    break;
                }
                out[i] = nv, cap[i] *= 2;
            }
            who[b.n] = i;
            dm_batch_read(&b, next, &out[i][n[i]], RX_LEAF_BYTES);
        }
        if (rc || !b.n) break;
        if (hop >= RX_CHAIN_MAX) rc = DM_ECORRUPT;
        if (!rc) rc = dm_batch_exec(ctx, &b);
        for (unsigned v = 0; !rc && v < b.n; v++) {
            unsigned i = who[v];
            if (!rx_leaf_ok(&out[i][n[i]])) /* torn: re-read this one */
                rc = rx_read_leaf(ctx, out[i][n[i] - 1].next, &out[i][n[i]]);
            n[i]++;
        }
    }
    if (rc)
        for (unsigned i = 0; i < k && i < DM_BATCH_MAX; i++) {
            free(out[i]);
            out[i] = NULL;
        }
    return rc;
}
