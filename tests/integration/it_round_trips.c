/* Round trips per command, as INFO dmkv counts them (waited batches; splits apart in
 * split_*): the bounds of docs/throughput.md "A new key in 3 round trips".
 *   1. 400 SETs of new keys, one at a time, into a pool of 20,000 keys: at most 3 round trips
 *      each on average before the reply (3 exactly, plus a read of another key's block when
 *      a fingerprint matches), the unlock and counter posted without waiting.
 *   2. 400 DELs of those keys from another gateway (no address cache): at most 3 each.
 *   3. DEL of absent keys: 1 (lock ‖ buckets).
 *   4. SET and GET of present keys from a gateway that never saw them: 3 and 2.
 *   5. A SCAN COUNT 100 walk of the preloaded keys: every key, at most 2 per command (ROLEX:
 *      and the loads of models the retrainer published during the walk); walks of SCAN MATCH
 *      with a literal prefix: at most 2 per command too (CHIME).
 *   6. The preload itself, one connection pipelining 20,000 new keys: the round trips per
 *      insert of a pipelined load (SepHash: appends to one segment placed one after the
 *      other, not all CASing its first empty entry; 33 each before, sephash/append.c).
 * Bounds per point engine, and for ROLEX as the range engine (its own, below).
 * The counters do not depend on the machine's speed; nothing here is timed. Every value is
 * read back, so a cheaper path that lost a write fails here too. */
#include <stdlib.h>
#include <string.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define PRELOAD 20000
#define N 400
/* A pipelined load's round trips per insert: RACE 2.3; SepHash 2.9 (42 before its appends
 * were placed, 2026-11-30). */
#define LOAD_RACE 3.0
#define LOAD_SEPHASH 4.0

/* Bounds per point engine. RACE: docs/throughput.md. SepHash (DMKV_IT_POINT_INDEX=sephash,
 * docs/DESIGN.md "SepHash"): the range lock's batch carries the lookup (the CurSegment and
 * the key's MainSegment run), the block, filter byte, entry CAS and counter go in the
 * next, but a segment whose CurSegment merged since this worker last read it costs 2 more
 * (its FPTable), and a GET or update reads the key's block after the lookup. */
typedef struct bounds {
    double set_new, del, del_absent, set_upd, get, load;
} bounds_t;
static const bounds_t race_bounds = {3.2, 3.1, 1.1, 3.05, 2.05, LOAD_RACE};
static const bounds_t sephash_bounds = {2.6, 3.3, 1.8, 3.3, 2.8, LOAD_SEPHASH};
/* ROLEX as the range index (DMKV_IT_RANGE_INDEX=rolex, docs/DESIGN.md "ROLEX as the range
 * role"): the lease's CAS carries the entry's leaf, the model word and the point role's
 * bucket reads, and a walk starts at the closest synonym this gateway learned (rolex/slt.c);
 * measured 2.89, 3.17, 4.08 (the leaves the DELs emptied stay linked: one more hop), 3.00,
 * 2.00 and a load at 2.85 (2026-12-01; 7.97, 4.17, 16.3 and 17.9 before). */
static const bounds_t rolex_bounds = {3.0, 3.3, 4.3, 3.05, 2.05, 4.0};

/* Round trips per op of class cls on c since the last CONFIG RESETSTAT, printed. */
static double per_op(redisContext *c, const char *cls, const char *what)
{
    char f[64];
    snprintf(f, sizeof(f), "%s_ops", cls);
    double ops = it_info_field(c, "dmkv", f);
    snprintf(f, sizeof(f), "%s_rtts", cls);
    double rtts = it_info_field(c, "dmkv", f);
    snprintf(f, sizeof(f), "%s_async_batches", cls);
    double async = it_info_field(c, "dmkv", f);
    double splits = it_info_field(c, "dmkv", "split_rtts");
    fprintf(stderr,
            "%-28s %.0f ops: %.2f round trips each, %.2f batches posted without waiting,"
            " %.0f split round trips apart\n",
            what, ops, ops ? rtts / ops : 0, ops ? async / ops : 0, splits);
    CHECK(ops >= N);
    return rtts / ops;
}

