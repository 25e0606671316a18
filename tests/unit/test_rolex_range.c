/* ROLEX as the range role (dmcore/rolex/range*.c, cursor.c) on the local transport: SCAN
 * cursors (every leaf's round-trips, forged and out-of-range ones refused with DM_EINVAL,
 * below 2^53); the hybrid index on RACE + ROLEX through the KV layer (an empty index created
 * and recorded in rolex_root, sets that fill a chain with synonym leaves, GET/DEL, a SCAN
 * walked page by page with cursors against a sorted reference, a prefix scan that ends
 * early, FLUSHALL leaving no entry, keys of 47 and 32,767 bytes held in key records and one
 * of 32,768 refused with DM_ETOOBIG and nothing written, a WATCH signature that changes on a create
 * and delete); the pending flag through the role's own calls (mark_pending shows it to search and
 * scan, unlock(1) clears it, unlock(0) removes the entry, unlock(-1) leaves it; a long key's record
 * written by mark_pending and freed by unlock(0) and by FLUSHALL's settle); and a holder that dies
 * with a pending entry whose key the point index lacks: the next locker takes the lease over and
 * settles it away, while a pending entry of a present key is kept unflagged; a worker asked for
 * CHIME on a ROLEX pool is refused, one asked for ROLEX joins it; and SCAN pages that read
 * their leaves by LT positions a batch at a time, one round trip a page after a retrain; and
 * inserts and deletes in a run of keys sharing one 8-byte image, a few round trips each. */
#include <stdlib.h>
#include <string.h>

#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "dmkv/rolex.h"
#include "dmkv/superblock.h"
#include "dmkv/transport.h"
#include "harness.h"
#include "worker_util.h"
#include "../dmcore/rolex/rolex_range.h"

enum { N = 3000 };

static void key_of(int i, char *k, size_t cap)
{
    snprintf(k, cap, "key:%06d", i);
}

static const dm_range_index_ops_t *role(void)
{
    return &dm_rolex_range_index;
}

/* A worker on a new race+rolex pool in the local region uri, on loop (worker_done ends it). */
static dm_worker_t *rolex_worker(uv_loop_t *loop, const char *uri)
{
    char err[256];
    CHECK(dm_kv_choose_engines("race", "rolex", err, sizeof(err)) == 0);
    uv_loop_init(loop);
    return worker_on(loop, uri);
}

static void test_cursor(void)
{
    uint64_t secret = 0x1234567890abcdefull, root = 0x40000ull;
    for (uint64_t leaf = 0; leaf < 5000; leaf += 7) {
        uint64_t c = rr_cursor_of(secret, root, leaf), got = 0;
        CHECK(c && c < (1ull << 53));
        CHECK(rr_cursor_leaf(secret, root, 5000, c, &got) == 0 && got == leaf);
        CHECK(rr_cursor_leaf(secret, root, leaf, c, &got) == DM_EINVAL);      /* past capacity */
        CHECK(rr_cursor_leaf(secret ^ 1, root, 5000, c, &got) == DM_EINVAL);  /* other pool */
        CHECK(rr_cursor_leaf(secret, root + 64, 5000, c, &got) == DM_EINVAL); /* other index */
        CHECK(rr_cursor_leaf(secret, root, 5000, c ^ (1ull << 40), &got) == DM_EINVAL);
        CHECK(rr_cursor_leaf(secret, root, 5000, c + 1, &got) == DM_EINVAL);
        CHECK(rr_cursor_leaf(secret, root, 5000, c | 1ull << 60, &got) == DM_EINVAL);
    }
    uint64_t got;
    int passed = 0;
    for (uint64_t f = 1; f < 200000; f++) /* forged: small numbers, as a client would try */
        passed += rr_cursor_leaf(secret, root, 5000, f, &got) == 0;
    CHECKF(passed == 0, "%d forged cursors passed", passed);
}

/* A full SCAN by pages of count keys returns exactly the keys fmt % i with in[i] set (i < m,
 * fmt's order is the numbers'), ascending; returns the pages. */
static int scan_all(dm_ctx_t *ctx, const char *in, int m, const char *fmt, size_t count)
{
    uint64_t cursor = 0;
    int next_i = 0, pages = 0;
    char k[32];
    do {
        dm_keylist_t l = {0};
        uint64_t next;
        CHECK(dm_kv_scan(ctx, cursor, count, NULL, 0, &l, &next) == 0);
        for (size_t i = 0; i < l.n; i++) {
            while (next_i < m && !in[next_i])
                next_i++;
            snprintf(k, sizeof(k), fmt, next_i++);
            CHECKF(l.keys[i].len == strlen(k) && !memcmp(l.keys[i].data, k, strlen(k)),
                   "scan: key %zu of page %d is not %s", i, pages, k);
        }
        dm_keylist_free(&l);
        cursor = next;
        pages++;
    } while (cursor);
    while (next_i < m && !in[next_i])
        next_i++;
    CHECKF(next_i == m, "scan ended before key %d", next_i);
    return pages;
}

/* Every key of the pool by SCAN pages of count keys: ascending, equal to in[]. */
static void check_scan(dm_ctx_t *ctx, const char *in, size_t count)
{
    int pages = scan_all(ctx, in, N, "key:%06d", count);
    CHECK(pages > 1 || count >= (size_t)N);
}

