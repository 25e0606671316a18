/* WATCH held longer than the 2 s block quarantine (issue 10 item 5). A key rewritten with
 * values of one length cycles through the same freed blocks (FIFO reuse after the
 * quarantine), so its RACE slot word recurs: WATCH must compare more than the slot word.
 * 40 connections WATCH k; a writer rewrites k every 50 ms for 4 s; after each rewrite past
 * the first 2 s one watcher runs MULTI / SET / EXEC, which must abort every time. Then the
 * positive control: a WATCH with 2.5 s of think time and no write in between commits. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define WATCHERS 40

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
    for (int i = 0; i < WATCHERS; i++)
        redisFree(wat[i]);
    redisFree(w);
    it_proc_stop(&gw);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_watch: OK\n");
    return 0;
}
