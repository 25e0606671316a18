/* Client connections spread evenly over a gateway's worker threads (server/balance.h).
 * SO_REUSEPORT alone split them by a hash of their addresses: 4 connections on 2 threads
 * went 2 + 2 only 3 times in 8, and one thread served most of a pipelined load. Here a
 * 4-thread gateway takes 16 connections one after another: CLIENT LIST's io-thread fields
 * must differ by at most one client (by the hash alone: 1.5% of the time). Every
 * connection, passed to another thread or not, answers its own commands. Then the clients
 * of one thread go away and the next connections go to it. The gateway's threads start
 * slowly (DMKV_THREAD_START_DELAY_MS): its port must stay closed until all of them are up. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define THREADS 4
#define CLIENTS 16

static int port;

/* Clients per io-thread in CLIENT LIST, read over c (itself one of them). Returns how many
 * lines there were. */
static int count_threads(redisContext *c, int per[THREADS])
{
    memset(per, 0, THREADS * sizeof(int));
    redisReply *r = it_cmd(c, "CLIENT LIST");
    CHECK(r && r->type == REDIS_REPLY_STRING);
    int lines = 0;
    for (const char *p = r->str; (p = strstr(p, "io-thread=")) != NULL; p++) {
        int t = atoi(p + strlen("io-thread="));
        CHECKF(t >= 0 && t < THREADS, "io-thread=%d", t);
        per[t]++;
        lines++;
    }
    freeReplyObject(r);
    return lines;
}

static void expect_even(redisContext *c, int want_lines)
{
    int per[THREADS];
    int lines = count_threads(c, per), lo = per[0], hi = per[0];
    for (int t = 1; t < THREADS; t++) {
        lo = per[t] < lo ? per[t] : lo;
        hi = per[t] > hi ? per[t] : hi;
    }
    CHECKF(lines == want_lines, "CLIENT LIST has %d clients, want %d", lines, want_lines);
    CHECKF(hi - lo <= 1, "clients per thread %d %d %d %d: uneven", per[0], per[1], per[2], per[3]);
}

/* Each connection writes and reads its own key: a passed socket serves like any other. */
static void expect_serving(redisContext **cs, int n, const char *tag)
{
    for (int i = 0; i < n; i++)
        EXPECT_STATUS(it_cmd(cs[i], "SET spread:%s:%d %d", tag, i, i), "OK");
    for (int i = 0; i < n; i++) {
        char v[16];
        snprintf(v, sizeof(v), "%d", i);
        EXPECT_BULKS(it_cmd(cs[i], "GET spread:%s:%d", tag, i), v);
    }
}

/* The thread that serves connection x (CLIENT ID against CLIENT LIST). */
static int thread_of(redisContext *lister, redisContext *x)
{
    redisReply *id = it_cmd(x, "CLIENT ID");
    CHECK(id && id->type == REDIS_REPLY_INTEGER);
    redisReply *r = it_cmd(lister, "CLIENT LIST ID %lld", id->integer);
    CHECK(r && r->type == REDIS_REPLY_STRING);
    const char *p = strstr(r->str, "io-thread=");
    CHECK(p);
    int t = atoi(p + strlen("io-thread="));
    freeReplyObject(r);
    freeReplyObject(id);
    return t;
}

static void test_spread(void)
{
    redisContext *cs[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        cs[i] = it_connect(port);
        EXPECT_STATUS(it_cmd(cs[i], "PING"), "PONG"); /* served: counted by its thread */
    }
    expect_even(cs[0], CLIENTS);
    expect_serving(cs, CLIENTS, "a");

    /* Thread t loses its clients: the next ones go there until it is even again. */
    int t = thread_of(cs[0], cs[CLIENTS - 1]), gone = 0;
    for (int i = 1; i < CLIENTS; i++) {
        if (thread_of(cs[0], cs[i]) != t) continue;
        redisFree(cs[i]);
        cs[i] = NULL;
        gone++;
    }
    CHECK(gone >= 3);
    for (int tries = 0;; tries++) { /* a close is seen by the gateway a little later */
        int per[THREADS];
        if (count_threads(cs[0], per) == CLIENTS - gone) break;
        CHECK(tries < 200);
        usleep(10000);
    }
    redisContext *more[CLIENTS];
    for (int i = 0; i < gone; i++) {
        more[i] = it_connect(port);
        EXPECT_STATUS(it_cmd(more[i], "PING"), "PONG");
        CHECKF(thread_of(cs[0], more[i]) == t, "new client %d went to thread %d, not %d", i,
               thread_of(cs[0], more[i]), t);
    }
    expect_even(cs[0], CLIENTS);
    expect_serving(more, gone, "b");
    for (int i = 0; i < gone; i++)
        redisFree(more[i]);
    for (int i = 0; i < CLIENTS; i++)
        if (cs[i]) redisFree(cs[i]);
}

int main(void)
{
    it_begin("client_spread", 120);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};
    it_proc_t gw;
    /* Threads 1-3 start 200 ms late each: a gateway that accepted as soon as thread 0 was
     * up would put the first clients all there, on threads the others cannot pass to yet. */
    it_gateway_start_env(&gw, uris, 1, THREADS, NULL, "DMKV_THREAD_START_DELAY_MS", "200");
    port = gw.port;
    RUN(test_spread);
    CHECK(it_proc_stop(&gw) == 0);
    if (pool.shared) it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_client_spread: OK\n");
    return 0;
}
