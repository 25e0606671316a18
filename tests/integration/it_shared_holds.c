/* Shared leaf holds (dmcore/chime/share.c): the inserts of one gateway worker into one CHIME
 * leaf share its lock. Sequential new keys pipelined 64 at a time fill a leaf and split it
 * every few dozen keys, the case sharing is for. On one memory node:
 *   - gateway A, ONE worker: writers 0 and 1 insert the same keys seq:NNNNNN (same values)
 *     in the same order, so two members of a hold often carry one key; writer 2 inserts
 *     its own sequential keys del:NNNNNN and DELs every fourth one in the same pipeline
 *     (a DEL needs the leaf alone: it wounds the hold's early members);
 *   - gateway B, two workers: writer 3 inserts the same seq keys from the far end down
 *     (the same leaves from another gateway: a hold there is a lock this worker cannot
 *     see), and a reader SCANs seq:* over and over.
 * Checked:
 *   - every reply is what Redis answers;
 *   - SCAN never misses a key acknowledged before it started (an entry a hold's member
 *     moved must never be missing from the pool while its key is in RACE);
 *   - at the end every key GETs its value, DBSIZE and a full SCAN count exactly the keys
 *     present, and no hybrid repair was needed (CHIME ⊇ RACE held throughout);
 *   - gateway A shared holds and members joined them, and split leaves under them (the test
 *     exercises them);
 *   - no leaf lock was taken over on either gateway: a hold is only ever left to its lease
 *     when its holder died, and a split under a hold must leave every member woundable by
 *     an earlier command of its thread (else the two wait for each other until the lease
 *     ends, 3 s). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define SEQ_MAX 6000 /* seq:000000 .. seq:005999 at most */
/* Keys inserted in order: seq_keys seq:NNNNNN keys and del_keys del:NNNNNN keys (one in four
 * deleted), del_keys = seq_keys / 2. DMKV_IT_SHARED_KEYS lowers seq_keys: the rxe VM runs
 * 2000 (6000 take ~280 s there, near its step limit). */
static int seq_keys = SEQ_MAX, del_keys = SEQ_MAX / 2;
#define PIPE 64

static int ports[2];
static atomic_int failures;
static atomic_int acked_up; /* seq keys [0, acked_up) acknowledged by writer 0 */
static atomic_int writers_done;

static void fail_once(const char *who, const char *what, const char *got)
{
    if (atomic_fetch_add(&failures, 1) < 5)
        fprintf(stderr, "%s: %s (got %s)\n", who, what, got ? got : "nothing");
}

/* Send n commands built by fmt with "%s %06d" of prefix and from+i, wait for the replies.
 * del_every > 0: every del_every-th key is also deleted right after its SET. */
static int pipeline(redisContext *c, const char *who, const char *prefix, int from, int n, int step,
                    int del_every)
{
    int sent = 0, kinds[2 * PIPE];
    for (int i = 0; i < n; i++) {
        int k = from + i * step;
        redisAppendCommand(c, "SET %s:%06d v:%06d", prefix, k, k);
        kinds[sent++] = 0;
        if (del_every && k % del_every == 0) {
            redisAppendCommand(c, "DEL %s:%06d", prefix, k);
            kinds[sent++] = 1;
        }
    }
    for (int i = 0; i < sent; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
            fail_once(who, "connection lost", c->errstr);
            return -1;
        }
        int ok = kinds[i] ? r->type == REDIS_REPLY_INTEGER && r->integer == 1
                          : r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK");
        if (!ok)
            fail_once(who, kinds[i] ? "DEL of a key just set did not answer 1" : "SET not OK",
                      r->type == REDIS_REPLY_ERROR ? r->str : "another reply");
        freeReplyObject(r);
    }
    return 0;
}

static void *writer_run(void *arg)
{
    long id = (long)arg;
    char who[16];
    snprintf(who, sizeof(who), "writer %ld", id);
    redisContext *c = it_connect(ports[id == 3 ? 1 : 0]);
    if (id <= 1) {
        for (int from = 0; from < seq_keys && !atomic_load(&failures); from += PIPE) {
            int n = seq_keys - from < PIPE ? seq_keys - from : PIPE;
            if (pipeline(c, who, "seq", from, n, 1, 0)) return NULL;
            if (id == 0) atomic_store(&acked_up, from + n);
        }
    } else if (id == 2) {
        for (int from = 0; from < del_keys && !atomic_load(&failures); from += PIPE)
            if (pipeline(c, who, "del", from, del_keys - from < PIPE ? del_keys - from : PIPE, 1,
                         4))
                return NULL;
    } else {
        for (int from = seq_keys - 1; from >= 0 && !atomic_load(&failures); from -= PIPE)
            if (pipeline(c, who, "seq", from, from + 1 < PIPE ? from + 1 : PIPE, -1, 0))
                return NULL;
    }
    redisFree(c);
    atomic_fetch_add(&writers_done, 1);
    return NULL;
}

