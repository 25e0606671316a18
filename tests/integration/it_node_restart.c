/* Issue 12: a memory node killed with SIGKILL and started again on the same port comes back
 * with a new, empty region (a new incarnation, dmkv/superblock.h). A gateway that was
 * running must not use it as if it were the same memory (its cached directory, leaves and
 * allocation cursors describe memory that is gone: writing by them corrupts the new
 * region, and before the incarnation check every command answered "protocol version
 * mismatch" or worse). It refuses the node with a clear error, on every command that needs
 * it, while PING and INFO keep working. */
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

int main(void)
{
    it_begin("node_restart", 300);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw;
    it_gateways_start(&pool, &gw, 1, 1, 1, NULL);
    redisContext *c = it_connect(gw.port);
    for (int i = 0; i < 100; i++) {
        redisReply *r = redisCommand(c, "SET nr:%d v%d", i, i);
        EXPECT_STATUS(r, "OK");
    }
    EXPECT_BULKS(it_cmd(c, "GET nr:7"), "v7");
    if (!it_pool_restart_empty(&pool)) return IT_SKIP;
    fprintf(stderr, "memory node restarted empty (pid %d)\n", (int)pool.memnode.pid);
    /* Within a few seconds (the connection is found lost, then redialed at most once a
     * second) every key command answers the incarnation error; none ever succeeds. */
    int refused = 0;
    for (int round = 0; round < 100 && refused < 5; round++) {
        const char *cmds[] = {"GET nr:7", "SET nr:new x", "DEL nr:8", "SCAN 0"};
        redisReply *r = it_cmd(c, cmds[round % 4]);
        CHECK(r);
        CHECKF(r->type == REDIS_REPLY_ERROR, "'%s' answered type %d after the node lost its data",
               cmds[round % 4], r->type);
        if (strstr(r->str, "restarted without its data"))
            refused++;
        else
            CHECKF(strstr(r->str, "connection lost") || strstr(r->str, "timed out") ||
                       strstr(r->str, "restarted too often"),
                   "unexpected error '%s'", r->str);
        freeReplyObject(r);
        usleep(100000);
    }
    CHECKF(refused >= 5, "only %d commands answered the incarnation error", refused);
    EXPECT_STATUS(it_cmd(c, "PING"), "PONG");
    redisReply *r = it_cmd(c, "INFO server");
    CHECK(r && r->type == REDIS_REPLY_STRING);
    freeReplyObject(r);
    /* The gateway logged why, once. */
    FILE *f = fopen(gw.log, "r");
    CHECK(f);
    char line[1024];
    int said = 0;
    while (fgets(line, sizeof(line), f))
        said += strstr(line, "came back as a new incarnation") != NULL;
    fclose(f);
    CHECKF(said == 1, "the gateway logged the new incarnation %d times", said);
    redisFree(c);
    CHECK(it_proc_stop(&gw) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_node_restart: OK\n");
    return 0;
}
