/* Pipelining on one connection: 10k+ mixed commands (scaled by DMKV_IT_SCALE) whose replies must
 * come back in order and see each other's effects (SET then GET of the same key), large replies
 * that cross the 64 KiB flush threshold, and a pipeline ending with QUIT. */
#include <stdint.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define N 10000

static redisContext *c;

static redisReply *next_reply(void)
{
    redisReply *r = NULL;
    CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK && r, "reply: %s", c->errstr);
    return r;
}

static void test_mixed_in_order(void)
{
    const int n = it_scaled(N);
    for (int i = 0; i < n; i++) {
        redisAppendCommand(c, "SET p:%d v:%d", i, i);
        redisAppendCommand(c, "GET p:%d", i);
        redisAppendCommand(c, "ECHO e:%d", i);
        redisAppendCommand(c, "SET p:%d w:%d XX GET", i, i);
        redisAppendCommand(c, "DEL p:%d", i - 1);
        redisAppendCommand(c, "EXISTS p:%d p:%d", i, i - 1);
    }
    char buf[64];
    for (int i = 0; i < n; i++) {
        EXPECT_STATUS(next_reply(), "OK");
        snprintf(buf, sizeof(buf), "v:%d", i);
        EXPECT_BULKS(next_reply(), buf);
        snprintf(buf, sizeof(buf), "e:%d", i);
        EXPECT_BULKS(next_reply(), buf);
        snprintf(buf, sizeof(buf), "v:%d", i);
        EXPECT_BULKS(next_reply(), buf);
        EXPECT_INT(next_reply(), i > 0 ? 1 : 0);
        EXPECT_INT(next_reply(), 1);
    }
    EXPECT_INT(it_cmd(c, "DBSIZE"), 1);
    char last[32];
    snprintf(last, sizeof(last), "w:%d", n - 1);
    EXPECT_BULKS(it_cmd(c, "GET p:%d", n - 1), last);
}

static void test_big_replies(void)
{
    size_t n = 256 * 1024;
    char *v = malloc(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (char)('a' + i % 26);
    EXPECT_STATUS(it_cmd(c, "SET big %b", v, n), "OK");
    int reps = 64; /* 16 MiB of replies in one pipeline */
    for (int i = 0; i < reps; i++) {
        redisAppendCommand(c, "GET big");
        redisAppendCommand(c, "PING");
    }
    for (int i = 0; i < reps; i++) {
        EXPECT_BULK(next_reply(), v, n);
        EXPECT_STATUS(next_reply(), "PONG");
    }
    free(v);
}

static void test_many_small_in_one_write(void)
{
    /* 20k PINGs in a single write (inline form): one read holds many commands. */
    size_t n = 20000;
    char *buf = malloc(n * 6);
    for (size_t i = 0; i < n; i++)
        memcpy(buf + i * 6, "PING\r\n", 6);
    redisAppendFormattedCommand(c, buf, n * 6);
    free(buf);
    for (size_t i = 0; i < n; i++)
        EXPECT_STATUS(next_reply(), "PONG");
}

/* Replies to the commands one client write brought leave together, as Redis writes a
 * read's replies once it ran them all: 16 pipelined SETs (which commit one round trip
 * apart, in order) used to cost 16 writes to the client, one per commit. */
static void test_replies_of_one_read_together(void)
{
    const int rounds = 50, per = 16;
    double w0 = it_info_field(c, "stats", "total_writes_processed");
    double r0 = it_info_field(c, "stats", "total_reads_processed");
    for (int k = 0; k < rounds; k++) {
        for (int i = 0; i < per; i++)
            redisAppendCommand(c, "SET together:%d r%d", i, k);
        for (int i = 0; i < per; i++)
            EXPECT_STATUS(next_reply(), "OK");
    }
    double writes = it_info_field(c, "stats", "total_writes_processed") - w0 - 1;
    double reads = it_info_field(c, "stats", "total_reads_processed") - r0 - 1;
    fprintf(stderr, "   %d pipelines of %d SETs: %.0f reads, %.0f writes\n", rounds, per, reads,
            writes);
    /* One write per read of commands (a pipeline split over two reads may take two). */
    CHECKF(writes <= reads + rounds / 5, "%.0f client writes for %.0f reads", writes, reads);
    EXPECT_BULKS(it_cmd(c, "GET together:%d", per - 1), "r49");
}

static void test_quit_in_pipeline(int port)
{
    redisContext *q = it_connect(port);
    redisAppendCommand(q, "SET q 1");
    redisAppendCommand(q, "QUIT");
    redisAppendCommand(q, "SET q 2"); /* never runs */
    redisReply *r;
    CHECK(redisGetReply(q, (void **)&r) == REDIS_OK);
    EXPECT_STATUS(r, "OK");
    CHECK(redisGetReply(q, (void **)&r) == REDIS_OK);
    EXPECT_STATUS(r, "OK");
    CHECK(redisGetReply(q, (void **)&r) != REDIS_OK);
    redisFree(q);
    EXPECT_BULKS(it_cmd(c, "GET q"), "1");
}

int main(void)
{
    it_begin("pipeline", 600);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 1, NULL);
    c = it_connect(gw.port);
    EXPECT_STATUS(it_cmd(c, "FLUSHALL"), "OK");
    RUN(test_mixed_in_order);
    RUN(test_big_replies);
    RUN(test_many_small_in_one_write);
    RUN(test_replies_of_one_read_together);
    test_quit_in_pipeline(gw.port);
    redisFree(c);
    int st = it_proc_stop(&gw);
    if (st != 0) it_proc_dump_log(&gw);
    CHECKF(st == 0, "gateway exit status %d", st);
    if (pool.shared) it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_pipeline: OK\n");
    return 0;
}