static void test_hybrid(void)
{
    char err[256];
    uv_loop_t loop;
    dm_worker_t *w = rolex_worker(&loop, "local:rxrange");
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    uint64_t rec = 0, root = 0;
    CHECK(dm_read_span(&ctx, dm_gaddr_make(0, DM_SB_OFF(engines)), &rec, 8) == 0);
    CHECK(dm_read_span(&ctx, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), &root, 8) == 0);
    CHECKF(rec == (1 | 2 << 8), "engines record %#lx", (unsigned long)rec);
    CHECK(root != 0);
    static char in[N];
    char k[32], v[32];
    /* Shuffled inserts of every other key: one chain, many synonym leaves. */
    for (int j = 0; j < N; j++) {
        int i = (int)((uint64_t)j * 7919 % N);
        if (i % 2) continue;
        key_of(i, k, sizeof(k));
        snprintf(v, sizeof(v), "v%d", i);
        dm_ctx_init(&ctx, w, DM_CLS_SET);
        int rc = dm_kv_set(&ctx, k, strlen(k), v, strlen(v), 0, 0, NULL);
        CHECKF(rc == 1, "set %s rc=%d", k, rc);
        in[i] = 1;
    }
    CHECK(dm_kv_dbsize(&ctx) == N / 2);
    for (int i = 0; i < N; i += 97) {
        key_of(i, k, sizeof(k));
        int pending = 1;
        CHECK(role()->search(&ctx, k, strlen(k), &pending) == in[i]);
        CHECK(!pending); /* every unlock settled its entry */
    }
    check_scan(&ctx, in, 10);
    check_scan(&ctx, in, 500);
    /* Deletes, then a scan again. */
    for (int i = 0; i < N; i += 6) {
        key_of(i, k, sizeof(k));
        dm_ctx_init(&ctx, w, DM_CLS_DEL);
        CHECK(dm_kv_del(&ctx, k, strlen(k)) == 1);
        in[i] = 0;
    }
    check_scan(&ctx, in, 37);
    /* A prefix scan ends once past its keys: key:0010xx only. */
    dm_keylist_t l = {0};
    uint64_t next = 1;
    CHECK(dm_kv_scan(&ctx, 0, 1000, "key:0010", 8, &l, &next) == 0);
    CHECK(next == 0);
    size_t want = 0;
    for (int i = 1000; i < 1100; i++)
        want += in[i];
    CHECKF(l.n == want, "prefix scan: %zu keys, want %zu", l.n, want);
    dm_keylist_free(&l);
    /* A forged cursor is refused, without reading anything but a leaf. */
    CHECK(dm_kv_scan(&ctx, 12345, 10, NULL, 0, &l, &next) == DM_EINVAL);
    CHECK(dm_kv_scan(&ctx, (1ull << 53) - 1, 10, NULL, 0, &l, &next) == DM_EINVAL);
    /* WATCH of an absent key: its signature moves when it is created and deleted. */
    uint64_t s0, s1;
    key_of(1, k, sizeof(k));
    CHECK(role()->watch_sig(&ctx, k, strlen(k), &s0) == 0);
    CHECK(dm_kv_set(&ctx, k, strlen(k), "x", 1, 0, 0, NULL) == 1);
    CHECK(dm_kv_del(&ctx, k, strlen(k)) == 1);
    CHECK(role()->watch_sig(&ctx, k, strlen(k), &s1) == 0);
    CHECK(s0 != s1);
    /* A key over 46 bytes lives in a key record; one over 32767 is refused before anything
     * is written. */
    static char lk[DM_ROLEX_KEY_MAX + 2];
    memset(lk, 'L', sizeof(lk));
    int64_t before = dm_kv_dbsize(&ctx);
    CHECK(dm_kv_set(&ctx, lk, DM_ROLEX_KEY_MAX + 1, "x", 1, 0, 0, NULL) == DM_ETOOBIG);
    CHECK(dm_kv_dbsize(&ctx) == before);
    dm_value_t val;
    CHECK(dm_kv_get(&ctx, lk, DM_ROLEX_KEY_MAX + 1, &val) == 0);
    CHECK(dm_kv_del(&ctx, lk, DM_ROLEX_KEY_MAX + 1) == 0); /* never stored: nothing to delete */
    for (size_t len = 46; len <= 48; len++) {              /* inline, and in a record */
        CHECK(dm_kv_set(&ctx, lk, len, "x", 1, 0, 0, NULL) == 1);
        CHECK(role()->search(&ctx, lk, len, NULL) == 1);
    }
    CHECK(dm_kv_set(&ctx, lk, DM_ROLEX_KEY_MAX, "x", 1, 0, 0, NULL) == 1); /* the longest */
    CHECK(role()->search(&ctx, lk, DM_ROLEX_KEY_MAX, NULL) == 1);
    CHECK(role()->search(&ctx, lk, 49, NULL) == 0);
    CHECK(dm_kv_dbsize(&ctx) == before + 4);
    CHECK(dm_kv_del(&ctx, lk, DM_ROLEX_KEY_MAX) == 1);
    for (size_t len = 46; len <= 48; len++)
        CHECK(dm_kv_del(&ctx, lk, len) == 1);
    CHECK(dm_kv_dbsize(&ctx) == before);
    /* FLUSHALL: no key, no entry. */
    CHECK(dm_kv_flushall(&ctx) == 0);
    CHECK(dm_kv_dbsize(&ctx) == 0);
    memset(in, 0, sizeof(in));
    check_scan(&ctx, in, 100);
    dm_index_stat_t st[DM_INDEX_STATS_MAX];
    size_t ns = role()->stats(st);
    CHECK(ns > 0 && ns <= DM_INDEX_STATS_MAX);
    /* A worker asked for CHIME on this ROLEX pool is refused, naming the pool's engines. */
    CHECK(dm_kv_choose_engines("race", "chime", err, sizeof(err)) == 0);
    const char *uris[1] = {"local:rxrange"};
    char err2[512];
    dm_worker_t *w2 = dm_kv_worker_create(&loop, uris, 1, err2, sizeof(err2));
    CHECKF(!w2 && strstr(err2, "race (point) and rolex (range)"), "%s", w2 ? "joined" : err2);
    CHECK(dm_kv_choose_engines("race", "rolex", err, sizeof(err)) == 0);
    w2 = worker_on(&loop, "local:rxrange"); /* joins, opening the recorded root */
    dm_worker_destroy(w2);
    worker_done(w, &loop);
}

