/* SET/DEL storm on an ordered keyspace (issue 3): one memory node, three gateways, three
 * client threads per gateway sending pipelined bursts of SET / SET NX / DEL / GETDEL / MSET
 * / GET on ~2000 overlapping keys (short keys that are prefixes of each other, keys with a
 * long common prefix such as user:session:0000000123:profile, the empty key, and binary keys
 * with \0 and \xff), with a hot subset so that several gateways create and delete the same
 * key at the same moment. One scanner per gateway iterates SCAN all the while: every
 * iteration must come in strictly increasing memcmp order (so no key twice), contain every
 * anchor key (written before the storm, never touched during it) and nothing that was never
 * written. At quiescence, on every gateway: the keys a full SCAN returns (in strictly
 * increasing order, cursors also hopping between gateways) are exactly the keys GET finds,
 * DBSIZE is that count, KEYS * returns that set once each, and all gateways agree. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "integration/scan_util.h"

#define NGW 3
#define CLIENTS_PER_GW 3
#define NCLIENTS (NGW * CLIENTS_PER_GW)
#define OPS 12000 /* commands per client (DMKV_IT_STORM_OPS overrides: the rxe VM runs fewer) */
static int ops = OPS;
#define HOT 48 /* keys that take a third of the storm */
#define MAX_SCANS 400

static int ports[NGW];
static su_keys_t storm;    /* the keys the storm writes (by index) */
static su_keys_t anchors;  /* written before, untouched during the storm (sorted) */
static su_keys_t universe; /* storm + anchors (sorted): nothing else may ever appear */
static atomic_bool storm_done;
static atomic_long scan_iterations;

static void add_fmt(su_keys_t *s, const char *fmt, int i)
{
    char k[128];
    int n = snprintf(k, sizeof(k), fmt, i);
    su_add(s, k, (size_t)n);
}

static void build_keys(void)
{
    /* short keys, many of them prefixes of others: k1 < k10 < k100 */
    for (int i = 0; i < 500; i++)
        add_fmt(&storm, "k%d", i);
    static const struct {
        const char *p;
        size_t n;
    } tiny[] = {{"", 0},   {"k", 1},    {"a", 1},     {"z", 1},
                {"\0", 1}, {"\0\0", 2}, {"\xff", 1},  {"\xff\xff", 2},
                {"u", 1},  {"user", 4}, {"user:", 5}, {"user:session:", 13}};
    for (size_t i = 0; i < sizeof(tiny) / sizeof(tiny[0]); i++)
        su_add(&storm, tiny[i].p, tiny[i].n);
    /* a long common prefix, and keys that are prefixes of other keys in it */
    for (int i = 0; i < 600; i++)
        add_fmt(&storm, "user:session:%010d:profile", i * 7);
    for (int i = 0; i < 200; i++)
        add_fmt(&storm, "user:session:%010d", i * 21);
    for (int i = 0; i < 200; i++)
        add_fmt(&storm, "user:%d", i);
    /* binary keys: \0 inside, \xff inside and first, \0 first */
    for (int i = 0; i < 300; i++) {
        char k[32];
        int n = snprintf(k, sizeof(k), "bin@%04d@", i);
        k[3] = 0;
        k[n - 1] = (char)0xff;
        su_add(&storm, k, (size_t)n);
    }
    for (int i = 0; i < 100; i++) {
        char k[32];
        int n = snprintf(k, sizeof(k), "@%03d@tail", i);
        k[0] = (char)0xff;
        k[4] = 0;
        su_add(&storm, k, (size_t)n);
    }
    for (int i = 0; i < 100; i++) {
        char k[32];
        int n = snprintf(k, sizeof(k), "@lead%d", i);
        k[0] = 0;
        su_add(&storm, k, (size_t)n);
    }
    /* anchors, spread over the whole key range */
    for (int i = 0; i < 150; i++)
        add_fmt(&anchors, "user:session:%010d:anchor", i * 29);
    for (int i = 0; i < 25; i++)
        add_fmt(&anchors, "anchor:%d", i);
    for (int i = 0; i < 25; i++) {
        char k[32];
        int n = snprintf(k, sizeof(k), "@@anchor%d", i);
        k[0] = k[1] = (char)0xff;
        su_add(&anchors, k, (size_t)n);
    }
    for (size_t i = 0; i < storm.n; i++)
        su_add(&universe, storm.v[i].p, storm.v[i].n);
    for (size_t i = 0; i < anchors.n; i++)
        su_add(&universe, anchors.v[i].p, anchors.v[i].n);
    CHECKF(su_sort_uniq(&universe) == 0, "test bug: a key is listed twice");
    su_sort_uniq(&anchors);
}

/* Reply kinds a storm command may get. */
enum { R_OK, R_OK_OR_NIL, R_INT1, R_INT2, R_STR_OR_NIL };

static const su_key_t *pick(uint64_t *x)
{
    uint64_t r = su_rand(x);
    size_t i =
        r % 3 == 0 ? (size_t)((r >> 8) % HOT) * (storm.n / HOT) : (size_t)((r >> 8) % storm.n);
    return &storm.v[i];
}

