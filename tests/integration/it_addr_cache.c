/* The validated address cache (race/addr_cache.c): a gateway that read a key before reads
 * it again in one round trip, and never answers from a slot that another gateway has since
 * changed, emptied or moved in a subtable split.
 *   1. 200 GETs of one key on gateway A: 1 round trip each after the first, plain SETs of
 *      it 1 (seen within 1 s), 2 when seen longer ago or with XX (INFO dmkv); A and B
 *      taking turns writing it always read the last write.
 *   2. A caches 2000 keys; B updates them all, deletes every 10th and inserts 30,000 more
 *      (a small table: many subtable splits move cached keys); A reads B's values exactly.
 *   3. B counts a key up while A reads it in a loop: A's values never go back, and A ends
 *      on B's last value.
 *   4. A reads 40,000 keys twice: the second pass costs one round trip per GET.
 *   5. A gateway of two worker threads: 8 clients read 1000 keys, then each key is read by
 *      the next client, which may sit on the other worker: one round trip per GET, as the
 *      workers share one cache (with a cache per worker, about half took 2); each key
 *      written by the next client and then by the first again: no entry goes stale.
 *   6. A inserts 3,000 new keys, then reads them: one round trip per GET (the insert's slot
 *      and word are cached; 2 each when only reads filled the cache), but for the keys a
 *      later split moved, which A's cache passes over without reading them (A split).
 *   7. --addr-cache-entries sizes the cache: CONFIG GET answers it, a bad value is refused at
 *      start, and a gateway of 1500 (rounded up to 2048) keeps at most 2048 of 3,000 inserted keys.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define KEYS 2000
#if defined(__SANITIZE_THREAD__)
/* Under TSan the fill and the working set loaded at ~100 SETs/s beside the ASan suite
 * (2026-11-29), over the 600 s limit together. 4,000 fill keys still split a dozen
 * subtables (the check below wants 4); the working set's check is not run there (below).
 * The run took 230 s with 8,000 fill keys and a working set of 10,000 alone on the machine
 * (2026-11-30), the longest of the TSan run that bounds the suite's time. */
#define FILL 4000
#else
#define FILL 30000
#define WORKING 40000
#endif
#define COUNT_TO 3000

static int port_b;
static atomic_bool counting_done;

static double info_field(redisContext *c, const char *name)
{
    return it_info_field(c, "dmkv", name);
}

