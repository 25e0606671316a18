/* SepHash as the point role (dmkv/index.h): the table kv/engines.c lists (docs/DESIGN.md
 * "SepHash: the core built, the point role planned"). The writes are role_write.c's; here
 * the table's root in the superblock, the key count, the walks and INFO's statistics. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"
#include "role.h"

/* ---- attach: the table's root is the superblock's sephash_root, set once by CAS ---- */

static int sh_attach(dm_ctx_t *ctx, dm_worker_t *w)
{
    uint64_t root = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(sephash_root)), &root, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (!rc && !root) {
        dm_gaddr_t mine;
        rc = dm_sephash_create(ctx, 0, &mine);
        if (!rc) {
            /* The table is complete before the CAS is posted; a loser's table leaks once. */
            dm_batch_init(&b);
            dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(sephash_root)), 0, mine);
            rc = dm_batch_exec(ctx, &b);
            root = v->result ? v->result : mine;
        }
    }
    struct dm_sephash_role *r = rc ? NULL : calloc(1, sizeof(*r));
    if (!rc && !r) rc = DM_ENOMEM;
    if (!rc) rc = dm_sephash_open(ctx, root, &r->h);
    if (rc) {
        free(r);
        return rc;
    }
    w->sephash = r;
    return 0;
}

/* ---- process statistics (INFO): each worker adds its handle's counters as it goes ---- */

static dm_sephash_stats_t totals;

void sh_role_report(struct dm_sephash_role *r)
{
    dm_sephash_stats_t s;
    dm_sephash_stats(r->h, &s);
    const uint64_t *now = (const uint64_t *)&s;
    uint64_t *seen = (uint64_t *)&r->reported, *tot = (uint64_t *)&totals;
    for (size_t i = 0; i < sizeof(s) / 8; i++) {
        if (now[i] != seen[i]) __atomic_fetch_add(&tot[i], now[i] - seen[i], __ATOMIC_RELAXED);
        seen[i] = now[i];
    }
}

static void sh_detach(dm_worker_t *w)
{
    if (!w->sephash) return;
    sh_role_report(w->sephash);
    dm_sephash_close(w->sephash->h);
    free(w->sephash);
    w->sephash = NULL;
}

static size_t sh_stats(dm_index_stat_t *out)
{
#define T(f) __atomic_load_n(&totals.f, __ATOMIC_RELAXED)
    size_t n = 0;
    out[n++] = dm_index_count("sephash_merges", T(merges));
    out[n++] = dm_index_count("sephash_splits", T(splits));
    out[n++] = dm_index_count("sephash_directory_doublings", T(doublings));
    out[n++] = dm_index_count("sephash_split_reads", T(split_reads));
    out[n++] = dm_index_count("sephash_merge_reads", T(merge_reads));
    out[n++] = dm_index_count("sephash_freed_blocks", T(freed_blocks));
    out[n++] = dm_index_count("sephash_retries", T(retries));
    out[n++] = dm_index_count("sephash_takeovers", T(takeovers));
    out[n++] = dm_index_count("sephash_hold_ends", T(hold_ends));
    out[n++] =
        dm_index_count("sephash_conflicts", __atomic_load_n(&sh_role_conflicts, __ATOMIC_RELAXED));
#undef T
    return n;
}

/* ---- counting: the live counter (exact: every point-role write is a counted
 * conditional append), not the core's merge-based count (dm_sephash_count), which lags by
 * the CurSegments' appends ---- */

static int64_t sh_count(dm_ctx_t *ctx)
{
    int64_t n = 0;
    int rc = dm_sephash_live_count(ctx, ctx->w->sephash->h, &n);
    return rc ? rc : n < 0 ? 0 : n; /* below 0 only when off: a recount repairs it */
}

typedef struct hashes {
    uint64_t *v;
    size_t n, cap;
    int oom;
} hashes_t;

/* A walk emits a key twice when its segment split meanwhile (scan.c), so a recount counts
 * distinct keys by their 64-bit hashes. */
