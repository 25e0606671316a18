/* SCAN's guarantees with the range index (issue 3): CHIME, or ROLEX when DMKV_IT_RANGE_INDEX
 * says so; one memory node, gateways A, B, C (and a late gateway D).
 * (a) 5000 stable keys; SCAN COUNT 50 on A (also with MATCH stable:*, and hopping A/B/C)
 *     while a client on B keeps creating and deleting churn:* keys and keys interleaved with
 *     the stable ones (stable:NNNNNN:x): every stable key is returned, no key deleted before
 *     the iteration began (and never re-added) is, nothing unknown is, and the whole
 *     iteration is in strictly increasing order.
 * (b) Quiescent: a cursor from A continues on B and C (and on D, started after the cursor
 *     was issued); the union is exactly the key set; a cursor asked twice gives the same page.
 * (c) Forged cursors (12345, 2^64-1, real cursors +-1 or with a bit flipped, ...) get
 *     exactly "ERR invalid cursor" from every gateway, which keep working.
 * (d) 100k keys under five prefixes: SCAN 0 MATCH p* COUNT 100 returns exactly p's keys and
 *     ends right after them, in a number of calls proportional to p's share of the keys (a
 *     full iteration takes far more); absent prefixes end at once.
 * (e) 20k keys behind a 200-byte common prefix, with glob specials, \0 and \xff after it:
 *     SCAN MATCH and KEYS with escapes (\*, \?, \[), classes ([a-c], [^x], [\[\*]) and ?
 *     return exactly what Redis's matcher selects, and binary keys round-trip through GET. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "integration/scan_util.h"

#define NSTABLE 5000
#define NCHURN 2000
#define MAX_CHURN_OPS 2000000

static int ports[4];
static atomic_bool churn_stop;
static atomic_long churn_ops;

static redisContext *A, *B, *C;

/* ---------------------------------------------------------------- (a) */

static void *churn_main(void *arg)
{
    (void)arg;
    redisContext *c = it_connect(ports[1]);
    uint64_t x = 0x2545F4914F6CDD1Dull;
    double t0 = su_now();
    while (!atomic_load(&churn_stop) && atomic_load(&churn_ops) < MAX_CHURN_OPS &&
           su_now() - t0 < 300) {
        int burst = 16;
        for (int b = 0; b < burst; b++) {
            uint64_t r = su_rand(&x);
            char k[32];
            if (r % 2)
                snprintf(k, sizeof(k), "churn:%05d", (int)((r >> 8) % NCHURN));
            else
                snprintf(k, sizeof(k), "stable:%06d:x", (int)((r >> 8) % NSTABLE));
            if ((r >> 40) % 2)
                redisAppendCommand(c, "SET %s c", k);
            else
                redisAppendCommand(c, "DEL %s", k);
        }
        for (int b = 0; b < burst; b++) {
            redisReply *r;
            CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK, "churn: %s", c->errstr);
            CHECKF(r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_INTEGER,
                   "churn: reply type %d %s", r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
            freeReplyObject(r);
        }
        atomic_fetch_add(&churn_ops, burst);
    }
    redisFree(c);
    return NULL;
}

/* 0 = unknown, 1 = stable:NNNNNN, 2 = stable:NNNNNN:x, 3 = churn:NNNNN, 4 = a deleted key */
static int family(const char *k, size_t n, int *idx)
{
    char buf[32];
    if (n >= sizeof(buf) || memchr(k, 0, n)) return 0;
    memcpy(buf, k, n);
    buf[n] = 0;
    int a, used = -1;
    if (sscanf(buf, "stable:%6d%n", &a, &used) == 1 && used == 13) {
        *idx = a;
        if (n == 13) return 1;
        if (strcmp(buf + 13, ":x") == 0) return 2;
        if (strcmp(buf + 13, ":gone") == 0) return 4;
        return 0;
    }
    if (sscanf(buf, "churn:%5d%n", &a, &used) == 1 && used == 11 && n == 11) return 3;
    if (sscanf(buf, "gone:%4d%n", &a, &used) == 1 && used == 9 && n == 9) return 4;
    return 0;
}

/* One iteration, checked; 0 when no churn write was acknowledged while it ran (the
 * caller iterates again: a range index whose writes are slow, ROLEX's one chain of keys
 * sharing an image, may finish a 0.1 s iteration between two churn bursts). */
