/* The gateway's KV API over the hybrid index (RACE + CHIME, kv/hybrid.c): expiry is checked here
 * (expired = absent), SET's NX/XX/GET/KEEPTTL become RACE's decide callback. */
#include "dmkv/kv.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/clock.h"
#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/index.h"
#include "dmkv/kvblock.h"
#include "dmkv/superblock.h"
#include "guard.h"
#include "hybrid.h"
#include "keyq.h"
#include "roles.h"
#include <xxhash.h>

#define KV_SMALL_BLOCK 256 /* bytes: a SET's block up to this size is built on the stack */

static int live(const dm_kv_view_t *v, uint64_t now_ms)
{
    return v && (v->expire_ms == 0 || v->expire_ms > now_ms);
}

void dm_value_free(dm_value_t *v)
{
    free(v->owner ? v->owner : v->data);
    v->data = NULL;
    v->owner = NULL;
    v->len = 0;
}

/* out takes the item's block over: the value stays where it was read, no copy (a GET's malloc). */
static void take_value(dm_point_item_t *it, dm_value_t *out)
{
    *out = (dm_value_t){(uint8_t *)it->view.val, it->view.val_len, it->view.expire_ms, it->block};
    it->block = NULL;
}

/* A read inside EXEC of a key WATCHed and not yet written by the transaction: a value
 * other than the watched one trips the guard set (the EXEC aborts if nothing was written
 * yet), as the check before EXEC would have. */
static void check_read_guard(const void *key, size_t klen, uint64_t version, uint64_t write_id)
{
    dm_kv_guard_set_t *gs = kv_guard_current();
    dm_kv_guard_t *g = kv_guard_find(gs, key, klen);
    if (g && !g->done && (version != g->version || write_id != g->write_id)) gs->tripped = 1;
}

int dm_kv_get(dm_ctx_t *ctx, const void *key, size_t klen, dm_value_t *out)
{
    dm_point_item_t it;
    int rc = point_role()->search_cached(ctx, key, klen, &it);
    uint64_t version = 0, wid = 0;
    if (rc == 1) {
        if (live(&it.view, dm_wall_ms())) {
            version = it.version;
            wid = it.view.write_id;
            rc = 1;
            if (out) take_value(&it, out);
        } else {
            rc = 0;
        }
        free(it.block);
    }
    if (rc >= 0) check_read_guard(key, klen, version, wid);
    return rc;
}

void dm_kv_prefetch(dm_worker_t *w, const void *key, size_t klen)
{
    point_role()->cache_prefetch(w, key, klen);
}

int dm_kv_cache_knows(dm_worker_t *w, const void *key, size_t klen)
{
    return point_role()->cache_knows(w, key, klen);
}

int dm_kv_exists(dm_ctx_t *ctx, const void *key, size_t klen)
{
    return dm_kv_get(ctx, key, klen, NULL);
}

typedef struct set_decide {
    unsigned flags;
    uint64_t now_ms;
    int existed;
} set_decide_t;

static int decide_set(void *arg, const dm_kv_view_t *v)
{
    set_decide_t *d = arg;
    d->existed = live(v, d->now_ms);
    /* NX waits the skew bound out: a key expired by our clock may still be live by the
     * writer's (a lock taken with SET NX PX on a gateway whose clock lags). */
    if ((d->flags & DM_SET_NX) && live(v, d->now_ms - dm_clock_margin_ms())) return 0;
    if ((d->flags & DM_SET_XX) && !d->existed) return 0;
    return 1;
}

int dm_kv_mark_volatile(dm_ctx_t *ctx)
{
    if (ctx->w->volatile_marked) return 0;
    static const uint64_t one = 1;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(volatile_seen)), &one, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (!rc) ctx->w->volatile_marked = 1;
    return rc;
}

