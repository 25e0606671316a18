/* A gateway whose connection to the memory node fails opens a new one (pool/worker.c):
 * the memory node is stopped (SIGSTOP) past the gateway's transport timeout, so the
 * command in flight answers an error instead of hanging; once the node runs again
 * (SIGCONT) the next commands reconnect and every key is still there. Then the node is
 * killed and the gateway stops on SIGTERM at once, exit status 0. */
#include <signal.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define KEYS 200

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void)
{
    it_begin("reconnect", 300);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    setenv("DMKV_TCP_TIMEOUT_MS", "1500", 1);
    it_proc_t gw;
    it_gateways_start(&pool, &gw, 1, 1, 1, NULL);
    unsetenv("DMKV_TCP_TIMEOUT_MS");
    redisContext *c = it_connect(gw.port);
    for (int i = 0; i < KEYS; i++)
        redisAppendCommand(c, "SET rc:%d v%d", i, i);
    for (int i = 0; i < KEYS; i++) {
        redisReply *r;
        CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
        EXPECT_STATUS(r, "OK");
    }

    /* The memory node stops answering: the command fails with Redis-style error text. */
    CHECK(kill(pool.memnode.pid, SIGSTOP) == 0);
    double t0 = now_s();
    redisReply *r = it_cmd(c, "GET rc:1");
    double waited = now_s() - t0;
    CHECKF(r->type == REDIS_REPLY_ERROR && strstr(r->str, "ERR dmkv: memory node"),
           "GET while the memory node is stopped: type %d %s", r->type,
           r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_ERROR ? r->str : "");
    fprintf(stderr, "memory node stopped: '%s' after %.1f s\n", r->str, waited);
    freeReplyObject(r);

    /* It runs again: within a few attempts the gateway has a new connection. */
    CHECK(kill(pool.memnode.pid, SIGCONT) == 0);
    int attempts = 0;
    for (;;) {
        attempts++;
        r = it_cmd(c, "GET rc:1");
        if (r->type == REDIS_REPLY_STRING) break;
        CHECKF(r->type == REDIS_REPLY_ERROR, "unexpected reply type %d", r->type);
        CHECKF(attempts < 60, "still failing after %d attempts: %s", attempts, r->str);
        freeReplyObject(r);
        usleep(250000);
    }
    EXPECT_BULKS(r, "v1");
    fprintf(stderr, "reconnected after %d attempt(s)\n", attempts);
    for (int i = 0; i < KEYS; i++)
        redisAppendCommand(c, "GET rc:%d", i);
    for (int i = 0; i < KEYS; i++) {
        CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
        char want[16];
        snprintf(want, sizeof(want), "v%d", i);
        EXPECT_BULKS(r, want);
    }
    EXPECT_STATUS(it_cmd(c, "SET rc:new after"), "OK");
    EXPECT_BULKS(it_cmd(c, "GET rc:new"), "after");
    EXPECT_INT(it_cmd(c, "DBSIZE"), KEYS + 1);
    redisFree(c);
    /* A gateway whose memory node is gone stops at once on SIGTERM: its last batches (the
     * free-block handoff, the clock-board slot) fail without waiting for a redial. Before
     * pool/batch.c spared a stopping worker the wait, it took 6 s (2026-12-01). */
    CHECK(kill(pool.memnode.pid, SIGKILL) == 0);
    usleep(300000);
    double stop_at = now_s();
    CHECK(it_proc_stop(&gw) == 0);
    double took = now_s() - stop_at;
    fprintf(stderr, "stopped in %.2f s with its memory node gone\n", took);
    CHECKF(took < 4.0, "SIGTERM took %.1f s with the memory node gone", took);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_reconnect: OK\n");
    return 0;
}
