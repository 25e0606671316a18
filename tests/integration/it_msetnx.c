/* MSETNX against SET NX of the same keys from another gateway (issue 10 item 7): a key
 * created by SET NX is never overwritten by MSETNX, and MSETNX is all-or-nothing as seen
 * afterwards (1: every key holds its value; 0: none of its values is left anywhere). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define ROUNDS 300

static int port_b;
static int nx_won[ROUNDS];
static atomic_int started; /* rounds whose MSETNX the main thread is about to send */

static void *setnx_main(void *arg)
{
    (void)arg;
    redisContext *c = it_connect(port_b);
    unsigned seed = 7;
    for (int i = 0; i < ROUNDS; i++) {
        while (atomic_load(&started) <= i)
            usleep(50);
        usleep((useconds_t)(rand_r(&seed) % 1500)); /* land before, during or after it */
        redisReply *r = it_cmd(c, "SET m:%d:b theirs NX", i);
        nx_won[i] = r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
    }
    redisFree(c);
    return NULL;
}

int main(void)
{
    it_begin("msetnx", 300);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[2];
    int ports[2];
    it_gateways_start(&pool, gw, 2, 1, 1, ports);
    port_b = ports[1];
    redisContext *a = it_connect(ports[0]);
    /* A range engine with a key length limit (ROLEX: 32,767 bytes) refuses a write naming a
     * longer key whole: an MSET does not write the keys before it. */
    const char *range = getenv("DMKV_IT_RANGE_INDEX");
    if (range && !strcmp(range, "rolex")) {
        static char lk[32769];
        memset(lk, 'k', 32768), lk[32768] = 0;
        redisReply *r = it_cmd(a, "MSET long:a 1 %s 2 long:c 3", lk);
        CHECKF(r->type == REDIS_REPLY_ERROR && strstr(r->str, "key too long"),
               "MSET with a 32768-byte key on rolex: type %d %s", r->type,
               r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
        r = it_cmd(a, "EXISTS long:a long:c");
        CHECKF(r->type == REDIS_REPLY_INTEGER && r->integer == 0,
               "a refused MSET wrote %lld of its keys", r->integer);
        freeReplyObject(r);
    }
    pthread_t t;
    pthread_create(&t, NULL, setnx_main, NULL);
    int ones = 0;
    int result[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        atomic_store(&started, i + 1);
        redisReply *r = it_cmd(a, "MSETNX m:%d:a ours m:%d:b ours m:%d:c ours", i, i, i);
        CHECK(r->type == REDIS_REPLY_INTEGER);
        result[i] = (int)r->integer;
        ones += result[i];
        freeReplyObject(r);
    }
    pthread_join(t, NULL);
    for (int i = 0; i < ROUNDS; i++) {
        redisReply *b = it_cmd(a, "GET m:%d:b", i);
        if (nx_won[i])
            CHECKF(b->type == REDIS_REPLY_STRING && !strcmp(b->str, "theirs"),
                   "round %d: the key SET NX created was overwritten (type %d '%s', MSETNX %d)", i,
                   b->type, b->type == REDIS_REPLY_STRING ? b->str : "", result[i]);
        freeReplyObject(b);
        const char *want = result[i] ? "ours" : NULL;
        for (int k = 0; k < 3; k += 2) {
            const char *which = k ? "c" : "a";
            redisReply *r = it_cmd(a, "GET m:%d:%s", i, which);
            if (want)
                CHECKF(r->type == REDIS_REPLY_STRING && !strcmp(r->str, want),
                       "round %d: MSETNX answered 1 but m:%d:%s is not ours", i, i, which);
            else
                CHECKF(r->type == REDIS_REPLY_NIL, "round %d: MSETNX answered 0 but left m:%d:%s",
                       i, i, which);
            freeReplyObject(r);
        }
        CHECKF(!(result[i] && nx_won[i]), "round %d: both MSETNX and SET NX won", i);
    }
    fprintf(stderr, "%d rounds: MSETNX won %d, SET NX won the others; nothing overwritten\n",
            ROUNDS, ones);
    redisFree(a);
    it_proc_stop(&gw[0]);
    it_proc_stop(&gw[1]);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_msetnx: OK\n");
    return 0;
}
