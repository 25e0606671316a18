/* Bucket walks: SCAN with a numeric cursor (subtable index * buckets + bucket), FLUSHALL,
 * and the load factor. Ordered SCAN arrives with CHIME (issue 3). */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/index.h"
#include "dmkv/superblock.h"
#include "race_internal.h"

#define SCAN_MAX_BUCKETS 384 /* 24 KiB per READ */

static uint64_t buckets_per_subtable(const dm_race_t *r)
{
    return r->groups * 3;
}

/* Read the blocks behind up to DM_BATCH_MAX slots at once and emit the verified ones.
 * A slot whose block fails its checksum changed while we read: read slot and block again. */
static int emit_slots(dm_ctx_t *ctx, const dm_gaddr_t *addrs, const uint64_t *words, unsigned n,
                      dm_race_emit_fn emit, void *arg)
{
    uint8_t *bufs[DM_BATCH_MAX] = {0};
    uint64_t lens[DM_BATCH_MAX];
    uint64_t cur[DM_BATCH_MAX];
    int rc = 0;
    uint64_t now = dm_wall_ms();
    for (unsigned i = 0; i < n; i++)
        cur[i] = words[i];
    for (int round = 0; round < 4; round++) {
        dm_batch_t b;
        for (unsigned i = 0; i < n; i++) {
            free(bufs[i]);
            bufs[i] = NULL;
        }
        rc = race_read_blocks(ctx, cur, n, bufs, lens);
        if (rc) goto out;
        dm_batch_init(&b);
        for (unsigned i = 0; i < n; i++) {
            if (!race_slot_ptr(cur[i])) continue;
            dm_kv_view_t v;
            if (dm_kvblock_parse(bufs[i], lens[i], &v) == 0) {
                if (!v.expire_ms || v.expire_ms > now) emit(arg, &v);
                cur[i] = 0;
            } else {
                dm_batch_read(&b, addrs[i], &cur[i], 8);
            }
        }
        if (b.n == 0) break;
        rc = dm_batch_exec(ctx, &b);
        if (rc) goto out;
    }
out:
    for (unsigned i = 0; i < n; i++)
        free(bufs[i]);
    return rc;
}

/* Bit-reverse the low DM_RACE_MAX_DEPTH bits. */
static uint64_t rev_bits(uint64_t x)
{
    uint64_t r = 0;
    for (int i = 0; i < DM_RACE_MAX_DEPTH; i++)
        r |= ((x >> i) & 1) << (DM_RACE_MAX_DEPTH - 1 - i);
    return r;
}

/* Read a whole subtable (in READs of SCAN_MAX_BUCKETS buckets) and hand every bucket to fn.
 * *max_ld receives the deepest local depth among its bucket headers. */
typedef int (*bucket_fn)(dm_ctx_t *ctx, dm_gaddr_t bucket, const uint64_t *raw, void *arg);

static int walk_subtable(dm_ctx_t *ctx, dm_gaddr_t st, bucket_fn fn, void *arg, unsigned *max_ld)
{
    dm_race_t *r = ctx->w->race;
    uint64_t per = buckets_per_subtable(r);
    uint64_t *raw = malloc(SCAN_MAX_BUCKETS * DM_RACE_BUCKET);
    if (!raw) return DM_ENOMEM;
    int rc = 0;
    for (uint64_t first = 0; !rc && first < per; first += SCAN_MAX_BUCKETS) {
        uint64_t want = per - first < SCAN_MAX_BUCKETS ? per - first : SCAN_MAX_BUCKETS;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, st + first * DM_RACE_BUCKET, raw, (uint32_t)(want * DM_RACE_BUCKET));
        rc = dm_batch_exec(ctx, &b);
        for (uint64_t bk = 0; !rc && bk < want; bk++) {
            unsigned ld = race_hdr_ld(raw[bk * 8]);
            if (max_ld && ld > *max_ld) *max_ld = ld;
            rc = fn(ctx, st + (first + bk) * DM_RACE_BUCKET, raw + bk * 8, arg);
        }
    }
    free(raw);
    return rc;
}

/* Subtables are visited in the bit-reversed order of their suffixes (Redis's SCAN trick):
 * a subtable of local depth l covers the cursor range that starts at rev(suffix) and spans
 * 2^(16-l) positions, and a split only narrows a range into two halves, the moved half
 * later in the order. So a page reads one subtable and the next cursor skips the range of
 * the deepest bucket header it saw: a key that moved out meanwhile is met again later. */
typedef struct scan_page {
    dm_gaddr_t addrs[DM_BATCH_MAX];
    uint64_t words[DM_BATCH_MAX];
    unsigned n;
    dm_race_emit_fn emit;
    void *arg;
    uint64_t suffix; /* rev(cursor): the page must read the subtable that holds it */
    int wrong;       /* a bucket header says it does not (stale directory cache) */
} scan_page_t;

