/* Redis's ordering guarantees for one connection's pipeline (issue 11), with reads of a
 * pipeline running concurrently (gateway/net/conn.c). One memory node, two gateways. A
 * writer on the first pipelines, in chunks of 250 rounds: SET data:i, GET data:i (must
 * return what it just wrote), SET flag:i 1, INCR seq:i, SET flag2:i 1, EXISTS data:i.
 * Readers on the second gateway poll recent rounds: GET flag:i then (after its reply)
 * GET data:i; GET flag2:i then GET seq:i. A reader that sees a flag must see the write the
 * pipeline made before it. DMKV_TEST_UNORDERED_WRITES=1 (a test-only switch that lets a
 * pipeline's writes run concurrently) must make this test fail: `it_pipeline_order
 * --expect-violation` runs that variant and fails if no reader caught it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define ROUNDS 6000
#define CHUNK 250
#define READERS 3

static int wport, rport;
static atomic_int written; /* rounds whose replies the writer has read */
static atomic_int done, violations;
static atomic_long polls;

static void *reader_main(void *arg)
{
    unsigned rs = (unsigned)(uintptr_t)arg * 7919u + 1;
    redisContext *c = it_connect(rport);
    while (!atomic_load(&done)) {
        int hi = atomic_load(&written) + 2 * CHUNK; /* rounds in flight in the pipeline too */
        int i = hi - 1 - (int)(rand_r(&rs) % (CHUNK * 2));
        if (i < 0) continue;
        redisReply *f = it_cmd(c, "GET flag:%d", i);
        if (f->type == REDIS_REPLY_STRING) {
            redisReply *d = it_cmd(c, "GET data:%d", i);
            if (d->type != REDIS_REPLY_STRING) {
                if (atomic_fetch_add(&violations, 1) < 3)
                    fprintf(stderr, "reader saw flag:%d without data:%d\n", i, i);
            }
            freeReplyObject(d);
        }
        freeReplyObject(f);
        f = it_cmd(c, "GET flag2:%d", i);
        if (f->type == REDIS_REPLY_STRING) {
            redisReply *d = it_cmd(c, "GET seq:%d", i);
            if (d->type != REDIS_REPLY_STRING || strcmp(d->str, "1") != 0) {
                if (atomic_fetch_add(&violations, 1) < 3)
                    fprintf(stderr, "reader saw flag2:%d before INCR seq:%d\n", i, i);
            }
            freeReplyObject(d);
        }
        freeReplyObject(f);
        atomic_fetch_add(&polls, 1);
    }
    redisFree(c);
    return NULL;
}

static redisReply *next_reply(redisContext *c)
{
    redisReply *r = NULL;
    CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK && r, "reply: %s", c->errstr);
    return r;
}

int main(int argc, char **argv)
{
    int expect_violation = argc > 1 && !strcmp(argv[1], "--expect-violation");
    it_begin("pipeline_order", 600);
    if (expect_violation) setenv("DMKV_TEST_UNORDERED_WRITES", "1", 1);
    it_pool_t pool;
    it_pool_start(&pool);
    it_proc_t gw[2];
    it_gateways_start(&pool, gw, 2, 1, 1, NULL);
    unsetenv("DMKV_TEST_UNORDERED_WRITES");
    wport = gw[0].port;
    rport = gw[1].port;
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++)
        pthread_create(&th[i], NULL, reader_main, (void *)(uintptr_t)i);
    redisContext *c = it_connect(wport);
    char want[32];
    int own_misses = 0;
    for (int base = 0; base < ROUNDS; base += CHUNK) {
        for (int i = base; i < base + CHUNK; i++) {
            redisAppendCommand(c, "SET data:%d v%d", i, i);
            redisAppendCommand(c, "GET data:%d", i);
            redisAppendCommand(c, "SET flag:%d 1", i);
            redisAppendCommand(c, "INCR seq:%d", i);
            redisAppendCommand(c, "SET flag2:%d 1", i);
            redisAppendCommand(c, "EXISTS data:%d", i);
        }
        for (int i = base; i < base + CHUNK; i++) {
            EXPECT_STATUS(next_reply(c), "OK");
            redisReply *g = next_reply(c);
            snprintf(want, sizeof(want), "v%d", i);
            if (g->type != REDIS_REPLY_STRING || strcmp(g->str, want) != 0) own_misses++;
            freeReplyObject(g);
            EXPECT_STATUS(next_reply(c), "OK");
            EXPECT_INT(next_reply(c), 1);
            EXPECT_STATUS(next_reply(c), "OK");
            redisReply *e = next_reply(c);
            if (e->type != REDIS_REPLY_INTEGER || e->integer != 1) own_misses++;
            freeReplyObject(e);
        }
        atomic_store(&written, base + CHUNK);
    }
    atomic_store(&done, 1);
    for (int i = 0; i < READERS; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr,
            "%d rounds pipelined in chunks of %d; %ld reader polls; %d ordering violations, %d "
            "reads of the pipeline's own writes missed%s\n",
            ROUNDS, CHUNK, atomic_load(&polls), atomic_load(&violations), own_misses,
            expect_violation ? " (writes unordered on purpose)" : "");
    redisFree(c);
    for (int i = 0; i < 2; i++)
        it_proc_stop(&gw[i]);
    it_proc_stop(&pool.memnode);
    if (expect_violation) {
        CHECKF(atomic_load(&violations) + own_misses > 0,
               "the unordered variant went unnoticed: the test cannot see reordering");
    } else {
        CHECKF(atomic_load(&violations) == 0, "a reader saw a later write before an earlier one");
        CHECKF(own_misses == 0, "a read missed an earlier write of its own pipeline");
    }
    fprintf(stderr, "it_pipeline_order: OK\n");
    return 0;
}
