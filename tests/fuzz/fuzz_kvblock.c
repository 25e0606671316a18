/* libFuzzer target (issue 12, hostile input): KV block images as a gateway reads them from
 * the pool, where a torn write, a freed and reused block or a corrupt region may put any
 * bytes. dm_kvblock_header, dm_kvblock_key_equals and dm_kvblock_parse read only inside the
 * image; what parse accepts lies inside it and builds back, in the layout it came in, to
 * an image of the same size that parses to the same key, value and expiry. Built and run
 * by run-fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/kvblock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes: AddressSanitizer catches a read past the image. */
    uint8_t *img = malloc(size ? size : 1);
    if (!img) return 0;
    memcpy(img, data, size);
    uint32_t klen, vlen;
    uint64_t hdr = dm_kvblock_header(img, size, &klen, &vlen);
    if (hdr && hdr != 8 && hdr != DM_KV_HDR) abort();
    if (size >= 8) (void)dm_kvblock_key_equals(img, size, data + 8, size > 40 ? 32 : size - 8);
    dm_kv_view_t v;
    if (dm_kvblock_parse(img, size, &v) == 0) {
        uint64_t full = dm_kvblock_size_from_hdr(img, size);
        if (!hdr || full > size || full % DM_KV_UNIT) abort();
        if (v.key < img || v.key + v.key_len > img + size || v.val + v.val_len > img + size)
            abort();
        if (!dm_kvblock_key_equals(img, size, v.key, v.key_len)) abort();
        int timed = hdr == DM_KV_HDR; /* the same layout again */
        if (dm_kvblock_size(v.key_len, v.val_len, timed) != full) abort();
        uint8_t *again = malloc(full);
        if (!again) abort();
        dm_kvblock_build(again, v.key, v.key_len, v.val, v.val_len, v.expire_ms, timed);
        dm_kv_view_t w;
        if (dm_kvblock_parse(again, full, &w) != 0 || w.key_len != v.key_len ||
            w.val_len != v.val_len || w.expire_ms != v.expire_ms ||
            memcmp(w.key, v.key, v.key_len) != 0 || memcmp(w.val, v.val, v.val_len) != 0)
            abort();
        free(again);
    }
    free(img);
    return 0;
}
