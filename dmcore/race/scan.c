/* Bucket walks: SCAN with a numeric cursor (subtable index * buckets + bucket), FLUSHALL,
 * and the load factor. Ordered SCAN arrives with CHIME (issue 3). */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"
#include "race_internal.h"

#define SCAN_MAX_BUCKETS 384 /* 24 KiB per READ */

static uint64_t buckets_per_subtable(const dm_race_t *r)
{
    return r->groups * 3;
}

/* Read the blocks behind up to DM_BATCH_MAX slots at once and emit the verified ones.
 * A slot whose block fails its checksum changed while we read: read slot and block again. */
static int emit_slots(dm_ctx_t *ctx, const dm_gaddr_t *addrs, const uint64_t *words,
                      unsigned n, dm_race_emit_fn emit, void *arg)
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
        dm_batch_init(&b);
        for (unsigned i = 0; i < n; i++) {
            if (!race_slot_ptr(cur[i]))
                continue;
            lens[i] = (uint64_t)race_slot_len(cur[i]) * DM_UNIT;
            free(bufs[i]);
            bufs[i] = malloc(lens[i]);
            if (!bufs[i]) {
                rc = DM_ENOMEM;
                goto out;
            }
            dm_batch_read(&b, race_slot_ptr(cur[i]), bufs[i], (uint32_t)lens[i]);
        }
        if (b.n == 0)
            break;
        rc = dm_batch_exec(ctx, &b);
        if (rc)
            goto out;
        /* Keys of blocks over 16 KB may extend past the first read. */
        dm_batch_init(&b);
        for (unsigned i = 0; i < n; i++) {
            if (!race_slot_ptr(cur[i]))
                continue;
            uint64_t full = dm_kvblock_size_from_hdr(bufs[i], lens[i]);
            if (full > lens[i] && race_slot_len(cur[i]) == DM_KV_LEN_MAX_UNITS) {
                uint8_t *nb = realloc(bufs[i], full);
                if (!nb) {
                    rc = DM_ENOMEM;
                    goto out;
                }
                bufs[i] = nb;
                dm_batch_read(&b, race_slot_ptr(cur[i]) + lens[i], nb + lens[i],
                              (uint32_t)(full - lens[i]));
                lens[i] = full;
            }
        }
        rc = dm_batch_exec(ctx, &b);
        if (rc)
            goto out;
        dm_batch_init(&b);
        for (unsigned i = 0; i < n; i++) {
            if (!race_slot_ptr(cur[i]))
                continue;
            dm_kv_view_t v;
            if (dm_kvblock_parse(bufs[i], lens[i], &v) == 0) {
                if (!v.expire_ms || v.expire_ms > now)
                    emit(arg, &v);
                cur[i] = 0;
            } else {
                dm_batch_read(&b, addrs[i], &cur[i], 8);
            }
        }
        if (b.n == 0)
            break;
        rc = dm_batch_exec(ctx, &b);
        if (rc)
            goto out;
    }
out:
    for (unsigned i = 0; i < n; i++)
        free(bufs[i]);
    return rc;
}

typedef struct counted_emit {
    dm_race_emit_fn emit;
    void *arg;
    size_t n;
} counted_emit_t;

static void count_emit(void *arg, const dm_kv_view_t *v)
{
    counted_emit_t *ce = arg;
    ce->n++;
    ce->emit(ce->arg, v);
}

/* Emit the live items of buckets [first, first + want) of subtable st. */
static int scan_buckets(dm_ctx_t *ctx, uint64_t st, uint64_t first, uint64_t want,
                        uint64_t *raw, counted_emit_t *ce)
{
    dm_race_t *r = ctx->w->race;
    dm_gaddr_t base = race_dir_addr(r->dir[st]);
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, base + first * DM_RACE_BUCKET, raw, (uint32_t)(want * DM_RACE_BUCKET));
    int rc = dm_batch_exec(ctx, &b);
    dm_gaddr_t addrs[DM_BATCH_MAX];
    uint64_t words[DM_BATCH_MAX];
    unsigned n = 0;
    for (uint64_t bk = 0; !rc && bk < want; bk++)
        for (int s = 0; !rc && s < DM_RACE_SLOTS; s++) {
            uint64_t w = raw[bk * 8 + 1 + s];
            if (!race_slot_ptr(w))
                continue;
            addrs[n] = base + (first + bk) * DM_RACE_BUCKET + 8 + 8 * (uint64_t)s;
            words[n++] = w;
            if (n == DM_BATCH_MAX) {
                rc = emit_slots(ctx, addrs, words, n, count_emit, ce);
                n = 0;
            }
        }
    if (!rc && n)
        rc = emit_slots(ctx, addrs, words, n, count_emit, ce);
    return rc;
}