/* The pending flag through the role's calls, and a dead holder's entries settled. */
static void test_pending(void)
{
    uv_loop_t loop;
    dm_worker_t *w = rolex_worker(&loop, "local:rxpending");
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    const dm_range_index_ops_t *ro = role();
    dm_range_lock_t *lk;
    int pending;
    /* mark_pending inserts the entry flagged; unlock(1) clears it. */
    CHECK(ro->lock(&ctx, "a1", 2, 0, NULL, NULL, &lk) == 0);
    CHECK(ro->lock_valid(lk) && ro->lock_hold_until(lk) > ro->lock_posted_us(lk));
    CHECK(ro->mark_pending(&ctx, lk) == 0);
    CHECK(ro->search(&ctx, "a1", 2, &pending) == 1 && pending);
    dm_range_key_t *keys = NULL;
    size_t n = 0, cap = 0;
    uint64_t next;
    CHECK(ro->scan(&ctx, 0, 10, NULL, 0, &keys, &n, &cap, &next) == 0);
    CHECK(n == 1 && keys[0].len == 2 && keys[0].pending);
    free(keys[0].data);
    free(keys);
    CHECK(ro->unlock(&ctx, lk, 1) == 0);
    CHECK(ro->search(&ctx, "a1", 2, &pending) == 1 && !pending);
    /* unlock(0) removes it; unlock(-1) leaves a pending entry pending. */
    CHECK(ro->lock(&ctx, "a1", 2, 1, NULL, NULL, &lk) == 1);
    CHECK(ro->mark_pending(&ctx, lk) == 0);
    CHECK(ro->unlock(&ctx, lk, 0) == 0);
    CHECK(ro->search(&ctx, "a1", 2, &pending) == 0);
    CHECK(ro->lock(&ctx, "a2", 2, 0, NULL, NULL, &lk) == 0);
    CHECK(ro->mark_pending(&ctx, lk) == 0);
    CHECK(ro->unlock(&ctx, lk, -1) == 0);
    CHECK(ro->search(&ctx, "a2", 2, &pending) == 1 && pending);
    /* A later holder keeps it pending (no takeover: readers resolve it). */
    CHECK(ro->lock(&ctx, "a2", 2, 0, NULL, NULL, &lk) == 1);
    CHECK(ro->unlock(&ctx, lk, -1) == 0);
    CHECK(ro->search(&ctx, "a2", 2, &pending) == 1 && pending);
    /* A holder dies with a2 pending (absent from RACE) and a3 pending (present in RACE):
     * the next locker takes the lease over and settles both. */
    CHECK(dm_kv_set(&ctx, "a3", 2, "v", 1, 0, 0, NULL) == 1);
    uint32_t lease = rx_lease_ms, hold = rx_hold_ms;
    rx_lease_ms = 300, rx_hold_ms = 200;
    CHECK(ro->lock(&ctx, "a3", 2, 0, NULL, NULL, &lk) == 1);
    CHECK(ro->mark_pending(&ctx, lk) == 0);
    rr_lock_forget(lk); /* dies holding it */
    CHECK(ro->search(&ctx, "a3", 2, &pending) == 1 && pending);
    uint64_t t0 = dm_now_us();
    CHECK(ro->lock(&ctx, "b9", 2, 0, NULL, NULL, &lk) == 0);
    CHECK(dm_now_us() - t0 >= 1000ull * rx_lease_ms);
    CHECK(ro->lock_sure_until(lk) == 0); /* taken over */
    CHECK(ro->unlock(&ctx, lk, -1) == 0);
    CHECK(ro->search(&ctx, "a2", 2, &pending) == 0);
    CHECK(ro->search(&ctx, "a3", 2, &pending) == 1 && !pending);
    /* A hold over writes nothing: mark_pending and unlock answer DM_ERETRY. */
    rx_hold_ms = 0;
    CHECK(ro->lock(&ctx, "a4", 2, 0, NULL, NULL, &lk) == 0);
    CHECK(!ro->lock_valid(lk));
    CHECK(ro->mark_pending(&ctx, lk) == DM_ERETRY);
    CHECK(ro->unlock(&ctx, lk, 1) == DM_ERETRY);
    CHECK(ro->search(&ctx, "a4", 2, &pending) == 0);
    rx_lease_ms = lease, rx_hold_ms = hold;
    /* Keys over DM_ROLEX_KEY_MAX: DM_ETOOBIG from lock, a keyless lock for a DEL. */
    static char huge[DM_ROLEX_KEY_MAX + 1];
    memset(huge, 'x', sizeof(huge));
    CHECK(ro->lock_insert(&ctx, huge, sizeof(huge), NULL, NULL, &lk) == DM_ETOOBIG);
    CHECK(ro->lock(&ctx, huge, sizeof(huge), 1, NULL, NULL, &lk) == 0);
    CHECK(ro->mark_pending(&ctx, lk) == DM_ETOOBIG);
    CHECK(ro->unlock(&ctx, lk, -1) == 0);
    /* A long key's pending entry: its record is written by mark_pending, kept by unlock(1),
     * freed by unlock(0) and by a settle that drops it. */
    char lk47[47];
    memset(lk47, 'x', sizeof(lk47));
    uint64_t wr = rx_recs_written, fr = rx_recs_freed;
    CHECK(ro->lock_insert(&ctx, lk47, 47, NULL, NULL, &lk) == 0);
    CHECK(ro->mark_pending(&ctx, lk) == 0);
    CHECK(rx_recs_written == wr + 1);
    CHECK(ro->search(&ctx, lk47, 47, &pending) == 1 && pending);
    CHECK(ro->unlock(&ctx, lk, 0) == 0);
    CHECK(ro->search(&ctx, lk47, 47, &pending) == 0);
    CHECK(rx_recs_freed == fr + 1);
    CHECK(ro->lock_insert(&ctx, lk47, 47, NULL, NULL, &lk) == 0); /* absent again */
    CHECK(ro->mark_pending(&ctx, lk) == 0);
    CHECK(ro->unlock(&ctx, lk, 1) == 0); /* unflagged, yet RACE lacks it: settle drops it */
    CHECK(ro->search(&ctx, lk47, 47, &pending) == 1 && !pending);
    CHECK(rx_recs_written == wr + 2 && rx_recs_freed == fr + 1);
    /* settle_all drops entries the point index lacks. */
    CHECK(ro->lock(&ctx, "c1", 2, 0, NULL, NULL, &lk) == 0);
    CHECK(ro->mark_pending(&ctx, lk) == 0);
    CHECK(ro->unlock(&ctx, lk, 1) == 0); /* unflagged, yet RACE lacks it */
    CHECK(ro->settle_all(&ctx) == 2);    /* c1 and the long key */
    CHECK(ro->search(&ctx, "c1", 2, &pending) == 0);
    CHECK(ro->search(&ctx, lk47, 47, &pending) == 0);
    CHECK(rx_recs_freed == fr + 2);
    CHECK(ro->search(&ctx, "a3", 2, &pending) == 1);
    worker_done(w, &loop);
}

