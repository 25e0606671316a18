/* Worker threads: loop + pool connection + listeners + connections, and their shutdown. */
#include "server/thread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/busy_poll.h"
#include "dmkv/clock.h"
#include "dmkv/coro.h"
#include "dmkv/env.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "dmkv/transport.h"
#include "net/conn.h"
#include "net/listener.h"
#include "server/balance.h"
#include "server/cron.h"
#include "server/monitor.h"
#include "server/watchdog.h"
#include "dmkv/log.h"

#define DRAIN_POLL_MS 10
#define DRAIN_WARN_MS 5000

static void close_listeners(gw_thread_t *th)
{
    for (int i = 0; i < GW_MAX_BIND; i++)
        if (th->listener_inited[i] && !uv_is_closing((uv_handle_t *)&th->listeners[i]))
            uv_close((uv_handle_t *)&th->listeners[i], NULL);
}

static void close_leftover(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Before the worker goes: what it holds free is handed over (the next gateway in our
 * clock-board slot takes it), the pool's live_bytes gets this thread's last change, and
 * thread 0 clears the process's clock-board slot (a clean stop is not a death: peers do
 * not repair after it). */
static void leave_pool(void *arg)
{
    dm_coro_set_name("stop: hand over free blocks");
    gw_thread_t *th = arg;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, th->w, DM_CLS_ADMIN);
    uint64_t pieces = 0, bytes = 0;
    int rc = dm_alloc_handoff(&ctx, &pieces, &bytes);
    if (rc)
        dm_log(DM_LOG_WARNING,
               "Thread %d: its free blocks were not handed over (%s): they stay "
               "taken until dmkv-pool-reclaim",
               th->index, dm_strerror(rc));
    else if (pieces)
        dm_log(DM_LOG_NOTICE,
               "Thread %d: handed over %llu free block(s), %llu bytes, to the "
               "next gateway in this clock-board slot",
               th->index, (unsigned long long)pieces, (unsigned long long)bytes);
    dm_alloc_flush_live(&ctx, 1);
    if (th->index == 0) dm_clock_leave(&ctx);
}

static void on_drain(uv_timer_t *t)
{
    gw_thread_t *th = t->data;
    size_t live = dm_coro_live();
    if (live == 0 && !th->live_flushed && th->w) {
        th->live_flushed = true;
        if (dm_coro_spawn(leave_pool, th)) return; /* destroyed on a later poll */
    }
    if (live > 0) {
        uint64_t waited = dm_now_us() / 1000 - th->stop_started_ms;
        /* Once, at the first poll past the mark: a poll late by more than its period (a busy
         * host) must not skip it. */
        int warn = waited >= DRAIN_WARN_MS && !th->drain_warned;
        th->drain_warned |= warn;
        if (warn)
            dm_log(DM_LOG_WARNING, "Thread %d: still waiting for %zu command(s) to finish",
                   th->index, live);
        gw_watchdog_drain(th, warn); /* names each of them */
        return;
    }
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, NULL);
    uv_close((uv_handle_t *)&th->stop_async, NULL);
    uv_close((uv_handle_t *)&th->monitor_async, NULL);
    dm_worker_destroy(th->w);
    th->w = NULL;
    gw_conn_flush_pending(th); /* releases the references of connections still queued */
    /* Anything the pool layer left open goes too, so that uv_run returns. */
    uv_walk(&th->loop, close_leftover, NULL);
}

static void on_stop(uv_async_t *a)
{
    gw_thread_t *th = a->data;
    if (th->stopping) return;
    th->stopping = true;
    if (th->w) th->w->stopping = 1; /* no redial waits for the last batches */
    th->stop_started_ms = dm_now_us() / 1000;
    gw_cron_stop(th);
    gw_balance_close(th); /* before the listeners: nothing passed here is left behind */
    close_listeners(th);
    for (;;) {
        uv_mutex_lock(&th->lock);
        gw_conn_t *c = th->conns;
        uv_mutex_unlock(&th->lock);
        if (!c) break;
        gw_conn_close(c); /* unlinks c */
    }
    uv_timer_init(&th->loop, &th->drain_timer);
    th->drain_timer.data = th;
    uv_timer_start(&th->drain_timer, on_drain, 0, DRAIN_POLL_MS);
}

/* Every thread is up (gw_thread_listen): accept clients from now on. Not before: clients
 * that connect while the gateway starts would all land on the threads that started first. */
static void on_listen(uv_async_t *a)
{
    gw_thread_t *th = a->data;
    if (th->stopping) return;
    for (int i = 0; i < th->cfg->nbind; i++) {
        int rc = gw_listen_start(&th->listeners[i], gw_conn_on_accept);
        if (rc)
            dm_log(DM_LOG_WARNING, "Thread %d: could not listen on %s:%d: %s", th->index,
                   th->cfg->bind[i], th->cfg->port, uv_strerror(rc));
    }
}

static void on_monitor(uv_async_t *a)
{
    gw_monitor_deliver(a->data);
}

static void on_reply_flush(dm_flush_hook_t *h)
{
    gw_conn_flush_pending(h->check.data);
}

/* Tests (it_client_spread): threads after the first start this many milliseconds late, as
 * when their pool connections are slow to open. */
static int parse_ms(const char *v)
{
    int ms = v ? atoi(v) : 0;
    return ms > 0 ? ms : 0;
}