static long scan_during_churn_once(redisContext **cs, int ncs, const char *match, const char *what)
{
    su_keys_t got = {0};
    long before = atomic_load(&churn_ops);
    double t0 = su_now();
    su_iter_t it = su_scan_all(cs, ncs, 50, match, match ? strlen(match) : 0, &got, 1000000, what);
    long during = atomic_load(&churn_ops) - before;
    static bool seen[NSTABLE];
    memset(seen, 0, sizeof(seen));
    char b[512];
    for (size_t i = 0; i < got.n; i++) {
        int idx = -1, f = family(got.v[i].p, got.v[i].n, &idx);
        CHECKF(f != 4, "%s returned '%s', deleted before the iteration began", what,
               su_show(got.v[i].p, got.v[i].n, b, sizeof(b)));
        CHECKF(f != 0, "%s returned '%s', a key nobody wrote", what,
               su_show(got.v[i].p, got.v[i].n, b, sizeof(b)));
        if (f == 1) seen[idx] = true;
    }
    for (int i = 0; i < NSTABLE; i++)
        CHECKF(seen[i], "%s missed stable:%06d, present for the whole iteration", what, i);
    fprintf(stderr, "(a) %s: %zu keys in %zu calls, %.1f s, %ld churn writes meanwhile\n", what,
            it.keys, it.pages, su_now() - t0, during);
    su_free(&got);
    return during;
}

static void scan_during_churn(redisContext **cs, int ncs, const char *match, const char *what)
{
    long during = 0;
    for (int i = 0; i < 20 && !during; i++)
        during = scan_during_churn_once(cs, ncs, match, what);
    CHECKF(during > 0, "%s: no churn happened during 20 iterations", what);
}

static void part_a(void)
{
    EXPECT_STATUS(it_cmd(A, "FLUSHALL"), "OK");
    su_keys_t stable = {0}, gone = {0};
    char k[32];
    for (int i = 0; i < NSTABLE; i++) {
        su_add(&stable, k, (size_t)snprintf(k, sizeof(k), "stable:%06d", i));
        if (i % 10 == 3) su_add(&gone, k, (size_t)snprintf(k, sizeof(k), "stable:%06d:gone", i));
    }
    for (int i = 0; i < 200; i++)
        su_add(&gone, k, (size_t)snprintf(k, sizeof(k), "gone:%04d", i));
    su_load(ports, 2, 2, &stable);
    su_set_many(A, &gone, 0, gone.n, 100);
    su_del_many(C, &gone, 0, gone.n, 100, true); /* deleted through another gateway */

    pthread_t th;
    CHECK(pthread_create(&th, NULL, churn_main, NULL) == 0);
    for (int waited = 0; atomic_load(&churn_ops) < 500 && waited < 3000; waited++)
        usleep(10000);
    CHECKF(atomic_load(&churn_ops) >= 500, "the churn client does not get going");

    scan_during_churn(&A, 1, NULL, "SCAN COUNT 50 on A");
    scan_during_churn(&A, 1, "stable:*", "SCAN MATCH stable:* COUNT 50 on A");
    redisContext *abc[3] = {A, B, C};
    scan_during_churn(abc, 3, NULL, "SCAN COUNT 50 hopping A/B/C");

    atomic_store(&churn_stop, true);
    pthread_join(th, NULL);
    fprintf(stderr, "(a) churn: %ld writes\n", atomic_load(&churn_ops));
    su_free(&stable);
    su_free(&gone);
}

/* ---------------------------------------------------------------- (b), (c) */

static void expect_invalid_cursor(redisContext *c, const char *cursor, const char *why)
{
    redisReply *r = su_scan_raw(c, cursor, 50, NULL, 0);
    CHECKF(r->type == REDIS_REPLY_ERROR && strcmp(r->str, "ERR invalid cursor") == 0,
           "SCAN %s (%s): want error 'ERR invalid cursor', got type %d %s", cursor, why, r->type,
           r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS ? r->str : "");
    freeReplyObject(r);
}

