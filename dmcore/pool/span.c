/* Whole-region reads and writes in 64 KiB verbs (dm_read_span), and the KV blocks behind
 * many index entries in one round trip (dm_read_kv_blocks): dmkv/batch.h. */
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/kvblock.h"

#include <stdlib.h>

#define SPAN_CHUNK 65536u

static int span(dm_ctx_t *ctx, dm_gaddr_t a, uint8_t *p, uint64_t len, int write)
{
    while (len) {
        dm_batch_t b;
        dm_batch_init(&b);
        while (len && b.n < DM_BATCH_MAX) {
            uint32_t n = len < SPAN_CHUNK ? (uint32_t)len : SPAN_CHUNK;
            if (write)
                dm_batch_write(&b, a, p, n);
            else
                dm_batch_read(&b, a, p, n);
            a += n, p += n, len -= n;
        }
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
    }
    return 0;
}

int dm_read_span(dm_ctx_t *ctx, dm_gaddr_t a, void *buf, uint64_t len)
{
    return span(ctx, a, buf, len, 0);
}

int dm_write_span(dm_ctx_t *ctx, dm_gaddr_t a, const void *buf, uint64_t len)
{
    return span(ctx, a, (uint8_t *)buf, len, 1); /* only read from when write is set */
}

int dm_read_kv_sizes(dm_ctx_t *ctx, const dm_gaddr_t *ptrs, size_t n_ptrs, uint64_t *sizes)
{
    for (size_t i = 0; i < n_ptrs; i += DM_BATCH_MAX) {
        size_t n = n_ptrs - i < DM_BATCH_MAX ? n_ptrs - i : DM_BATCH_MAX;
        uint8_t hdr[DM_BATCH_MAX][DM_KV_HDR];
        dm_batch_t b;
        dm_batch_init(&b);
        for (size_t k = 0; k < n; k++)
            dm_batch_read(&b, ptrs[i + k], hdr[k], DM_KV_HDR);
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        for (size_t k = 0; k < n; k++)
            sizes[i + k] = dm_kvblock_size_from_hdr(hdr[k], DM_KV_HDR);
    }
    return 0;
}

int dm_read_kv_blocks(dm_ctx_t *ctx, unsigned n, dm_kv_entry_fn entry, const void *arg,
                      uint8_t **bufs, uint64_t *lens)
{
    for (unsigned i = 0; i < n; i++)
        bufs[i] = NULL, lens[i] = 0;
    dm_bulk_t k;
    dm_bulk_init(&k);
    int rc = 0;
    for (unsigned i = 0; i < n && !rc; i++) {
        dm_gaddr_t p;
        int grow;
        entry(i, arg, &p, &lens[i], &grow);
        if (!p) {
            lens[i] = 0;
            continue;
        }
        dm_batch_t *b = (bufs[i] = malloc(lens[i])) ? dm_bulk_for(&k, p) : NULL;
        if (!b)
            rc = DM_ENOMEM;
        else
            dm_batch_read(b, p, bufs[i], (uint32_t)lens[i]);
    }
    if (!rc) rc = dm_bulk_exec(ctx, &k);
    dm_bulk_free(&k);
    /* Blocks longer than their entry says: the header tells how much is left. */
    for (unsigned i = 0; i < n && !rc; i++) {
        dm_gaddr_t p;
        uint64_t len;
        int grow;
        entry(i, arg, &p, &len, &grow);
        uint64_t full = bufs[i] && grow ? dm_kvblock_size_from_hdr(bufs[i], lens[i]) : 0;
        if (full <= lens[i]) continue;
        uint8_t *nb = realloc(bufs[i], full);
        dm_batch_t *b = nb ? dm_bulk_for(&k, p) : NULL;
        if (nb) bufs[i] = nb;
        if (!b) {
            rc = DM_ENOMEM;
            break;
        }
        dm_batch_read(b, p + lens[i], nb + lens[i], (uint32_t)(full - lens[i]));
        lens[i] = full;
    }
    if (!rc) rc = dm_bulk_exec(ctx, &k);
    dm_bulk_free(&k);
    return rc;
}
