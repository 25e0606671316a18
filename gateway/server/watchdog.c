/* Stalled coroutines, reported (watchdog.h). */
#include "server/watchdog.h"

#include <stdlib.h>

#include "dmkv/coro.h"
#include "dmkv/log.h"
#include "dmkv/worker.h"
#include "server/stats.h"

#define REPORT_MAX 16 /* coroutines named per look; the rest are counted */

/* Logs what dm_coro_watch reports: parked coroutines as `why`, and commands running long
 * while resumed all along (a lock polled or a retry loop that never ends: a livelock).
 * Returns how many were parked; *nrunning gets how many ran long. */
static size_t report(gw_thread_t *th, uint64_t still_ms, uint64_t run_ms, int once, const char *why,
                     size_t *nrunning)
{
    dm_coro_still_t s[REPORT_MAX];
    size_t n = dm_coro_watch(dm_now_us() / 1000, still_ms, run_ms, once, s, REPORT_MAX, nrunning);
    for (size_t i = 0; i < n && i < REPORT_MAX; i++)
        if (s[i].running_ms)
            dm_log(DM_LOG_WARNING,
                   "Thread %d: running long (a livelock?): %s for %llu ms, resumed %llu times, "
                   "now waits for %s",
                   th->index, s[i].name, (unsigned long long)s[i].running_ms,
                   (unsigned long long)s[i].resumes, s[i].waits_on);
        else
            dm_log(DM_LOG_WARNING, "Thread %d: %s: %s waits for %s, parked %llu ms", th->index, why,
                   s[i].name, s[i].waits_on, (unsigned long long)s[i].still_ms);
    if (n > REPORT_MAX)
        dm_log(DM_LOG_WARNING, "Thread %d: %s: %zu more", th->index, why, n - REPORT_MAX);
    return n - *nrunning;
}

/* GW_STALL_MS, or DMKV_STALL_MS from the environment (tests). */
static uint64_t stall_ms(void)
{
    static uint64_t ms;
    if (!__atomic_load_n(&ms, __ATOMIC_RELAXED)) {
        const char *e = getenv("DMKV_STALL_MS");
        __atomic_store_n(&ms, e && atol(e) > 0 ? (uint64_t)atol(e) : GW_STALL_MS, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&ms, __ATOMIC_RELAXED);
}

void gw_watchdog_tick(gw_thread_t *th)
{
    size_t running;
    size_t n = report(th, stall_ms(), stall_ms(), 1, "stalled (a lost wake-up?)", &running);
    if (n) GW_STAT_ADD(stalled_coroutines, n);
    if (running) GW_STAT_ADD(long_running_commands, running);
}

void gw_watchdog_drain(gw_thread_t *th, int log)
{
    size_t running;
    if (log)
        report(th, 0, UINT64_MAX, 0, "not finished at stop", &running);
    else
        dm_coro_watch(dm_now_us() / 1000, UINT64_MAX, UINT64_MAX, 0, NULL, 0, NULL);
}