static bool same_page(redisReply *x, redisReply *y)
{
    if (strcmp(x->element[0]->str, y->element[0]->str) != 0) return false;
    if (x->element[1]->elements != y->element[1]->elements) return false;
    for (size_t i = 0; i < x->element[1]->elements; i++) {
        redisReply *a = x->element[1]->element[i], *b = y->element[1]->element[i];
        if (a->len != b->len || memcmp(a->str, b->str, a->len) != 0) return false;
    }
    return true;
}

static void part_bc(const it_pool_t *pool)
{
    su_keys_t want = {0}, got = {0};
    su_keys_cmd(A, "*", 1, &want);
    size_t n = want.n;
    CHECKF(su_sort_uniq(&want) == 0, "KEYS * repeats keys");
    CHECKF(su_dbsize(A) == (long long)n && su_dbsize(B) == (long long)n,
           "DBSIZE %lld/%lld, KEYS * %zu", su_dbsize(A), su_dbsize(B), n);

    su_scan_all(&A, 1, 50, NULL, 0, &got, 1000000, "(b) SCAN COUNT 50 on A");
    su_sort_uniq(&got);
    su_expect_same(&got, &want, "(b) SCAN COUNT 50 on A vs KEYS *");
    su_free(&got);
    redisContext *abc[3] = {A, B, C};
    su_scan_all(abc, 3, 50, NULL, 0, &got, 1000000, "(b) SCAN COUNT 50 hopping A/B/C");
    su_sort_uniq(&got);
    su_expect_same(&got, &want, "(b) SCAN hopping A/B/C vs KEYS *");
    su_free(&got);

    /* up to 20 pages on A, keeping the cursors; then gateway D starts and finishes the walk */
    char cursors[20][32], cur[32] = "0", next[32];
    int ncur = 0;
    while (ncur < 20) {
        redisReply *r = su_scan_page(A, cur, 50, NULL, 0, next);
        for (size_t j = 0; j < r->element[1]->elements; j++)
            su_add(&got, r->element[1]->element[j]->str, r->element[1]->element[j]->len);
        freeReplyObject(r);
        memcpy(cur, next, sizeof(cur));
        if (strcmp(next, "0") == 0) break;
        memcpy(cursors[ncur++], next, sizeof(cur));
    }
    CHECKF(ncur >= 4, "(b) a SCAN COUNT 50 iteration over %zu keys ended after %d calls", n,
           ncur + 1);
    const char *uris[] = {pool->uri};
    it_proc_t gwd;
    it_gateway_start(&gwd, uris, 1, 1, NULL);
    redisContext *D = it_connect(gwd.port);
    for (int i = 0; i < 1000000 && strcmp(cur, "0") != 0; i++) {
        redisReply *r = su_scan_page(D, cur, 50, NULL, 0, next);
        for (size_t j = 0; j < r->element[1]->elements; j++)
            su_add(&got, r->element[1]->element[j]->str, r->element[1]->element[j]->len);
        freeReplyObject(r);
        memcpy(cur, next, sizeof(cur));
    }
    CHECKF(su_sort_uniq(&got) == 0, "(b) A then D: a key returned twice");
    su_expect_same(&got, &want, "(b) the first pages on A, the rest on D (started later)");
    su_free(&got);

    /* stateless: a cursor asked again (on other gateways, with another COUNT and a MATCH) */
    for (int i = 0; i < ncur; i += 3) {
        char n1[32], n2[32];
        redisReply *x = su_scan_page(B, cursors[i], 50, NULL, 0, n1);
        redisReply *y = su_scan_page(D, cursors[i], 50, NULL, 0, n2);
        CHECKF(same_page(x, y), "(b) cursor %s gives different pages on B and on D", cursors[i]);
        freeReplyObject(x);
        freeReplyObject(y);
        freeReplyObject(su_scan_page(C, cursors[i], 1000, "stable:*", 8, n1));
    }
    fprintf(stderr, "(b) %zu keys: cursors continue on every gateway\n", want.n);

    /* (c) forged cursors */
    static const char *const fixed[] = {"12345",
                                        "18446744073709551615",
                                        "18446744073709551614",
                                        "9223372036854775808",
                                        "1",
                                        "4096",
                                        "abc",
                                        "0x10",
                                        "18446744073709551616" /* does not fit */};
    redisContext *abcd[4] = {A, B, C, D};
    int tried = 0;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++, tried++)
        expect_invalid_cursor(abcd[tried % 4], fixed[i], "made up");
    for (int i = 0; i < ncur; i += 2) {
        unsigned long long v = strtoull(cursors[i], NULL, 10);
        unsigned long long forged[] = {v + 1,
                                       v - 1,
                                       v ^ 1ull,
                                       v ^ (1ull << 12),
                                       v ^ (1ull << 33),
                                       v ^ (1ull << 47),
                                       v ^ (1ull << 63),
                                       v + 64};
        for (size_t f = 0; f < sizeof(forged) / sizeof(forged[0]); f++) {
            char s[32];
            snprintf(s, sizeof(s), "%llu", forged[f]);
            bool real = false;
            for (int j = 0; j < ncur; j++)
                real = real || strcmp(cursors[j], s) == 0;
            if (real || forged[f] == 0) continue;
            expect_invalid_cursor(abcd[tried++ % 4], s, "a real cursor altered");
        }
    }
    fprintf(stderr, "(c) %d forged cursors rejected\n", tried);
    /* the gateways keep working, and the real cursors stay valid */
    for (int g = 0; g < 4; g++) {
        redisReply *r = it_cmd(abcd[g], "PING");
        EXPECT_STATUS(r, "PONG");
        freeReplyObject(su_scan_page(abcd[g], cursors[g % ncur], 50, NULL, 0, cur));
    }
    redisFree(D);
    int st = it_proc_stop(&gwd);
    CHECKF(st == 0, "gateway D exit status %d", st);
    su_free(&want);
}