/* SCAN pages read their leaves by LT positions, a batch at a time: once the memory node's
 * host retrained the index (here called in-process, as mn_retrainer does), a full iteration
 * by COUNT 100 costs about one round trip a page, where a walk leaf by leaf costs one a leaf.
 * Keys with distinct 8-byte images, so that every leaf can be listed. */
/* Keys "%08d" of i < m, three in four (i % 4 != 3), set in shuffled order through w (in[i]
 * set for each), then the index retrained in-process, as its memory node's host does. */
static void load_then_retrain_by(dm_worker_t *w, char *in, int m, dm_rolex_host_t *h)
{
    dm_ctx_t ctx;
    char k[32];
    for (int j = 0; j < m; j++) {
        int i = (int)((uint64_t)j * 7919 % (uint64_t)m);
        if (i % 4 == 3) continue;
        snprintf(k, sizeof(k), "%08d", i);
        dm_ctx_init(&ctx, w, DM_CLS_SET);
        CHECK(dm_kv_set(&ctx, k, strlen(k), "v", 1, 0, 0, NULL) == 1);
        in[i] = 1;
    }
    uint64_t root = 0;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    CHECK(dm_read_span(&ctx, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), &root, 8) == 0);
    dm_rolex_host_init(h, root);
    int rc = 0;
    for (int t = 0; t < 200 && (rc = dm_rolex_host_step(&ctx, h)) != 1; t++)
        dm_ctx_sleep(&ctx, 10000);
    CHECKF(rc == 1, "no retrain: rc=%d", rc);
}

static void load_then_retrain(dm_worker_t *w, char *in, int m)
{
    dm_rolex_host_t h;
    load_then_retrain_by(w, in, m, &h);
}

/* Round trips per SET of the keys "z%07d" of 2i + odd for i in [from, from + n), in a
 * shuffled order. */
static double set_past(dm_worker_t *w, int from, int n, int odd)
{
    dm_ctx_t ctx;
    dm_cls_stats_t s0, s1;
    char k[32];
    dm_stats_get(DM_CLS_SET, &s0);
    for (int j = 0; j < n; j++) {
        int i = from + (int)((uint64_t)j * 7919 % (uint64_t)n);
        snprintf(k, sizeof(k), "z%07d", 2 * i + odd);
        dm_ctx_init(&ctx, w, DM_CLS_SET);
        CHECK(dm_kv_set(&ctx, k, strlen(k), "v", 1, 0, 0, NULL) == 1);
    }
    dm_stats_get(DM_CLS_SET, &s1);
    return (double)(s1.rtts - s0.rtts) / n;
}

/* Keys past the model's last entry all go to one chain, walked leaf by leaf under its lock
 * from that entry's leaf, save where the walking handle learned a closer start (slt.c: its
 * own walks only, at most 4,096 of them). The host's bar on leaves taken (LT entries / 8)
 * let such a chain reach thousands of leaves in a large index (bench/engines.sh, 10M keys:
 * 920 round trips an insert). Writers whose walk was long ask for a retrain (host.c), and
 * the host retrains well before the bar. Here one worker grows the chain and a second,
 * which learned nothing, walks it. */
