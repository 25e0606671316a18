/* SCAN at scale (issue 3): load N keys (16-byte keys key:%012d) with pipelined SETs over four
 * connections through one gateway, then: DBSIZE is exact on two gateways; a full SCAN COUNT
 * 1000 iteration, its cursors hopping between the two gateways, returns every key exactly
 * once and in order (the i-th key returned is key:<i>); prefix scans (SCAN 0 MATCH
 * key:<digits>* COUNT 1000) return exactly their keys in a number of calls proportional to
 * their share, and absent prefixes end at once.
 * Usage: it_scan_1m [--slow] [N]. N is DMKV_IT_SCAN_KEYS if set, else the argument, else
 * 200,000: loading a million keys under ASan takes about four minutes on a two-core machine,
 * so the default ctest run uses the smaller count, and integration/it_scan_1m_full
 * (tests/CMakeLists.txt, labels "chime;slow") runs `--slow 1000000`, which skips (77) unless
 * DMKV_IT_SLOW=1. */
#include <pthread.h>
#include <stdint.h>

#include "integration/scan_util.h"

#define LOADERS 4
#define PIPELINE 512

static long long nkeys;
static int load_port;

static void *loader_main(void *arg)
{
    long long t = (long long)(intptr_t)arg;
    long long from = nkeys * t / LOADERS, to = nkeys * (t + 1) / LOADERS;
    redisContext *c = it_connect(load_port);
    for (long long i = from; i < to; i += PIPELINE) {
        long long end = i + PIPELINE < to ? i + PIPELINE : to;
        for (long long k = i; k < end; k++)
            redisAppendCommand(c, "SET key:%012lld v%lld", k, k);
        for (long long k = i; k < end; k++) {
            redisReply *r;
            CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK, "loader: %s", c->errstr);
            CHECKF(r->type == REDIS_REPLY_STATUS, "SET key:%012lld: reply type %d %s", k, r->type,
                   r->type == REDIS_REPLY_ERROR ? r->str : "");
            freeReplyObject(r);
        }
    }
    redisFree(c);
    return NULL;
}

/* Full iteration, pages alternating over cs: the i-th key must be key:<i>. */
static size_t full_scan(redisContext **cs, int ncs)
{
    char cursor[32] = "0", next[32], want[32], b1[512], b2[512];
    long long i = 0;
    size_t pages = 0;
    do {
        redisReply *r = su_scan_page(cs[pages % (size_t)ncs], cursor, 1000, NULL, 0, next);
        pages++;
        redisReply *ks = r->element[1];
        for (size_t j = 0; j < ks->elements; j++, i++) {
            size_t wn = (size_t)snprintf(want, sizeof(want), "key:%012lld", i);
            const char *k = ks->element[j]->str;
            size_t kn = ks->element[j]->len;
            if (kn == wn && memcmp(k, want, wn) == 0) continue;
            int o = su_cmp(k, kn, want, wn);
            CHECKF(0, "full SCAN, page %zu (cursor %s): key number %lld is '%s', want '%s' (%s)",
                   pages, cursor, i, su_show(k, kn, b1, sizeof(b1)),
                   su_show(want, wn, b2, sizeof(b2)),
                   o < 0 ? "a repeat or out of order" : "a key was skipped");
        }
        freeReplyObject(r);
        memcpy(cursor, next, sizeof(cursor));
        CHECKF(pages < 100000000, "full SCAN does not end");
    } while (strcmp(cursor, "0") != 0);
    CHECKF(i == nkeys, "full SCAN returned %lld keys, want %lld", i, nkeys);
    return pages;
}

/* SCAN 0 MATCH pat COUNT 1000: exactly key:<from>..key:<to-1>, within the seek bound. */
static void prefix_scan(redisContext **cs, int ncs, const char *pat, long long from, long long to,
                        size_t full_pages)
{
    su_keys_t got = {0};
    char what[96];
    snprintf(what, sizeof(what), "SCAN 0 MATCH %s COUNT 1000", pat);
    double t0 = su_now();
    su_iter_t it = su_scan_all(cs, ncs, 1000, pat, strlen(pat), &got, 100000000, what);
    double dt = su_now() - t0;
    long long n = to > from ? to - from : 0;
    CHECKF((long long)got.n == n, "%s: %zu keys, want %lld", what, got.n, n);
    for (size_t j = 0; j < got.n; j++) {
        char want[32];
        size_t wn = (size_t)snprintf(want, sizeof(want), "key:%012lld", from + (long long)j);
        CHECKF(got.v[j].n == wn && memcmp(got.v[j].p, want, wn) == 0,
               "%s: key %zu is '%.*s', want '%s'", what, j, (int)got.v[j].n, got.v[j].p, want);
    }
    size_t bound = (size_t)(1.5 * (double)full_pages * (double)n / (double)nkeys) + 3;
    fprintf(stderr, "%s: %lld keys in %zu calls, %.3f s (bound %zu)\n", what, n, it.pages, dt,
            bound);
    CHECKF(it.pages <= bound,
           "%s: %zu calls for %lld of %lld keys, a full iteration takes %zu: the prefix must be "
           "sought and the walk must stop after it",
           what, it.pages, n, nkeys, full_pages);
    if (n)
        CHECKF(it.pages_after_end <= 1,
               "%s: %zu more calls after the last key with the prefix before cursor 0", what,
               it.pages_after_end);
    su_free(&got);
}