int dm_kv_set(dm_ctx_t *ctx, const void *key, size_t klen, const void *val, size_t vlen,
              uint64_t expire_ms, unsigned flags, dm_value_t *old)
{
    if (old) memset(old, 0, sizeof(*old));
    if (klen > DM_KV_MAX_KEY || vlen > DM_KV_MAX_VALUE) return DM_ETOOBIG;
    if (expire_ms) {
        int rc = dm_kv_mark_volatile(ctx); /* before the first volatile key is visible */
        if (rc) return rc;
    }
    int timed = expire_ms || (flags & DM_SET_KEEPTTL); /* KEEPTTL may give it one */
    uint64_t size = dm_kvblock_size(klen, vlen, timed);
    /* Small blocks on the (coroutine's) stack: every post copies the block out. */
    uint8_t small[KV_SMALL_BLOCK] __attribute__((aligned(8)));
    uint8_t *block = size <= sizeof(small) ? small : malloc(size);
    if (!block) return DM_ENOMEM;
    dm_kvblock_build(block, key, klen, val, vlen, expire_ms, timed);
    /* A guarded (WATCH) write is never combined: its guard must see its own slot CAS. Nor
     * is a write running ahead of its connection's earlier writes (coro.h): absorbed by a
     * later SET, it would take effect after writes of its connection that follow it. */
    dm_keyq_entry_t q = {.hash = XXH3_64bits(key, klen),
                         .key = key,
                         .klen = klen,
                         .blind = flags == 0 && !kv_guard_current() && !dm_coro_turn_pending()};
    if (!dm_keyq_enter(ctx->w, &q)) {
        if (block != small) free(block);
        return q.result; /* combined with a later SET of this key (keyq.h) */
    }
    set_decide_t d = {.flags = flags, .now_ms = 0, .existed = 0}; /* now_ms: below */
    dm_point_item_t prev;
    memset(&prev, 0, sizeof(prev));
    /* A plain SET of a key seen present lately: one round trip, without reading it. */
    int rc =
        flags == 0 && !kv_guard_current() ? dm_hybrid_set_blind(ctx, key, klen, block, size) : 2;
    /* KEEPTTL keeps the expiry only of a live key (an expired one is absent). */
    if (rc == 2) {
        d.now_ms = dm_wall_ms(); /* only a read old value is judged live or expired */
        rc = dm_hybrid_set(ctx, key, klen, block, size, decide_set, &d,
                           (flags & DM_SET_KEEPTTL) != 0, (flags & DM_SET_GET) ? &prev : NULL);
    }
    dm_keyq_leave(ctx->w, &q, rc);
    if ((flags & DM_SET_GET) && old) {
        /* The old value is reported when the key was live, written or not (SET ... GET). */
        if (rc >= 0 && prev.block && live(&prev.view, d.now_ms)) take_value(&prev, old);
    }
    free(prev.block);
    if (block != small) free(block);
    return rc;
}

static int decide_del(void *arg, const dm_kv_view_t *v)
{
    int *was_live = arg;
    *was_live = live(v, dm_wall_ms());
    return 1; /* expired keys are removed too, but reported as absent */
}

int dm_kv_del(dm_ctx_t *ctx, const void *key, size_t klen)
{
    int was_live = 0;
    dm_keyq_entry_t q = {.hash = XXH3_64bits(key, klen), .key = key, .klen = klen, .blind = 0};
    dm_keyq_enter(ctx->w, &q);
    int rc = dm_hybrid_delete(ctx, key, klen, decide_del, &was_live);
    dm_keyq_leave(ctx->w, &q, rc);
    if (rc == 1) return was_live;
    return rc;
}

int64_t dm_kv_dbsize(dm_ctx_t *ctx)
{
    return dm_kv_point_index()->count(ctx);
}

int dm_kv_flushall(dm_ctx_t *ctx)
{
    /* The point index first (the range index stays a superset), then the range index drops
     * the entries the point index lost. */
    int64_t n = dm_kv_point_index()->flush(ctx);
    if (n >= 0) n = dm_kv_range_index()->settle_all(ctx);
    return n < 0 ? (int)n : 0;
}

void dm_keylist_free(dm_keylist_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->keys[i].data);
    free(l->keys);
    l->keys = NULL;
    l->n = l->cap = 0;
}

int dm_keylist_push(dm_keylist_t *l, const uint8_t *k, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        dm_key_t *nk = realloc(l->keys, cap * sizeof(*nk));
        if (!nk) return DM_ENOMEM;
        l->keys = nk;
        l->cap = cap;
    }
    uint8_t *d = malloc(len ? len : 1);
    if (!d) return DM_ENOMEM;
    memcpy(d, k, len);
    l->keys[l->n].data = d;
    l->keys[l->n].len = len;
    l->n++;
    return 0;
}

/* Settle one page of CHIME keys against RACE: present and live ones are returned, pending
 * entries whose key RACE does not hold are not (docs/DESIGN.md "Keeping them consistent").
 * With want_expired, the keys RACE holds expired are returned instead. */
static int settle_page(dm_ctx_t *ctx, const dm_range_key_t *ck, size_t n, dm_keylist_t *out,
                       int want_expired, int probe_all)
{
    const uint8_t **keys = malloc((n ? n : 1) * sizeof(*keys));
    size_t *lens = malloc((n ? n : 1) * sizeof(*lens));
    uint8_t *present = malloc(n ? n : 1);
    uint64_t *expire = malloc((n ? n : 1) * sizeof(*expire));
    int rc = keys && lens && present && expire ? 0 : DM_ENOMEM;
    /* Without any volatile key in the pool only pending entries need RACE: a settled entry's
     * key is in RACE (CHIME ⊇ RACE, and entries leave only after their key did). */
    size_t m = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (!probe_all && !ck[i].pending) continue;
        keys[m] = ck[i].data;
        lens[m++] = ck[i].len;
    }
    if (!rc && m) rc = point_role()->probe(ctx, keys, lens, (unsigned)m, present, expire);
    uint64_t now = dm_wall_ms();
    if (want_expired) now -= dm_clock_margin_ms(); /* delete only what is expired everywhere */
    for (size_t i = 0, j = 0; i < n && !rc; i++) {
        int in = 1, live = 1;
        if (probe_all || ck[i].pending) {
            in = present[j];
            live = expire[j] == 0 || expire[j] > now;
            j++;
        }
        if (in && live != want_expired) rc = dm_keylist_push(out, ck[i].data, ck[i].len);
    }
    free(keys);
    free(lens);
    free(present);
    free(expire);
    return rc;
}

