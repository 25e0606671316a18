/* Busy polling of an event loop (issue 11; docs/throughput.md "Polling before sleeping"):
 * the memory node's (on by default) and a gateway worker's (opt-in). After a read that
 * brought work, the loop polls its sockets for up to spin_us microseconds before it blocks
 * in epoll again. A gateway writing its next message to a node blocked in epoll wakes it:
 * on these VMs that is an IPI to a halted vCPU, which cost the gateway about 38% of its CPU
 * in `perf` (sock_def_readable under writev) at redis-benchmark -c 1 -P 1000. A node that
 * is still polling needs no wake-up.
 *
 * Polling takes a CPU that other processes of the machine may need (50 clients at -P 1
 * lost a third of their rate to it), so it is allowed only while the machine's CPU
 * pressure (/proc/pressure/cpu, "some": the share of time some task waited for a CPU)
 * stayed under DM_BUSY_POLL_PSI_MAX over the last DM_BUSY_POLL_PSI_MS; the loop yields
 * the CPU on every empty poll. Without /proc/pressure (no PSI in the kernel) it never
 * polls. Source: dmcore/util/busy_poll.c. */
#ifndef DMKV_BUSY_POLL_H
#define DMKV_BUSY_POLL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define DM_BUSY_POLL_PSI_MS 10    /* how often the pressure is read, milliseconds */
#define DM_BUSY_POLL_PSI_MAX 0.10 /* polling stops above this share of stalled time */

typedef struct dm_busy_poll {
    uint64_t spin_us;         /* poll this long after the last request; 0: never */
    const uint64_t *activity; /* a counter every read that brought work bumps (the memory
                                 node: requests served; a gateway worker: dm_conn_activity) */
    int psi_fd;               /* /proc/pressure/cpu, -1 when absent */
    uint64_t psi_total_us;    /* its "some total" at psi_at_us */
    uint64_t psi_at_us;
    bool allowed;       /* the pressure let it poll at the last reading */
    uint64_t polled_us; /* time spent polling without finding work, microseconds */
    uint64_t hits;      /* polls that found a request before spin_us ran out */
    uint64_t sleeps;    /* times the loop blocked */
} dm_busy_poll_t;

/* Prepare bp for a loop whose requests bump *activity, polling spin_us microseconds after
 * each (0 disables it). Opens /proc/pressure/cpu; without it bp never polls. */
void dm_busy_poll_init(dm_busy_poll_t *bp, uint64_t spin_us, const uint64_t *activity);

/* Run loop until it has no active handle left (as uv_run(loop, UV_RUN_DEFAULT)), polling
 * as above between reads. uv_stop does not end it: close the loop's handles instead. */
void dm_busy_poll_run(dm_busy_poll_t *bp, uv_loop_t *loop);

/* Close the pressure file. */
void dm_busy_poll_close(dm_busy_poll_t *bp);

#endif