int main(int argc, char **argv)
{
    int a = 1;
    bool slow = argc > a && strcmp(argv[a], "--slow") == 0;
    if (slow) a++;
    if (slow && !(getenv("DMKV_IT_SLOW") && strcmp(getenv("DMKV_IT_SLOW"), "1") == 0)) {
        fprintf(stderr, "SKIP: the full-size run needs DMKV_IT_SLOW=1\n");
        return 77;
    }
    const char *env = getenv("DMKV_IT_SCAN_KEYS");
    nkeys = env ? atoll(env) : argc > a ? atoll(argv[a]) : 200000;
    CHECKF(nkeys >= 200000 && nkeys <= 100000000, "DMKV_IT_SCAN_KEYS=%lld out of range", nkeys);
    setenv("DMKV_IT_MEMNODE_SIZE", nkeys > 300000 ? "4g" : "1g", 0);
    it_begin("scan_1m", 1780);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};
    it_proc_t gw[2];
    int ngw = pool.shared ? 2 : 1;
    it_gateway_start(&gw[0], uris, 1, 2, NULL);
    if (ngw > 1) it_gateway_start(&gw[1], uris, 1, 1, NULL);
    redisContext *cs[2];
    for (int g = 0; g < ngw; g++)
        cs[g] = it_connect(gw[g].port);
    EXPECT_STATUS(it_cmd(cs[0], "FLUSHALL"), "OK");

    double t0 = su_now();
    load_port = gw[0].port;
    pthread_t th[LOADERS];
    for (int t = 0; t < LOADERS; t++)
        CHECK(pthread_create(&th[t], NULL, loader_main, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < LOADERS; t++)
        pthread_join(th[t], NULL);
    double t1 = su_now();
    fprintf(stderr, "loaded %lld keys in %.1f s (%.0f keys/s)\n", nkeys, t1 - t0,
            (double)nkeys / (t1 - t0));
    for (int g = 0; g < ngw; g++) {
        long long n = su_dbsize(cs[g]);
        CHECKF(n == nkeys, "gateway %d: DBSIZE %lld, want %lld", g, n, nkeys);
    }

    size_t pages = full_scan(cs, ngw);
    double t2 = su_now();
    fprintf(stderr, "full SCAN COUNT 1000: %lld keys in order, %zu calls, %.1f s\n", nkeys, pages,
            t2 - t1);

    char pat[48];
    long long mid = nkeys / 2 / 10000 * 10000; /* key:<8 digits>* holds 10,000 keys */
    snprintf(pat, sizeof(pat), "key:%08lld*", mid / 10000);
    prefix_scan(cs, ngw, pat, mid, mid + 10000 < nkeys ? mid + 10000 : nkeys, pages);
    snprintf(pat, sizeof(pat), "key:%010lld*", 1234LL);
    prefix_scan(cs, ngw, pat, 123400, 123500, pages);
    long long last = (nkeys - 1) / 10 * 10;
    snprintf(pat, sizeof(pat), "key:%011lld*", last / 10);
    prefix_scan(&cs[ngw - 1], 1, pat, last, nkeys, pages);
    prefix_scan(cs, 1, "key:000000000000*", 0, 1, pages);
    prefix_scan(cs, 1, "key:1*", 0, 0, pages);
    prefix_scan(cs, 1, "kez*", 0, 0, pages);
    prefix_scan(cs, 1, "a*", 0, 0, pages);

    su_keys_t keys = {0};
    su_keys_cmd(cs[0], "key:00000000012?", 16, &keys);
    CHECKF(su_sort_uniq(&keys) == 0 && keys.n == 10, "KEYS key:00000000012?: %zu keys, want 10",
           keys.n);
    for (size_t j = 0; j < keys.n; j++) {
        char want[32];
        snprintf(want, sizeof(want), "key:%012zu", 120 + j);
        CHECKF(keys.v[j].n == 16 && memcmp(keys.v[j].p, want, 16) == 0,
               "KEYS key:00000000012?: '%s' is not %s", keys.v[j].p, want);
    }
    su_free(&keys);
    fprintf(stderr, "prefix scans and KEYS: %.1f s\n", su_now() - t2);

    for (int g = 0; g < ngw; g++) {
        redisFree(cs[g]);
        int st = it_proc_stop(&gw[g]);
        if (st != 0) it_proc_dump_log(&gw[g]);
        CHECKF(st == 0, "gateway %d exit status %d", g, st);
    }
    if (pool.shared) it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_scan_1m: OK (%lld keys, %.1f s in all)\n", nkeys, su_now() - t0);
    return 0;
}