static void *client_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    redisContext *c = it_connect(ports[id % NGW]);
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 7);
    int kinds[16];
    char val[48];
    for (int j = 0; j < ops;) {
        int burst = 1 + (int)(su_rand(&x) % 12);
        for (int b = 0; b < burst; b++, j++) {
            const su_key_t *k = pick(&x), *k2 = pick(&x);
            int op = (int)(su_rand(&x) % 100);
            size_t vn = (size_t)snprintf(val, sizeof(val), "v%d:%d", id, j);
            const char *argv[6];
            size_t lens[6];
            int n = 0;
            if (op < 40) { /* SET */
                argv[0] = "SET", lens[0] = 3;
                argv[1] = k->p, lens[1] = k->n;
                argv[2] = val, lens[2] = vn;
                n = 3, kinds[b] = R_OK;
            } else if (op < 50) { /* SET NX: creation races */
                argv[0] = "SET", lens[0] = 3;
                argv[1] = k->p, lens[1] = k->n;
                argv[2] = val, lens[2] = vn;
                argv[3] = "NX", lens[3] = 2;
                n = 4, kinds[b] = R_OK_OR_NIL;
            } else if (op < 80) { /* DEL */
                argv[0] = "DEL", lens[0] = 3;
                argv[1] = k->p, lens[1] = k->n;
                n = 2, kinds[b] = R_INT1;
            } else if (op < 85) { /* DEL two keys */
                argv[0] = "DEL", lens[0] = 3;
                argv[1] = k->p, lens[1] = k->n;
                argv[2] = k2->p, lens[2] = k2->n;
                n = 3, kinds[b] = R_INT2;
            } else if (op < 89) { /* GETDEL */
                argv[0] = "GETDEL", lens[0] = 6;
                argv[1] = k->p, lens[1] = k->n;
                n = 2, kinds[b] = R_STR_OR_NIL;
            } else if (op < 94) { /* MSET two keys */
                argv[0] = "MSET", lens[0] = 4;
                argv[1] = k->p, lens[1] = k->n;
                argv[2] = val, lens[2] = vn;
                argv[3] = k2->p, lens[3] = k2->n;
                argv[4] = val, lens[4] = vn;
                n = 5, kinds[b] = R_OK;
            } else { /* GET */
                argv[0] = "GET", lens[0] = 3;
                argv[1] = k->p, lens[1] = k->n;
                n = 2, kinds[b] = R_STR_OR_NIL;
            }
            CHECK(redisAppendCommandArgv(c, n, argv, lens) == REDIS_OK);
        }
        for (int b = 0; b < burst; b++) {
            redisReply *r;
            CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK, "client %d: %s", id, c->errstr);
            CHECKF(r->type != REDIS_REPLY_ERROR, "client %d: error reply '%s'", id, r->str);
            bool ok = false;
            switch (kinds[b]) {
            case R_OK:
                ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
                break;
            case R_OK_OR_NIL:
                ok = r->type == REDIS_REPLY_NIL ||
                     (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0);
                break;
            case R_INT1:
            case R_INT2:
                ok = r->type == REDIS_REPLY_INTEGER && r->integer >= 0 &&
                     r->integer <= (kinds[b] == R_INT1 ? 1 : 2);
                break;
            case R_STR_OR_NIL:
                ok = r->type == REDIS_REPLY_NIL ||
                     (r->type == REDIS_REPLY_STRING && r->len >= 1 && r->str[0] == 'v');
                break;
            }
            CHECKF(ok, "client %d: unexpected reply type %d for a command of kind %d", id, r->type,
                   kinds[b]);
            freeReplyObject(r);
        }
    }
    redisFree(c);
    return NULL;
}

/* Full iterations while the storm runs: ordered, every anchor, nothing unknown. */
static void *scanner_main(void *arg)
{
    int g = (int)(intptr_t)arg;
    redisContext *c = it_connect(ports[g]);
    static const long counts[] = {1, 10, 100, 0};
    char what[64], b[512];
    for (int it = 0; it < MAX_SCANS && !atomic_load(&storm_done); it++) {
        su_keys_t got = {0};
        long count = counts[it % 4];
        snprintf(what, sizeof(what), "gateway %d, SCAN during the storm (COUNT %ld)", g, count);
        su_scan_all(&c, 1, count, NULL, 0, &got, 1000000, what);
        for (size_t i = 0; i < got.n; i++)
            CHECKF(su_contains(&universe, got.v[i].p, got.v[i].n),
                   "%s returned '%s', a key nobody ever wrote", what,
                   su_show(got.v[i].p, got.v[i].n, b, sizeof(b)));
        su_sort_uniq(&got);
        for (size_t i = 0; i < anchors.n; i++)
            CHECKF(su_contains(&got, anchors.v[i].p, anchors.v[i].n),
                   "%s missed '%s', present for the whole iteration", what,
                   su_show(anchors.v[i].p, anchors.v[i].n, b, sizeof(b)));
        su_free(&got);
        atomic_fetch_add(&scan_iterations, 1);
    }
    redisFree(c);
    return NULL;
}

