/* Per-thread periodic work (Redis's serverCron, hz 10): active expiry and closing clients
 * that CLIENT KILL on another thread flagged. */
#ifndef GW_SERVER_CRON_H
#define GW_SERVER_CRON_H

#include "server/thread.h"

#define GW_CRON_HZ 10               /* ticks per second */
#define GW_EXPIRE_KEYS_PER_TICK 200 /* due keys removed per tick at most: bounds the work */
#define GW_SWEEP_KEYS_PER_TICK 64   /* keys of the key order the sweep checks per tick */
/* Free-log writes per second (dm_alloc_log_tick): a gateway killed loses what it freed
 * since the last one and three ticks' lead of its reuse horizon (FREE_LOG_AHEAD_MIN_US),
 * so they are more frequent than the cron's ticks. An idle worker's tick sends nothing. */
#define GW_FREE_LOG_HZ 100

/* Start th's cron timer (call on th's loop thread once th->w is connected). */
void gw_cron_start(gw_thread_t *th);

/* Stop the timer (shutdown); an expiry sweep in flight finishes on its own. */
void gw_cron_stop(gw_thread_t *th);

/* Free what the cron keeps (the expiry queue); after the loop has stopped. */
void gw_cron_free(gw_thread_t *th);

#endif
