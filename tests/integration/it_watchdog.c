/* The gateway's watchdog (gateway/server/watchdog.h) in the real processes: a command parked
 * far past any bounded wait is named in the log, with what it waits for, and counted in INFO
 * (stalled_coroutines); a stop that has to wait for a command names it too. The stall is a
 * test fault ('inserted': a new key's SET sleeps after its slot CAS) and the bound is
 * lowered for the test (DMKV_STALL_MS). A command that runs as long while it is resumed
 * all along (section 3: a SET polling a leaf lock whose holder stalls, until the lease runs
 * out and it takes the lock over) is named too ("running long"), as a livelock would be. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

/* Send SET key v on a context of its own without waiting for the reply. */
static redisContext *set_async(int port, const char *key)
{
    redisContext *c = it_connect(port);
    CHECK(redisAppendCommand(c, "SET %s v", key) == REDIS_OK);
    int done = 0;
    while (!done)
        CHECK(redisBufferWrite(c, &done) == REDIS_OK);
    return c;
}

int main(void)
{
    it_begin("it_watchdog", 120);
    setenv("DMKV_STALL_MS", "300", 1);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};

    /* 1. A SET stalled 2 s (one pass): reported once, named, counted; then it ends. */
    setenv("DMKV_FAULT_STALL", "inserted:2000:1:1", 1);
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 1, NULL);
    redisContext *a = set_async(gw.port, "slow:1");
    redisContext *b = it_connect(gw.port);
    sleep(1);
    CHECKF(it_info_field(b, "dmkv", "stalled_coroutines") == 1,
           "stalled_coroutines %lld after a 1 s stall (want 1)",
           (long long)it_info_field(b, "dmkv", "stalled_coroutines"));
    redisReply *r;
    CHECK(redisGetReply(a, (void **)&r) == REDIS_OK);
    EXPECT_STATUS(r, "OK"); /* frees r */
    EXPECT_BULKS(it_cmd(b, "GET slow:1"), "v");
    CHECKF(it_log_count(&gw, "set waits for a timer (sleep)") == 1,
           "the stalled SET was not named once in the log");
    CHECK(it_info_field(b, "dmkv", "stalled_coroutines") == 1); /* once per stillness */
    redisFree(a);
    redisFree(b);
    CHECK(it_proc_stop(&gw) == 0);

    /* 2. A stop behind a SET stalled 7 s: the drain's warning (at 5 s) names it. */
    setenv("DMKV_FAULT_STALL", "inserted:7000:1:1", 1);
    it_gateway_start(&gw, uris, 1, 1, NULL);
    a = set_async(gw.port, "slow:2");
    sleep(1);
    CHECK(it_proc_stop(&gw) == 0);
    CHECKF(it_log_count(&gw, "not finished at stop: set waits for a timer (sleep)") == 1,
           "the drain did not name the SET it waited for");
    redisFree(a);

    /* 3. The holder gateway holds the only leaf's lock and stalls 4.5 s ('locked': after the
     * lock, before the slot CAS); a SET of another new key through the poller gateway polls
     * that lock until the 3 s lease runs out and takes it over: resumed every millisecond,
     * never parked 300 ms, so only the running-long report can name it. */
    setenv("DMKV_FAULT_STALL", "locked:4500:1:1", 1);
    it_proc_t holder, poller;
    it_gateway_start(&holder, uris, 1, 1, NULL);
    unsetenv("DMKV_FAULT_STALL");
    it_gateway_start(&poller, uris, 1, 1, NULL);
    a = set_async(holder.port, "lease:held");
    usleep(300 * 1000);
    b = it_connect(poller.port);
    EXPECT_STATUS(it_cmd(b, "SET lease:polled v"), "OK");
    CHECKF(it_info_field(b, "dmkv", "long_running_commands") >= 1,
           "long_running_commands %lld after a SET polled a held lock for seconds",
           (long long)it_info_field(b, "dmkv", "long_running_commands"));
    CHECKF(it_log_count(&poller, "running long (a livelock?): set for") >= 1,
           "the polling SET was not named in the log");
    /* It never parked 300 ms (a background task of the poller sleeping that long may be
     * reported). */
    CHECK(it_log_count(&poller, "stalled (a lost wake-up?): set ") == 0);
    CHECK(redisGetReply(a, (void **)&r) == REDIS_OK); /* OK or an error: fenced */
    freeReplyObject(r);
    EXPECT_BULKS(it_cmd(b, "GET lease:polled"), "v");
    redisFree(a);
    redisFree(b);
    CHECK(it_proc_stop(&poller) == 0);
    CHECK(it_proc_stop(&holder) == 0);
    fprintf(stderr, "it_watchdog: OK\n");
    return 0;
}
