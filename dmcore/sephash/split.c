/* SepHash split, directory side (SepHash §4.2.2 "Segment split", extendible hashing): the
 * merge (merge.c) has written both new MainSegments and the new CurSegment; here the
 * directory slots of the 1 half move to it, doubling the directory first when the segment
 * was as deep as the directory. The old CurSegment keeps the 0 half, so its address stays
 * valid for every key that stays (sh_meta_check).
 *
 * A dead splitter (dmkv: not in the paper). Directory writes happen under the directory
 * lock (a lease), inside the merge lock's hold, and every write is idempotent:
 * - a doubling copies the lower half up, then raises GD: done again, it copies the same
 *   entries (the dead split's slots included, half written or not: the redo below covers
 *   both copies); an upper half written without the GD raise is never read;
 * - a slot write sets one slot to its final value, seg or seg1 at ld + 1.
 * So what a dead splitter leaves is a prefix of its slot writes, with the segment's meta
 * still locked (the merge's commit comes after): writers of the moved slots append to seg1
 * (a full segment of its own from then on), writers of the others wait on the locked meta.
 * The merge's taker redoes the merge, computes the same two halves (same CurSegment, same
 * MainSegment), and here finds the 1 half's slots naming the dead splitter's seg1: it
 * adopts that one (appends may have landed in it) and writes the remaining slots. A
 * directory lock taken over from a dead holder needs nothing more: the slots it may have
 * left half written are its segment's, whose meta stays locked until its merge's taker
 * finishes them here. Not handled: seg1 splitting again before the taker comes (it
 * needs 128 appends to the moved slots within the lease): its own split then finds slots of
 * its half naming seg and fails with DM_ECORRUPT (both segments stay locked). */
#include "dmkv/sephash.h"

#include <stdlib.h>

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "sephash_internal.h"

#define SH_DIR_WAIT_LEASES 4 /* a directory lock wait gives up after 4 leases */

static int dir_lock(dm_ctx_t *ctx, dm_sephash_t *h, sh_hold_t *hd)
{
    uint64_t t0 = dm_now_us();
    for (;;) {
        int took = 0;
        int rc = sh_lease_try(ctx, h->root + SH_HDR_LOCK_OFF, hd, &took);
        if (rc < 0) return rc;
        if (rc == 1) {
            h->st.takeovers += took;
            return 0;
        }
        if (dm_now_us() - t0 > 1000ull * SH_DIR_WAIT_LEASES * sh_lease_ms) return DM_ETIMEDOUT;
        sh_pause(ctx);
    }
}

/* The batch's writes are sent by until at the latest (refused, DM_ERETRY, after it). */
static int exec_by(dm_ctx_t *ctx, dm_batch_t *b, uint64_t until)
{
    b->send_by_us = until;
    return dm_batch_exec(ctx, b);
}

int sh_dir_split(dm_ctx_t *ctx, dm_sephash_t *h, dm_gaddr_t seg, unsigned ld, uint64_t lo,
                 dm_gaddr_t seg1, uint64_t until, dm_gaddr_t *used)
{
    sh_hold_t hd;
    int rc = dir_lock(ctx, h, &hd);
    if (rc) return rc;
    if (sh_die(h, SH_AT_DIR_LOCKED)) return DM_EIO;
    until = dm_send_by_earlier(until, hd.until_us);
    sh_table_hdr_t hdr;
    uint64_t *dir = malloc(8ull << SH_MAX_DEPTH);
    rc = dir ? dm_read_span(ctx, h->root, &hdr, sizeof(hdr)) : DM_ENOMEM;
    unsigned gd = (unsigned)hdr.global_depth;
    if (!rc && (gd > SH_MAX_DEPTH || ld > gd)) rc = DM_ECORRUPT;
    if (!rc) rc = dm_read_span(ctx, h->root + SH_DIR_OFF, dir, 8ull << gd);
    if (!rc && ld == gd) {
        /* Doubling: the new half first, then GD (readers read GD, then the entries). */
        for (uint64_t j = 0; j < (1ull << gd); j++)
            dir[j + (1ull << gd)] = dir[j];
        dm_gaddr_t a = h->root + SH_DIR_OFF + (8ull << gd);
        for (uint64_t off = 0; !rc && off < (8ull << gd); off += 65536) {
            uint64_t n = (8ull << gd) - off < 65536 ? (8ull << gd) - off : 65536;
            dm_batch_t b;
            dm_batch_init(&b);
            dm_batch_write(&b, a + off, (uint8_t *)(dir + (1ull << gd)) + off, (uint32_t)n);
            rc = exec_by(ctx, &b, until);
        }
        uint64_t ngd = gd + 1;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, h->root + SH_HDR_GD_OFF, &ngd, 8);
        if (!rc) rc = exec_by(ctx, &b, until);
        if (!rc) gd++, h->st.doublings++;
    }
    *used = seg1;
    uint64_t mask = (1ull << ld) - 1, x = lo & mask;
    /* A split begun by a dead merger of seg: its seg1 is in some 1-half slots. */
    for (uint64_t j = x; !rc && j < (1ull << gd); j += 1ull << ld) {
        dm_gaddr_t s = sh_dir_seg(dir[j]);
        if (s == seg) continue;
        if (!((j >> ld) & 1) || sh_dir_ld(dir[j]) != ld + 1 || (*used != seg1 && *used != s))
            rc = DM_ECORRUPT;
        else
            *used = s;
    }
    if (!rc) {
        uint64_t e0 = sh_dir_entry(seg, ld + 1), e1 = sh_dir_entry(*used, ld + 1);
        /* The segment's slots are x + k 2^ld: few unless the directory is much deeper. */
        dm_batch_t b;
        dm_batch_init(&b);
        for (uint64_t j = x; !rc && j < (1ull << gd); j += 1ull << ld) {
            uint64_t e = (j >> ld) & 1 ? e1 : e0;
            if (dir[j] == e) continue;
            dir[j] = e;
            if (b.n == DM_BATCH_MAX) {
                rc = exec_by(ctx, &b, until);
                dm_batch_init(&b);
            }
            if (!rc) dm_batch_write(&b, h->root + SH_DIR_OFF + 8 * j, &dir[j], 8);
        }
        if (!rc && b.n) rc = exec_by(ctx, &b, until);
    }
    int urc = sh_lease_release(ctx, &hd);
    free(dir);
    if (!rc) rc = urc;
    if (!rc) rc = sh_refresh(ctx, h);
    return rc;
}
