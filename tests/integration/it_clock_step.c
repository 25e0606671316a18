/* A step of the machine's wall clock (NTP, a VM resumed late) must not make gateways on it
 * refuse commands (dmkv/clock.h, docs/clocks.md "Steps of the wall clock").
 *
 * Two gateways under libfaketime read their wall clock from one shared file (monotonic clock
 * real), so both clocks step at the same moment, as on one machine. A word a peer stamped
 * just before the step and that a gateway reads just after it looks as old as the step: a
 * CI run saw "this gateway's clock is off by 8585..8691 ms from 1 of 1 other gateways"
 * (rolex/it_concurrency). Clients write through both gateways while the clock steps 8 s
 * forward, then 5 s back: every SET must succeed, neither gateway may take its clock for
 * skewed, both must count the steps (INFO clock_steps) and measure each other again after.
 * Skips (with a message) when libfaketime is not installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

static char stamp_path[64];

/* Write the shared clock offset atomically (rename), e.g. "+8s". */
static void set_offset(const char *off)
{
    char tmp[80];
    snprintf(tmp, sizeof(tmp), "%s.new", stamp_path);
    FILE *f = fopen(tmp, "w");
    CHECK(f != NULL);
    fprintf(f, "%s\n", off);
    CHECK(fclose(f) == 0);
    CHECK(rename(tmp, stamp_path) == 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* SETs through both gateways and their verdicts, every few ms, for secs seconds. */
static void write_for(redisContext *const *c, double secs, int *n)
{
    double end = now_s() + secs;
    while (now_s() < end) {
        for (int g = 0; g < 2; g++) {
            redisReply *r = it_cmd(c[g], "SET step:%d:%d v", g, *n);
            CHECKF(r->type == REDIS_REPLY_STATUS, "gateway %d refused SET %d: %s", g, *n,
                   r->type == REDIS_REPLY_ERROR ? r->str : "(not a status)");
            freeReplyObject(r);
            CHECKF(it_info_field(c[g], "dmkv", "clock_skewed") == 0,
                   "gateway %d took its clock for skewed at SET %d", g, *n);
        }
        (*n)++;
        usleep(2000);
    }
}

int main(void)
{
    it_begin("clock_step", 120);
    if (!it_faketime_installed()) return IT_SKIP;
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    snprintf(stamp_path, sizeof(stamp_path), "/tmp/dmkv-clock-step-%d", (int)getpid());
    set_offset("+0s");
    it_faketime_on(NULL, stamp_path);
    const char *uris[1] = {pool.uri};
    it_proc_t gw[2];
    for (int g = 0; g < 2; g++)
        it_gateway_start(&gw[g], uris, 1, 1, NULL);
    it_faketime_off();
    redisContext *c[2] = {it_connect(gw[0].port), it_connect(gw[1].port)};

    /* Both measure each other before the steps. */
    for (int i = 0; i < 100 && (it_info_field(c[0], "dmkv", "clock_peers") < 1 ||
                                it_info_field(c[1], "dmkv", "clock_peers") < 1);
         i++)
        usleep(100000);
    CHECKF(it_info_field(c[0], "dmkv", "clock_peers") == 1 &&
               it_info_field(c[1], "dmkv", "clock_peers") == 1,
           "the gateways never measured each other");

    int n = 0;
    write_for(c, 1.0, &n);
    set_offset("+8s");
    fprintf(stderr, "wall clock stepped 8 s forward after %d SETs a gateway\n", n);
    write_for(c, 3.0, &n);
    set_offset("+3s");
    fprintf(stderr, "wall clock stepped 5 s back after %d SETs a gateway\n", n);
    write_for(c, 3.0, &n);
    for (int g = 0; g < 2; g++) {
        long long steps = (long long)it_info_field(c[g], "dmkv", "clock_steps");
        CHECKF(steps >= 2, "gateway %d saw %lld steps of its wall clock, want 2", g, steps);
    }
    /* After the pause, measurements resume: each bounds its offset to the other around 0. */
    write_for(c, 2.5, &n);
    for (int g = 0; g < 2; g++) {
        long long lo = (long long)it_info_field(c[g], "dmkv", "clock_offset_min_ms");
        long long hi = (long long)it_info_field(c[g], "dmkv", "clock_offset_max_ms");
        CHECKF(it_info_field(c[g], "dmkv", "clock_peers") == 1 && lo <= 0 && hi >= 0 &&
                   hi - lo < 2000,
               "gateway %d bounds its offset by %lld..%lld ms (the same clock)", g, lo, hi);
    }
    fprintf(stderr, "%d SETs a gateway, none refused, both saw 2 steps\n", n);

    for (int g = 0; g < 2; g++) {
        redisFree(c[g]);
        int st = it_proc_stop(&gw[g]);
        if (st != 0) it_proc_dump_log(&gw[g]);
        CHECKF(st == 0, "gateway %d exit status %d", g, st);
    }
    it_proc_stop(&pool.memnode);
    unlink(stamp_path);
    fprintf(stderr, "it_clock_step: OK\n");
    return 0;
}