static void start_delay(const gw_thread_t *th)
{
    static int cache = -1;
    int ms = dm_env_cached(&cache, "DMKV_THREAD_START_DELAY_MS", parse_ms);
    if (th->index > 0 && ms > 0) uv_sleep((unsigned)ms);
}

static void thread_main(void *arg)
{
    gw_thread_t *th = arg;
    const gw_config_t *cfg = th->cfg;
    char err[512] = "";
    start_delay(th);
    th->flush_head = NULL;
    dm_flush_hook_init(&th->loop, &th->reply_flush, on_reply_flush, th);
    th->w = dm_kv_worker_create(&th->loop, (const char *const *)cfg->memnodes,
                                (unsigned)cfg->nmemnodes, err, sizeof(err));
    if (!th->w) {
        snprintf(th->start_err, sizeof(th->start_err), "Cannot connect to the memory pool: %s",
                 err);
        goto fail;
    }
    if (th->index == 0) {
        /* On the clock board before the first client: a gateway that dies at once is still
         * found dead by its peers, who then repair what it left (server/dead_repair.h). */
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, th->w, DM_CLS_ADMIN);
        /* Our chunk tails registered before any is taken (dmkv/alloc.h): a peer that
         * finds us dead takes over what we never handed out. */
        int rc = dm_alloc_register(&ctx);
        if (rc)
            dm_log(DM_LOG_WARNING,
                   "no allocation record (%s): if this gateway dies, its chunk "
                   "tails stay taken until dmkv-pool-reclaim",
                   dm_strerror(rc));
        dm_clock_tick(&ctx);
    }
    int brc = gw_balance_open(th);
    if (brc) {
        snprintf(th->start_err, sizeof(th->start_err), "uv_async_init: %s", uv_strerror(brc));
        goto fail;
    }
    for (int i = 0; i < cfg->nbind; i++) {
        if (gw_listen_bind(&th->loop, &th->listeners[i], &th->listener_inited[i], cfg->bind[i],
                           cfg->port, err, sizeof(err)) != 0) {
            snprintf(th->start_err, sizeof(th->start_err), "%s", err);
            goto fail;
        }
        th->listeners[i].data = th;
    }
    uv_async_init(&th->loop, &th->stop_async, on_stop);
    th->stop_async.data = th;
    uv_async_init(&th->loop, &th->monitor_async, on_monitor);
    th->monitor_async.data = th;
    uv_async_init(&th->loop, &th->listen_async, on_listen);
    th->listen_async.data = th;
    gw_cron_start(th);
    th->start_rc = 0;
    uv_sem_post(&th->ready);

    {
        dm_busy_poll_t poll; /* polls while reads bring work (dmkv/busy_poll.h) */
        dm_busy_poll_init(&poll, (uint64_t)cfg->busy_poll_us, dm_conn_activity());
        dm_busy_poll_run(&poll, &th->loop);
        dm_busy_poll_close(&poll);
    }
    uv_run(&th->loop, UV_RUN_DEFAULT); /* close callbacks queued at the very end */
    gw_cmd_spares_release();
    gw_cron_free(th);
    if (uv_loop_close(&th->loop) != 0)
        dm_log(DM_LOG_WARNING, "Thread %d: event loop closed with handles still open", th->index);
    return;

fail:
    th->start_rc = -1;
    gw_balance_close(th);
    close_listeners(th);
    if (th->w) {
        dm_worker_destroy(th->w);
        th->w = NULL;
    }
    uv_walk(&th->loop, close_leftover, NULL);
    uv_run(&th->loop, UV_RUN_DEFAULT);
    uv_loop_close(&th->loop);
    uv_sem_post(&th->ready);
}

void gw_thread_init(gw_thread_t *th)
{
    th->start_rc = -1;
    th->start_err[0] = 0;
    th->conns = NULL;
    th->nconns = 0;
    th->stopping = false;
    th->created = false;
    uv_mutex_init(&th->lock);
    uv_mutex_init(&th->handoff_lock);
    th->handoff_open = false;
    th->handoff_fds = NULL;
    th->handoff_n = th->handoff_cap = 0;
    th->handoffs_in = 0;
    uv_sem_init(&th->ready, 0);
}

int gw_thread_start(gw_thread_t *th)
{
    int rc = uv_loop_init(&th->loop);
    if (rc != 0) {
        snprintf(th->start_err, sizeof(th->start_err), "uv_loop_init: %s", uv_strerror(rc));
        return -1;
    }
    rc = uv_thread_create(&th->tid, thread_main, th);
    if (rc != 0) {
        snprintf(th->start_err, sizeof(th->start_err), "cannot create thread: %s", uv_strerror(rc));
        uv_loop_close(&th->loop);
        return -1;
    }
    th->created = true;
    uv_sem_wait(&th->ready);
    return th->start_rc;
}

void gw_thread_listen(gw_thread_t *th)
{
    uv_async_send(&th->listen_async);
}

void gw_thread_stop(gw_thread_t *th)
{
    if (th->start_rc == 0) uv_async_send(&th->stop_async);
}

void gw_thread_join(gw_thread_t *th)
{
    if (th->created) uv_thread_join(&th->tid);
    th->created = false;
    uv_sem_destroy(&th->ready);
    uv_mutex_destroy(&th->lock);
    gw_balance_free(th);
    uv_mutex_destroy(&th->handoff_lock);
}
