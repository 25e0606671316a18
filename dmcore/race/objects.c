/* The objects a RACE table reaches, for offline walks (dmkv-pool-reclaim, index.h objects):
 * the table (header, directory, locks), every subtable the directory names and every KV
 * block a slot points to, frozen MOVING slots included. */
#include <stdlib.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/race.h"
#include "race_internal.h"

/* Blocks of slots whose length saturated (255+ units): sized from their headers. */
static int emit_long_blocks(dm_ctx_t *ctx, const dm_gaddr_t *ptrs, size_t n, dm_index_object_fn fn,
                            void *arg)
{
    uint64_t *sizes = malloc((n ? n : 1) * sizeof(*sizes));
    int rc = sizes ? dm_read_kv_sizes(ctx, ptrs, n, sizes) : DM_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        /* The block as allocated: a large one is rounded to its size class. */
        uint64_t full = dm_alloc_kv_block_bytes(sizes[i]);
        uint64_t min = (uint64_t)DM_KV_LEN_MAX_UNITS * DM_UNIT;
        rc = fn(arg, ptrs[i], full > min ? full : min);
    }
    free(sizes);
    return rc;
}

/* One subtable (groups * 3 buckets) and the block of every occupied slot. */
static int emit_subtable(dm_ctx_t *ctx, dm_gaddr_t st, uint64_t groups, dm_index_object_fn fn,
                         void *arg)
{
    enum { STEP = 1024 }; /* buckets per READ (64 KiB) */
    uint64_t nb = groups * 3;
    uint64_t *raw = malloc(STEP * DM_RACE_BUCKET);
    dm_gaddr_t *longs = malloc(STEP * 8 * sizeof(*longs));
    int rc = raw && longs ? fn(arg, st, nb * DM_RACE_BUCKET) : DM_ENOMEM;
    for (uint64_t c = 0; c < nb && !rc; c += STEP) {
        uint64_t n = nb - c < STEP ? nb - c : STEP;
        size_t n_longs = 0;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, st + c * DM_RACE_BUCKET, raw, (uint32_t)(n * DM_RACE_BUCKET));
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        for (uint64_t k = 0; k < n * 8 && !rc; k++) {
            uint64_t w = raw[k];
            if (k % 8 == 0 || !race_slot_ptr(w)) continue; /* bucket header, empty slot */
            if (race_slot_len(w) == DM_KV_LEN_MAX_UNITS)
                longs[n_longs++] = race_slot_ptr(w);
            else
                rc = fn(arg, race_slot_ptr(w), (uint64_t)race_slot_len(w) * DM_KV_UNIT);
        }
        if (!rc) rc = emit_long_blocks(ctx, longs, n_longs, fn, arg);
    }
    free(longs);
    free(raw);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Directory entries past 2^gd are zero unless a doubling died between writing the new
 * half and bumping GD: a subtable named only there is kept (conservatively; its slots are
 * frozen copies of slots the used half still reaches). */
static int emit_dir_tail(dm_ctx_t *ctx, dm_gaddr_t root, unsigned gd, uint64_t groups,
                         uint64_t *dir, dm_index_object_fn fn, void *arg)
{
    uint64_t from = 1ull << gd, to = 1ull << DM_RACE_MAX_DEPTH;
    int rc = 0;
    for (uint64_t off = from; off < to && !rc; off += 8192) {
        uint64_t cnt = to - off < 8192 ? to - off : 8192;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, root + RACE_DIR_OFF + off * 8, dir + off, (uint32_t)(cnt * 8));
        rc = dm_batch_exec(ctx, &b);
        for (uint64_t i = off; i < off + cnt && !rc; i++)
            if (race_dir_addr(dir[i]))
                rc = fn(arg, race_dir_addr(dir[i]), groups * 3 * DM_RACE_BUCKET);
    }
    return rc;
}

int dm_race_objects(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg)
{
    dm_race_t *r = ctx->w->race;
    uint64_t *dir = malloc(8ull << DM_RACE_MAX_DEPTH);
    if (!dir) return DM_ENOMEM;
    unsigned gd = 0;
    uint64_t groups = 0;
    int rc = race_read_dir(ctx, r, dir, &gd, &groups);
    if (!rc) rc = fn(arg, r->root, RACE_TABLE_BYTES);
    if (!rc) rc = emit_dir_tail(ctx, r->root, gd, groups, dir, fn, arg);
    uint64_t n = 1ull << gd;
    for (uint64_t i = 0; i < n && !rc; i++)
        dir[i] = race_dir_addr(dir[i]);
    if (!rc) qsort(dir, n, 8, cmp_u64);
    for (uint64_t i = 0; i < n && !rc; i++)
        if (dir[i] && (i == 0 || dir[i] != dir[i - 1]))
            rc = emit_subtable(ctx, dir[i], groups, fn, arg);
    free(dir);
    return rc;
}
