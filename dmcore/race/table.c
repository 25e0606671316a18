/* RACE table creation, attach, directory cache, hashing and bucket layout. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/alloc.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"
#include "race_internal.h"

#define HASH_SEED 0x646d6b76ull /* "dmkv" */

static uint64_t create_groups = DM_RACE_GROUPS;

void dm_race_set_create_groups(uint64_t groups)
{
    create_groups = groups < 2 ? DM_RACE_GROUPS : groups;
}

void race_locate(const dm_race_t *r, const void *key, size_t klen, race_loc_t *loc)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(key, klen, HASH_SEED);
    /* Disjoint bits: suffix = low GD bits of low64; bucket 1 from low64 >> 20; bucket 2
     * and the fingerprint from high64 (RACE traps: fp must not correlate with buckets). */
    uint64_t nmain = 2 * r->groups;
    loc->dir_idx = (unsigned)(h.low64 & ((1ull << r->global_depth) - 1));
    loc->fp = (uint8_t)(h.high64 & 0xff);
    uint64_t m1 = (h.low64 >> 20) % nmain;
    uint64_t m2 = (h.high64 >> 8) % nmain;
    if (m1 / 2 == m2 / 2) /* force different groups */
        m2 = ((m2 / 2 + 1) % r->groups) * 2 + (m2 & 1);
    uint64_t e = r->dir[loc->dir_idx];
    loc->subtable = race_dir_addr(e);
    loc->ld = race_dir_ld(e);
    /* Main bucket A of group g is bucket 3g (combined [3g, 3g+1]); B is 3g+2 ([3g+1, 3g+2]). */
    loc->first_bucket[0] = (m1 / 2) * 3 + (m1 & 1);
    loc->first_bucket[1] = (m2 / 2) * 3 + (m2 & 1);
}

dm_gaddr_t race_bucket_addr(const race_loc_t *loc, uint64_t bucket)
{
    return loc->subtable + bucket * DM_RACE_BUCKET;
}

int race_read_cbs(dm_batch_t *b, const race_loc_t *loc, race_cbs_t *cbs)
{
    for (int i = 0; i < 2; i++)
        if (!dm_batch_read(b, race_bucket_addr(loc, loc->first_bucket[i]), cbs->raw[i],
                           2 * DM_RACE_BUCKET))
            return DM_EINVAL;
    return 0;
}

int race_check_headers(const race_loc_t *loc, const race_cbs_t *cbs)
{
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            uint64_t hdr = cbs->raw[i][j * 8];
            if (hdr != race_bucket_hdr(loc->ld, loc->dir_idx))
                return DM_ERETRY;
        }
    return 0;
}

unsigned race_fp_slots(const race_loc_t *loc, const race_cbs_t *cbs, uint8_t fp,
                       race_slotref_t *out, unsigned max)
{
    unsigned n = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int s = 0; s < DM_RACE_SLOTS; s++) {
                uint64_t w = cbs->raw[i][j * 8 + 1 + s];
                if (!race_slot_ptr(w) || race_slot_fp(w) != fp || n >= max)
                    continue;
                uint64_t bucket = loc->first_bucket[i] + j;
                out[n].canon = bucket * DM_RACE_SLOTS + s;
                out[n].addr = race_bucket_addr(loc, bucket) + 8 + 8 * s;
                out[n].word = w;
                n++;
            }
    /* Insertion sort by canonical position (n <= 28). */
    for (unsigned a = 1; a < n; a++)
        for (unsigned b = a; b > 0 && out[b - 1].canon > out[b].canon; b--) {
            race_slotref_t t = out[b];
            out[b] = out[b - 1];
            out[b - 1] = t;
        }
    return n;
}