/* ---------------------------------------------------------------- (d) */

static const char *const prefixes[] = {"alpha:", "beta:", "delta:", "gamma:", "omega:"};
#define NPFX 5
#define PER_PFX 20000

/* SCAN MATCH pat COUNT 100 (pages sent round robin to cs) and KEYS pat must both return
 * exactly what Redis's matcher selects from all (sorted); with seeks, the iteration must also
 * stay within su_seek_bound calls and, when every key with the pattern's literal prefix
 * matches, end at most one call after its last key. */
static void check_match(redisContext **cs, int ncs, const su_keys_t *all, const char *pat,
                        size_t plen, const char *label, size_t min_want, size_t full_pages,
                        bool seeks)
{
    su_keys_t want = {0}, got = {0}, keys = {0};
    char what[160];
    su_filter(all, pat, plen, &want);
    CHECKF(want.n >= min_want, "test bug: %s selects only %zu keys", label, want.n);
    snprintf(what, sizeof(what), "SCAN 0 MATCH %s COUNT 100%s", label,
             ncs > 1 ? " hopping between gateways" : "");
    su_iter_t it = su_scan_all(cs, ncs, 100, pat, plen, &got, 1000000, what);
    CHECKF(su_sort_uniq(&got) == 0, "%s: repeats", what);
    su_expect_same(&got, &want, what);
    size_t bound = su_seek_bound(all, pat, plen, full_pages);
    fprintf(stderr, "  %s: %zu keys in %zu calls (bound %zu, %zu after the last key)\n", what,
            want.n, it.pages, bound, want.n ? it.pages_after_end : 0);
    if (seeks) {
        CHECKF(it.pages <= bound,
               "%s: %zu calls for %zu of %zu keys while a full iteration takes %zu: the literal "
               "prefix (escapes resolved) must be sought and the walk must stop after it (at "
               "most %zu calls)",
               what, it.pages, want.n, all->n, full_pages, bound);
        /* when every key with the literal prefix matches, the walk ends right after them */
        if (want.n && want.n == su_in_prefix(all, pat, plen))
            CHECKF(it.pages_after_end <= 1,
                   "%s: %zu more calls after the last key with the prefix before cursor 0", what,
                   it.pages_after_end);
    }
    su_keys_cmd(cs[0], pat, plen, &keys);
    size_t nk = keys.n;
    CHECKF(su_sort_uniq(&keys) == 0, "KEYS %s: %zu keys with repeats", label, nk);
    snprintf(what, sizeof(what), "KEYS %s", label);
    su_expect_same(&keys, &want, what);
    su_free(&want);
    su_free(&got);
    su_free(&keys);
}

static void check_pat(redisContext **cs, int ncs, const su_keys_t *all, const char *pat,
                      size_t full_pages, bool seeks)
{
    check_match(cs, ncs, all, pat, strlen(pat), pat, 0, full_pages, seeks);
}

