/* A clock-board word that lands late must not make an honest peer refuse (dmkv/clock.h).
 *
 * A gateway reads its wall clock, then posts its word; anything between the two (a loaded
 * host, a long event-loop turn, a slow memory node) makes the word older than it looks
 * when it lands. A CI run saw it: a gateway refused every key command with "clock is off
 * by 1180..1301 ms" from a peer on the same machine. Here gateway B stalls 1.5 s at every
 * tick between reading its clock and posting (fault point `clock`); A, with the same clock,
 * must keep serving and must still measure B. Without the delay B publishes with its next
 * word, A took itself for 1.4 s ahead and refused. B, which reads the board only every
 * 1.6 s and so misses most of A's words, must measure A too (A's delay word covers its
 * last 2 s, not one word). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

int main(void)
{
    it_begin("clock_late_word", 120);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    const char *uris[1] = {pool.uri};
    it_proc_t a_gw, b_gw;
    it_gateway_start(&a_gw, uris, 1, 1, NULL);
    it_gateway_start_env(&b_gw, uris, 1, 1, NULL, "DMKV_FAULT_STALL", "clock:1500:1");
    redisContext *a = it_connect(a_gw.port), *b = it_connect(b_gw.port);
    int measured = 0;
    for (int s = 0; s < 40; s++) { /* 10 s: about 6 late words of B's */
        usleep(250 * 1000);
        redisReply *r = it_cmd(a, "SET late:%d v", s);
        CHECKF(r->type == REDIS_REPLY_STATUS, "A refused after %.2f s: %s", (s + 1) * 0.25, r->str);
        freeReplyObject(r);
        CHECKF(it_info_field(a, "dmkv", "clock_skewed") == 0, "A took its clock for skewed");
        if (it_info_field(a, "dmkv", "clock_peers") == 1) {
            long long lo = it_info_field(a, "dmkv", "clock_offset_min_ms");
            long long hi = it_info_field(a, "dmkv", "clock_offset_max_ms");
            CHECKF(lo <= 0 && hi >= 0, "A bounds its offset to B by %lld..%lld ms (the same clock)",
                   lo, hi);
            if (!measured) fprintf(stderr, "A bounds its offset to B by %lld..%lld ms\n", lo, hi);
            measured = 1;
        }
    }
    CHECKF(measured, "A never measured B's clock");
    /* B reads the board every 1.6 s and misses most of A's words: it still measures A. */
    CHECKF(it_info_field(b, "dmkv", "clock_peers") == 1, "B, a slow reader, never measured A");
    EXPECT_BULKS(it_cmd(b, "GET late:0"), "v");
    redisFree(a);
    redisFree(b);
    CHECK(it_proc_stop(&b_gw) == 0 && it_proc_stop(&a_gw) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_clock_late_word: OK\n");
    return 0;
}