/* dm_chime_scan, reading the pool's volatile_seen flag in the same batch as the first leaf
 * (a flag set before any volatile key was stored, so a 0 read now means none can be
 * expired among the keys read). */
static int scan_chime(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix, size_t plen,
                      dm_range_key_t **ck, size_t *n, size_t *cap, uint64_t *next, uint64_t *vol)
{
    dm_batch_t ride;
    dm_batch_init(&ride);
    dm_batch_read(&ride, dm_gaddr_make(0, DM_SB_OFF(volatile_seen)), vol, 8);
    dm_ctx_ride_start(ctx, &ride);
    int rc = range_role()->scan(ctx, cursor, count, prefix, plen, ck, n, cap, next);
    int r2 = dm_ctx_ride_end(ctx, &ride);
    if (!rc) rc = r2;
    return rc;
}

/* A CHIME page settled against RACE: the keys with prefix (plen 0: all) that are live, or
 * with want_expired the expired ones. */
static int scan_settled(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix,
                        size_t plen, int want_expired, dm_keylist_t *out, uint64_t *next)
{
    dm_range_key_t *ck = NULL;
    size_t n = 0, cap = 0;
    uint64_t vol = 1;
    int rc = scan_chime(ctx, cursor, count, plen ? prefix : NULL, plen, &ck, &n, &cap, next, &vol);
    if (rc == DM_ERANGE && cursor) rc = DM_EINVAL; /* a forged cursor past the region */
    /* Keys outside the prefix would be dropped by MATCH anyway: no need to probe them. */
    size_t keep = 0;
    for (size_t i = 0; i < n; i++) {
        if (plen && (ck[i].len < plen || memcmp(ck[i].data, prefix, plen) != 0))
            free(ck[i].data);
        else
            ck[keep++] = ck[i];
    }
    if (!rc) rc = settle_page(ctx, ck, keep, out, want_expired, vol != 0);
    for (size_t i = 0; i < keep; i++)
        free(ck[i].data);
    free(ck);
    return rc;
}

int dm_kv_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix, size_t plen,
               dm_keylist_t *out, uint64_t *next)
{
    return scan_settled(ctx, cursor, count, prefix, plen, 0, out, next);
}

uint64_t dm_kv_footprint(dm_ctx_t *ctx, size_t klen, size_t vlen)
{
    return dm_alloc_kv_block_bytes(dm_kvblock_size(klen, vlen, 0)) + point_role()->key_bytes() +
           range_role()->key_bytes(ctx, klen);
}

enum { RANDOM_PAGE_KEYS = 32 };

int dm_kv_random_key(dm_ctx_t *ctx, dm_key_t *out)
{
    uint64_t cursor, start;
    int rc = range_role()->random_cursor(ctx, &start);
    cursor = start;
    /* From the random leaf to the end, then from the start up to it. A page of several
     * keys, not the first key found: after FLUSHALL most leaves are empty (leaves never
     * merge) and the first key after a long run of empty leaves would be picked almost
     * always (Redis's suite: RANDOMKEY of two keys must return both). */
    for (int wrapped = 0; !rc;) {
        dm_keylist_t l = {0};
        uint64_t next;
        rc = scan_settled(ctx, cursor, RANDOM_PAGE_KEYS, NULL, 0, 0, &l, &next);
        if (!rc && l.n) {
            size_t pick = (size_t)rand() % l.n;
            *out = l.keys[pick];
            l.keys[pick].data = NULL;
            dm_keylist_free(&l);
            return 1;
        }
        dm_keylist_free(&l);
        if (rc) break;
        if (next == start || (next == 0 && wrapped)) return 0;
        if (next == 0) wrapped = 1;
        cursor = next;
    }
    return rc;
}

int64_t dm_kv_expire_sweep(dm_ctx_t *ctx, uint64_t cursor, size_t count, uint64_t *next)
{
    int rc = 0;
    if (cursor == 0) rc = range_role()->random_cursor(ctx, &cursor);
    dm_keylist_t l = {0};
    if (!rc) rc = scan_settled(ctx, cursor, count, NULL, 0, 1, &l, next);
    int64_t removed = 0;
    for (size_t i = 0; i < l.n && !rc; i++) {
        int r = dm_kv_del_expired(ctx, l.keys[i].data, l.keys[i].len);
        if (r < 0) rc = r;
        removed += r == 1;
    }
    dm_keylist_free(&l);
    return rc ? rc : removed;
}