static void test_asks(void)
{
    uv_loop_t loop;
    dm_worker_t *w = rolex_worker(&loop, "local:rxasks");
    dm_ctx_t ctx;
    enum { M = 16000, K = 800, N = 1 };
    static char in[M];
    dm_rolex_host_t h;
    load_then_retrain_by(w, in, M, &h);
    double grow = set_past(w, 0, K, 0);
    dm_worker_t *w2 = worker_on(&loop, "local:rxasks");
    uint64_t asks0 = __atomic_load_n(&rx_retrain_asks, __ATOMIC_RELAXED);
    double before = set_past(w2, K - N, N, 1); /* near the chain's end: one walk */
    uint64_t asks = __atomic_load_n(&rx_retrain_asks, __ATOMIC_RELAXED) - asks0;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    int rc = 0;
    for (int t = 0; t < 20 && (rc = dm_rolex_host_step(&ctx, &h)) != 1; t++)
        dm_ctx_sleep(&ctx, 10000);
    fprintf(stderr,
            "  %d keys past the model (LT %llu entries): %.2f round trips a SET by their "
            "writer, %.2f by another; %llu asks\n",
            K, (unsigned long long)h.entries, grow, before, (unsigned long long)asks);
    CHECKF(asks >= 1, "no walk asked for a retrain");
    CHECKF(rc == 1 && h.asked == 1, "no retrain asked for: rc=%d asked=%llu", rc,
           (unsigned long long)h.asked);
    double after = set_past(w2, K - 2 * N, N, 1); /* under the new model */
    fprintf(stderr, "  after the retrain: %.2f round trips a SET by the other\n", after);
    CHECKF(after < before / 2, "%.2f round trips a SET after the retrain, %.2f before", after,
           before);
    dm_worker_destroy(w2);
    worker_done(w, &loop);
}

static void test_scan_batches(void)
{
    uv_loop_t loop;
    dm_worker_t *w = rolex_worker(&loop, "local:rxscan");
    dm_ctx_t ctx;
    enum { M = 4000 };
    static char in[M];
    load_then_retrain(w, in, M);
    /* Full iterations: the first page of the first notices the new model. */
    for (int round = 0; round < 2; round++) {
        dm_cls_stats_t s0, s1;
        dm_ctx_init(&ctx, w, DM_CLS_SCAN);
        dm_stats_get(DM_CLS_SCAN, &s0);
        int pages = scan_all(&ctx, in, M, "%08d", 100);
        dm_stats_get(DM_CLS_SCAN, &s1);
        double per = (double)(s1.rtts - s0.rtts) / pages;
        fprintf(stderr, "  full SCAN COUNT 100, %s: %d pages, %.2f round trips a page\n",
                round ? "after the retrain" : "noticing the retrain", pages, per);
        if (round) CHECKF(per <= 1.2, "%.2f round trips a SCAN page after a retrain", per);
    }
    worker_done(w, &loop);
}

/* Lock domains (rolex/domain.c): an index created empty is one chain; after a retrain the
 * writers' unlocks cut its promoted leaves into domains of their own, so keys far apart take
 * different lock words and one holder does not stop another; a holder that dies is taken
 * over (and its pending entry settled) by a locker of its own domain only. Every key stays
 * found by search and SCAN, and FLUSHALL's settle finds nothing to remove. With
 * DMKV_ROLEX_CUTS=0 every lock is head 0's: "one lock word" below. */
static void test_domains(void)
{
    uv_loop_t loop;
    dm_worker_t *w = rolex_worker(&loop, "local:rxdomains");
    dm_ctx_t ctx;
    enum { M = 3000 };
    static char in[M];
    char k[32];
    load_then_retrain(w, in, M);
    uint64_t cuts0 = __atomic_load_n(&rx_dom_cuts, __ATOMIC_RELAXED);
    for (int i = 3; i < M; i += 4) { /* the fourth quarter, under the new model */
        snprintf(k, sizeof(k), "%08d", i);
        dm_ctx_init(&ctx, w, DM_CLS_SET);
        CHECK(dm_kv_set(&ctx, k, strlen(k), "v", 1, 0, 0, NULL) == 1);
        in[i] = 1;
    }
    uint64_t cuts = __atomic_load_n(&rx_dom_cuts, __ATOMIC_RELAXED) - cuts0;
    fprintf(stderr, "  %llu cuts by %d inserts after a retrain\n", (unsigned long long)cuts, M / 4);
    CHECKF(cuts >= 20, "%llu cuts", (unsigned long long)cuts);
    dm_ctx_init(&ctx, w, DM_CLS_SCAN);
    scan_all(&ctx, in, M, "%08d", 100);

    /* Two holders at once, far apart: two lock words, neither waits. */
    const dm_range_index_ops_t *ro = role();
    dm_range_lock_t *a, *b;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    CHECK(ro->lock(&ctx, "00000101", 8, 1, NULL, NULL, &a) == 1);
    CHECK(ro->lock(&ctx, "00002901", 8, 1, NULL, NULL, &b) == 1);
    CHECKF(ro->lock_range(a) != ro->lock_range(b), "one lock word for keys 2800 apart");
    CHECK(ro->lock_sure_until(b) != 0); /* not taken over: a's word was never b's */
    CHECK(ro->unlock(&ctx, b, -1) == 0);
    /* a's holder dies with a pending entry of an absent key in its domain: a lock elsewhere
     * goes on at once, one in its domain takes it over and settles the entry away. */
    uint32_t lease = rx_lease_ms, hold = rx_hold_ms;
    rx_lease_ms = 300, rx_hold_ms = 200;
    CHECK(ro->unlock(&ctx, a, -1) == 0);
    CHECK(ro->lock(&ctx, "00000101x", 9, 0, NULL, NULL, &a) == 0);
    dm_gaddr_t dead = ro->lock_range(a);
    CHECK(ro->mark_pending(&ctx, a) == 0);
    rr_lock_forget(a); /* dies holding it */
    uint64_t t0 = dm_now_us();
    CHECK(ro->lock(&ctx, "00002901", 8, 1, NULL, NULL, &b) == 1);
    CHECK(ro->lock_range(b) != dead && ro->lock_sure_until(b) != 0);
    CHECK(dm_now_us() - t0 < 1000ull * rx_lease_ms);
    CHECK(ro->unlock(&ctx, b, -1) == 0);
    int pending;
    CHECK(ro->search(&ctx, "00000101x", 9, &pending) == 1 && pending);
    CHECK(ro->lock(&ctx, "00000101", 8, 1, NULL, NULL, &a) == 1);
    CHECK(ro->lock_range(a) == dead && ro->lock_sure_until(a) == 0); /* taken over */
    CHECK(ro->unlock(&ctx, a, -1) == 0);
    CHECK(ro->search(&ctx, "00000101x", 9, &pending) == 0); /* settled: absent from RACE */
    rx_lease_ms = lease, rx_hold_ms = hold;
    CHECK(rr_settle_all(&ctx) == 0); /* nothing pending, nothing absent */
    dm_ctx_init(&ctx, w, DM_CLS_SCAN);
    scan_all(&ctx, in, M, "%08d", 100);
    CHECK(dm_kv_dbsize(&ctx) == M);
    worker_done(w, &loop);
}