int race_refresh(dm_ctx_t *ctx, dm_race_t *r)
{
    race_table_hdr_t hdr;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, r->root, &hdr, sizeof(hdr));
    dm_batch_read(&b, r->root + RACE_DIR_OFF, r->dir, sizeof(r->dir));
    int rc = dm_batch_exec(ctx, &b);
    if (rc)
        return rc;
    if (hdr.magic != RACE_MAGIC || hdr.global_depth != DM_RACE_INIT_DEPTH || hdr.groups == 0)
        return DM_EPROTO;
    r->global_depth = (unsigned)hdr.global_depth;
    r->groups = hdr.groups;
    return 0;
}

/* Build a table one-sidedly and publish it with a CAS on race_root. */
static int race_create(dm_ctx_t *ctx, dm_gaddr_t *root)
{
    unsigned nsub = 1u << DM_RACE_INIT_DEPTH;
    uint64_t groups = create_groups;
    uint64_t st_bytes = groups * 3ull * DM_RACE_BUCKET;
    uint64_t hdr_bytes = RACE_DIR_OFF + 8ull * (1u << DM_RACE_MAX_DEPTH);
    uint64_t *dir = calloc(1u << DM_RACE_MAX_DEPTH, 8);
    uint64_t *buf = malloc(st_bytes);
    if (!dir || !buf) {
        free(dir);
        free(buf);
        return DM_ENOMEM;
    }
    int rc = 0;
    dm_gaddr_t hdr_addr;
    for (unsigned i = 0; i < nsub && !rc; i++) {
        dm_gaddr_t st;
        rc = dm_alloc_block(ctx, st_bytes, &st);
        if (rc)
            break;
        memset(buf, 0, st_bytes);
        for (uint64_t bk = 0; bk < groups * 3ull; bk++)
            buf[bk * 8] = race_bucket_hdr(DM_RACE_INIT_DEPTH, i);
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, st, buf, (uint32_t)st_bytes);
        rc = dm_batch_exec(ctx, &b);
        dir[i] = race_dir_entry(st, DM_RACE_INIT_DEPTH);
    }
    if (!rc)
        rc = dm_alloc_block(ctx, hdr_bytes, &hdr_addr);
    if (!rc) {
        race_table_hdr_t hdr = {.magic = RACE_MAGIC,
                                .global_depth = DM_RACE_INIT_DEPTH,
                                .groups = groups,
                                .max_depth = DM_RACE_MAX_DEPTH};
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, hdr_addr + RACE_DIR_OFF, dir, 8u << DM_RACE_MAX_DEPTH);
        dm_batch_write(&b, hdr_addr, &hdr, sizeof(hdr));
        rc = dm_batch_exec(ctx, &b);
    }
    if (!rc) {
        /* The writes above completed before this CAS is posted: readers that find the
         * root find a complete table. */
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(race_root)), 0, hdr_addr);
        rc = dm_batch_exec(ctx, &b);
        /* Losing the race leaks this table's memory once; the winner's table is used. */
        *root = v->result == 0 ? hdr_addr : v->result;
    }
    free(dir);
    free(buf);
    return rc;
}

int dm_race_attach(dm_ctx_t *ctx, dm_race_t **out)
{
    dm_race_t *r = calloc(1, sizeof(*r));
    if (!r)
        return DM_ENOMEM;
    dm_superblock_t sb;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, 0), &sb, sizeof(sb));
    int rc = dm_batch_exec(ctx, &b);
    if (!rc && sb.magic != DM_SB_MAGIC)
        rc = DM_EPROTO;
    if (!rc) {
        r->root = sb.race_root;
        if (!r->root)
            rc = race_create(ctx, &r->root);
    }
    if (!rc)
        rc = race_refresh(ctx, r);
    if (rc) {
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void dm_race_detach(dm_race_t *r)
{
    free(r);
}

int64_t dm_race_count(dm_ctx_t *ctx)
{
    dm_batch_t b;
    uint64_t n = 0;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(key_count)), &n, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc)
        return rc;
    return (int64_t)n < 0 ? 0 : (int64_t)n;
}
