/* Per-thread cron: every tick, close clients flagged by CLIENT KILL and, unless one is still
 * running, start an active-expiry step on a coroutine: at most GW_EXPIRE_KEYS_PER_TICK due
 * keys from this thread's expiry queue (expiry_track.h) are removed with dm_kv_del_expired
 * (which leaves a key alone if it was rewritten meanwhile). Every thread of every gateway
 * expires the keys it gave an expiry, so the work is spread; each tick's work is bounded.
 * (A SCAN-driven sweep cannot find expired keys: RACE's scan skips them.) The same step
 * returns the worker's idle free blocks to the pool (dm_alloc_return_idle). Thread 0 also
 * writes the clock board, the process's heartbeat, on a coroutine of its own (clock_step).
 * A faster timer writes the worker's free log (dm_alloc_log_tick), what a peer takes over
 * if we die. */
#include "server/cron.h"

#include <stdlib.h>

#include "dmkv/alloc.h"
#include "dmkv/clock.h"
#include "dmkv/coro.h"
#include "dmkv/fault.h"
#include "dmkv/kv.h"
#include "net/conn.h"
#include "server/client_evict.h"
#include "server/client_obuf.h"
#include "server/dead_repair.h"
#include "server/expiry_track.h"
#include "server/monitor.h"
#include "server/stats.h"
#include "server/watchdog.h"

/* The clock board (one thread per process) on a coroutine of its own: peers take a
 * gateway whose word stands still for 10 s for dead, so its tick must not wait for the
 * expiry step, which can run for seconds (64 idle blocks returned at two round trips
 * each, expiries, a sweep, on a slow network). */
static void clock_step(void *arg)
{
    dm_coro_set_name("cron: clock board tick");
    gw_thread_t *th = arg;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, th->w, DM_CLS_ADMIN);
    dm_clock_tick(&ctx);
    th->clock_running = false;
}

static void expire_step(void *arg)
{
    dm_coro_set_name("cron: expiry sweep");
    gw_thread_t *th = arg;
    if (!th->stopping) { /* free blocks this worker left unused go back to the pool */
        dm_ctx_t rctx;
        dm_ctx_init(&rctx, th->w, DM_CLS_ADMIN);
        dm_alloc_return_idle(&rctx);
        dm_fault_point(&rctx, DM_FAULT_CRON);
    }
    if (dm_clock_skewed()) { /* our clock would delete other gateways' keys early */
        th->expire_running = false;
        return;
    }
    /* A key is removed only once expired by more than the skew bound: a clock up to that
     * far ahead of the writer's never deletes a key early for everyone. */
    uint64_t now = dm_wall_ms() - dm_clock_margin_ms();
    char *key;
    size_t klen;
    for (int i = 0;
         i < GW_EXPIRE_KEYS_PER_TICK && !th->stopping && gw_expiry_pop_due(th, now, &key, &klen);
         i++) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, th->w, DM_CLS_ADMIN);
        if (dm_kv_del_expired(&ctx, key, klen) == 1) GW_STAT_ADD(expired_keys, 1);
        dm_stats_op(DM_CLS_ADMIN);
        free(key);
    }
    if (!th->stopping) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, th->w, DM_CLS_ADMIN);
        uint64_t next = 0;
        int64_t n = dm_kv_expire_sweep(&ctx, th->sweep_cursor, GW_SWEEP_KEYS_PER_TICK, &next);
        th->sweep_cursor = n < 0 ? 0 : next;
        if (n > 0) GW_STAT_ADD(expired_keys, (uint64_t)n);
    }
    th->expire_running = false;
}

static void close_killed(gw_thread_t *th)
{
    for (;;) {
        gw_conn_t *victim = NULL;
        uv_mutex_lock(&th->lock);
        for (gw_conn_t *x = th->conns; x && !victim; x = x->next)
            if (__atomic_load_n(&x->kill, __ATOMIC_RELAXED)) victim = x;
        uv_mutex_unlock(&th->lock);
        if (!victim) break;
        gw_conn_close(victim);
    }
}

/* Run fn(th) on a coroutine unless the last one is still running (*running, which fn
 * clears when it ends). */
static void spawn_step(bool *running, dm_coro_fn fn, gw_thread_t *th)
{
    if (*running) return;
    *running = true;
    if (!dm_coro_spawn(fn, th) && *running) *running = false;
}

static void on_tick(uv_timer_t *t)
{
    gw_thread_t *th = t->data;
    if (th->stopping) return;
    close_killed(th);
    gw_conn_early_sweep(th);
    gw_evict_tick(th);
    gw_obuf_tick(th);
    gw_monitor_deliver(th); /* lines held back while a monitor ran a command */
    gw_watchdog_tick(th);
    if (th->w) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, th->w, DM_CLS_ADMIN);
        dm_alloc_flush_live(&ctx, 0); /* the pool's live_bytes (INFO mem_fragmentation_*) */
    }
    if (th->index == 0 && th->w) gw_dead_repair_check(th); /* found by the clock board */
    if (th->index == 0 && th->w) spawn_step(&th->clock_running, clock_step, th);
    if (th->w) spawn_step(&th->expire_running, expire_step, th);
}

static void on_log_tick(uv_timer_t *t);

/* The next free-log tick now, then every 1/GW_FREE_LOG_HZ again. */
static void log_tick_soon(void *arg)
{
    gw_thread_t *th = arg;
    if (th->stopping || !th->cron_inited) return;
    uv_timer_start(&th->log_timer, on_log_tick, 0, 1000 / GW_FREE_LOG_HZ);
}

static void log_step(void *arg)
{
    dm_coro_set_name("cron: free-log tick");
    gw_thread_t *th = arg;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, th->w, DM_CLS_ADMIN);
    int rc = dm_alloc_log_tick(&ctx);
    th->log_running = false;
    /* Large frees staged while this tick was on the wire (a failed one waits for the
     * timer: no loop of failing writes). */
    if (!rc && dm_alloc_log_due(th->w)) log_tick_soon(th);
}

static void on_log_tick(uv_timer_t *t)
{
    gw_thread_t *th = t->data;
    if (th->stopping || !th->w) return;
    spawn_step(&th->log_running, log_step, th);
}

void gw_cron_start(gw_thread_t *th)
{
    uv_timer_init(&th->loop, &th->cron_timer);
    th->cron_timer.data = th;
    uv_timer_init(&th->loop, &th->log_timer);
    th->log_timer.data = th;
    th->cron_inited = true;
    uv_timer_start(&th->cron_timer, on_tick, 1000 / GW_CRON_HZ, 1000 / GW_CRON_HZ);
    uv_timer_start(&th->log_timer, on_log_tick, 1000 / GW_FREE_LOG_HZ, 1000 / GW_FREE_LOG_HZ);
    th->w->log_due = log_tick_soon;
    th->w->log_due_arg = th;
}

static void close_timer(uv_timer_t *t)
{
    uv_timer_stop(t);
    if (!uv_is_closing((uv_handle_t *)t)) uv_close((uv_handle_t *)t, NULL);
}

void gw_cron_stop(gw_thread_t *th)
{
    if (!th->cron_inited) return;
    close_timer(&th->cron_timer);
    close_timer(&th->log_timer);
    th->cron_inited = false;
}

void gw_cron_free(gw_thread_t *th)
{
    gw_expiry_free(th);
}
