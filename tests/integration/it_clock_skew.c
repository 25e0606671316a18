/* Clock skew between gateways (issue 10 item 6, dmkv/clock.h): three gateways on one memory
 * node, the third under libfaketime with its wall clock 2 s ahead (monotonic clock real).
 *   - the skewed gateway finds out through the pool's clock board and refuses key commands
 *     with a clear error (PING and INFO still answer); the two others keep serving;
 *   - its clock does not delete anybody's keys early: a key written with PX 2500 on a good
 *     gateway is still there 1.2 s later (the skewed gateway's active expiry and sweep
 *     would have removed it at once);
 *   - SET NX over a key expired by less than the bound waits the bound out (a lock taken
 *     by a lagging clock is not stolen early), and succeeds after it.
 * Skips (with a message) when libfaketime is not installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

static long long info_field(redisContext *c, const char *name)
{
    redisReply *r = it_cmd(c, "INFO dmkv");
    CHECK(r && r->type == REDIS_REPLY_STRING);
    char pat[64];
    snprintf(pat, sizeof(pat), "\r\n%s:", name);
    const char *p = strstr(r->str, pat);
    CHECKF(p, "INFO has no %s", name);
    long long v = atoll(p + strlen(pat));
    freeReplyObject(r);
    return v;
}

/* Poll until INFO's clock_skewed on c is want (10 s at most). */
static void wait_skewed(redisContext *c, int want, const char *who)
{
    for (int i = 0; i < 100; i++) {
        if (info_field(c, "clock_skewed") == want) return;
        usleep(100000);
    }
    CHECKF(0, "%s: clock_skewed never became %d", who, want);
}

int main(void)
{
    it_begin("clock_skew", 120);
    if (!it_faketime_installed()) return IT_SKIP;
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[3];
    int ports[3];
    it_gateways_start(&pool, gw, 2, 1, 1, ports);
    /* The third gateway's wall clock runs 2 s ahead; its monotonic clock stays real. */
    it_faketime_on("+2s", NULL);
    const char *uris[1] = {pool.uri};
    it_gateway_start(&gw[2], uris, 1, 1, NULL);
    ports[2] = gw[2].port;
    it_faketime_off();
    redisContext *a = it_connect(ports[0]), *b = it_connect(ports[1]), *c = it_connect(ports[2]);

    wait_skewed(c, 1, "the gateway 2 s ahead");
    redisReply *r = it_cmd(c, "SET k v");
    CHECKF(r && r->type == REDIS_REPLY_ERROR &&
               strncmp(r->str, "ERR dmkv: this gateway's clock is off by", 40) == 0,
           "SET on the skewed gateway: %s", r && r->str ? r->str : "(not an error)");
    freeReplyObject(r);
    EXPECT_STATUS(it_cmd(c, "PING"), "PONG");
    CHECK(info_field(a, "clock_skewed") == 0 && info_field(a, "clock_peers") == 2);
    CHECK(info_field(b, "clock_skewed") == 0 && info_field(a, "clock_far_peers") == 1);
    long long lo = info_field(c, "clock_offset_min_ms"), hi = info_field(c, "clock_offset_max_ms");
    CHECKF(lo > 1000 && hi >= 1900 && hi < 2600, "measured offset (%lld, %lld] ms, want ~2000", lo,
           hi);
    fprintf(stderr, "skewed gateway: offset in (%lld, %lld] ms, refuses key commands\n", lo, hi);

    /* Early deletion: keys with an expiry, written on a good gateway, must outlive the
     * skewed clock's view of them. */
    for (int i = 0; i < 20; i++)
        EXPECT_STATUS(it_cmd(a, "SET vol:%d v PX 2500", i), "OK");
    usleep(1200000);
    for (int i = 0; i < 20; i++)
        EXPECT_BULKS(it_cmd(b, "GET vol:%d", i), "v");
    fprintf(stderr, "20 keys with PX 2500 all present after 1.2 s\n");

    /* SET NX over a just-expired key waits out the 500 ms bound. */
    EXPECT_STATUS(it_cmd(a, "SET lock a NX PX 200"), "OK");
    usleep(300000);
    EXPECT_NIL(it_cmd(b, "SET lock b NX"));
    usleep(600000);
    EXPECT_STATUS(it_cmd(b, "SET lock b NX"), "OK");
    EXPECT_BULKS(it_cmd(a, "GET lock"), "b");

    redisFree(a);
    redisFree(b);
    redisFree(c);
    for (int i = 0; i < 3; i++)
        it_proc_stop(&gw[i]);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_clock_skew: OK\n");
    return 0;
}
