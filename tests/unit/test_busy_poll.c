/* dm_busy_poll_run (dmkv/busy_poll.h) on a loop of its own, with the pressure file replaced
 * by one this test writes, so that polling is allowed or not by the test's choice:
 *  - reads that bring work (a counter the loop's timer bumps) are followed by polls;
 *  - a timer alone (no work) starts none: on a memory node with an rdma listener the fence
 *    mailbox's 1 ms timer would otherwise cost ~10% of a core idle;
 *  - pressure over DM_BUSY_POLL_PSI_MAX stops polling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmkv/busy_poll.h"
#include "harness.h"

#define TICKS 100 /* timer ticks per run, 1 ms apart */

typedef struct run {
    uv_timer_t timer;
    uint64_t activity; /* what the loop polls on */
    int ticks, bump;   /* bump: each tick counts as work */
    int psi_fd;        /* the file standing in for /proc/pressure/cpu */
    uint64_t stalled;  /* its "total", raised by 5 ms a tick when the test says so */
    int stall;
} run_t;

static void write_psi(int fd, uint64_t total)
{
    char b[128];
    int n = snprintf(b, sizeof(b), "some avg10=0.00 avg60=0.00 avg300=0.00 total=%llu\n",
                     (unsigned long long)total);
    CHECK(pwrite(fd, b, (size_t)n, 0) == n && ftruncate(fd, n) == 0);
}

static void on_tick(uv_timer_t *t)
{
    run_t *r = t->data;
    if (r->bump) r->activity++;
    if (r->stall) write_psi(r->psi_fd, r->stalled += 5000);
    if (++r->ticks == TICKS) uv_close((uv_handle_t *)t, NULL);
}

/* One run of TICKS ticks; returns the poller's state after it. */
static dm_busy_poll_t run_once(int bump, int stall)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    char path[] = "/tmp/dmkv-psi-XXXXXX";
    run_t r = {.bump = bump, .stall = stall, .psi_fd = mkstemp(path)};
    CHECK(r.psi_fd >= 0);
    unlink(path);
    write_psi(r.psi_fd, 0);
    dm_busy_poll_t bp;
    dm_busy_poll_init(&bp, 200, &r.activity);
    if (bp.psi_fd >= 0) close(bp.psi_fd);
    bp.psi_fd = r.psi_fd; /* the test's pressure, not the machine's */
    bp.psi_total_us = 0;
    bp.allowed = true;
    uv_timer_init(&loop, &r.timer);
    r.timer.data = &r;
    uv_timer_start(&r.timer, on_tick, 1, 1);
    dm_busy_poll_run(&bp, &loop);
    dm_busy_poll_close(&bp);
    CHECK(uv_loop_close(&loop) == 0);
    fprintf(stderr, "  bump %d stall %d: %llu sleeps, %llu hits, %llu us polled\n", bump, stall,
            (unsigned long long)bp.sleeps, (unsigned long long)bp.hits,
            (unsigned long long)bp.polled_us);
    return bp;
}

static void test_polls_after_work(void)
{
    dm_busy_poll_t bp = run_once(1, 0);
    /* each tick's work is followed by a poll of up to 200 us (the next tick, 1 ms later,
     * mostly comes after it) */
    CHECKF(bp.polled_us >= TICKS * 100, "%llu us polled", (unsigned long long)bp.polled_us);
}

static void test_no_poll_after_timer(void)
{
    dm_busy_poll_t bp = run_once(0, 0);
    /* only the first poll after the start, before any timer: one sleep, never woken into a
     * poll (counts, not microseconds: on a loaded host the first 200 us poll took 3.9 ms of
     * wall time, 2026-12-04) */
    CHECKF(bp.sleeps == 1 && bp.hits == 0, "%llu sleeps, %llu hits after timers alone",
           (unsigned long long)bp.sleeps, (unsigned long long)bp.hits);
}

static void test_pressure_stops_it(void)
{
    /* 5 ms stalled per 1 ms tick, far over 10%: read at 10 ms, it stops polling there, so
     * few of the ticks' work is found by a poll (4-6 of 100; 31-90 without pressure) */
    dm_busy_poll_t bp = run_once(1, 1);
    CHECKF(bp.hits < TICKS / 4, "%llu polls found work under pressure",
           (unsigned long long)bp.hits);
}

int main(void)
{
    RUN(test_polls_after_work);
    RUN(test_no_poll_after_timer);
    RUN(test_pressure_stops_it);
    return 0;
}
