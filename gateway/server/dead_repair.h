/* Repair after a dead gateway (issue 12): when this process's clock-board tick finds a peer
 * gateway dead (its word unchanged for 2 * DM_CLOCK_STALE_MS, dmkv/clock.h) and clears its
 * slot, it repairs what that gateway may have left behind while the pool serves. The same
 * key count repair runs after this process opened a failed connection to a memory node
 * again (dm_pool_redials: a fence, or a node killed and started again on its --dir), since
 * a write in flight on it may have landed without its counter FAA. Today:
 * the key counter (DBSIZE), recounted from the point index (its role's recount: dm_race_recount),
 * in case the dead gateway's last counter FAA never left. Its leaf locks expire by lease and their
 * pending entries are settled by the next holder; a separator it never inserted is repaired by
 * CHIME (chime/repair.c); its chunks, unlinked blocks and free lists are reclaimed only
 * offline (dmkv-pool-reclaim). */
#ifndef GW_SERVER_DEAD_REPAIR_H
#define GW_SERVER_DEAD_REPAIR_H

#include <stdint.h>

#include "server/thread.h"

/* Call after dm_clock_tick on th's worker: starts a repair coroutine on th when a dead
 * peer was found, or a memory node connection was reopened since the last call, and no
 * repair is running (a later one during a repair runs again). */
void gw_dead_repair_check(gw_thread_t *th);

typedef struct gw_dead_repair_stats {
    uint64_t dead_found;      /* peers found dead by this process */
    uint64_t repairs_done;    /* repair runs finished */
    uint64_t count_fixed;     /* runs that corrected the key counter */
    int64_t count_drift;      /* keys added to the counter by them, in total */
    uint64_t repairs_failed;  /* runs that gave up (the table kept changing, errors) */
    int running;              /* a repair run is under way */
    uint64_t redial_recounts; /* repair runs asked for by a reopened memory node connection */
} gw_dead_repair_stats_t;

/* This process's dead-gateway repair counters (INFO), relaxed atomics. */
void gw_dead_repair_stats(gw_dead_repair_stats_t *s);

#endif
