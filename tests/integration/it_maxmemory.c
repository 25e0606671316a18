/* maxmemory (issue 5): a pool-wide budget in the superblock. CONFIG SET on one gateway
 * applies to every gateway of the pool; once the budget is spent, writes answer Redis's
 * -OOM error, and every key stored before is still there, whole. */
#include <stdint.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define VAL (100 * 1024)

int main(void)
{
    it_begin("maxmemory", 300);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[2];
    it_gateways_start(&pool, gw, 2, 1, 1, NULL);
    it_proc_t *g1 = &gw[0], *g2 = &gw[1];
    redisContext *c1 = it_connect(g1->port), *c2 = it_connect(g2->port);
    EXPECT_STATUS(it_cmd(c1, "CONFIG SET maxmemory 64mb"), "OK");
    redisReply *r = it_cmd(c2, "CONFIG GET maxmemory");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    EXPECT_BULKS(r->element[1], "67108864");
    r->element[1] = NULL;
    freeReplyObject(r);
    r = it_cmd(c2, "INFO memory"); /* the other gateway's INFO shows the pool's budget */
    CHECK(r->type == REDIS_REPLY_STRING);
    CHECKF(strstr(r->str, "\r\nmaxmemory:67108864\r\n") &&
               strstr(r->str, "\r\nmaxmemory_human:64.00M\r\n"),
           "INFO memory: %s", r->str);
    freeReplyObject(r);
    EXPECT_ERR(it_cmd(c1, "CONFIG SET maxmemory lots"),
               "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument "
               "must be a memory value");

    /* Fill through both gateways until each refuses: each may still have room in the
     * chunk it holds when the other hits the budget. */
    static char val[VAL];
    static unsigned char stored[4000];
    int n = 0, refused[2] = {0, 0};
    for (; n < 4000 && !(refused[0] && refused[1]); n++) {
        int g = n % 2;
        if (refused[g]) continue;
        memset(val, 'a' + n % 26, sizeof(val));
        r = it_cmd(g ? c2 : c1, "SET mm:%d %b", n, val, (size_t)VAL);
        if (r->type == REDIS_REPLY_ERROR) {
            EXPECT_ERR(r, "OOM command not allowed when used memory > 'maxmemory'.");
            refused[g] = 1;
            continue;
        }
        EXPECT_STATUS(r, "OK");
        stored[n] = 1;
    }
    CHECK(refused[0] && refused[1]);
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (!stored[i]) {
            EXPECT_NIL(it_cmd(c1, "GET mm:%d", i));
            continue;
        }
        memset(val, 'a' + i % 26, sizeof(val));
        EXPECT_BULK(it_cmd(i % 2 ? c1 : c2, "GET mm:%d", i), val, (size_t)VAL);
        kept++;
    }
    fprintf(stderr, "-OOM after %d values of %d bytes (64 MiB budget)\n", kept, VAL);
    CHECK(kept > 100);
    EXPECT_INT(it_cmd(c1, "DBSIZE"), kept);
    /* Overwrites of existing keys with small values still fit in the chunks already
     * taken, and a bigger budget lets writes in again. */
    EXPECT_STATUS(it_cmd(c1, "SET mm:1 small"), "OK");
    EXPECT_STATUS(it_cmd(c2, "CONFIG SET maxmemory 0"), "OK");
    EXPECT_STATUS(it_cmd(c1, "SET mm:extra %b", val, (size_t)VAL), "OK");
    redisFree(c1);
    redisFree(c2);
    CHECK(it_proc_stop(g1) == 0);
    CHECK(it_proc_stop(g2) == 0);
    it_proc_stop(&pool.memnode);
    printf("it_maxmemory: passed\n");
    return 0;
}