static void hot_key_costs_one_rtt(redisContext *a, redisContext *b)
{
    EXPECT_STATUS(it_cmd(b, "SET hot v0"), "OK");
    EXPECT_BULKS(it_cmd(a, "GET hot"), "v0"); /* full search: fills the cache */
    EXPECT_STATUS(it_cmd(a, "CONFIG RESETSTAT"), "OK");
    double hits0 = info_field(a, "race_addr_cache_hits");
    for (int i = 0; i < 200; i++)
        EXPECT_BULKS(it_cmd(a, "GET hot"), "v0");
    double rtts = info_field(a, "get_rtts_per_op"), hits = info_field(a, "race_addr_cache_hits");
    fprintf(stderr, "hot key: %.2f round trips per GET, %.0f cache answers\n", rtts, hits - hits0);
    CHECKF(rtts < 1.01, "a cached GET took %.2f round trips", rtts);
    CHECK(hits - hits0 == 200);
    /* A plain SET of a key seen within the operation timeout (1 s), and not within the last
     * millisecond: new block ‖ slot CAS from the cached word, one round trip (race/ops.c
     * dm_race_update_blind). */
    EXPECT_STATUS(it_cmd(a, "CONFIG RESETSTAT"), "OK");
    double blind0 = info_field(a, "race_addr_cache_blind_sets");
    for (int i = 0; i < 100; i++) {
        /* Past 1 ms and 8 write round trips (HOT_RTTS). 10 ms was not always: in a
         * clean-clone make test of 2026-11-28, beside the TSan tree's build, 5 of 100 SETs
         * found their key still hot (write round trips over 1.25 ms) and took 2; 50 ms was
         * not always either under TSan beside the ASan suite (2026-11-29: 5 of 100, write
         * round trips over 6 ms). */
        usleep(150 * 1000);
        EXPECT_STATUS(it_cmd(a, "SET hot v0"), "OK");
    }
    double set_rtts = info_field(a, "set_rtts_per_op");
    double blind = info_field(a, "race_addr_cache_blind_sets") - blind0;
    fprintf(stderr, "hot key: %.2f round trips per SET, %.0f of 100 written blind\n", set_rtts,
            blind);
    /* Every blind SET one round trip; one SET in these 100 may also raise its worker's
     * registered watermark (one CAS per 128 KB carved, docs/leases.md "A dead gateway's
     * chunk tails"): 1.01. On a host loaded enough that 8 write round trips outlast the
     * 150 ms (2026-12-06: ctest -j2 of a stress loop beside a build, 2 of 100), a SET finds
     * its key hot and takes the validated way's 2: counted, and allowed for a few. */
    CHECKF(blind >= 95, "only %.0f of 100 SETs of a key seen 150 ms before were blind", blind);
    CHECKF(set_rtts < 1.015 + (100 - blind) / 100.0, "a cached SET took %.2f round trips",
           set_rtts);
    /* Seen longer ago, or with an option that reads the old value: the update through the
     * cache reads the slot and the old block first (new block ‖ slot word ‖ old block,
     * then the slot CAS). */
    usleep(1200 * 1000);
    EXPECT_STATUS(it_cmd(a, "CONFIG RESETSTAT"), "OK");
    EXPECT_STATUS(it_cmd(a, "SET hot v0"), "OK");
    EXPECT_STATUS(it_cmd(a, "SET hot v0 XX"), "OK");
    set_rtts = info_field(a, "set_rtts_per_op");
    fprintf(stderr, "hot key, seen 1.2 s before, then XX: %.2f round trips per SET\n", set_rtts);
    CHECKF(set_rtts > 1.99 && set_rtts < 2.01, "%.2f round trips per SET", set_rtts);
    /* Back to back (seen within the last millisecond): the validated way, 2. */
    EXPECT_STATUS(it_cmd(a, "CONFIG RESETSTAT"), "OK");
    redisAppendCommand(a, "SET hot v0");
    redisAppendCommand(a, "SET hot v0");
    it_pipeline_ok(a, 2);
    set_rtts = info_field(a, "set_rtts_per_op");
    fprintf(stderr, "hot key, two SETs back to back: %.2f round trips per SET\n", set_rtts);
    CHECKF(set_rtts > 1.49, "%.2f round trips per SET back to back", set_rtts);
    /* Two gateways taking turns: each write makes the other's entry stale. */
    for (int i = 0; i < 300; i++) {
        redisContext *w = i % 2 ? a : b, *rd = i % 2 ? b : a;
        char v[16];
        snprintf(v, sizeof(v), "t%d", i);
        EXPECT_STATUS(it_cmd(w, "SET hot %s", v), "OK");
        EXPECT_BULKS(it_cmd(rd, "GET hot"), v);
        EXPECT_BULKS(it_cmd(w, "GET hot"), v);
    }
    EXPECT_STATUS(it_cmd(a, "SET hot v0"), "OK");
    /* Changed by the other gateway: A sees the new value (and pays the full search once). */
    EXPECT_STATUS(it_cmd(b, "SET hot v1"), "OK");
    EXPECT_BULKS(it_cmd(a, "GET hot"), "v1");
    EXPECT_INT(it_cmd(b, "DEL hot"), 1);
    EXPECT_NIL(it_cmd(a, "GET hot"));
    EXPECT_STATUS(it_cmd(b, "SET hot v2"), "OK");
    EXPECT_BULKS(it_cmd(a, "GET hot"), "v2");
}

