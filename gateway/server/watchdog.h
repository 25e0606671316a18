/* Coroutines parked without a resume for far longer than any bounded wait (a batch's
 * replies: 10 s at most; an operation: DM_OP_TIMEOUT_US): each is logged once, with the
 * command or task it runs and what it waits for, and counted (INFO stalled_coroutines). A
 * hang then names itself in the log instead of leaving only a count of commands in
 * progress (docs/testing-concurrency.md "Open"). Commands that run as long while they are
 * resumed (a lock polled every millisecond, a retry loop: a livelock) are logged once too,
 * with the time they ran, how often they were resumed and their wait at the look (INFO
 * long_running_commands). */
#ifndef GW_SERVER_WATCHDOG_H
#define GW_SERVER_WATCHDOG_H

#include <stddef.h>

#include "server/thread.h"

#define GW_STALL_MS                                                                                \
    20000 /* a coroutine parked this long is reported, milliseconds                                \
             (environment DMKV_STALL_MS: tests) */

/* th's cron: report th's coroutines and commands that crossed GW_STALL_MS since the last
 * call. */
void gw_watchdog_tick(gw_thread_t *th);

/* th's stop: log each of th's live coroutines (a drain that does not end). Every drain poll
 * calls it with log = 0, so each coroutine's clock runs from the stop on. */
void gw_watchdog_drain(gw_thread_t *th, int log);

#endif