static void collect_hash(void *arg, const dm_kv_view_t *kv)
{
    hashes_t *hs = arg;
    if (hs->n == hs->cap) {
        size_t cap = hs->cap ? 2 * hs->cap : 1024;
        uint64_t *v = realloc(hs->v, cap * 8);
        if (!v) {
            hs->oom = 1;
            return;
        }
        hs->v = v, hs->cap = cap;
    }
    hs->v[hs->n++] = XXH3_64bits(kv->key, kv->key_len);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Distinct live keys of one whole walk: 0 with *n, or DM_E*. */
static int walk_count(dm_ctx_t *ctx, dm_sephash_t *h, int64_t *n)
{
    hashes_t hs = {0};
    uint64_t cursor = 0;
    int rc;
    do {
        ctx->start_us = dm_now_us();
        rc = dm_sephash_scan(ctx, h, cursor, 1024, collect_hash, &hs, &cursor);
    } while (!rc && !hs.oom && cursor);
    if (!rc && hs.oom) rc = DM_ENOMEM;
    if (!rc) {
        if (hs.n) qsort(hs.v, hs.n, 8, cmp_u64);
        int64_t d = 0;
        for (size_t i = 0; i < hs.n; i++)
            d += !i || hs.v[i] != hs.v[i - 1];
        *n = d;
    }
    free(hs.v);
    return rc;
}

/* Recount (a dead gateway's count updates that never landed, or a connection's lost in
 * flight): the counter read before a walk, CASed from that value to the walk's count; a
 * counter that moved meanwhile means keys came or went (DM_ERETRY). dmkv: not in the paper.
 * gap_us > 0: the rule of dm_point_index_ops_t.recount, two walks gap_us apart under one
 * counter value (one walk counted a key twice: DBSIZE 174 for 173 keys in the SepHash +
 * ROLEX step of rdma/integration_in_vm, 2026-12-01). */
static int recount_walks(dm_ctx_t *ctx, uint32_t gap_us, int64_t *drift)
{
    dm_sephash_t *h = ctx->w->sephash->h;
    *drift = 0;
    int64_t before = 0, after = 0, found = 0, again = 0;
    int rc = dm_sephash_live_count(ctx, h, &before);
    if (!rc) rc = walk_count(ctx, h, &found);
    if (!rc && gap_us) {
        if ((rc = dm_sephash_live_count(ctx, h, &after)) != 0) return rc;
        if (after != before) return DM_ERETRY; /* moved already: no need to wait */
        dm_ctx_sleep(ctx, gap_us);
        if ((rc = walk_count(ctx, h, &again)) != 0) return rc;
        if (again != found) return DM_ERETRY;
    }
    if (rc) return rc;
    rc = dm_sephash_live_count_set(ctx, h, before, found);
    if (rc == DM_ECONFLICT) return DM_ERETRY;
    if (!rc) *drift = found - before;
    return rc;
}

static int sh_recount(dm_ctx_t *ctx, int64_t *drift)
{
    return recount_walks(ctx, DM_RECOUNT_GAP_US, drift);
}

/* FLUSHALL: the core's flush (tombstones, not atomic), then the counter set from one walk
 * (a flush's tombstones are unconditional appends: they do not move it). One walk, not
 * the recount's two a second apart: FLUSHALL answers at once, and writes racing with it
 * are not atomic with it anyway (a redial or a dead gateway starts a recount). */
static int64_t sh_flush(dm_ctx_t *ctx)
{
    dm_sephash_t *h = ctx->w->sephash->h;
    uint64_t deleted = 0;
    ctx->start_us = dm_now_us();
    int rc = dm_sephash_flush(ctx, h, &deleted);
    sh_role_report(ctx->w->sephash);
    if (rc) return rc;
    int64_t drift;
    for (int i = 0; i < 8; i++)
        if ((rc = recount_walks(ctx, 0, &drift)) != DM_ERETRY) break;
    return rc ? rc : (int64_t)deleted;
}

/* ---- lookups and walks ---- */

static int sh_probe(dm_ctx_t *ctx, const uint8_t *const *keys, const size_t *lens, unsigned n,
                    uint8_t *present, uint64_t *expire_ms)
{
    for (unsigned i = 0; i < n; i++) {
        dm_point_item_t it;
        int rc = sh_role_search(ctx, keys[i], lens[i], &it);
        if (rc < 0) return rc;
        present[i] = (uint8_t)rc;
        if (expire_ms) expire_ms[i] = rc ? it.view.expire_ms : 0;
        if (rc) free(it.block);
    }
    return 0;
}

typedef struct live_emit {
    dm_point_emit_fn emit;
    void *arg;
    uint64_t now_ms;
} live_emit_t;

static void emit_live(void *arg, const dm_kv_view_t *v)
{
    const live_emit_t *le = arg;
    if (!v->expire_ms || v->expire_ms > le->now_ms) le->emit(le->arg, v);
}

/* The role's walk emits live keys only, as RACE's (race/scan.c); the table's own walk
 * (dm_sephash_scan, which the recount uses) emits every newest version. */
static int sh_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, dm_point_emit_fn emit, void *arg,
                   uint64_t *next)
{
    ctx->start_us = dm_now_us();
    live_emit_t le = {emit, arg, dm_wall_ms()};
    return dm_sephash_scan(ctx, ctx->w->sephash->h, cursor, count > 65536 ? 65536 : (unsigned)count,
                           emit_live, &le, next);
}

/* No cache of versions yet: every SET reads first (the caller runs set). */
static int sh_set_blind(dm_ctx_t *ctx, const void *key, size_t klen, const uint8_t *block,
                        uint64_t block_len)
{
    (void)ctx, (void)key, (void)klen, (void)block, (void)block_len;
    return 2;
}

static void sh_cache_prefetch(dm_worker_t *w, const void *key, size_t klen)
{
    (void)w, (void)key, (void)klen;
}

static int sh_cache_knows(dm_worker_t *w, const void *key, size_t klen)
{
    (void)w, (void)key, (void)klen;
    return 0; /* no per-key cache: every SET counts as a possible insert */
}

/* A key's MainSegment entry and its fp2 byte (its CurSegment entries are transient). */
static uint64_t sh_key_bytes(void)
{
    return 9;
}

static int sh_objects(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg)
{
    return dm_sephash_objects(ctx, ctx->w->sephash->h, fn, arg);
}

const dm_point_index_ops_t dm_sephash_point_index = {.engine = {"sephash", 2},
                                                     .attach = sh_attach,
                                                     .detach = sh_detach,
                                                     .count = sh_count,
                                                     .flush = sh_flush,
                                                     .recount = sh_recount,
                                                     .stats = sh_stats,
                                                     .search = sh_role_search,
                                                     .search_cached = sh_role_search,
                                                     .cache_prefetch = sh_cache_prefetch,
                                                     .cache_knows = sh_cache_knows,
                                                     .set = sh_role_set,
                                                     .set_blind = sh_set_blind,
                                                     .del = sh_role_del,
                                                     .carry_release = sh_role_carry_release,
                                                     .block_bytes = dm_sephash_block_bytes,
                                                     .prefetch = sh_role_prefetch,
                                                     .probe = sh_probe,
                                                     .key_bytes = sh_key_bytes,
                                                     .scan = sh_scan,
                                                     .objects = sh_objects};