/* SCANs seq:* while the writers run: every key acknowledged before a SCAN began is in it. */
static void *reader_run(void *arg)
{
    (void)arg;
    redisContext *c = it_connect(ports[1]);
    static unsigned char seen[SEQ_MAX];
    int scans = 0;
    while (atomic_load(&writers_done) < 4 && !atomic_load(&failures)) {
        int before = atomic_load(&acked_up);
        memset(seen, 0, sizeof(seen));
        char cursor[64] = "0";
        do {
            redisReply *r = redisCommand(c, "SCAN %s MATCH seq:* COUNT 300", cursor);
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
                fail_once("reader", "SCAN did not answer a cursor and keys", r ? r->str : NULL);
                freeReplyObject(r);
                redisFree(c);
                return NULL;
            }
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            for (size_t i = 0; i < r->element[1]->elements; i++) {
                int k = atoi(r->element[1]->element[i]->str + 4);
                if (k >= 0 && k < seq_keys) seen[k] = 1;
            }
            freeReplyObject(r);
        } while (strcmp(cursor, "0"));
        for (int k = 0; k < before; k++)
            if (!seen[k]) {
                char key[32];
                snprintf(key, sizeof(key), "seq:%06d", k);
                fail_once("reader", "SCAN missed a key acknowledged before it began", key);
                break;
            }
        scans++;
    }
    fprintf(stderr, "reader: %d full SCANs during the load\n", scans);
    redisFree(c);
    return NULL;
}

int main(void)
{
    it_begin("shared_holds", 600);
    const char *keys = getenv("DMKV_IT_SHARED_KEYS");
    if (keys && atoi(keys) >= 2 * PIPE && atoi(keys) <= SEQ_MAX)
        seq_keys = atoi(keys), del_keys = seq_keys / 2;
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return 0;
    it_proc_t gw[2];
    it_gateways_start(&pool, gw, 2, 1, 2, ports);
    pthread_t th[5];
    for (long i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, writer_run, (void *)i);
    pthread_create(&th[4], NULL, reader_run, NULL);
    for (int i = 0; i < 5; i++)
        pthread_join(th[i], NULL);
    CHECKF(atomic_load(&failures) == 0, "a client saw a wrong reply");

    redisContext *c = it_connect(ports[1]);
    int bad = 0;
    for (int k = 0; k < seq_keys + del_keys; k++) {
        int seq = k < seq_keys, n = seq ? k : k - seq_keys;
        redisAppendCommand(c, "GET %s:%06d", seq ? "seq" : "del", n);
    }
    for (int k = 0; k < seq_keys + del_keys; k++) {
        int seq = k < seq_keys, n = seq ? k : k - seq_keys;
        redisReply *r = NULL;
        CHECK(redisGetReply(c, (void **)&r) == REDIS_OK && r);
        char want[32];
        snprintf(want, sizeof(want), "v:%06d", n);
        int gone = !seq && n % 4 == 0;
        int ok = gone ? r->type == REDIS_REPLY_NIL
                      : r->type == REDIS_REPLY_STRING && !strcmp(r->str, want);
        if (!ok && bad++ < 5) fprintf(stderr, "GET %s:%06d: wrong value\n", seq ? "seq" : "del", n);
        freeReplyObject(r);
    }
    CHECKF(bad == 0, "a key does not GET its value");
    long long want = seq_keys + del_keys - del_keys / 4;
    redisReply *r = redisCommand(c, "DBSIZE");
    CHECK(r && r->type == REDIS_REPLY_INTEGER);
    long long dbsize = r->integer;
    freeReplyObject(r);
    long long scanned = it_scan_count(c, "*");
    redisContext *a = it_connect(ports[0]);
    double holds = it_info_field(a, "dmkv", "chime_shared_holds");
    double joins = it_info_field(a, "dmkv", "chime_shared_joins");
    double direct = it_info_field(a, "dmkv", "chime_shared_joins_direct");
    double splits = it_info_field(a, "dmkv", "chime_shared_splits");
    double takeovers = it_info_field(a, "dmkv", "chime_lease_takeovers") +
                       it_info_field(c, "dmkv", "chime_lease_takeovers");
    double repairs =
        it_info_field(a, "dmkv", "hybrid_repairs") + it_info_field(c, "dmkv", "hybrid_repairs");
    fprintf(stderr,
            "%lld keys present, DBSIZE %lld, SCAN %lld; %.0f shared holds, %.0f joins (%.0f "
            "by the hold's key range), %.0f splits under a hold, %.0f lease takeovers, %.0f "
            "hybrid repairs\n",
            want, dbsize, scanned, holds, joins, direct, splits, takeovers, repairs);
    CHECKF(dbsize == want, "DBSIZE is not the number of keys present");
    CHECKF(scanned == want, "SCAN did not return exactly the keys present");
    CHECKF(repairs == 0, "a key was in RACE without its CHIME entry (or the reverse)");
    CHECKF(takeovers == 0, "a leaf lock was left to its lease with no process dead");
    const char *off = getenv("DMKV_SHARE_LOCKS");
    if (!(off && !strcmp(off, "0"))) {
        CHECKF(holds > 0 && joins > holds, "no hold was shared: the test does not exercise them");
        CHECKF(splits > 0, "no leaf split under a shared hold: the test does not exercise it");
        CHECKF(direct > 0, "no join found its hold by key range: the test does not exercise it");
    }
    redisFree(a);
    redisFree(c);
    for (int g = 0; g < 2; g++)
        it_proc_stop(&gw[g]);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_shared_holds: OK\n");
    return 0;
}