static void stale_entries_after_splits(redisContext *a, redisContext *b)
{
    for (int i = 0; i < KEYS; i++)
        redisAppendCommand(b, "SET ac:%d old:%d", i, i);
    it_pipeline_ok(b, KEYS);
    for (int round = 0; round < 2; round++) { /* the second round answers from the cache */
        for (int i = 0; i < KEYS; i++)
            redisAppendCommand(a, "GET ac:%d", i);
        it_pipeline_ok(a, KEYS);
    }
    double splits0 = info_field(b, "race_splits"),
           dropped0 = info_field(a, "race_addr_cache_dropped"),
           moved0 = info_field(a, "race_addr_cache_moved");
    for (int i = 0; i < KEYS; i++) {
        if (i % 10 == 0)
            redisAppendCommand(b, "DEL ac:%d", i);
        else
            redisAppendCommand(b, "SET ac:%d new:%d", i, i);
        if (i % 2 == 0) /* interleaved with growth, so keys move after their update too */
            for (int j = 0; j < FILL / KEYS * 2; j++)
                redisAppendCommand(b, "SET fill:%d:%d x", i, j);
    }
    it_pipeline_ok(b, KEYS + KEYS / 2 * (FILL / KEYS * 2));
    double splits = info_field(b, "race_splits") - splits0;
    for (int i = 0; i < KEYS; i++)
        redisAppendCommand(a, "GET ac:%d", i);
    for (int i = 0; i < KEYS; i++) {
        redisReply *r;
        CHECK(redisGetReply(a, (void **)&r) == REDIS_OK);
        if (i % 10 == 0) {
            EXPECT_NIL(r);
        } else {
            char want[32];
            snprintf(want, sizeof(want), "new:%d", i);
            EXPECT_BULKS(r, want);
        }
    }
    double dropped = info_field(a, "race_addr_cache_dropped") - dropped0;
    double moved = info_field(a, "race_addr_cache_moved") - moved0;
    fprintf(stderr,
            "after %.0f splits on B: %.0f of A's cache entries found stale, %.0f passed over "
            "(their key's subtable split)\n",
            splits, dropped, moved);
    CHECKF(splits >= 4, "only %.0f subtable splits: the test did not move keys", splits);
    /* every entry had changed (a few were evicted); once A's directory knows a split (its
     * first stale read refreshes it), the keys it moved are passed over unread */
    CHECK(dropped + moved >= KEYS * 9 / 10);
}

#if !defined(__SANITIZE_THREAD__)
/* A working set of WORKING keys stays cached on one gateway thread: the second pass of
 * GETs is one round trip each. With 64 K direct-mapped entries it took 1.46 round trips
 * per GET, with 2 ways of 128 K sets 1.04 (each run once). */
static void working_set_stays_cached(redisContext *a, redisContext *b)
{
    for (int i = 0; i < WORKING; i++)
        redisAppendCommand(b, "SET ws:%d %d", i, i);
    it_pipeline_ok(b, WORKING);
    double dropped0 = 0;
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            EXPECT_STATUS(it_cmd(a, "CONFIG RESETSTAT"), "OK");
            dropped0 = info_field(a, "race_addr_cache_dropped");
        }
        for (int i = 0; i < WORKING; i++)
            redisAppendCommand(a, "GET ws:%d", i);
        it_pipeline_ok(a, WORKING);
    }
    double rtts = info_field(a, "get_rtts_per_op");
    double dropped = info_field(a, "race_addr_cache_dropped") - dropped0;
    fprintf(stderr, "%d keys read again: %.3f round trips per GET, %.0f entries stale\n", WORKING,
            rtts, dropped);
    CHECKF(rtts < 1.02, "%.3f round trips per GET of a cached working set", rtts);
}

static void config_is(redisContext *c, const char *want)
{
    redisReply *r = it_cmd(c, "CONFIG GET addr-cache-entries");
    CHECKF(r->type == REDIS_REPLY_ARRAY && r->elements == 2 && !strcmp(r->element[1]->str, want),
           "CONFIG GET addr-cache-entries: want %s", want);
    freeReplyObject(r);
}

