/* Active expiry of keys another gateway gave an expiry (issue 6): gateway A sets volatile
 * keys and dies (SIGKILL) before they expire, so its own expiry queue is gone. Gateway B
 * never touched them; its sweep over the CHIME key order must remove them from both
 * indexes: DBSIZE drops to the persistent keys, and nothing expired is ever returned. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define PERSISTENT 3000
#define VOLATILE 600

int main(void)
{
    it_begin("expiry_sweep", 600);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[2];
    it_gateways_start(&pool, gw, 2, 1, 1, NULL);
    it_proc_t *a = &gw[0], *b = &gw[1];
    redisContext *ca = it_connect(a->port), *cb = it_connect(b->port);
    for (int i = 0; i < PERSISTENT; i++)
        redisAppendCommand(ca, "SET keep:%05d v", i);
    for (int i = 0; i < VOLATILE; i++)
        redisAppendCommand(ca, "SET vol:%05d v PX 1500", i);
    for (int i = 0; i < PERSISTENT + VOLATILE; i++) {
        redisReply *r;
        CHECK(redisGetReply(ca, (void **)&r) == REDIS_OK);
        EXPECT_STATUS(r, "OK");
    }
    EXPECT_INT(it_cmd(cb, "DBSIZE"), PERSISTENT + VOLATILE);
    kill(a->pid, SIGKILL);
    waitpid(a->pid, NULL, 0);
    a->pid = 0;
    redisFree(ca);
    /* Expired keys are never returned, before or after removal. */
    usleep(1600 * 1000);
    EXPECT_NIL(it_cmd(cb, "GET vol:00007"));
    redisReply *r = it_cmd(cb, "KEYS vol:*");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 0);
    freeReplyObject(r);
    /* B's sweep walks about 640 keys a second from random leaves: bounded wait. */
    long long n = -1;
    int waited = 0;
    for (; waited < 120; waited++) {
        r = it_cmd(cb, "DBSIZE");
        n = r->integer;
        freeReplyObject(r);
        if (n == PERSISTENT) break;
        sleep(1);
    }
    CHECKF(n == PERSISTENT, "DBSIZE %lld after %d s: expired keys of a dead gateway not removed", n,
           waited);
    r = it_cmd(cb, "INFO stats");
    CHECK(r->type == REDIS_REPLY_STRING);
    CHECKF(strstr(r->str, "expired_keys:600\r\n") != NULL, "INFO stats: %s", r->str);
    freeReplyObject(r);
    EXPECT_BULKS(it_cmd(cb, "GET keep:00042"), "v");
    redisFree(cb);
    CHECK(it_proc_stop(b) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_expiry_sweep: %d expired keys of a dead gateway removed in %d s\n",
            VOLATILE, waited + 2);
    return 0;
}