int main(void)
{
    it_begin("round_trips", 600);
    const char *engine = getenv("DMKV_IT_POINT_INDEX");
    const bounds_t *bd = engine && !strcmp(engine, "sephash") ? &sephash_bounds : &race_bounds;
    const char *range = getenv("DMKV_IT_RANGE_INDEX");
    if (range && !strcmp(range, "rolex")) bd = &rolex_bounds;
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[3];
    it_gateways_start(&pool, gw, 3, 1, 1, NULL);
    redisContext *a = it_connect(gw[0].port), *b = it_connect(gw[1].port),
                 *c = it_connect(gw[2].port);
    EXPECT_STATUS(it_cmd(a, "CONFIG RESETSTAT"), "OK");
    for (int i = 0; i < PRELOAD; i++)
        redisAppendCommand(a, "SET pre:%d v%d", i, i);
    it_pipeline_ok(a, PRELOAD);
    double load = it_info_field(a, "dmkv", "set_rtts") / PRELOAD;
    fprintf(stderr, "pipelined load of %d keys: %.2f round trips per insert (bound %.2f)\n",
            PRELOAD, load, bd->load);
    CHECKF(load <= bd->load, "a pipelined load took %.2f round trips per insert", load);

    /* A whole SCAN COUNT 100 walk on a gateway that did not write the keys (its cache of
     * inner nodes starts empty): every key once, each command <= 2 round trips. */
    EXPECT_STATUS(it_cmd(b, "CONFIG RESETSTAT"), "OK");
    int rolex = range && !strcmp(range, "rolex");
    double loads0 = rolex ? it_info_field(b, "dmkv", "rolex_model_loads") : 0;
    unsigned char *seen = calloc(PRELOAD, 1);
    CHECK(seen);
    long cursor = 0, found = 0;
    do {
        redisReply *r = it_cmd(b, "SCAN %ld COUNT 100", cursor);
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        cursor = strtol(r->element[0]->str, NULL, 10);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            int k = atoi(r->element[1]->element[i]->str + 4); /* "pre:<k>" */
            CHECK(k >= 0 && k < PRELOAD);
            found += !seen[k];
            seen[k] = 1;
        }
        freeReplyObject(r);
    } while (cursor != 0);
    free(seen);
    CHECKF(found == PRELOAD, "SCAN found %ld of %d keys", found, PRELOAD);
    /* ROLEX: the memory node's retrainer may still be publishing models for the load (it
     * lags the writes), and a walk that notices a new model loads it once it is done: 2
     * round trips (rolex/sync.c), 4 when the load found the slot being rewritten. Those are
     * counted apart; the walk's own stay at 2 per command. */
    double scans = it_info_field(b, "dmkv", "scan_ops"),
           rtts = it_info_field(b, "dmkv", "scan_rtts");
    double loads = rolex ? it_info_field(b, "dmkv", "rolex_model_loads") - loads0 : 0;
    CHECK(scans > 0);
    fprintf(stderr,
            "SCAN COUNT 100: %.2f round trips per command over the whole keyspace, %.0f model "
            "loads\n",
            rtts / scans, loads);
    CHECKF(rtts <= 2 * scans + 4 * loads,
           "a SCAN COUNT 100 took %.2f round trips (bound 2, with %.0f model loads)", rtts / scans,
           loads);

    /* SCAN MATCH with a literal prefix, walked to cursor 0: each prefix's 111 keys ("pre:123"
     * matches pre:123, pre:1230-1239, pre:12300-12399), at most 2 round trips a command. Each
     * leaf's fence key was read to learn whether the prefix's run goes on (a round trip per
     * leaf: 5.3 per first page of 1,000-key prefixes, bench/README.md); the leaves' own keys
     * tell instead (chime/scan.c prefix_may_follow). */
    if (!rolex) {
        EXPECT_STATUS(it_cmd(b, "CONFIG RESETSTAT"), "OK");
        long matched = 0;
        for (int pfx = 100; pfx < 200; pfx += 5) {
            cursor = 0;
            do {
                redisReply *r = it_cmd(b, "SCAN %ld MATCH pre:%d* COUNT 100", cursor, pfx);
                CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
                cursor = strtol(r->element[0]->str, NULL, 10);
                matched += (long)r->element[1]->elements;
                freeReplyObject(r);
            } while (cursor != 0);
        }
        scans = it_info_field(b, "dmkv", "scan_ops");
        rtts = it_info_field(b, "dmkv", "scan_rtts");
        fprintf(stderr,
                "SCAN MATCH pre:NNN* COUNT 100: %.2f round trips per command, %.2f per "
                "prefix\n",
                rtts / scans, rtts / 20);
        CHECKF(matched == 20 * 111, "SCAN MATCH found %ld of %d keys", matched, 20 * 111);
        CHECKF(rtts <= 2 * scans, "a SCAN MATCH COUNT 100 took %.2f round trips (bound 2)",
               rtts / scans);
    }

    EXPECT_STATUS(it_cmd(a, "CONFIG RESETSTAT"), "OK");
    for (int i = 0; i < N; i++)
        EXPECT_STATUS(it_cmd(a, "SET new:%d val:%d", i, i), "OK");
    double set_new = per_op(a, "set", "SET of a new key");
    CHECKF(set_new <= bd->set_new, "a new key took %.2f round trips (bound %.2f)", set_new,
           bd->set_new);
    for (int i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof(want), "val:%d", i);
        EXPECT_BULKS(it_cmd(c, "GET new:%d", i), want);
    }

    EXPECT_STATUS(it_cmd(b, "CONFIG RESETSTAT"), "OK");
    for (int i = 0; i < N; i++)
        EXPECT_INT(it_cmd(b, "DEL new:%d", i), 1);
    double del = per_op(b, "del", "DEL of a present key");
    CHECKF(del <= bd->del, "a DEL took %.2f round trips (bound %.2f)", del, bd->del);
    for (int i = 0; i < N; i++)
        EXPECT_NIL(it_cmd(c, "GET new:%d", i));

    EXPECT_STATUS(it_cmd(b, "CONFIG RESETSTAT"), "OK");
    for (int i = 0; i < N; i++)
        EXPECT_INT(it_cmd(b, "DEL new:%d", i), 0);
    double del_absent = per_op(b, "del", "DEL of an absent key");
    CHECKF(del_absent <= bd->del_absent, "a DEL of an absent key took %.2f round trips",
           del_absent);

    EXPECT_STATUS(it_cmd(c, "CONFIG RESETSTAT"), "OK");
    for (int i = 0; i < N; i++)
        EXPECT_STATUS(it_cmd(c, "SET pre:%d w%d", i * 7, i), "OK");
    double set_upd = per_op(c, "set", "SET of a present key");
    CHECKF(set_upd <= bd->set_upd, "an uncached update took %.2f round trips", set_upd);
    EXPECT_STATUS(it_cmd(b, "CONFIG RESETSTAT"), "OK");
    for (int i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof(want), "w%d", i);
        EXPECT_BULKS(it_cmd(b, "GET pre:%d", i * 7), want);
    }
    double get = per_op(b, "get", "GET from a fresh gateway");
    CHECKF(get <= bd->get, "an uncached GET took %.2f round trips", get);

    redisFree(a);
    redisFree(b);
    redisFree(c);
    for (int g = 0; g < 3; g++)
        CHECK(it_proc_stop(&gw[g]) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_round_trips: OK\n");
    return 0;
}
