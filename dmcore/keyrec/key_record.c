/* Key records (dmkv/key_record.h), shared by CHIME (long keys, leaf fences) and ROLEX (long
 * keys): the byte format, its check, and the verbs that write and read records. Its own
 * folder: it uses the pool's allocator and batches (dmcore/pool), which use dmcore/kvblock,
 * so it cannot live there without a circle. */
#include "dmkv/key_record.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"

#define KEYREC_TRIES 64 /* reads of a record that fails its check before DM_ECORRUPT */
#define KEYREC_HEAD 256 /* bytes read first: the whole record of a key up to 240 bytes */

uint8_t *dm_keyrec_build(const void *key, size_t klen, uint32_t *bytes)
{
    *bytes = dm_keyrec_bytes(klen);
    uint8_t *r = calloc(1, *bytes);
    if (!r) return NULL;
    uint32_t magic = DM_KEYREC_MAGIC, len = (uint32_t)klen;
    uint64_t h = XXH3_64bits(key, klen);
    memcpy(r, &magic, 4);
    memcpy(r + 4, &len, 4);
    memcpy(r + 8, &h, 8);
    memcpy(r + DM_KEYREC_HDR, key, klen);
    return r;
}

int dm_keyrec_write(dm_ctx_t *ctx, const void *key, size_t klen, dm_gaddr_t *out)
{
    uint32_t bytes;
    uint8_t *r = dm_keyrec_build(key, klen, &bytes);
    if (!r) return DM_ENOMEM;
    int rc = dm_alloc_block(ctx, bytes, out);
    if (!rc) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, *out, r, bytes);
        rc = dm_batch_exec(ctx, &b);
    }
    free(r);
    return rc;
}

int dm_keyrec_read(dm_ctx_t *ctx, const dm_gaddr_t *recs, unsigned n, uint64_t max_len,
                   const uint32_t *want, uint8_t **keys, uint32_t *lens)
{
    for (unsigned i = 0; i < n; i++)
        keys[i] = NULL;
    int rc = 0;
    for (int attempt = 0; attempt < KEYREC_TRIES; attempt++) {
        int torn = 0;
        for (unsigned i0 = 0; i0 < n; i0 += DM_BATCH_MAX) {
            unsigned cnt = n - i0 < DM_BATCH_MAX ? n - i0 : DM_BATCH_MAX;
            uint8_t *buf[DM_BATCH_MAX];
            dm_batch_t b;
            dm_batch_init(&b);
            uint32_t first[DM_BATCH_MAX];
            for (unsigned k = 0; k < cnt; k++) { /* the whole record when its size is known */
                first[k] = want ? dm_keyrec_bytes(want[i0 + k]) : KEYREC_HEAD;
                buf[k] = keys[i0 + k] ? NULL : malloc(first[k]);
                if (buf[k]) dm_batch_read(&b, recs[i0 + k], buf[k], first[k]);
            }
            rc = dm_batch_exec(ctx, &b);
            for (unsigned k = 0; k < cnt && !rc; k++) {
                if (!buf[k]) continue;
                uint32_t len;
                memcpy(&len, buf[k] + 4, 4);
                uint32_t total = dm_keyrec_bytes(len);
                if (want && len != want[i0 + k]) { /* torn, freed, or another key's */
                    torn = 1;
                    free(buf[k]);
                    buf[k] = NULL;
                    continue;
                }
                if (len > max_len || total > first[k]) { /* the rest: never trust len */
                    uint8_t *full = len > max_len ? NULL : malloc(total);
                    if (full) {
                        dm_batch_t b2;
                        dm_batch_init(&b2);
                        dm_batch_read(&b2, recs[i0 + k], full, total);
                        rc = dm_batch_exec(ctx, &b2);
                    }
                    free(buf[k]);
                    buf[k] = full;
                    if (!full) {
                        torn = 1;
                        continue;
                    }
                }
                long kl = rc ? -1 : dm_keyrec_check(buf[k], total);
                if (kl < 0) {
                    torn = 1;
                    free(buf[k]);
                    buf[k] = NULL;
                    continue;
                }
                memmove(buf[k], buf[k] + DM_KEYREC_HDR, (size_t)kl);
                keys[i0 + k] = buf[k];
                lens[i0 + k] = (uint32_t)kl;
                buf[k] = NULL;
            }
            for (unsigned k = 0; k < cnt; k++)
                free(buf[k]);
            if (rc) break;
        }
        if (rc || !torn) break;
        dm_ctx_yield(ctx);
        rc = DM_ECORRUPT; /* unless a later try reads them all */
    }
    if (rc)
        for (unsigned i = 0; i < n; i++) {
            free(keys[i]);
            keys[i] = NULL;
        }
    return rc;
}