/* Keys this gateway inserted are read in one round trip, before any GET filled the cache. */
static double inserted_keys_are_cached(redisContext *a, const char *prefix, int inserted)
{
    for (int i = 0; i < inserted; i++)
        redisAppendCommand(a, "SET %s:%d v%d", prefix, i, i);
    it_pipeline_ok(a, inserted);
    EXPECT_STATUS(it_cmd(a, "CONFIG RESETSTAT"), "OK");
    double hits0 = info_field(a, "race_addr_cache_hits");
    double dropped0 = info_field(a, "race_addr_cache_dropped");
    double moved0 = info_field(a, "race_addr_cache_moved");
    for (int i = 0; i < inserted; i++) {
        char want[16];
        snprintf(want, sizeof(want), "v%d", i);
        EXPECT_BULKS(it_cmd(a, "GET %s:%d", prefix, i), want);
    }
    double rtts = info_field(a, "get_rtts_per_op");
    double hits = info_field(a, "race_addr_cache_hits") - hits0;
    double dropped = info_field(a, "race_addr_cache_dropped") - dropped0;
    double moved = info_field(a, "race_addr_cache_moved") - moved0;
    fprintf(stderr,
            "%d keys read after their insert: %.3f round trips per GET, %.0f cache answers, "
            "%.0f entries stale, %.0f passed over (moved by a later split)\n",
            inserted, rtts, hits, dropped, moved);
    /* Each GET answered from the cache, or its entry moved by one of the splits the
     * inserts caused (the small table; this gateway split, so its directory knows and the
     * entry is passed over unread): nothing else missed. A cache smaller than the keys
     * evicts the rest (the caller checks). */
    if (!strcmp(prefix, "ins"))
        CHECKF(hits + moved == inserted && moved < inserted / 10 && dropped == 0,
               "%.0f cache answers, %.0f passed over and %.0f stale entries for %d keys this "
               "gateway inserted",
               hits, moved, dropped, inserted);
    return hits;
}
#endif

static void *count_up(void *arg)
{
    (void)arg;
    redisContext *b = it_connect(port_b);
    for (int i = 1; i <= COUNT_TO; i++)
        EXPECT_STATUS(it_cmd(b, "SET ctr %d", i), "OK");
    redisFree(b);
    atomic_store(&counting_done, true);
    return NULL;
}

static void reads_never_go_back(redisContext *a, redisContext *b)
{
    EXPECT_STATUS(it_cmd(b, "SET ctr 0"), "OK");
    pthread_t t;
    pthread_create(&t, NULL, count_up, NULL);
    long last = 0, reads = 0;
    for (;;) {
        bool done = atomic_load(&counting_done);
        redisReply *r = it_cmd(a, "GET ctr");
        CHECK(r->type == REDIS_REPLY_STRING);
        long v = strtol(r->str, NULL, 10);
        freeReplyObject(r);
        CHECKF(v >= last, "GET ctr went back from %ld to %ld", last, v);
        last = v;
        reads++;
        if (done) break;
    }
    pthread_join(t, NULL);
    fprintf(stderr, "%ld reads while B counted to %d: never back, ended on %ld\n", reads, COUNT_TO,
            last);
    CHECK(last == COUNT_TO);
}

#define SHARED_KEYS 1000
#define SHARED_CLIENTS 8

/* Send cmd ("SET sh:%d v" or "GET sh:%d") for every key, key k through client k + shift. */
static void shared_pass(redisContext **c, const char *cmd, int shift)
{
    for (int k = 0; k < SHARED_KEYS; k++)
        redisAppendCommand(c[(k + shift) % SHARED_CLIENTS], cmd, k);
    for (int i = 0; i < SHARED_CLIENTS; i++)
        it_pipeline_ok(c[i], SHARED_KEYS / SHARED_CLIENTS);
}

