/* Repair after a dead gateway (dead_repair.h). */
#include "server/dead_repair.h"

#include <errno.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/clock.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/log.h"
#include "dmkv/index.h"
#include "dmkv/kv.h"

static gw_dead_repair_stats_t stats; /* atomics: INFO reads them from any thread */
static int again;                    /* thread 0 only (the clock board's thread) */
static uint64_t redials_seen;        /* thread 0 only: dm_pool_redials() at the last check */

/* A table that kept changing: walk again 1, 2, 4 ... 64 s later (about 4 minutes in all, at
 * most 3 walks each time: a walk reads the whole table). */
#define RETRY_FIRST_US 1000000u
#define RETRY_MAX_US 64000000u
#define RETRIES 8

/* Sleep us in 100 ms steps, returning early when th stops (a SIGTERM must not wait for a
 * repair's back-off). */
static void nap(dm_ctx_t *ctx, gw_thread_t *th, uint32_t us)
{
    for (uint32_t slept = 0; slept < us && !th->stopping; slept += 100000u)
        dm_ctx_sleep(ctx, 100000u);
}

static int adopting; /* thread 0 only */

/* Take over the unused chunk tails of the gateways found dead or gone (dm_alloc_adopt):
 * this process's workers carve them before taking new chunks. */
static void adopt_main(void *arg)
{
    dm_coro_set_name("repair: adopt a dead gateway's leftovers");
    gw_thread_t *th = arg;
    dm_ctx_t c, *ctx = &c;
    dm_ctx_init(ctx, th->w, DM_CLS_ADMIN);
    uint64_t recs[DM_CLOCK_SLOTS];
    unsigned n = dm_clock_take_dead_records(recs, DM_CLOCK_SLOTS);
    for (unsigned i = 0; i < n; i++) {
        dm_alloc_tail_stats_t got;
        int rc = dm_alloc_adopt(ctx, recs[i], &got);
        if (rc)
            dm_log(DM_LOG_WARNING,
                   "the chunk tails and free blocks of a gateway that died or stopped were not "
                   "(all) taken over: %s",
                   dm_strerror(rc));
        if (got.regions_adopted || got.handoffs_adopted)
            dm_log(DM_LOG_NOTICE,
                   "took over from a gateway that died or stopped: %llu chunk tail(s), %llu "
                   "bytes it never handed out; %llu free bytes it handed over at its stop",
                   (unsigned long long)got.regions_adopted, (unsigned long long)got.bytes_adopted,
                   (unsigned long long)got.handoff_bytes_adopted);
        if (got.free_logs_adopted)
            dm_log(DM_LOG_NOTICE,
                   "took over the free logs of %llu worker(s) of a gateway that died: %llu "
                   "bytes it had freed and could not have reused (%llu of them large blocks "
                   "past their quarantine that it never claimed)",
                   (unsigned long long)got.free_logs_adopted,
                   (unsigned long long)got.free_log_bytes_adopted,
                   (unsigned long long)got.free_log_early_bytes);
    }
    /* What was taken over is in our lists now: in our free log at once, not at the next
     * tick (we may die before it). */
    if (n) dm_alloc_log_tick(ctx);
    adopting = 0;
}

static void repair_main(void *arg)
{
    dm_coro_set_name("repair: key count and separators");
    gw_thread_t *th = arg;
    do {
        again = 0;
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, th->w, DM_CLS_ADMIN);
        int64_t drift = 0;
        int rc = dm_kv_point_index()->recount(&ctx, &drift);
        /* Keys kept coming and going while it walked: the table is busy; try later. */
        uint32_t pause = RETRY_FIRST_US;
        for (int i = 0; rc == DM_ERETRY && i < RETRIES && !th->stopping; i++) {
            nap(&ctx, th, pause);
            if (th->stopping) break;
            pause = pause < RETRY_MAX_US / 2 ? pause * 2 : RETRY_MAX_US;
            rc = dm_kv_point_index()->recount(&ctx, &drift);
        }
        if (rc && th->stopping) {
            dm_log(DM_LOG_WARNING, "key count repair: stopping before the table was quiet "
                                   "enough to recount: the key count was not checked");
        } else if (rc) {
            __atomic_fetch_add(&stats.repairs_failed, 1, __ATOMIC_RELAXED);
            dm_log(DM_LOG_WARNING, "key count repair: key count not checked: %s", dm_strerror(rc));
        } else if (drift) {
            __atomic_fetch_add(&stats.count_fixed, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&stats.count_drift, drift, __ATOMIC_RELAXED);
            dm_log(DM_LOG_WARNING,
                   "key count repair: the key count was off by %lld (a counter update that a "
                   "dead gateway never sent, or that a lost connection dropped): corrected "
                   "from the table",
                   (long long)-drift);
        } else {
            dm_log(DM_LOG_NOTICE, "key count repair: the key count agrees with the table");
        }
        __atomic_fetch_add(&stats.repairs_done, 1, __ATOMIC_RELAXED);
    } while (again && !th->stopping);
    __atomic_store_n(&stats.running, 0, __ATOMIC_RELAXED);
}

void gw_dead_repair_check(gw_thread_t *th)
{
    if (!adopting && dm_clock_records_pending()) {
        adopting = 1;
        errno = 0;
        dm_coro_spawn(adopt_main, th);
        if (errno == ENOMEM) adopting = 0;
    }
    unsigned dead = dm_clock_take_dead();
    uint64_t redials = dm_pool_redials();
    int redialed = redials != redials_seen;
    redials_seen = redials;
    if (!dead && !redialed) return;
    int running = __atomic_load_n(&stats.running, __ATOMIC_RELAXED);
    __atomic_store_n(&stats.running, 1, __ATOMIC_RELAXED); /* before found: INFO readers */
    if (dead) {
        __atomic_fetch_add(&stats.dead_found, dead, __ATOMIC_RELAXED);
        dm_log(DM_LOG_WARNING,
               "%u peer gateway(s) stopped updating the clock board for %u ms: repairing what "
               "they may have left behind",
               dead, 2 * DM_CLOCK_STALE_MS);
    }
    if (redialed) {
        __atomic_fetch_add(&stats.redial_recounts, 1, __ATOMIC_RELAXED);
        dm_log(DM_LOG_NOTICE, "a connection to a memory node was opened again after it failed: "
                              "recounting the keys (a counter update in flight on it may have "
                              "been lost)");
    }
    if (running) {
        again = 1;
        return;
    }
    errno = 0;
    dm_coro_spawn(repair_main, th); /* NULL: it ran to the end already (or no memory) */
    if (errno == ENOMEM) __atomic_store_n(&stats.running, 0, __ATOMIC_RELAXED);
}

void gw_dead_repair_stats(gw_dead_repair_stats_t *s)
{
    s->dead_found = __atomic_load_n(&stats.dead_found, __ATOMIC_RELAXED);
    s->repairs_done = __atomic_load_n(&stats.repairs_done, __ATOMIC_RELAXED);
    s->count_fixed = __atomic_load_n(&stats.count_fixed, __ATOMIC_RELAXED);
    s->count_drift = __atomic_load_n(&stats.count_drift, __ATOMIC_RELAXED);
    s->repairs_failed = __atomic_load_n(&stats.repairs_failed, __ATOMIC_RELAXED);
    s->running = __atomic_load_n(&stats.running, __ATOMIC_RELAXED);
    s->redial_recounts = __atomic_load_n(&stats.redial_recounts, __ATOMIC_RELAXED);
}