/* Keys sharing their first 8 bytes (redis-benchmark's key:__rand_int__) sit in one run of
 * leaves no model can split: a lock walked it from its start, one round trip a leaf. The
 * walks' leaves are learned with their first keys as bounds (rolex/slt.c), so a later lock
 * starts next to its key: shuffled inserts, then deletes, each a few round trips, and every
 * key found by search and by a full SCAN (without the key bounds: 238.9 round trips an
 * insert, by hand over tcp). */
static void test_shared_image(void)
{
    uv_loop_t loop;
    dm_worker_t *w = rolex_worker(&loop, "local:rxshared");
    dm_ctx_t ctx;
    enum { M = 3000 };
    static char in[M];
    char k[32];
    dm_cls_stats_t s0, s1;
    dm_stats_get(DM_CLS_SET, &s0);
    for (int j = 0; j < M; j++) {
        int i = (int)((uint64_t)j * 7919 % M);
        snprintf(k, sizeof(k), "key:%012d", i);
        dm_ctx_init(&ctx, w, DM_CLS_SET);
        CHECK(dm_kv_set(&ctx, k, strlen(k), "v", 1, 0, 0, NULL) == 1);
        in[i] = 1;
    }
    dm_stats_get(DM_CLS_SET, &s1);
    double per = (double)(s1.rtts - s0.rtts) / M;
    fprintf(stderr, "  %d shuffled inserts sharing one image: %.2f round trips each\n", M, per);
    CHECKF(per <= 6.0, "%.2f round trips an insert into a run of one image", per);
    dm_stats_get(DM_CLS_DEL, &s0);
    int dels = 0;
    for (int j = 0; j < M; j += 3) {
        int i = (int)((uint64_t)j * 104729 % M);
        snprintf(k, sizeof(k), "key:%012d", i);
        dm_ctx_init(&ctx, w, DM_CLS_DEL);
        CHECK(dm_kv_del(&ctx, k, strlen(k)) == in[i]);
        dels++;
        in[i] = 0;
    }
    dm_stats_get(DM_CLS_DEL, &s1);
    per = (double)(s1.rtts - s0.rtts) / dels;
    fprintf(stderr, "  %d deletes in that run: %.2f round trips each\n", dels, per);
    CHECKF(per <= 6.0, "%.2f round trips a delete in a run of one image", per);
    dm_ctx_init(&ctx, w, DM_CLS_GET);
    for (int i = 0; i < M; i++) {
        snprintf(k, sizeof(k), "key:%012d", i);
        int pending = 1;
        CHECKF(role()->search(&ctx, k, strlen(k), &pending) == in[i], "search %s", k);
    }
    dm_ctx_init(&ctx, w, DM_CLS_SCAN);
    scan_all(&ctx, in, M, "key:%012d", 100);
    worker_done(w, &loop);
}

/* The leaf region's room: an eighth of node 0 by default (256 MiB here: 36,792 leaves of 816
 * bytes with their 96 bytes of arena), else what dm_rolex_set_create_leaves asked for. */
/* Keys deleted leave their leaves in the chain, empty, each possibly a lock domain of its
 * own (cut while it was an LT entry), and never listed by the retrainer: every key whose
 * place lay past such a run passed it one lock round trip a leaf (bench/engines.sh at 10M
 * keys: 760 round trips a SET; here 105 before the fix). Retraining lists the last leaf of
 * an empty run (retrain.c list_chain), so after it keys past the run start there. */
