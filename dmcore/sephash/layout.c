/* SepHash table creation, handles, the directory cache, hashing and pool reads. */
#include "dmkv/sephash.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/kvblock.h"
#include "sephash_internal.h"

#define HASH_SEED 0x7365706873ull /* "sephs": not RACE's seed, so the two never correlate */

void sh_hash(const void *key, size_t klen, uint64_t *lo, uint64_t *hi)
{
    XXH128_hash_t x = XXH3_128bits_withSeed(key, klen, HASH_SEED);
    *lo = x.low64;
    *hi = x.high64;
}

void sh_locate(const dm_sephash_t *h, const void *key, size_t klen, sh_loc_t *loc)
{
    sh_hash(key, klen, &loc->lo, &loc->hi);
    loc->fp = (uint8_t)loc->hi;
    loc->fp2 = (uint8_t)(loc->hi >> 8);
    loc->slot = loc->lo & ((1ull << h->global_depth) - 1);
    uint64_t e = h->dir[loc->slot];
    loc->seg = sh_dir_seg(e);
    loc->ld = sh_dir_ld(e);
}

/* A segment only ever keeps the 0 half when it splits (the 1 half moves to a new one), so
 * a meta deeper than the cache holds the key iff the key's bits in between are 0. A meta
 * shallower than the cache is a split not yet unlocked: the segment still holds both
 * halves. */
int sh_meta_check(const sh_loc_t *loc, uint64_t m)
{
    unsigned ld = sh_meta_ld(m);
    if (ld <= loc->ld) return 0;
    uint64_t between = (loc->lo >> loc->ld) & ((1ull << (ld - loc->ld)) - 1);
    return between ? DM_ERETRY : 0;
}

sh_seg_cache_t *sh_cache(dm_sephash_t *h, const sh_loc_t *loc)
{
    sh_seg_cache_t *c = h->cache[loc->slot];
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c) return NULL;
        h->cache[loc->slot] = c;
    }
    if (c->seg != loc->seg) {
        memset(c, 0, sizeof(*c));
        c->seg = loc->seg;
    }
    if (c->round && sh_cache_stale(c->seen_us, dm_now_us())) {
        c->round = 0; /* its MainSegment may have been reused since: read it again */
        c->fpt_ok = 0;
        c->off = 0;
    }
    return c;
}

void sh_cache_seen(sh_seg_cache_t *c, uint64_t round, uint64_t posted_us)
{
    if (c->round == round && posted_us > c->seen_us) c->seen_us = posted_us;
}

int sh_cache_load(dm_ctx_t *ctx, sh_seg_cache_t *c)
{
    uint64_t m, posted_us = dm_now_us();
    int rc = dm_read_span(ctx, c->seg, &m, 8);
    if (rc) return rc;
    uint16_t start[257];
    rc = dm_read_span(ctx, sh_meta_main(m) + 8, start, sizeof(start));
    if (rc) return rc;
    /* Published MainSegments never change; m names this one until the next merge. */
    if (sh_round(m) != c->round) c->off = 0;
    c->round = sh_round(m);
    c->seen_us = posted_us;
    memcpy(c->start, start, sizeof(start));
    c->fpt_ok = 1;
    return 0;
}

unsigned sh_len_units(uint64_t bytes)
{
    uint64_t u = (bytes + 63) / 64;
    return u == 0 ? 1 : u > SH_LEN_MAX ? SH_LEN_MAX : (unsigned)u;
}

/* A SepHash entry word as a dm_read_kv_blocks entry: its length (64-byte units) saturates
 * at SH_LEN_MAX, and a tombstone's is 0. */
static void entry_of(unsigned i, const void *arg, dm_gaddr_t *ptr, uint64_t *len, int *grow)
{
    uint64_t e = ((const uint64_t *)arg)[i];
    unsigned u = sh_entry_len(e);
    *ptr = sh_entry_ptr(e);
    *len = 64ull * (u ? u : 1);
    *grow = u == 0 || u == SH_LEN_MAX;
}

int sh_read_blocks(dm_ctx_t *ctx, const uint64_t *words, unsigned n, uint8_t **bufs, uint64_t *lens)
{
    return dm_read_kv_blocks(ctx, n, entry_of, words, bufs, lens);
}

int sh_block_is(const uint8_t *buf, uint64_t have, const void *key, size_t klen, dm_kv_view_t *v)
{
    if (!buf || dm_kvblock_parse(buf, have, v)) return 0;
    return v->key_len == klen && memcmp(v->key, key, klen) == 0;
}

void sh_pause(dm_ctx_t *ctx)
{
    dm_ctx_sleep(ctx, 100);
}

