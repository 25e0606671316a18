/* A gateway's clock-board word is its heartbeat (dmkv/clock.h): a peer that sees it stand
 * still for 2 * DM_CLOCK_STALE_MS (10 s) takes the gateway for dead, clears its slot and
 * takes its chunk tails and free logs over. The tick must keep beating while the same
 * thread's cron step is slow (a rdma guest run took a live gateway for dead). Gateway B's
 * first cron step stalls 13 s (fault point `cron`); gateway A, on the same memory node,
 * must not find B dead in the 16 s that follow, and B keeps serving. With the clock tick
 * inside the cron step, A found B dead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

int main(void)
{
    it_begin("clock_liveness", 120);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    const char *uris[1] = {pool.uri};
    it_proc_t a_gw, b_gw;
    it_gateway_start(&a_gw, uris, 1, 1, NULL);
    it_gateway_start_env(&b_gw, uris, 1, 1, NULL, "DMKV_FAULT_STALL", "cron:13000:1:1");
    redisContext *a = it_connect(a_gw.port), *b = it_connect(b_gw.port);
    EXPECT_STATUS(it_cmd(b, "SET live:b 1"), "OK");
    for (int s = 0; s < 16; s++) {
        sleep(1);
        CHECKF(it_info_field(a, "dmkv", "dead_gateways_found") == 0,
               "after %d s of B's slow cron step, A took B for dead", s + 1);
    }
    EXPECT_BULKS(it_cmd(a, "GET live:b"), "1");
    EXPECT_STATUS(it_cmd(b, "SET live:b 2"), "OK");
    EXPECT_BULKS(it_cmd(a, "GET live:b"), "2");
    CHECK(it_info_field(b, "dmkv", "dead_gateways_found") == 0);
    redisFree(a);
    redisFree(b);
    CHECK(it_proc_stop(&b_gw) == 0 && it_proc_stop(&a_gw) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_clock_liveness: OK\n");
    return 0;
}