static void test_empty_run(void)
{
    uv_loop_t loop;
    dm_worker_t *w = rolex_worker(&loop, "local:rxempty");
    dm_ctx_t ctx;
    enum { M = 8000, K = 1000 };
    static char in[M];
    char k[32];
    dm_rolex_host_t h;
    load_then_retrain_by(w, in, M, &h);
    set_past(w, 0, K, 0);
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    for (int t = 0; t < 50 && dm_rolex_host_step(&ctx, &h) != 1; t++)
        dm_ctx_sleep(&ctx, 10000);
    set_past(w, 0, K, 1); /* under a model that lists their leaves: cuts made */
    for (int i = 0; i < 2 * K; i++) {
        snprintf(k, sizeof(k), "z%07d", i);
        dm_ctx_init(&ctx, w, DM_CLS_DEL);
        CHECK(dm_kv_del(&ctx, k, strlen(k)) == 1);
    }
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    int rc = 0;
    for (int t = 0; t < 50 && (rc = dm_rolex_host_step(&ctx, &h)) != 1; t++)
        dm_ctx_sleep(&ctx, 10000);
    CHECK(rc == 1);
    /* The first key past the run through a handle that has not walked it: a handle learns a
     * walk (slt.c), so later keys would start near their place anyway, until its SLT is full
     * and starts again empty (a loaded pool's is: bench/engines.sh). w's own learned starts
     * still lead into the run (the gap docs/DESIGN.md names). */
    dm_worker_t *w2 = worker_on(&loop, "local:rxempty");
    uint64_t p0 = __atomic_load_n(&rx_dom_passes, __ATOMIC_RELAXED);
    double first = set_past(w2, 0, 1, 0);
    uint64_t passes = __atomic_load_n(&rx_dom_passes, __ATOMIC_RELAXED) - p0;
    double per = set_past(w2, 1, 199, 0);
    fprintf(stderr,
            "  the first key set again past %d deleted ones: %.0f round trips, %llu passes; "
            "199 more: %.2f round trips each\n",
            2 * K, first, (unsigned long long)passes, per);
    CHECKF(passes <= 2, "%llu passes over an empty run", (unsigned long long)passes);
    /* w learned the run's leaves while they held keys: a walk from inside the run moves the
     * learned starts it passes to the run's last leaf (slt.c slt_skip_run), so each leaf of
     * the run is walked a few times, not once per key (19.4 round trips a SET, 96.5 without;
     * the keys come in a scattered order, each walk starting where its key's entry was). */
    uint64_t sk0 = __atomic_load_n(&rx_slt_skips, __ATOMIC_RELAXED);
    double stale = set_past(w, 200, 200, 0);
    fprintf(stderr,
            "  200 more through the handle that learned the run before it emptied: %.2f round "
            "trips each, %llu learned starts moved past it\n",
            stale, (unsigned long long)(__atomic_load_n(&rx_slt_skips, __ATOMIC_RELAXED) - sk0));
    CHECKF(stale < 40, "%.2f round trips a SET through learned starts inside an empty run", stale);
    for (int i = 0; i < 400; i++) { /* each found, then SCAN finds the loaded keys alone */
        snprintf(k, sizeof(k), "z%07d", 2 * i);
        dm_ctx_init(&ctx, w2, DM_CLS_DEL);
        CHECK(dm_kv_del(&ctx, k, strlen(k)) == 1);
    }
    dm_ctx_init(&ctx, w2, DM_CLS_SCAN);
    scan_all(&ctx, in, M, "%08d", 100);
    dm_worker_destroy(w2);
    worker_done(w, &loop);
}

static void test_room(void)
{
    uv_loop_t loop;
    dm_worker_t *w = rolex_worker(&loop, "local:rxroom");
    CHECKF(rr_of(w)->r->hdr.capacity == (256ull << 20) / 8 / 912, "capacity %llu",
           (unsigned long long)rr_of(w)->r->hdr.capacity);
    worker_done(w, &loop);
    CHECK(dm_rolex_set_create_leaves(1) == DM_EINVAL);
    CHECK(dm_rolex_set_create_leaves(1ull << 26) == DM_EINVAL);
    CHECK(dm_rolex_set_create_leaves(100) == 0);
    w = rolex_worker(&loop, "local:rxroom2");
    CHECK(rr_of(w)->r->hdr.capacity == 100);
    worker_done(w, &loop);
    CHECK(dm_rolex_set_create_leaves(0) == 0);
}

/* A worker's coroutines share its handle (rr_of(w)->r): a SET that notices a retrain loads
 * the new model while a SCAN or another SET of the same worker is parked between two reads of
 * LT positions of the old one (CI of 39b1e74: ahead_next read past the new LT, a heap overflow
 * under ASan). Keys are loaded into the index as created (one LT entry), then on each of four
 * workers a writer sets the fourth quarter while two scanners walk full and prefix iterations
 * by COUNT 20, a fifth worker retrains back to back, every completion 1-3 ms late: each
 * worker's first load moves from one LT entry to hundreds under its scanners. Each iteration
 * holds every key set before it began, and the index ends holding every key. */
enum { SW_M = 3000, SW_WORKERS = 4, SW_SCANNERS = 2 };
static char sw_in[SW_M];
static int sw_writing, sw_done, sw_iterations;

typedef struct sw_coro {
    dm_worker_t *w;
    int id;
} sw_coro_t;

/* Keys "%08d" of i, i % 4 == 3 (writing) or not, i % SW_WORKERS == id, shuffled. */
static void sw_set(dm_worker_t *w, int id, int writing)
{
    char k[32];
    for (int j = 0; j < SW_M; j++) {
        int i = (int)((uint64_t)j * 7919 % SW_M);
        if ((i % 4 == 3) != writing || (id >= 0 && i % SW_WORKERS != id)) continue;
        snprintf(k, sizeof(k), "%08d", i);
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, w, DM_CLS_SET);
        int rc = dm_kv_set(&ctx, k, strlen(k), "v", 1, 0, 0, NULL);
        CHECKF(rc == 1, "set %s rc=%d", k, rc);
        sw_in[i] = 1;
    }
}

