/* SepHash split, directory side (SepHash §4.2.2 "Segment split", extendible hashing): the
 * merge (merge.c) has written both new MainSegments and the new CurSegment; here the
 * directory slots of the 1 half move to it, doubling the directory first when the segment
 * was as deep as the directory. The old CurSegment keeps the 0 half, so its address stays
 * valid for every key that stays (sh_meta_check). */
#include "dmkv/sephash.h"

#include <stdlib.h>

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "sephash_internal.h"

/* Directory writes are serialized by one lock word in the table header.
 * TODO(lease): a holder that dies keeps it for good (no expiry yet). */
static int dir_lock(dm_ctx_t *ctx, dm_sephash_t *h)
{
    for (;;) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, h->root + SH_HDR_LOCK_OFF, 0, h->owner);
        int rc = dm_batch_exec(ctx, &b);
        if (rc || v->result == 0) return rc;
        sh_pause(ctx);
    }
}

static int dir_unlock(dm_ctx_t *ctx, dm_sephash_t *h)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_cas(&b, h->root + SH_HDR_LOCK_OFF, h->owner, 0);
    return dm_batch_exec(ctx, &b);
}

int sh_dir_split(dm_ctx_t *ctx, dm_sephash_t *h, dm_gaddr_t seg, unsigned ld, uint64_t lo,
                 dm_gaddr_t seg1)
{
    int rc = dir_lock(ctx, h);
    if (rc) return rc;
    sh_table_hdr_t hdr;
    uint64_t *dir = malloc(8ull << SH_MAX_DEPTH);
    rc = dir ? sh_read(ctx, h->root, &hdr, sizeof(hdr)) : DM_ENOMEM;
    unsigned gd = (unsigned)hdr.global_depth;
    if (!rc && (gd > SH_MAX_DEPTH || ld > gd)) rc = DM_ECORRUPT;
    if (!rc) rc = sh_read(ctx, h->root + SH_DIR_OFF, dir, 8ull << gd);
    if (!rc && ld == gd) {
        /* Doubling: the new half first, then GD (readers read GD, then the entries). */
        for (uint64_t j = 0; j < (1ull << gd); j++)
            dir[j + (1ull << gd)] = dir[j];
        rc = sh_write(ctx, h->root + SH_DIR_OFF + (8ull << gd), dir + (1ull << gd), 8ull << gd);
        uint64_t ngd = gd + 1;
        if (!rc) rc = sh_write(ctx, h->root + SH_HDR_GD_OFF, &ngd, 8);
        if (!rc) gd++, h->st.doublings++;
    }
    if (!rc) {
        uint64_t mask = (1ull << ld) - 1, x = lo & mask;
        uint64_t e0 = sh_dir_entry(seg, ld + 1), e1 = sh_dir_entry(seg1, ld + 1);
        /* The segment's slots are x + k 2^ld: few unless the directory is much deeper. */
        dm_batch_t b;
        dm_batch_init(&b);
        for (uint64_t j = x; !rc && j < (1ull << gd); j += 1ull << ld) {
            if (sh_dir_seg(dir[j]) != seg) rc = DM_ECORRUPT;
            dir[j] = (j >> ld) & 1 ? e1 : e0;
            if (b.n == DM_BATCH_MAX && !rc) {
                rc = dm_batch_exec(ctx, &b);
                dm_batch_init(&b);
            }
            if (!rc) dm_batch_write(&b, h->root + SH_DIR_OFF + 8 * j, &dir[j], 8);
        }
        if (!rc && b.n) rc = dm_batch_exec(ctx, &b);
    }
    int urc = dir_unlock(ctx, h);
    free(dir);
    if (!rc) rc = urc;
    if (!rc) rc = sh_refresh(ctx, h);
    return rc;
}
