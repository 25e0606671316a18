/* Stalled coroutines, reported (watchdog.h). */
#include "server/watchdog.h"

#include <stdlib.h>

#include "dmkv/coro.h"
#include "dmkv/log.h"
#include "dmkv/worker.h"
#include "server/stats.h"

#define REPORT_MAX 16 /* coroutines named per look; the rest are counted */

static size_t report(gw_thread_t *th, uint64_t still_ms, int once, const char *why)
{
    dm_coro_still_t s[REPORT_MAX];
    size_t n = dm_coro_watch(dm_now_us() / 1000, still_ms, once, s, REPORT_MAX);
    for (size_t i = 0; i < n && i < REPORT_MAX; i++)
        dm_log(DM_LOG_WARNING, "Thread %d: %s: %s waits for %s, parked %llu ms", th->index, why,
               s[i].name, s[i].waits_on, (unsigned long long)s[i].still_ms);
    if (n > REPORT_MAX)
        dm_log(DM_LOG_WARNING, "Thread %d: %s: %zu more", th->index, why, n - REPORT_MAX);
    return n;
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

/* Commands resumed all along yet running past run_ms: a lock polled or a retry loop that
 * never ends (a livelock), which the parked-coroutine report cannot see. */
static size_t report_long(gw_thread_t *th, uint64_t run_ms)
{
    dm_coro_long_t s[REPORT_MAX];
    size_t n = dm_coro_watch_long(dm_now_us() / 1000, run_ms, s, REPORT_MAX);
    for (size_t i = 0; i < n && i < REPORT_MAX; i++)
        dm_log(DM_LOG_WARNING,
               "Thread %d: running long (a livelock?): %s for %llu ms, resumed %llu times, "
               "now waits for %s",
               th->index, s[i].name, (unsigned long long)s[i].running_ms,
               (unsigned long long)s[i].resumes, s[i].waits_on);
    if (n > REPORT_MAX)
        dm_log(DM_LOG_WARNING, "Thread %d: running long: %zu more", th->index, n - REPORT_MAX);
    return n;
}

void gw_watchdog_tick(gw_thread_t *th)
{
    size_t n = report(th, stall_ms(), 1, "stalled (a lost wake-up?)");
    if (n) GW_STAT_ADD(stalled_coroutines, n);
    n = report_long(th, stall_ms());
    if (n) GW_STAT_ADD(long_running_commands, n);
}

void gw_watchdog_drain(gw_thread_t *th, int log)
{
    if (log)
        report(th, 0, 0, "not finished at stop");
    else
        dm_coro_watch(dm_now_us() / 1000, UINT64_MAX, 0, NULL, 0);
}