int dm_race_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, dm_race_emit_fn emit, void *arg,
                 uint64_t *next)
{
    dm_race_t *r = ctx->w->race;
    uint64_t per = buckets_per_subtable(r);
    uint64_t total = per << r->global_depth;
    *next = 0;
    if (cursor >= total)
        return 0;
    if (count == 0)
        count = 1;
    /* Read runs of buckets, doubling while they come back sparse, until about count keys
     * or 16 reads: a page costs a bounded number of round trips on an empty table too. */
    uint64_t want = count / 2 + 1;
    want = want < 8 ? 8 : want > SCAN_MAX_BUCKETS ? SCAN_MAX_BUCKETS : want;
    uint64_t *raw = malloc(SCAN_MAX_BUCKETS * DM_RACE_BUCKET);
    if (!raw)
        return DM_ENOMEM;
    counted_emit_t ce = {.emit = emit, .arg = arg, .n = 0};
    int rc = 0;
    uint64_t pos = cursor;
    for (int reads = 0; !rc && pos < total && ce.n < count && reads < 16; reads++) {
        uint64_t st = pos / per, first = pos % per;
        uint64_t n = first + want > per ? per - first : want;
        rc = scan_buckets(ctx, st, first, n, raw, &ce);
        pos += n;
        want = want * 2 > SCAN_MAX_BUCKETS ? SCAN_MAX_BUCKETS : want * 2;
    }
    free(raw);
    if (rc)
        return rc;
    *next = pos >= total ? 0 : pos;
    return 0;
}

/* Walk every bucket of every subtable, SCAN_MAX_BUCKETS at a time. fn sees each bucket. */
typedef int (*bucket_fn)(dm_ctx_t *ctx, dm_gaddr_t bucket, const uint64_t *raw, void *arg);

static int walk_buckets(dm_ctx_t *ctx, bucket_fn fn, void *arg)
{
    dm_race_t *r = ctx->w->race;
    uint64_t per = buckets_per_subtable(r);
    uint64_t *raw = malloc(SCAN_MAX_BUCKETS * DM_RACE_BUCKET);
    if (!raw)
        return DM_ENOMEM;
    int rc = 0;
    for (uint64_t st = 0; !rc && st < (1ull << r->global_depth); st++) {
        dm_gaddr_t base = race_dir_addr(r->dir[st]);
        for (uint64_t first = 0; !rc && first < per; first += SCAN_MAX_BUCKETS) {
            uint64_t want = per - first < SCAN_MAX_BUCKETS ? per - first : SCAN_MAX_BUCKETS;
            dm_batch_t b;
            dm_batch_init(&b);
            dm_batch_read(&b, base + first * DM_RACE_BUCKET, raw,
                          (uint32_t)(want * DM_RACE_BUCKET));
            rc = dm_batch_exec(ctx, &b);
            for (uint64_t bk = 0; !rc && bk < want; bk++)
                rc = fn(ctx, base + (first + bk) * DM_RACE_BUCKET, raw + bk * 8, arg);
        }
    }
    free(raw);
    return rc;
}

typedef struct flush_state {
    int64_t removed;
} flush_state_t;

static int flush_bucket(dm_ctx_t *ctx, dm_gaddr_t bucket, const uint64_t *raw, void *arg)
{
    flush_state_t *fs = arg;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *v[DM_RACE_SLOTS] = {0};
    for (int s = 0; s < DM_RACE_SLOTS; s++)
        if (race_slot_ptr(raw[1 + s]))
            v[s] = dm_batch_cas(&b, bucket + 8 + 8 * (uint64_t)s, raw[1 + s], 0);
    if (b.n == 0)
        return 0;
    int rc = dm_batch_exec(ctx, &b);
    if (rc)
        return rc;
    for (int s = 0; s < DM_RACE_SLOTS; s++)
        if (v[s] && v[s]->result == raw[1 + s]) {
            fs->removed++;
            /* Blocks over 16 KB are not returned here (their size needs a read). */
            if (race_slot_len(raw[1 + s]) < DM_KV_LEN_MAX_UNITS)
                dm_alloc_free(ctx->w->alloc, race_slot_ptr(raw[1 + s]),
                              (uint64_t)race_slot_len(raw[1 + s]) * DM_UNIT);
        }
    return 0;
}

int64_t dm_race_flush(dm_ctx_t *ctx)
{
    flush_state_t fs = {0};
    int rc = walk_buckets(ctx, flush_bucket, &fs);
    if (fs.removed) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_faa(&b, dm_gaddr_make(0, DM_SB_OFF(key_count)), (uint64_t)-fs.removed);
        int rc2 = dm_batch_exec(ctx, &b);
        if (!rc)
            rc = rc2;
    }
    return rc ? rc : fs.removed;
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
