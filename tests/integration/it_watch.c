/* WATCH held longer than the 2 s block quarantine (issue 10 item 5). A key rewritten with
 * values of one length cycles through the same freed blocks (FIFO reuse after the
 * quarantine), so its RACE slot word recurs: WATCH must compare more than the slot word.
 * 40 connections WATCH k; a writer rewrites k every 50 ms for 4 s; after each rewrite past
 * the first 2 s one watcher runs MULTI / SET / EXEC, which must abort every time. Then the
 * positive control: a WATCH with 2.5 s of think time and no write in between commits.
 * Last, reads inside EXEC are validated (reads_in_exec). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define WATCHERS 40

/* A writer on a second gateway rewrites k as fast as it can; a transaction WATCH k /
 * MULTI / GET k / GET k / EXEC that commits must have read the watched value twice: reads
 * inside EXEC are validated against the watch (a change aborts the EXEC, nothing having
 * been written). */
static volatile int writer_stop;
static int writer_port;
static void *writer_main(void *arg)
{
    (void)arg;
    redisContext *c = it_connect(writer_port);
    for (int i = 0; !writer_stop && i < 400000; i++) {
        redisReply *r = redisCommand(c, "SET k w%06d", i);
        if (!r) break; /* the gateway is being stopped */
        freeReplyObject(r);
    }
    redisFree(c);
    return NULL;
}

static void reads_in_exec(const it_pool_t *pool, it_proc_t *gw)
{
    it_proc_t gw2;
    const char *uris[1] = {pool->uri};
    it_gateway_start(&gw2, uris, 1, 1, NULL);
    writer_port = gw2.port;
    pthread_t t;
    pthread_create(&t, NULL, writer_main, NULL);
    redisContext *c = it_connect(gw->port);
    int commits = 0, aborts = 0;
    for (int i = 0; i < 1000; i++) {
        EXPECT_STATUS(it_cmd(c, "WATCH k"), "OK");
        EXPECT_STATUS(it_cmd(c, "MULTI"), "OK");
        EXPECT_STATUS(it_cmd(c, "GET k"), "QUEUED");
        EXPECT_STATUS(it_cmd(c, "GET k"), "QUEUED");
        redisReply *r = it_cmd(c, "EXEC");
        if (r->type == REDIS_REPLY_NIL) {
            aborts++;
        } else {
            CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
            CHECKF(r->element[0]->len == r->element[1]->len &&
                       !memcmp(r->element[0]->str, r->element[1]->str, r->element[0]->len),
                   "a committed EXEC read '%s' then '%s' of its watched key", r->element[0]->str,
                   r->element[1]->str);
            commits++;
        }
        freeReplyObject(r);
    }
    writer_stop = 1;
    pthread_join(t, NULL);
    redisFree(c);
    it_proc_stop(&gw2);
    fprintf(stderr, "reads inside EXEC under a concurrent writer: %d commits, %d aborts\n", commits,
            aborts);
}

int main(void)
{
    it_begin("watch", 120);
    it_pool_t pool;
    it_pool_start(&pool);
    it_proc_t gw;
    const char *uris[1] = {pool.uri};
    it_gateway_start(&gw, uris, 1, 1, NULL);
    redisContext *w = it_connect(gw.port), *wat[WATCHERS];
    EXPECT_STATUS(it_cmd(w, "SET k v0000"), "OK");
    for (int i = 0; i < WATCHERS; i++) {
        wat[i] = it_connect(gw.port);
        EXPECT_STATUS(it_cmd(wat[i], "WATCH k"), "OK");
    }
    int next = 0;
    for (int round = 1; round <= 80; round++) { /* 80 x 50 ms: 4 s of same-length rewrites */
        EXPECT_STATUS(it_cmd(w, "SET k v%04d", round), "OK");
        usleep(50000);
        if (round >= 40 && next < WATCHERS) {
            redisContext *c = wat[next++];
            EXPECT_STATUS(it_cmd(c, "MULTI"), "OK");
            EXPECT_STATUS(it_cmd(c, "SET k stolen"), "QUEUED");
            redisReply *r = it_cmd(c, "EXEC");
            CHECKF(r && r->type == REDIS_REPLY_NIL,
                   "watcher %d committed after %d rewrites of the watched key", next - 1, round);
            freeReplyObject(r);
        }
    }
    EXPECT_BULKS(it_cmd(w, "GET k"), "v0080");
    fprintf(stderr, "%d EXECs over a key rewritten for 4 s: all aborted\n", next);
    /* Positive control: nothing written, 2.5 s of think time, the EXEC commits. */
    EXPECT_STATUS(it_cmd(wat[0], "WATCH k"), "OK");
    usleep(2500000);
    EXPECT_STATUS(it_cmd(wat[0], "MULTI"), "OK");
    EXPECT_STATUS(it_cmd(wat[0], "SET k mine"), "QUEUED");
    redisReply *r = it_cmd(wat[0], "EXEC");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    freeReplyObject(r);
    EXPECT_BULKS(it_cmd(w, "GET k"), "mine");
    /* WATCH of an absent key: SET k2 then DEL k2 from another client must abort the EXEC;
     * with no change in between it commits. */
    EXPECT_STATUS(it_cmd(wat[1], "WATCH absent"), "OK");
    EXPECT_STATUS(it_cmd(w, "SET absent x"), "OK");
    EXPECT_INT(it_cmd(w, "DEL absent"), 1);
    EXPECT_STATUS(it_cmd(wat[1], "MULTI"), "OK");
    EXPECT_STATUS(it_cmd(wat[1], "SET absent y"), "QUEUED");
    EXPECT_NIL(it_cmd(wat[1], "EXEC"));
    EXPECT_NIL(it_cmd(w, "GET absent"));
    EXPECT_STATUS(it_cmd(wat[1], "WATCH absent"), "OK");
    EXPECT_STATUS(it_cmd(wat[1], "MULTI"), "OK");
    EXPECT_STATUS(it_cmd(wat[1], "SET absent y"), "QUEUED");
    r = it_cmd(wat[1], "EXEC");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    freeReplyObject(r);
    EXPECT_BULKS(it_cmd(w, "GET absent"), "y");
    for (int i = 0; i < WATCHERS; i++)
        redisFree(wat[i]);
    redisFree(w);
    reads_in_exec(&pool, &gw);
    it_proc_stop(&gw);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_watch: OK\n");
    return 0;
}
