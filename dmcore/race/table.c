/* RACE table creation, attach, directory cache, hashing and bucket layout. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"
#include "race_internal.h"

#define HASH_SEED 0x646d6b76ull /* "dmkv" */

static uint64_t create_groups;

void dm_race_set_create_groups(uint64_t groups)
{
    create_groups = groups < 2 ? 0 : groups;
}

/* Groups for a new table: set by the process, else DMKV_RACE_GROUPS (tests use small
 * subtables to split often), else the default. */
static uint64_t groups_for_create(void)
{
    if (create_groups) return create_groups;
    const char *env = getenv("DMKV_RACE_GROUPS");
    uint64_t g = env ? strtoull(env, NULL, 10) : 0;
    return g >= 2 && g <= (1u << 20) ? g : DM_RACE_GROUPS;
}

uint64_t race_key_hash(const void *key, size_t klen, uint64_t *high)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(key, klen, HASH_SEED);
    if (high) *high = h.high64;
    return h.low64;
}

/* Disjoint bits: the suffix is the low DM_RACE_MAX_DEPTH bits of the low word, bucket 1
 * comes from low >> 20, bucket 2 and the fingerprint from the high word (docs/NOTES.md §1.9: the
 * fingerprint must not correlate with the bucket). */
void race_locate(const dm_race_t *r, const void *key, size_t klen, race_loc_t *loc)
{
    uint64_t high;
    loc->hash = race_key_hash(key, klen, &high);
    loc->fp = (uint8_t)(high & 0xff);
    uint64_t nmain = 2 * r->groups;
    uint64_t m1 = (loc->hash >> 20) % nmain;
    uint64_t m2 = (high >> 8) % nmain;
    if (m1 / 2 == m2 / 2) /* force different groups */
        m2 = ((m2 / 2 + 1) % r->groups) * 2 + (m2 & 1);
    /* Main bucket A of group g is bucket 3g (combined [3g, 3g+1]); B is 3g+2 ([3g+1, 3g+2]). */
    loc->first_bucket[0] = (m1 / 2) * 3 + (m1 & 1);
    loc->first_bucket[1] = (m2 / 2) * 3 + (m2 & 1);
    uint64_t e = race_dir_get(r, loc->hash);
    race_locate_in(loc, race_dir_addr(e), race_dir_ld(e));
}

void race_locate_in(race_loc_t *loc, dm_gaddr_t subtable, unsigned ld)
{
    loc->subtable = subtable;
    loc->ld = ld;
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

/* A RACE slot word as a dm_read_kv_blocks entry: its length saturates at
 * DM_KV_LEN_MAX_UNITS. */
static void slot_entry(unsigned i, const void *arg, dm_gaddr_t *ptr, uint64_t *len, int *grow)
{
    uint64_t w = ((const uint64_t *)arg)[i];
    *ptr = race_slot_ptr(w);
    *len = (uint64_t)race_slot_len(w) * DM_KV_UNIT;
    *grow = race_slot_len(w) == DM_KV_LEN_MAX_UNITS;
}

int race_read_blocks(dm_ctx_t *ctx, const uint64_t *words, unsigned n, uint8_t **bufs,
                     uint64_t *lens)
{
    return dm_read_kv_blocks(ctx, n, slot_entry, words, bufs, lens);
}

int race_check_headers(const race_loc_t *loc, const race_cbs_t *cbs, int *moving)
{
    *moving = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            uint64_t hdr = cbs->raw[i][j * 8];
            unsigned ld = race_hdr_ld(hdr);
            uint64_t mask = (1ull << ld) - 1;
            /* Case 1 (same depth) and case 2 (split, but the key stayed) both reduce to:
             * the key's low LD bits equal the bucket's suffix. Otherwise case 3. */
            if (ld == 0 && hdr == 0 && loc->ld != 0)
                return DM_ERETRY; /* not a bucket at all: stale address */
            if ((loc->hash & mask) != race_hdr_suffix(hdr)) return DM_ERETRY;
            if (hdr & RACE_HDR_MOVING) *moving = 1;
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
                if (!race_slot_ptr(w) || race_slot_fp(w) != fp || n >= max) continue;
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

/* Read GD and the used directory into dir (2^DM_RACE_MAX_DEPTH entries). */
int race_read_dir(dm_ctx_t *ctx, dm_race_t *r, uint64_t *dir, unsigned *gd, uint64_t *groups)
{
    race_table_hdr_t hdr;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, r->root, &hdr, sizeof(hdr));
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (hdr.magic != RACE_MAGIC || hdr.groups < 2 || hdr.max_depth != DM_RACE_MAX_DEPTH ||
        hdr.global_depth > DM_RACE_MAX_DEPTH)
        return DM_EPROTO;
    /* Entries are read after GD: a doubling writes the new half before bumping GD. */
    uint64_t n = 1ull << hdr.global_depth;
    for (uint64_t off = 0; off < n; off += 8192) {
        uint64_t cnt = n - off < 8192 ? n - off : 8192;
        dm_batch_init(&b);
        dm_batch_read(&b, r->root + RACE_DIR_OFF + off * 8, dir + off, (uint32_t)(cnt * 8));
        rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
    }
    *gd = (unsigned)hdr.global_depth;
    *groups = hdr.groups;
    return 0;
}

int race_refresh(dm_ctx_t *ctx, dm_race_t *r)
{
    /* Other coroutines of this worker use r->dir while we wait: read into a private copy
     * and install it without yielding in between. */
    uint64_t *dir = malloc(8ull << DM_RACE_MAX_DEPTH);
    if (!dir) return DM_ENOMEM;
    unsigned gd;
    uint64_t groups;
    uint64_t seq = r->installs;
    int rc = race_read_dir(ctx, r, dir, &gd, &groups);
    /* A refresh that finished while we waited installed a snapshot at least as new as
     * the memory we started from; installing ours over it could go back in time. */
    if (!rc && r->installs == seq) {
        r->installs++;
        memcpy(r->dir, dir, 8ull << gd);
        r->global_depth = gd;
        r->groups = groups;
    }
    free(dir);
    return rc;
}

/* Allocate and format one subtable with local depth ld and suffix s. */
int race_new_subtable(dm_ctx_t *ctx, uint64_t groups, unsigned ld, uint32_t s, int moving,
                      dm_gaddr_t *out)
{
    uint64_t bytes = groups * 3 * DM_RACE_BUCKET;
    uint64_t *buf = calloc(1, bytes);
    if (!buf) return DM_ENOMEM;
    int rc = dm_alloc_block(ctx, bytes, out);
    if (!rc) {
        uint64_t h = race_bucket_hdr(ld, s) | (moving ? RACE_HDR_MOVING : 0);
        for (uint64_t bk = 0; bk < groups * 3; bk++)
            buf[bk * 8] = h;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, *out, buf, (uint32_t)bytes);
        rc = dm_batch_exec(ctx, &b);
    }
    free(buf);
    return rc;
}

