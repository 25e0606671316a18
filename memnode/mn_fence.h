/* The memory node's side of fencing (docs/leases.md "Fencing", dmkv/fence.h): a gateway
 * about to take over a lease whose holder may still have writes in flight puts a request
 * (the holder id) into the fence mailbox of the node's header; this module finds it on the
 * loop (after every loop iteration, so right after the tcp request that wrote it; every
 * MN_FENCE_POLL_MS as well when an rdma device may write it, since the device's writes
 * wake nothing), has every transport cut the holder's connections
 * (tcp: the socket closed, unread bytes dropped; rdma: the QP moved to the error state),
 * and only then writes the ack. Whatever the holder sent and the node had not executed
 * is gone; the holder reconnects and its late writes are refused by its own send-by
 * bounds. Source: memnode/mn_fence.c. */
#ifndef MEMNODE_MN_FENCE_H
#define MEMNODE_MN_FENCE_H

#include <stdint.h>
#include <uv.h>

#define MN_FENCE_POLL_MS 1 /* period of the mailbox scan with an rdma listener, milliseconds */

/* A fence leaves the holder's connections accepted less than this long before it is served
 * (milliseconds): the taker waited CH_LEASE_MS (3 s) after the lock was taken, and the
 * holder's writes under it leave by CH_HOLD_MAX_MS (2 s), so a connection that young was
 * opened after the last of them was posted and carries none. Without this, a second taker's
 * fence (another gateway, a few ms later) cut the holder's fresh reconnection too, and its
 * clients saw errors for the second it waits before dialling again. */
#define MN_FENCE_FRESH_MS 500

/* Does a fence cut a connection of its holder accepted at accepted_ms (loop time, ms)? */
static inline int mn_fence_cuts(uint64_t now_ms, uint64_t accepted_ms)
{
    return now_ms - accepted_ms >= MN_FENCE_FRESH_MS;
}

/* Cut every connection of holder (a nonzero holder id); returns how many were cut. */
typedef unsigned (*mn_fence_cut_fn)(void *arg, uint16_t holder);

typedef struct mn_fence {
    uv_check_t check; /* after every loop iteration: tcp requests run on the loop */
    uv_timer_t timer; /* every MN_FENCE_POLL_MS, only with device_writes */
    int timer_on;
    uint8_t *base; /* the region: its header holds the mailbox (dm_superblock_t.fence_box) */
    mn_fence_cut_fn cut;
    void *arg;
} mn_fence_t;

/* Serve the mailbox of the region at base on loop. device_writes: an rdma listener is on,
 * so the mailbox may change without waking the loop (scanned every MN_FENCE_POLL_MS too).
 * A tcp-only node scans only after loop iterations: idle, it wakes for nothing (a 1 ms
 * timer cost an idle node 3-4% of a core). Returns 0 or a libuv error. */
int mn_fence_start(mn_fence_t *f, uv_loop_t *loop, uint8_t *base, int device_writes,
                   mn_fence_cut_fn cut, void *arg);

/* Stop serving (the loop must run once more to release the handles). */
void mn_fence_stop(mn_fence_t *f);

#endif
