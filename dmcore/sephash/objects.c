/* The objects a SepHash table reaches, for offline walks (dmkv-pool-reclaim, index.h
 * objects): the table (header and directory), every CurSegment the directory names (past
 * 2^GD too: a doubling that died after writing its new half), each one's MainSegment, and
 * the KV block of every entry of both, dead versions and tombstones included (a merge
 * frees those; until then they are the pool's). dmkv: not in the paper. */
#include <stdlib.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/kvblock.h"
#include "dmkv/sephash.h"
#include "sephash_internal.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Blocks whose entry does not give their size (len 7: 448 bytes or more; len 0: a
 * tombstone): sized from their headers. */
static int emit_sized(dm_ctx_t *ctx, const dm_gaddr_t *ptrs, size_t n, dm_index_object_fn fn,
                      void *arg)
{
    uint64_t *sizes = malloc((n ? n : 1) * sizeof(*sizes));
    int rc = sizes ? dm_read_kv_sizes(ctx, ptrs, n, sizes) : DM_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++)
        rc = fn(arg, ptrs[i],
                dm_alloc_kv_block_bytes(dm_sephash_block_bytes(sizes[i] ? sizes[i] : 64)));
    free(sizes);
    return rc;
}

/* The blocks of n entry words: those of len 1..6 at once, the others queued on sized. */
static int emit_blocks(const uint64_t *words, size_t n, dm_gaddr_t *sized, size_t *n_sized,
                       dm_index_object_fn fn, void *arg)
{
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        dm_gaddr_t p = sh_entry_ptr(words[i]);
        unsigned len = sh_entry_len(words[i]);
        if (!p) continue;
        if (len && len < SH_LEN_MAX)
            rc = fn(arg, p, dm_alloc_kv_block_bytes(64ull * len));
        else
            sized[(*n_sized)++] = p;
    }
    return rc;
}

/* One CurSegment, its MainSegment and every block their entries name (2 RTTs and the
 * headers of blocks the entries do not size). */
static int emit_segment(dm_ctx_t *ctx, dm_gaddr_t seg, dm_index_object_fn fn, void *arg)
{
    uint64_t cur[SH_CUR_BYTES / 8];
    int rc = dm_read_span(ctx, seg, cur, SH_CUR_BYTES);
    if (!rc) rc = fn(arg, seg, SH_CUR_BYTES);
    if (rc) return rc;
    uint64_t m = cur[0];
    uint32_t cnt = sh_meta_cnt(m);
    dm_gaddr_t main = sh_meta_main(m);
    uint64_t *mw = main ? malloc(SH_MAIN_HDR + 8ull * cnt) : NULL;
    dm_gaddr_t *sized = malloc((SH_CUR_N + cnt) * sizeof(*sized));
    size_t n_sized = 0;
    if (!sized || (main && !mw)) rc = DM_ENOMEM;
    if (!rc && main) rc = dm_read_span(ctx, main, mw, SH_MAIN_HDR + 8ull * cnt);
    if (!rc && main && mw[0] != cnt) rc = DM_ECORRUPT; /* the meta word's count is the header's */
    if (!rc && main) rc = fn(arg, main, sh_main_bytes(cnt));
    /* Entries of this round: those whose sign differs from the meta's (a prefix while
     * appends run in order; all of them counted, as a walk that frees must not miss one). */
    uint64_t ce[SH_CUR_N];
    size_t full = 0;
    for (size_t i = 0; i < SH_CUR_N; i++)
        if (sh_entry_sign(cur[SH_CUR_ENTRY_OFF / 8 + i]) != sh_meta_sign(m))
            ce[full++] = cur[SH_CUR_ENTRY_OFF / 8 + i];
    if (!rc) rc = emit_blocks(ce, full, sized, &n_sized, fn, arg);
    if (!rc && main) rc = emit_blocks(mw + SH_MAIN_HDR / 8, cnt, sized, &n_sized, fn, arg);
    if (!rc) rc = emit_sized(ctx, sized, n_sized, fn, arg);
    free(sized);
    free(mw);
    return rc;
}

int dm_sephash_objects(dm_ctx_t *ctx, dm_sephash_t *h, dm_index_object_fn fn, void *arg)
{
    const uint64_t n = 1ull << SH_MAX_DEPTH;
    uint64_t *dir = malloc(8 * n);
    if (!dir) return DM_ENOMEM;
    int rc = dm_read_span(ctx, h->root + SH_DIR_OFF, dir, 8 * n);
    if (!rc) rc = fn(arg, h->root, SH_TABLE_BYTES);
    for (uint64_t i = 0; i < n; i++)
        dir[i] = sh_dir_seg(dir[i]);
    if (!rc) qsort(dir, n, 8, cmp_u64);
    for (uint64_t i = 0; i < n && !rc; i++)
        if (dir[i] && (i == 0 || dir[i] != dir[i - 1])) rc = emit_segment(ctx, dir[i], fn, arg);
    free(dir);
    return rc;
}