static void workers_share_the_cache(const it_pool_t *pool)
{
    it_proc_t g;
    const char *uris[] = {pool->uri};
    it_gateway_start(&g, uris, 1, 2, NULL);
    redisContext *c[SHARED_CLIENTS];
    for (int i = 0; i < SHARED_CLIENTS; i++)
        c[i] = it_connect(g.port);
    shared_pass(c, "SET sh:%d a", 0);
    shared_pass(c, "GET sh:%d", 0);
    /* Read by the next client, which may sit on the other worker. */
    EXPECT_STATUS(it_cmd(c[0], "CONFIG RESETSTAT"), "OK");
    shared_pass(c, "GET sh:%d", 1);
    double rtts = info_field(c[0], "get_rtts_per_op");
    fprintf(stderr,
            "two workers, each key read by another client than read it before: %.3f "
            "round trips per GET\n",
            rtts);
    CHECKF(rtts < 1.05, "%.3f round trips per GET: the workers do not share the cache", rtts);
    /* Written by the next client, then by the first again: no entry goes stale. */
    shared_pass(c, "SET sh:%d b", 1);
    double dropped0 = info_field(c[0], "race_addr_cache_dropped");
    shared_pass(c, "SET sh:%d c", 0);
    double dropped = info_field(c[0], "race_addr_cache_dropped") - dropped0;
    fprintf(stderr, "keys written on one worker, then the other: %.0f cache entries stale\n",
            dropped);
    /* Not shared, the keys a worker wrote before the other would be stale (500 with a cache
     * per worker, docs/throughput.md). Shared, a few may be: a store that finds its set held
     * by a writer for LOCK_SPINS gives up (addr_cache.c, a hint). Under TSan beside the ASan
     * suite, updates whose commit turn came after their 1 s bound dropped their entries as
     * stale too: 247 of 1,000 in a clean-clone run (2026-12-02), 0 since they keep them
     * (race/ops.c). */
    CHECKF(dropped < SHARED_KEYS / 10, "%.0f entries stale: the workers do not share the cache",
           dropped);
    for (int k = 0; k < SHARED_KEYS; k += 97)
        EXPECT_BULKS(it_cmd(c[k % SHARED_CLIENTS], "GET sh:%d", k), "c");
    for (int i = 0; i < SHARED_CLIENTS; i++)
        redisFree(c[i]);
    CHECK(it_proc_stop(&g) == 0);
}

int main(void)
{
    it_begin("addr_cache", 600);
    setenv("DMKV_RACE_GROUPS", "8", 1); /* a small table, so the fill splits subtables */
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[2];
    it_gateways_start(&pool, gw, 2, 1, 1, NULL);
    port_b = gw[1].port;
    redisContext *a = it_connect(gw[0].port), *b = it_connect(gw[1].port);
    hot_key_costs_one_rtt(a, b);
    stale_entries_after_splits(a, b);
    reads_never_go_back(a, b);
#if !defined(__SANITIZE_THREAD__)
    /* One gateway thread's hit rate: nothing shared between threads for TSan to judge,
     * and 100 s of the TSan run (the ASan runs check it). */
    working_set_stays_cached(a, b);
    inserted_keys_are_cached(a, "ins", 3000);
    config_is(a, "1048576");
    it_expect_refused("DMKV_GATEWAY", "--addr-cache-entries 100 --memnode local",
                      "Invalid addr-cache-entries '100'");
    it_proc_t small;
    const char *uris[] = {pool.uri}, *extra[] = {"--addr-cache-entries", "1500", NULL};
    it_gateway_start(&small, uris, 1, 1, extra);
    redisContext *s = it_connect(small.port);
    config_is(s, "2048"); /* rounded up: 4 ways x 512 sets */
    double hits = inserted_keys_are_cached(s, "small", 3000);
    CHECKF(hits <= 2048, "%.0f cache answers from a cache of 2048 entries", hits);
    redisFree(s);
    CHECK(it_proc_stop(&small) == 0);
#endif
    workers_share_the_cache(&pool);
    redisFree(a);
    redisFree(b);
    for (int g = 0; g < 2; g++)
        CHECK(it_proc_stop(&gw[g]) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_addr_cache: OK\n");
    return 0;
}