static void check_quiescent(redisContext **cs, su_keys_t *first)
{
    char what[96];
    for (int g = 0; g < NGW; g++) {
        su_keys_t exist = {0}, got = {0}, keys = {0};
        su_existing(cs[g], &universe, &exist);
        su_sort_uniq(&exist);
        if (g == 0) {
            for (size_t i = 0; i < exist.n; i++)
                su_add(first, exist.v[i].p, exist.v[i].n);
            for (size_t i = 0; i < anchors.n; i++)
                CHECKF(su_contains(&exist, anchors.v[i].p, anchors.v[i].n),
                       "anchor key %zu lost after the storm", i);
        } else {
            snprintf(what, sizeof(what), "gateway %d GET vs gateway 0 GET", g);
            su_expect_same(&exist, first, what);
        }
        static const long counts[] = {0, 7, 1000};
        for (int k = 0; k < 3; k++) {
            snprintf(what, sizeof(what), "gateway %d, full SCAN COUNT %ld vs GET", g, counts[k]);
            su_scan_all(&cs[g], 1, counts[k], NULL, 0, &got, 1000000, what);
            CHECKF(su_sort_uniq(&got) == 0, "%s: repeats", what);
            su_expect_same(&got, &exist, what);
            su_free(&got);
        }
        long long dbsize = su_dbsize(cs[g]);
        CHECKF(dbsize == (long long)exist.n, "gateway %d: DBSIZE %lld, but GET finds %zu keys", g,
               dbsize, exist.n);
        su_keys_cmd(cs[g], "*", 1, &keys);
        size_t nkeys = keys.n;
        size_t rep = su_sort_uniq(&keys);
        CHECKF(rep == 0, "gateway %d: KEYS * returned %zu keys, %zu of them repeats", g, nkeys,
               rep);
        snprintf(what, sizeof(what), "gateway %d, KEYS * vs GET", g);
        su_expect_same(&keys, &exist, what);
        su_free(&keys);
        su_free(&exist);
    }
    /* cursors hopping over all gateways */
    su_keys_t got = {0};
    su_scan_all(cs, NGW, 25, NULL, 0, &got, 1000000, "SCAN COUNT 25 hopping between gateways");
    su_sort_uniq(&got);
    su_expect_same(&got, first, "SCAN hopping between gateways vs GET");
    su_free(&got);
}

int main(void)
{
    it_begin("chime_storm", 600);
    const char *o = getenv("DMKV_IT_STORM_OPS");
    if (o && atoi(o) > 0) ops = atoi(o);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[NGW];
    it_gateways_start(&pool, gw, NGW, 2, 1, ports);
    build_keys();
    fprintf(stderr, "%zu storm keys, %zu anchors\n", storm.n, anchors.n);
    redisContext *cs[NGW];
    for (int g = 0; g < NGW; g++)
        cs[g] = it_connect(ports[g]);
    EXPECT_STATUS(it_cmd(cs[0], "FLUSHALL"), "OK");
    su_set_many(cs[1], &anchors, 0, anchors.n, 100);
    /* start with about half of the storm keys present */
    for (size_t i = 0; i < storm.n; i += 2)
        su_set_many(cs[i % NGW], &storm, i, i + 1, 1);

    double t0 = su_now();
    pthread_t th[NCLIENTS], sc[NGW];
    for (int g = 0; g < NGW; g++)
        CHECK(pthread_create(&sc[g], NULL, scanner_main, (void *)(intptr_t)g) == 0);
    for (int i = 0; i < NCLIENTS; i++)
        CHECK(pthread_create(&th[i], NULL, client_main, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < NCLIENTS; i++)
        pthread_join(th[i], NULL);
    atomic_store(&storm_done, true);
    for (int g = 0; g < NGW; g++)
        pthread_join(sc[g], NULL);
    double t1 = su_now();
    fprintf(stderr,
            "storm: %d clients x %d commands in %.1f s, %ld full SCAN iterations alongside\n",
            NCLIENTS, ops, t1 - t0, atomic_load(&scan_iterations));
    CHECKF(atomic_load(&scan_iterations) >= NGW, "the scanners did not finish an iteration each");

    su_keys_t first = {0};
    check_quiescent(cs, &first);
    fprintf(stderr, "quiescent: %zu keys, identical on %d gateways (%.1f s)\n", first.n, NGW,
            su_now() - t1);
    su_free(&first);

    for (int g = 0; g < NGW; g++) {
        redisFree(cs[g]);
        int st = it_proc_stop(&gw[g]);
        if (st != 0) it_proc_dump_log(&gw[g]);
        CHECKF(st == 0, "gateway %d exit status %d", g, st);
    }
    it_proc_stop(&pool.memnode);
    su_free(&storm);
    su_free(&anchors);
    su_free(&universe);
    fprintf(stderr, "it_chime_storm: OK\n");
    return 0;
}