/* Build a table one-sidedly and publish it with a CAS on race_root. */
static int race_create(dm_ctx_t *ctx, dm_gaddr_t *root)
{
    unsigned nsub = 1u << DM_RACE_INIT_DEPTH;
    uint64_t groups = groups_for_create();
    uint64_t *dir = calloc(nsub, 8);
    if (!dir) return DM_ENOMEM;
    int rc = 0;
    dm_gaddr_t hdr_addr;
    for (unsigned i = 0; i < nsub && !rc; i++) {
        dm_gaddr_t st;
        rc = race_new_subtable(ctx, groups, DM_RACE_INIT_DEPTH, i, 0, &st);
        dir[i] = race_dir_entry(st, DM_RACE_INIT_DEPTH);
    }
    /* Fresh pool memory is zero: only the used part of the directory is written. */
    if (!rc) rc = dm_alloc_block(ctx, RACE_TABLE_BYTES, &hdr_addr);
    if (!rc) {
        race_table_hdr_t hdr = {.magic = RACE_MAGIC,
                                .global_depth = DM_RACE_INIT_DEPTH,
                                .groups = groups,
                                .max_depth = DM_RACE_MAX_DEPTH};
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, hdr_addr + RACE_DIR_OFF, dir, nsub * 8);
        dm_batch_write(&b, hdr_addr, &hdr, sizeof(hdr));
        rc = dm_batch_exec(ctx, &b);
    }
    if (!rc) {
        /* The writes above completed before this CAS is posted: whoever finds the root
         * finds a complete table. */
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(race_root)), 0, hdr_addr);
        rc = dm_batch_exec(ctx, &b);
        /* Losing the race leaks this table's memory once; the winner's table is used. */
        *root = v->result == 0 ? hdr_addr : v->result;
    }
    free(dir);
    return rc;
}

int dm_race_attach(dm_ctx_t *ctx, dm_race_t **out)
{
    dm_race_t *r = calloc(1, sizeof(*r));
    if (!r) return DM_ENOMEM;
    r->dir = calloc(1ull << DM_RACE_MAX_DEPTH, 8);
    if (!r->dir) {
        free(r);
        return DM_ENOMEM;
    }
    r->owner = (uint16_t)(1 + (dm_now_us() ^ (uint64_t)(uintptr_t)r) % 65535);
    dm_superblock_t sb;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, 0), &sb, sizeof(sb));
    int rc = dm_batch_exec(ctx, &b);
    if (!rc && sb.magic != DM_SB_MAGIC) rc = DM_EPROTO;
    if (!rc) {
        r->root = sb.race_root;
        if (!r->root) rc = race_create(ctx, &r->root);
    }
    if (!rc) rc = race_refresh(ctx, r);
    if (!rc) race_addr_cache_attach(r, sb.incarnation);
    if (rc) {
        dm_race_detach(r);
        return rc;
    }
    *out = r;
    return 0;
}

void dm_race_detach(dm_race_t *r)
{
    if (!r) return;
    race_addr_cache_detach(r);
    free(r->dir);
    free(r);
}

int64_t dm_race_count(dm_ctx_t *ctx)
{
    dm_batch_t b;
    uint64_t n = 0;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(key_count)), &n, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    return dm_key_count_value(n) < 0 ? 0 : dm_key_count_value(n);
}

unsigned dm_race_global_depth(const dm_race_t *r)
{
    return r->global_depth;
}
