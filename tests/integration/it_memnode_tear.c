/* A memory node killed in the middle of a WRITE: the index it was rewriting stays readable
 * once the node is back (docs/DESIGN.md, Rules: "A WRITE lands whole or not at all across a
 * kill of the memory node").
 *
 * The node runs on --dir with DMKV_TEST_TEAR_WRITE=800:N: its N-th WRITE of 800 bytes (a
 * ROLEX leaf body, rewritten in place by every insert under the leaf's lock) lands up to its
 * first 64-byte line's end and the process SIGKILLs itself there, as a kill between two lines
 * of the executor's line-locked copy (here the leaf's next, count, label, new checksum, new
 * version and first entry land; its new last entry does not). A gateway SETs new keys one at
 * a time until that happens, then the node is started again on the same --dir without the
 * fault. Then:
 *  - every acknowledged key is there, and a full SCAN returns exactly the keys GET finds
 *    (without the memory node's WAL the leaf stayed torn for ever: every reader of its chain
 *    gave up with DM_ECORRUPT (then worded "KV block failed its checksum"), and no SET was taken
 * within 20 s of the restart);
 *  - new keys are taken, past the torn leaf's keys too, and SCAN sees them;
 *  - the node's log says it completed the WRITE cut short (from its WAL).
 * ROLEX is the range index here whatever DMKV_IT_RANGE_INDEX says (the leaf's size is ROLEX's);
 * the point index is the harness's (race, or sephash under DMKV_IT_POINT_INDEX). */
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define MAX_KEYS 2000
#define TEAR_NTH 40 /* the 40th leaf WRITE: a few leaves in, inside a chain's domain */
#define MORE 300    /* keys SET after the restart */

int main(void)
{
    it_begin("memnode_tear", 300);
    setenv("DMKV_IT_RANGE_INDEX", "rolex", 1);
    char dir[64], args[128], tear[32];
    it_pool_t pool;
    snprintf(tear, sizeof(tear), "800:%d", TEAR_NTH);
    setenv("DMKV_TEST_TEAR_WRITE", tear, 1);
    if (!it_dir_pool_start(&pool, dir, args)) return IT_SKIP;
    unsetenv("DMKV_TEST_TEAR_WRITE");
    it_proc_t gw;
    int port;
    it_gateways_start(&pool, &gw, 1, 1, 1, &port);
    redisContext *c = it_connect(port);

    /* New keys, one at a time, until the node dies in its torn WRITE. */
    static int acked[MAX_KEYS];
    int n = 0, lost = -1;
    while (n < MAX_KEYS && lost < 0) {
        redisReply *r = redisCommand(c, "SET tear:%05d v%d", n, n);
        if (r && r->type == REDIS_REPLY_STATUS) acked[n] = 1;
        if (!r || r->type == REDIS_REPLY_ERROR) lost = n;
        if (r) freeReplyObject(r);
        if (!r) { /* the gateway closed on us: a new connection */
            redisFree(c);
            c = it_connect(port);
        }
        n++;
    }
    CHECKF(lost >= 0, "the memory node did not die in its WRITE %d of 800 bytes (%d SETs)",
           TEAR_NTH, n);
    fprintf(stderr, "the memory node died in the SET of tear:%05d\n", lost);
    CHECK(it_pool_kill(&pool)); /* reaped (it killed itself) */
    CHECK(it_pool_revive(&pool, args));

    /* Back: every acknowledged key, and SCAN returns exactly what GET finds. A SET in the
     * torn leaf's chain waits for its dead holder's lease first. */
    long long t0 = it_now_ms();
    redisReply *r = NULL;
    while (it_now_ms() - t0 < 20000) {
        r = redisCommand(c, "SET tear:resume ok");
        if (r && r->type == REDIS_REPLY_STATUS) break;
        if (r) freeReplyObject(r);
        if (!r) {
            redisFree(c);
            c = it_connect(port);
        }
        r = NULL;
        usleep(100000);
    }
    CHECKF(r, "the gateway did not take a SET within 20 s of the memory node's restart");
    freeReplyObject(r);
    EXPECT_INT(it_cmd(c, "DEL tear:resume"), 1);
    long present = 0;
    for (int i = 0; i < n; i++) {
        r = it_cmd(c, "GET tear:%05d", i);
        CHECKF(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL, "GET tear:%05d: %s", i,
               r->type == REDIS_REPLY_ERROR ? r->str : "not a string");
        CHECKF(r->type == REDIS_REPLY_STRING || !acked[i], "tear:%05d was acknowledged, now absent",
               i);
        present += r->type == REDIS_REPLY_STRING;
        freeReplyObject(r);
    }
    long long scanned = it_scan_count(c, "tear:*");
    CHECKF(scanned == present, "SCAN returned %lld keys, GET found %ld", scanned, present);

    /* New keys after the ones the torn leaf held, and between them. */
    for (int i = 0; i < MORE; i++)
        EXPECT_STATUS(it_cmd(c, "SET tear:%05d:%d w", i * 7 % (n + 1), i), "OK");
    scanned = it_scan_count(c, "tear:*");
    CHECKF(scanned == present + MORE, "SCAN returned %lld keys after %d more SETs, want %ld",
           scanned, MORE, present + MORE);
    fprintf(stderr, "%d SETs, %ld keys present, SCAN agrees before and after %d more\n", n, present,
            MORE);
    CHECKF(it_log_count(&pool.memnode, "was completed from") == 1,
           "the restarted memory node did not complete the WRITE cut short");
    redisFree(c);
    CHECK(it_proc_stop(&gw) == 0);
    it_proc_stop(&pool.memnode);
    it_dir_pool_remove(dir);
    fprintf(stderr, "it_memnode_tear: OK\n");
    return 0;
}