static void part_d(void)
{
    EXPECT_STATUS(it_cmd(A, "FLUSHALL"), "OK");
    su_keys_t all = {0};
    char k[32];
    for (int p = 0; p < NPFX; p++)
        for (int i = 0; i < PER_PFX; i++)
            su_add(&all, k, (size_t)snprintf(k, sizeof(k), "%s%06d", prefixes[p], i));
    /* neighbours of a prefix's range: the prefix itself is a key too ("*" matches nothing) */
    static const char *const edges[] = {"beta:", "beta",       "bet",         "beta;",     "beta9",
                                        "betb",  "gamma:0001", "gamma:00019", "gamma:0002"};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        su_add(&all, edges[i], strlen(edges[i]));
    double t0 = su_now();
    su_load(ports, 2, 4, &all);
    fprintf(stderr, "(d) loaded %zu keys in %.1f s\n", all.n, su_now() - t0);
    su_sort_uniq(&all);
    CHECKF(su_dbsize(B) == (long long)all.n, "(d) DBSIZE %lld, want %zu", su_dbsize(B), all.n);

    su_keys_t got = {0};
    su_iter_t full = su_scan_all(&A, 1, 100, NULL, 0, &got, 1000000, "(d) full SCAN COUNT 100");
    CHECKF(su_sort_uniq(&got) == 0, "(d) full SCAN repeats keys");
    su_expect_same(&got, &all, "(d) full SCAN COUNT 100");
    su_free(&got);
    fprintf(stderr, "(d) full iteration: %zu calls\n", full.pages);

    for (int p = 0; p < NPFX; p++) {
        char pat[32];
        snprintf(pat, sizeof(pat), "%s*", prefixes[p]);
        check_pat(&A, 1, &all, pat, full.pages, true);
    }
    redisContext *abc[3] = {A, B, C};
    check_pat(abc, 3, &all, "delta:*", full.pages, true);
    static const char *const small[] = {"gamma:0001*",   "beta:01999*", "omega:019999*",
                                        "alpha:000000*", "beta*",       "gamma:0001?0"};
    for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++)
        check_pat(&B, 1, &all, small[i], full.pages, true);
    static const char *const none[] = {"aaa*", "kappa:*", "zzz*", "beta:1*", "\xff*", "alpha;*"};
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        check_pat(&C, 1, &all, none[i], full.pages, true);
    /* patterns without a usable prefix: correct, no bound on calls */
    check_pat(&A, 1, &all, "*:000123", full.pages, false);
    check_pat(&A, 1, &all, "?eta:00012*", full.pages, false);
    check_pat(&A, 1, &all, "beta:00*5", full.pages, true);
    su_free(&all);
}

/* ---------------------------------------------------------------- (e) */

#define NLONG 20000