static int page_bucket(dm_ctx_t *ctx, dm_gaddr_t bucket, const uint64_t *raw, void *arg)
{
    scan_page_t *p = arg;
    if ((p->suffix & ((1ull << race_hdr_ld(raw[0])) - 1)) != race_hdr_suffix(raw[0])) p->wrong = 1;
    for (int s = 0; s < DM_RACE_SLOTS; s++) {
        uint64_t w = raw[1 + s];
        if (!race_slot_ptr(w)) continue;
        p->addrs[p->n] = bucket + 8 + 8 * (uint64_t)s;
        p->words[p->n++] = w & ~RACE_SLOT_MOVING;
        if (p->n == DM_BATCH_MAX) {
            int rc = emit_slots(ctx, p->addrs, p->words, p->n, p->emit, p->arg);
            p->n = 0;
            if (rc) return rc;
        }
    }
    return 0;
}

int dm_race_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, dm_race_emit_fn emit, void *arg,
                 uint64_t *next)
{
    (void)count; /* a page is one subtable: COUNT is a hint in Redis too */
    dm_race_t *r = ctx->w->race;
    *next = 0;
    if (cursor >= (1ull << DM_RACE_MAX_DEPTH)) return 0;
    uint64_t e;
    unsigned max_ld;
    for (int tries = 0;; tries++) {
        e = race_dir_get(r, rev_bits(cursor));
        max_ld = race_dir_ld(e);
        scan_page_t p = {.n = 0, .emit = emit, .arg = arg, .suffix = rev_bits(cursor)};
        int rc = walk_subtable(ctx, race_dir_addr(e), page_bucket, &p, &max_ld);
        if (!rc && p.n) rc = emit_slots(ctx, p.addrs, p.words, p.n, emit, arg);
        if (rc) return rc;
        if (max_ld > race_dir_ld(e) || p.wrong)
            rc = race_refresh(ctx, r); /* it split: learn the new directory */
        if (rc) return rc;
        if (!p.wrong) break;
        if (tries >= 8) return DM_ERETRY;
    }
    uint64_t nx = cursor + (1ull << (DM_RACE_MAX_DEPTH - max_ld));
    *next = nx >= (1ull << DM_RACE_MAX_DEPTH) ? 0 : nx;
    return 0;
}

/* Every subtable once, in cursor order. */
static int walk_buckets(dm_ctx_t *ctx, bucket_fn fn, void *arg)
{
    dm_race_t *r = ctx->w->race;
    int rc = race_refresh(ctx, r);
    for (uint64_t pos = 0; !rc && pos < (1ull << DM_RACE_MAX_DEPTH);) {
        uint64_t e = race_dir_get(r, rev_bits(pos));
        rc = walk_subtable(ctx, race_dir_addr(e), fn, arg, NULL);
        pos += 1ull << (DM_RACE_MAX_DEPTH - race_dir_ld(e));
    }
    return rc;
}

typedef struct flush_state {
    int64_t removed;
} flush_state_t;

/* Frozen slots belong to a running split: its mover clears them. The key counter is
 * counted with each bucket's CASes, as every removal is (race_internal.h). */
static int flush_bucket(dm_ctx_t *ctx, dm_gaddr_t bucket, const uint64_t *raw, void *arg)
{
    flush_state_t *fs = arg;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *v[DM_RACE_SLOTS] = {0};
    int64_t sent = 0, won = 0;
    for (int s = 0; s < DM_RACE_SLOTS; s++)
        if (race_slot_ptr(raw[1 + s]) && !race_slot_moving(raw[1 + s])) {
            v[s] = dm_batch_cas(&b, bucket + 8 + 8 * (uint64_t)s, raw[1 + s], 0);
            sent++;
        }
    if (b.n == 0) return 0;
    dm_verb_t *fv = race_count_with(&b, -sent);
    int rc = dm_batch_exec(ctx, &b);
    for (int s = 0; !rc && s < DM_RACE_SLOTS; s++)
        won += v[s] && v[s]->result == raw[1 + s];
    race_count_removed(ctx, fv, sent, won);
    if (rc) return rc;
    for (int s = 0; s < DM_RACE_SLOTS; s++)
        if (v[s] && v[s]->result == raw[1 + s]) {
            fs->removed++;
            /* Blocks over 16 KB are not returned here (their size needs a read). */
            if (race_slot_len(raw[1 + s]) < DM_KV_LEN_MAX_UNITS)
                dm_alloc_free(ctx->w->alloc, race_slot_ptr(raw[1 + s]),
                              (uint64_t)race_slot_len(raw[1 + s]) * DM_KV_UNIT);
        }
    return 0;
}

int64_t dm_race_flush(dm_ctx_t *ctx)
{
    flush_state_t fs = {0};
    int rc = walk_buckets(ctx, flush_bucket, &fs);
    return rc ? rc : fs.removed;
}

