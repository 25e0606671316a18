/* Busy polling of an event loop: see dmkv/busy_poll.h. */
#include "dmkv/busy_poll.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t now_us(void)
{
    return uv_hrtime() / 1000;
}

/* The "some ... total=N" field of /proc/pressure/cpu: microseconds during which at least
 * one task waited for a CPU. Returns 0, or -1 when unreadable. */
static int read_psi(int fd, uint64_t *total_us)
{
    char buf[256];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char *t = strstr(buf, "total=");
    if (strncmp(buf, "some", 4) != 0 || !t) return -1;
    *total_us = strtoull(t + 6, NULL, 10);
    return 0;
}

void dm_busy_poll_init(dm_busy_poll_t *bp, uint64_t spin_us, const uint64_t *activity)
{
    memset(bp, 0, sizeof(*bp));
    bp->spin_us = spin_us;
    bp->activity = activity;
    bp->psi_fd = spin_us ? open("/proc/pressure/cpu", O_RDONLY | O_CLOEXEC) : -1;
    if (bp->psi_fd >= 0 && read_psi(bp->psi_fd, &bp->psi_total_us) != 0) {
        close(bp->psi_fd);
        bp->psi_fd = -1;
    }
    bp->psi_at_us = now_us();
    bp->allowed = bp->psi_fd >= 0;
}

/* Whether polling may go on at now: the share of the last DM_BUSY_POLL_PSI_MS in which
 * some task waited for a CPU stayed under DM_BUSY_POLL_PSI_MAX. */
static bool poll_allowed(dm_busy_poll_t *bp, uint64_t now)
{
    if (bp->psi_fd < 0) return false;
    uint64_t dt = now - bp->psi_at_us;
    if (dt < DM_BUSY_POLL_PSI_MS * 1000) return bp->allowed;
    uint64_t total;
    if (read_psi(bp->psi_fd, &total) != 0) return bp->allowed = false;
    uint64_t stalled = total - bp->psi_total_us;
    bp->allowed = (double)stalled < DM_BUSY_POLL_PSI_MAX * (double)dt;
    bp->psi_total_us = total;
    bp->psi_at_us = now;
    return bp->allowed;
}

void dm_busy_poll_run(dm_busy_poll_t *bp, uv_loop_t *loop)
{
    if (!bp->spin_us || bp->psi_fd < 0) {
        uv_run(loop, UV_RUN_DEFAULT);
        return;
    }
    uint64_t seen = *bp->activity;
    uint64_t until = now_us() + bp->spin_us;
    uint64_t idle_from = 0; /* when the current run of empty polls began, 0: none */
    for (;;) {
        if (!uv_run(loop, UV_RUN_NOWAIT)) return;
        uint64_t now = now_us();
        if (*bp->activity != seen) { /* a request came: poll on */
            seen = *bp->activity;
            if (idle_from) {
                bp->hits++;
                bp->polled_us += now - idle_from;
                idle_from = 0;
            }
            until = now + bp->spin_us;
            continue;
        }
        if (!idle_from) idle_from = now;
        if (now < until && poll_allowed(bp, now)) {
            sched_yield(); /* a task waiting for this CPU runs first */
            continue;
        }
        bp->polled_us += now - idle_from;
        idle_from = 0;
        bp->sleeps++;
        uint64_t before;
        do { /* a timer alone (the fence mailbox's, every ms) does not start a poll */
            before = *bp->activity;
            if (!uv_run(loop, UV_RUN_ONCE)) return;
        } while (*bp->activity == before);
        seen = *bp->activity;
        until = now_us() + bp->spin_us;
    }
}

void dm_busy_poll_close(dm_busy_poll_t *bp)
{
    if (bp->psi_fd >= 0) close(bp->psi_fd);
    bp->psi_fd = -1;
}
