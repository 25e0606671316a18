/* Whole-region reads and writes in 64 KiB verbs (dmkv/batch.h dm_read_span). */
#include "dmkv/batch.h"
#include "dmkv/kvblock.h"

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