/* Recount: live slots, and whether a split is under way (frozen slots, MOVING headers). */
typedef struct recount_state {
    int64_t keys;
    int split;
} recount_state_t;

static int recount_bucket(dm_ctx_t *ctx, dm_gaddr_t bucket, const uint64_t *raw, void *arg)
{
    (void)ctx;
    (void)bucket;
    recount_state_t *rs = arg;
    if (raw[0] & RACE_HDR_MOVING) rs->split = 1;
    for (int s = 0; s < DM_RACE_SLOTS; s++) {
        if (race_slot_moving(raw[1 + s])) rs->split = 1;
        rs->keys += race_slot_ptr(raw[1 + s]) != 0;
    }
    return 0;
}

/* The counter word and a private copy of the directory, in one batch. */
static int read_count_and_dir(dm_ctx_t *ctx, uint64_t *word, uint64_t *dir, unsigned *gd)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(key_count)), word, 8);
    int rc = dm_batch_exec(ctx, &b);
    uint64_t groups;
    return rc ? rc : race_read_dir(ctx, ctx->w->race, dir, gd, &groups);
}

/* One walk between two reads of the counter and the directory: rs counts the live slots,
 * and *steady says the counter, the directory and every bucket stayed still (no frozen
 * slot, no MOVING header) as far as these reads can tell. *w is the counter word after. */
static int walk_once(dm_ctx_t *ctx, uint64_t *d0, uint64_t *d1, recount_state_t *rs, uint64_t *w,
                     int *steady)
{
    uint64_t w0;
    unsigned gd0, gd1;
    *rs = (recount_state_t){0, 0};
    int rc = read_count_and_dir(ctx, &w0, d0, &gd0);
    if (!rc) rc = walk_buckets(ctx, recount_bucket, rs);
    if (!rc) rc = read_count_and_dir(ctx, w, d1, &gd1);
    *steady = !rc && w0 == *w && gd0 == gd1 && !memcmp(d0, d1, 8ull << gd0) && !rs->split;
    return rc;
}

int dm_race_recount(dm_ctx_t *ctx, int64_t *drift)
{
    *drift = 0;
    uint64_t *d0 = malloc(8ull << DM_RACE_MAX_DEPTH), *d1 = malloc(8ull << DM_RACE_MAX_DEPTH);
    int rc = d0 && d1 ? DM_ERETRY : DM_ENOMEM;
    for (int tries = 0; rc == DM_ERETRY && tries < 3; tries++) {
        if (tries) race_pause(ctx, 200000);
        recount_state_t r1, r2;
        uint64_t w1, w2;
        int steady1 = 0, steady2 = 0;
        rc = walk_once(ctx, d0, d1, &r1, &w1, &steady1);
        if (rc) break;
        if (!steady1) {
            rc = DM_ERETRY; /* keys came or went, or a split moved slots */
            continue;
        }
        /* A slot CAS and the FAA that counts it travel in one batch but land apart (two
         * memory nodes, or two QPs): a walk that falls between them sees the key while the
         * counter does not. A second walk a while later, agreeing with the first and with
         * the same counter word, rules that out (the batch's other verb has landed). */
        race_pause(ctx, DM_RECOUNT_GAP_US);
        rc = walk_once(ctx, d0, d1, &r2, &w2, &steady2);
        if (rc) break;
        if (!steady2 || w2 != w1 || r2.keys != r1.keys) {
            rc = DM_ERETRY;
            continue;
        }
        if (r2.keys == dm_key_count_value(w2)) break;
        uint64_t want = (dm_key_count_seq(w2) + 1) << DM_KEY_COUNT_BITS |
                        ((uint64_t)r2.keys & ((1ull << DM_KEY_COUNT_BITS) - 1));
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(key_count)), w2, want);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        if (v->result != w2) {
            rc = DM_ERETRY;
            continue;
        }
        *drift = r2.keys - dm_key_count_value(w2);
    }
    free(d0);
    free(d1);
    return rc;
}

typedef struct load_state {
    uint64_t used, total;
} load_state_t;

static int load_bucket(dm_ctx_t *ctx, dm_gaddr_t bucket, const uint64_t *raw, void *arg)
{
    (void)ctx;
    (void)bucket;
    load_state_t *ls = arg;
    for (int s = 0; s < DM_RACE_SLOTS; s++)
        ls->used += race_slot_ptr(raw[1 + s]) != 0;
    ls->total += DM_RACE_SLOTS;
    return 0;
}

int dm_race_load(dm_ctx_t *ctx, uint64_t *used, uint64_t *total)
{
    load_state_t ls = {0};
    int rc = walk_buckets(ctx, load_bucket, &ls);
    *used = ls.used;
    *total = ls.total;
    return rc;
}