static void sw_writer(void *arg)
{
    sw_coro_t *c = arg;
    sw_set(c->w, c->id, 1);
    sw_writing--, sw_done++;
}

/* One iteration by COUNT 20 of the keys starting with prefix (plen 0: all): every key of
 * before[] with the prefix is returned. */
static void sw_iterate(dm_worker_t *w, const char *prefix, size_t plen, const char *before)
{
    char *seen = calloc(SW_M, 1); /* coroutine stacks are small */
    CHECK(seen);
    uint64_t cursor = 0;
    do {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, w, DM_CLS_SCAN);
        dm_keylist_t l = {0};
        int rc = dm_kv_scan(&ctx, cursor, 20, prefix, plen, &l, &cursor);
        CHECKF(rc == 0, "scan rc=%d", rc);
        for (size_t i = 0; i < l.n; i++) {
            char k[32];
            CHECK(l.keys[i].len == 8 && !memcmp(l.keys[i].data, prefix, plen));
            memcpy(k, l.keys[i].data, 8), k[8] = 0;
            int n = atoi(k);
            CHECKF(n >= 0 && n < SW_M, "scan returned %s", k);
            seen[n] = 1;
        }
        dm_keylist_free(&l);
    } while (cursor);
    char k[32];
    for (int i = 0; i < SW_M; i++) {
        snprintf(k, sizeof(k), "%08d", i);
        CHECKF(!before[i] || memcmp(k, prefix, plen) || seen[i], "an iteration of '%.*s' missed %s",
               (int)plen, prefix, k);
    }
    free(seen);
}

/* Full iterations and prefix ones (SCAN MATCH, KEYS: a first page from the middle of the
 * LT) until the writers are done. */
static void sw_scanner(void *arg)
{
    sw_coro_t *c = arg;
    char *before = malloc(SW_M), prefix[16];
    CHECK(before);
    unsigned t = 0;
    do {
        memcpy(before, sw_in, SW_M);
        if (t++ % 8 == 0) {
            sw_iterate(c->w, "", 0, before);
        } else {
            snprintf(prefix, sizeof(prefix), "%06d", (int)((t * 7 + (unsigned)c->id) % 30));
            sw_iterate(c->w, prefix, 6, before);
        }
        sw_iterations++;
    } while (sw_writing);
    free(before);
    sw_done++;
}

static void sw_retrainer(void *arg)
{
    dm_worker_t *w = arg;
    uint64_t root = 0;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    CHECK(dm_read_span(&ctx, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), &root, 8) == 0);
    dm_ctx_sleep(&ctx, 20000); /* the scanners under way */
    while (sw_writing) {
        dm_rolex_retrain_stats_t st;
        dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
        int rc = rx_retrain(&ctx, root, 1, &st);
        CHECKF(rc == 0, "retrain rc=%d", rc);
    }
    sw_done++;
}

static void test_model_swap(void)
{
    uv_loop_t loop;
    dm_worker_t *ws[SW_WORKERS + 1];
    ws[0] = rolex_worker(&loop, "local:rxswap");
    for (int i = 1; i <= SW_WORKERS; i++)
        ws[i] = worker_on(&loop, "local:rxswap");
    sw_set(ws[0], -1, 0); /* three keys in four, no retrain: one LT entry */
    CHECK(rr_of(ws[0])->r->hdr.entries == 1);
    dm_rolex_stats_t s0, s1;
    dm_rolex_stats(&s0);
    dm_local_inject(2000, 0, NULL, NULL);
    sw_writing = SW_WORKERS, sw_done = 0, sw_iterations = 0;
    static sw_coro_t cs[SW_WORKERS * (1 + SW_SCANNERS)];
    int n = 0;
    for (int i = 0; i < SW_WORKERS; i++) {
        cs[n] = (sw_coro_t){ws[i], i};
        dm_coro_spawn(sw_writer, &cs[n++]);
        for (int j = 0; j < SW_SCANNERS; j++) {
            cs[n] = (sw_coro_t){ws[i], i * SW_SCANNERS + j};
            dm_coro_spawn(sw_scanner, &cs[n++]);
        }
    }
    dm_coro_spawn(sw_retrainer, ws[SW_WORKERS]);
    while (sw_done < n + 1)
        uv_run(&loop, UV_RUN_ONCE);
    dm_local_inject(0, 0, NULL, NULL);
    dm_rolex_stats(&s1);
    fprintf(stderr, "  %d iterations, %llu models loaded by the writers and scanners\n",
            sw_iterations, (unsigned long long)(s1.model_loads - s0.model_loads));
    CHECK(s1.model_loads - s0.model_loads >= SW_WORKERS);
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, ws[0], DM_CLS_SCAN);
    scan_all(&ctx, sw_in, SW_M, "%08d", 100);
    for (int i = 1; i <= SW_WORKERS; i++)
        dm_worker_destroy(ws[i]);
    worker_done(ws[0], &loop);
}

int main(void)
{
    dm_local_set_size(256ull << 20);
    RUN(test_cursor);
    RUN(test_room);
    RUN(test_hybrid);
    RUN(test_pending);
    RUN(test_scan_batches);
    RUN(test_domains);
    RUN(test_asks);
    RUN(test_empty_run);
    RUN(test_shared_image);
    RUN(test_model_swap);
    fprintf(stderr, "test_rolex_range: all passed\n");
    return 0;
}