static void part_e(void)
{
    EXPECT_STATUS(it_cmd(A, "FLUSHALL"), "OK");
    char P[201];
    memcpy(P, "lp:", 3);
    for (int i = 3; i < 200; i++)
        P[i] = "abcdefghijklmnopqrstuvwxyz0123456789:_-"[(i - 3) % 39];
    P[200] = 0;
    static const char fam[8] = {'a', 'b', 'c', '*', '?', '[', '\0', (char)0xff};
    su_keys_t all = {0};
    char k[256];
    for (int i = 0; i < NLONG; i++) {
        memcpy(k, P, 200);
        k[200] = fam[i % 8];
        int n = snprintf(k + 201, 16, "%05d", i / 8);
        su_add(&all, k, 201 + (size_t)n);
    }
    /* the prefix itself, one byte more, a backslash, and keys that leave the prefix late */
    su_add(&all, P, 200);
    memcpy(k, P, 200);
    k[200] = 'x';
    su_add(&all, k, 201);
    k[200] = '\\';
    su_add(&all, k, 201);
    for (int i = 0; i < 100; i++) {
        memcpy(k, P, 199);
        k[199] = '~';
        int n = snprintf(k + 200, 16, "%05d", i);
        su_add(&all, k, 200 + (size_t)n);
        k[199] = (char)(P[199] - 1);
        su_add(&all, k, 200 + (size_t)n);
    }
    double t0 = su_now();
    su_load(ports, 2, 4, &all);
    fprintf(stderr, "(e) loaded %zu keys (200-byte common prefix) in %.1f s\n", all.n,
            su_now() - t0);
    su_sort_uniq(&all);

    su_keys_t got = {0};
    redisContext *abc[3] = {A, B, C};
    su_iter_t full = su_scan_all(abc, 3, 100, NULL, 0, &got, 1000000, "(e) full SCAN COUNT 100");
    CHECKF(su_sort_uniq(&got) == 0, "(e) full SCAN repeats keys");
    su_expect_same(&got, &all, "(e) full SCAN");
    /* every key SCAN returned reads back with GET (binary keys round-trip) */
    su_keys_t back = {0};
    su_existing(B, &got, &back);
    CHECKF(back.n == got.n, "(e) GET finds %zu of the %zu keys SCAN returned", back.n, got.n);
    su_free(&back);
    su_free(&got);
    CHECKF(su_dbsize(C) == (long long)all.n, "(e) DBSIZE %lld, want %zu", su_dbsize(C), all.n);

    struct {
        const char *suffix; /* appended to P */
        size_t len;
        const char *label;
        size_t min_want;
        bool seeks;
    } pats[] = {
        {"*", 1, "P*", NLONG, true},
        {"\\**", 3, "P\\**", NLONG / 8, true},
        {"\\*0001*", 7, "P\\*0001*", 10, true},
        {"\\?00001", 7, "P\\?00001", 1, true},
        {"\\[*", 3, "P\\[*", NLONG / 8, true},
        {"[a-c]*", 6, "P[a-c]*", 3 * NLONG / 8, true},
        {"[a-c]0012?", 10, "P[a-c]0012?", 20, true},
        {"[^x]0000?", 9, "P[^x]0000?", 80, true},
        {"[^a-c*?[]*", 10, "P[^a-c*?[]*", NLONG / 4, true},
        {"[\\[\\*]0000*", 11, "P[\\[\\*]0000*", 20, true},
        {"?0012?", 6, "P?0012?", 80, true},
        {"\0*", 2, "P\\x00*", NLONG / 8, true},
        {"\xff"
         "0001*",
         6, "P\\xff0001*", 10, true},
        {"\\\\", 2, "P\\\\ (a backslash)", 1, true},
        {"x", 1, "Px (literal)", 1, true},
        {"", 0, "P (literal)", 1, true},
    };
    char pat[300];
    for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++) {
        memcpy(pat, P, 200);
        memcpy(pat + 200, pats[i].suffix, pats[i].len);
        check_match(i % 2 ? &A : abc, i % 2 ? 1 : 3, &all, pat, 200 + pats[i].len, pats[i].label,
                    pats[i].min_want, full.pages, pats[i].seeks);
    }
    /* prefixes cut inside the common prefix, and one that leaves it at its last byte */
    check_match(&B, 1, &all, "lp:abc*", 7, "lp:abc*", NLONG, full.pages, true);
    memcpy(pat, P, 199);
    memcpy(pat + 199, "~*", 2);
    check_match(&B, 1, &all, pat, 201, "P[0..199)~*", 100, full.pages, true);
    check_match(&C, 1, &all, "*00042", 6, "*00042", 8, full.pages, false);
    su_free(&all);
}

int main(void)
{
    it_begin("scan_guarantee", 840);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[3];
    it_gateways_start(&pool, gw, 3, 2, 1, ports);
    A = it_connect(ports[0]);
    B = it_connect(ports[1]);
    C = it_connect(ports[2]);

    double t = su_now();
    part_a();
    fprintf(stderr, "(a) done in %.1f s\n", su_now() - t);
    t = su_now();
    part_bc(&pool);
    fprintf(stderr, "(b)(c) done in %.1f s\n", su_now() - t);
    t = su_now();
    part_d();
    fprintf(stderr, "(d) done in %.1f s\n", su_now() - t);
    t = su_now();
    part_e();
    fprintf(stderr, "(e) done in %.1f s\n", su_now() - t);

    redisFree(A);
    redisFree(B);
    redisFree(C);
    for (int g = 0; g < 3; g++) {
        int st = it_proc_stop(&gw[g]);
        if (st != 0) it_proc_dump_log(&gw[g]);
        CHECKF(st == 0, "gateway %d exit status %d", g, st);
    }
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_scan_guarantee: OK\n");
    return 0;
}
