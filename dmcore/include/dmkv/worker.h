/* A worker: one thread's libuv loop, its connections to every memory node of the pool,
 * its chunk allocator and its wake-ups (batches of verbs: batch.h). It knows no index: the
 * key-value layer attaches the pool's indexes and key queues to it (kv.h
 * dm_kv_worker_create, kv/engines.c). Gateways run one worker per thread; tests create
 * workers directly. */
#ifndef DMKV_WORKER_H
#define DMKV_WORKER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "dmkv/fault.h"
#include "dmkv/gaddr.h"
#include "dmkv/stats.h"
#include "dmkv/transport.h"

typedef struct dm_alloc dm_alloc_t;
typedef struct dm_race dm_race_t;

typedef struct dm_worker {
    uv_loop_t *loop;
    unsigned n_nodes;
    dm_conn_t *conns[DM_GADDR_MAX_NODES];
    dm_alloc_t *alloc;                   /* per-worker KV-block allocator (alloc.h) */
    dm_race_t *race;                     /* per-worker RACE handle: directory cache (race.h) */
    struct dm_chime *chime;              /* per-worker CHIME handle: inner-node cache (chime.h) */
    struct dm_sephash_role *sephash;     /* per-worker SepHash point role (sephash/index_ops.c) */
    struct rr_role *rolex;               /* per-worker ROLEX range role (rolex/range.c) */
    struct dm_keyq *keyq;                /* writes in flight per key on this worker (kv/keyq.c) */
    void (*detach)(struct dm_worker *w); /* set by whoever attached the above (kv/engines.c):
                                            run first by dm_worker_destroy */
    int volatile_marked; /* this worker set the superblock's volatile_seen (kv/kv.c) */
    uv_idle_t *waker;    /* resumes coroutines queued by dm_worker_wake */
    struct dm_wake *ready, *ready_tail;
    struct dm_wake *draining, *draining_tail; /* the wakes the waker is resuming now */
    int in_waker;                             /* the waker is running */
    uint32_t op_timeout_us;                   /* an operation running longer restarts (DM_ERETRY) */
    char *uris[DM_GADDR_MAX_NODES];           /* to open a failed connection again */
    uint64_t redial_at_us[DM_GADDR_MAX_NODES]; /* no reconnect attempt before (monotonic us) */
    uint64_t lost[DM_GADDR_MAX_NODES]; /* a reconnect found this other incarnation: refused */
    /* Called (on the loop thread) when this worker's allocator has enough frees staged for
     * its free log to be written before the next timer tick (dm_alloc_log_due); NULL: the
     * timer's ticks only. */
    void (*log_due)(void *arg);
    void *log_due_arg;
    int stopping; /* the process is stopping: a batch whose connection failed is not posted
                     again after a redial (pool/batch.c exec_one_node), so a stop with a
                     memory node down does not wait for it */
    struct held_batch *held; /* fire-and-forget batches the 'posted' fault holds back (tests) */
} dm_worker_t;

/* Per-operation context: which worker, which counters, when it started. */
typedef struct dm_batch dm_batch_t;

typedef struct dm_ctx {
    dm_worker_t *w;
    dm_cls_t cls;
    uint64_t start_us;      /* monotonic start time, microseconds */
    dm_batch_t *ride;       /* verbs posted with this operation's next batch (writes only): lets
                               one index's write share a round trip with the other's (hybrid.c) */
    uint64_t ride_until_us; /* 0, or the monotonic time (us) after which the ride is dropped
                               unposted: the leaf lease its writes rely on has ended */
    int ride_failed;        /* since dm_ctx_ride_start, a batch that carried ride verbs failed
                               or the ride was dropped: which of them landed is unknown */
} dm_ctx_t;

/* Connect a worker to the pool given as memory-node URIs (see dm_conn_open; the order is
 * the node numbering and must match on every gateway) and create its allocator; no index
 * (dm_kv_worker_create adds them). Blocks while connecting. Returns NULL with a message in
 * err.
 * A connection that fails later (lost, timed out, QP in error) fails the batches it
 * carried (DM_EIO / DM_ETIMEDOUT: the command answers an error, nothing is retried whose
 * effect is unknown); the next batch to that node opens a new one (a blocking connect of
 * up to 5 s), and fails with DM_EIO while that fails. Attempts come at most once a second
 * while they fail, and 100 ms after one that succeeded, so a fenced connection is replaced
 * at once (pool/batch.c conn_for). */
dm_worker_t *dm_worker_create(uv_loop_t *loop, const char *const *uris, unsigned n, char *err,
                              size_t errlen);
/* Detach what was attached (w->detach), close the worker's connections and free it. Run its
 * loop afterwards (uv_run) so libuv finishes closing its handles. */
void dm_worker_destroy(dm_worker_t *w);

/* A coroutine parked until another operation of the same worker wakes it. */
typedef struct dm_wake {
    struct dm_coro *co; /* NULL outside a coroutine: the waiter runs the loop */
    int woken;
    struct dm_wake *next;
} dm_wake_t;

/* Park the current operation on wk until dm_worker_wake(w, wk) (yields on a coroutine,
 * runs the loop otherwise). what: what it waits for, a static string (dm_coro_yield_on). */
void dm_worker_park(dm_worker_t *w, dm_wake_t *wk, const char *what);
/* Make wk's operation runnable; it resumes from the loop, never inside the caller. */
void dm_worker_wake(dm_worker_t *w, dm_wake_t *wk);
/* dm_worker_wake, but when called from an operation the waker resumed, wk resumes in the
 * same pass (before the loop's next turn): a chain of commit turns, each letting the next
 * go (gateway/net/conn.c), then posts into one message instead of one per loop turn. Only
 * for waking another operation that makes progress: a self-wake would never let the loop
 * run. */
void dm_worker_wake_now(dm_worker_t *w, dm_wake_t *wk);

/* Start an operation context charged to class cls. */
void dm_ctx_init(dm_ctx_t *ctx, dm_worker_t *w, dm_cls_t cls);

/* Suspend the operation for about us microseconds (libuv timer, millisecond granularity):
 * the coroutine yields, or the loop runs when called outside one. */
void dm_ctx_sleep(dm_ctx_t *ctx, uint32_t us);
/* Maybe stall the calling coroutine at a test fault point (dmkv/fault.h): sleeps
 * dm_fault_delay_ms(site) milliseconds. Returns 1 if it stalled. */
int dm_fault_point(dm_ctx_t *ctx, dm_fault_site_t site);
/* Let the worker's other ready operations and I/O run once before continuing. */
void dm_ctx_yield(dm_ctx_t *ctx);

/* Monotonic clock in microseconds. */
uint64_t dm_now_us(void);
/* Wall clock in milliseconds since the epoch (expiry times). */
uint64_t dm_wall_ms(void);

#endif