/* Install a directory snapshot read while other coroutines of the worker used h->dir. */
static void install(dm_sephash_t *h, uint64_t seq, const uint64_t *dir, unsigned gd)
{
    if (h->installs != seq) return; /* a newer snapshot was installed meanwhile */
    h->installs++;
    memcpy(h->dir, dir, 8ull << gd);
    h->global_depth = gd;
}

int sh_refresh(dm_ctx_t *ctx, dm_sephash_t *h)
{
    uint64_t seq = h->installs;
    sh_table_hdr_t hdr;
    int rc = dm_read_span(ctx, h->root, &hdr, sizeof(hdr));
    if (rc) return rc;
    if (hdr.magic != SH_MAGIC || hdr.global_depth > SH_MAX_DEPTH) return DM_EPROTO;
    uint64_t *dir = malloc(8ull << hdr.global_depth);
    if (!dir) return DM_ENOMEM;
    /* Entries after GD: a doubling writes the new half before it raises GD. */
    rc = dm_read_span(ctx, h->root + SH_DIR_OFF, dir, 8ull << hdr.global_depth);
    if (!rc) {
        install(h, seq, dir, (unsigned)hdr.global_depth);
        h->main_max = (uint32_t)hdr.main_max;
    }
    free(dir);
    return rc;
}

/* An empty MainSegment: n = 0, every run empty. */
static int new_empty_main(dm_ctx_t *ctx, dm_gaddr_t *out)
{
    uint8_t hdr[SH_MAIN_HDR] = {0};
    int rc = dm_alloc_block(ctx, SH_MAIN_HDR, out);
    if (!rc) rc = dm_write_span(ctx, *out, hdr, sizeof(hdr));
    return rc;
}

int dm_sephash_create(dm_ctx_t *ctx, uint32_t main_max, dm_gaddr_t *root)
{
    if (!main_max) main_max = DM_SH_MAIN_MAX;
    if (main_max < SH_CUR_N || main_max > DM_SH_MAIN_LIMIT - SH_CUR_N) return DM_EINVAL;
    unsigned nseg = 1u << SH_INIT_DEPTH;
    uint64_t dir[1u << SH_INIT_DEPTH];
    uint8_t *cur = calloc(1, SH_CUR_BYTES);
    if (!cur) return DM_ENOMEM;
    int rc = 0;
    for (unsigned i = 0; i < nseg && !rc; i++) {
        dm_gaddr_t main, seg;
        rc = new_empty_main(ctx, &main);
        if (!rc) rc = dm_alloc_block(ctx, SH_CUR_BYTES, &seg);
        if (rc) break;
        uint64_t m = sh_meta(0, SH_INIT_DEPTH, 0, main);
        memcpy(cur, &m, 8);
        rc = dm_write_span(ctx, seg, cur, SH_CUR_BYTES);
        dir[i] = sh_dir_entry(seg, SH_INIT_DEPTH);
    }
    free(cur);
    dm_gaddr_t hdr_addr;
    if (!rc) rc = dm_alloc_block(ctx, SH_TABLE_BYTES, &hdr_addr);
    if (!rc) {
        sh_table_hdr_t hdr = {
            .magic = SH_MAGIC, .global_depth = SH_INIT_DEPTH, .main_max = main_max};
        rc = dm_write_span(ctx, hdr_addr + SH_DIR_OFF, dir, sizeof(dir));
        if (!rc) rc = dm_write_span(ctx, hdr_addr, &hdr, sizeof(hdr));
    }
    if (!rc) *root = hdr_addr;
    return rc;
}

int dm_sephash_open(dm_ctx_t *ctx, dm_gaddr_t root, dm_sephash_t **out)
{
    dm_sephash_t *h = calloc(1, sizeof(*h));
    if (!h) return DM_ENOMEM;
    h->root = root;
    h->dir = calloc(1ull << SH_MAX_DEPTH, 8);
    h->cache = calloc(1ull << SH_MAX_DEPTH, sizeof(*h->cache));
    int rc = h->dir && h->cache ? sh_refresh(ctx, h) : DM_ENOMEM;
    if (rc) {
        dm_sephash_close(h);
        return rc;
    }
    *out = h;
    return 0;
}

void dm_sephash_close(dm_sephash_t *h)
{
    if (!h) return;
    if (h->cache)
        for (uint64_t i = 0; i < (1ull << SH_MAX_DEPTH); i++)
            free(h->cache[i]);
    free(h->cache);
    free(h->dir);
    free(h);
}

void dm_sephash_stats(const dm_sephash_t *h, dm_sephash_stats_t *s)
{
    *s = h->st;
}

unsigned dm_sephash_global_depth(const dm_sephash_t *h)
{
    return h->global_depth;
}
