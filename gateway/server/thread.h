/* One worker thread: its own libuv loop, its own dmcore worker (connections to every memory
 * node), its own SO_REUSEPORT listeners, and the client connections it accepted. */
#ifndef GW_SERVER_THREAD_H
#define GW_SERVER_THREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "config/config.h"
#include "dmkv/flush_hook.h"
#include "dmkv/worker.h"

#define GW_READ_BUF (64u * 1024) /* bytes per read() */

typedef struct gw_conn gw_conn_t;
typedef struct gw_expiry_entry gw_expiry_entry_t;

typedef struct gw_thread {
    int index; /* 0..threads-1 */
    const gw_config_t *cfg;
    uv_loop_t loop;
    uv_thread_t tid;
    dm_worker_t *w; /* NULL until connected to the pool */
    uv_tcp_t listeners[GW_MAX_BIND];
    int listener_inited[GW_MAX_BIND];
    uv_async_t stop_async;    /* wakes the loop for shutdown */
    uv_async_t monitor_async; /* wakes the loop for MONITOR lines (server/monitor.h) */
    uv_timer_t drain_timer;   /* polls for the end of in-flight commands at shutdown */
    uv_timer_t cron_timer;    /* server/cron.c: active expiry, CLIENT KILL sweeps */
    bool cron_inited;
    bool expire_running;              /* an active-expiry step is on a coroutine */
    uv_timer_t log_timer;             /* server/cron.c: the allocator's free log */
    bool log_running;                 /* a free-log step is on a coroutine */
    bool clock_running;               /* a clock-board tick is on a coroutine (thread 0) */
    struct gw_expiry_entry *exp_heap; /* server/expiry_track.h */
    uint64_t sweep_cursor;            /* active-expiry sweep over the key order (0 = new walk) */
    size_t exp_n, exp_cap;
    bool created; /* the OS thread exists (join it) */
    bool stopping;
    uint64_t stop_started_ms;
    bool drain_warned; /* the drain's warning (DRAIN_WARN_MS into a stop) was logged */
    bool live_flushed; /* the pool's live_bytes got this thread's last change (stop) */

    /* Guarded by lock so that CLIENT LIST on another thread can walk it. */
    uv_mutex_t lock;
    gw_conn_t *conns;  /* doubly linked through gw_conn_t.prev/next */
    gw_conn_t *closed; /* closed, commands still running (this thread only; same links) */
    size_t nconns;
    uint64_t clients_mem;        /* bytes its clients held at the last cron tick (atomic) */
    uint64_t commands_running;   /* its commands begun and not yet returned (INFO dmkv): written
                                    by this thread alone, no RMW; others read it relaxed */
    uint64_t biggest_client_mem; /* ... its biggest evictable one (server/client_evict.h) */
    int evict_over_ticks;        /* its ticks in a row that saw all clients over the limit */

    dm_flush_hook_t reply_flush; /* end of turn: write the replies queued on flush_head */
    gw_conn_t *flush_head;       /* connections with replies to write (net/conn.h) */

    char rbuf[GW_READ_BUF]; /* read buffer shared by this thread's connections */
    bool rbuf_busy;

    /* Connections other threads accepted for this one (server/balance.c). */
    uv_async_t handoff_async;
    uv_mutex_t handoff_lock; /* guards the four below */
    bool handoff_open;       /* handoff_async is live: passes are taken */
    int *handoff_fds;
    size_t handoff_n, handoff_cap;
    size_t handoffs_in; /* passed here and not yet counted in nconns (atomic) */

    /* Start-up handshake with the main thread. */
    uv_sem_t ready;
    uv_async_t listen_async; /* every thread is ready: start accepting (gw_thread_listen) */
    int start_rc;            /* 0 ok, -1 failed (message in start_err) */
    char start_err[1024];
} gw_thread_t;

/* Set up th's locks and lists (fields index and cfg set by the caller). Every thread is set
 * up before the first starts: a running thread reads the others' client counts
 * (server/balance.h). gw_thread_join releases it, started or not. */
void gw_thread_init(gw_thread_t *th);

/* Start thread th (set up by gw_thread_init); blocks until it has connected to the pool and
 * bound its listeners, or failed. Returns 0 or -1 (th->start_err says why; the thread has then
 * exited and must still be joined with gw_thread_join). */
int gw_thread_start(gw_thread_t *th);

/* Once every thread started (gw_thread_start returned 0 for each): let th accept clients.
 * Until then the port refuses connections. Thread-safe. */
void gw_thread_listen(gw_thread_t *th);

/* Ask the thread to shut down: stop accepting, close every connection, wait for running
 * commands to finish (at most a few seconds), disconnect from the pool. Thread-safe. */
void gw_thread_stop(gw_thread_t *th);

/* Wait for the thread to exit and release what it holds. */
void gw_thread_join(gw_thread_t *th);

#endif
