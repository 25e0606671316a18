/* Whole-region reads and writes in 64 KiB verbs (dmkv/batch.h dm_read_span). */
#include "dmkv/batch.h"

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
