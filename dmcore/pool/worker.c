/* Worker set-up: connections, allocator, indexes; clocks, contexts, wake-ups and pauses.
 * The batch layer is batch.c. */
#include "dmkv/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"

uint64_t dm_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t dm_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void dm_ctx_init(dm_ctx_t *ctx, dm_worker_t *w, dm_cls_t cls)
{
    ctx->w = w;
    ctx->cls = cls;
    ctx->start_us = dm_now_us();
    ctx->ride = NULL;
    ctx->ride_until_us = 0;
    ctx->ride_failed = 0;
}

static void on_waker(uv_idle_t *h)
{
    dm_worker_t *w = h->data;
    w->draining = w->ready;
    w->draining_tail = w->ready_tail;
    w->ready = w->ready_tail = NULL;
    uv_idle_stop(h);
    w->in_waker = 1;
    while (w->draining) {
        dm_wake_t *wk = w->draining;
        w->draining = wk->next;
        if (!w->draining) w->draining_tail = NULL;
        wk->woken = 1;
        if (wk->co) dm_coro_resume(wk->co);
    }
    w->in_waker = 0;
}

/* Append wk to the list *head .. *tail. */
static void wake_append(dm_wake_t **head, dm_wake_t **tail, dm_wake_t *wk)
{
    wk->next = NULL;
    if (*tail)
        (*tail)->next = wk;
    else
        *head = wk;
    *tail = wk;
}

void dm_worker_wake_now(dm_worker_t *w, dm_wake_t *wk)
{
    if (w->in_waker)
        wake_append(&w->draining, &w->draining_tail, wk);
    else
        dm_worker_wake(w, wk);
}

void dm_worker_park(dm_worker_t *w, dm_wake_t *wk, const char *what)
{
    wk->co = dm_coro_self();
    wk->woken = 0;
    wk->next = NULL;
    if (wk->co)
        dm_coro_yield_on(what);
    else
        while (!wk->woken)
            uv_run(w->loop, UV_RUN_ONCE);
}

void dm_worker_wake(dm_worker_t *w, dm_wake_t *wk)
{
    wake_append(&w->ready, &w->ready_tail, wk);
    uv_idle_start(w->waker, on_waker);
}

void dm_ctx_yield(dm_ctx_t *ctx)
{
    dm_wake_t wk;
    dm_worker_wake(ctx->w, &wk);
    dm_worker_park(ctx->w, &wk, "its next loop turn");
}

dm_worker_t *dm_worker_create(uv_loop_t *loop, const char *const *uris, unsigned n, char *err,
                              size_t errlen)
{
    if (n == 0 || n > DM_GADDR_MAX_NODES) {
        snprintf(err, errlen, "need between 1 and %u memory nodes", DM_GADDR_MAX_NODES);
        return NULL;
    }
    dm_worker_t *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->loop = loop;
    w->op_timeout_us = DM_OP_TIMEOUT_US;
    w->waker = malloc(sizeof(*w->waker));
    if (w->waker) {
        uv_idle_init(loop, w->waker);
        w->waker->data = w;
    }
    for (unsigned i = 0; i < n; i++) {
        w->conns[i] = dm_conn_open(loop, uris[i], i, err, errlen);
        w->uris[i] = strdup(uris[i]);
        w->n_nodes = i + 1;
        if (!w->conns[i] || !w->uris[i]) {
            if (w->conns[i]) snprintf(err, errlen, "out of memory");
            dm_worker_destroy(w);
            return NULL;
        }
    }
    w->alloc = dm_alloc_create(w);
    if (!w->alloc || !w->waker) {
        snprintf(err, errlen, "out of memory");
        dm_worker_destroy(w);
        return NULL;
    }
    return w;
}

void dm_worker_destroy(dm_worker_t *w)
{
    if (!w) return;
    if (w->detach) w->detach(w);
    dm_alloc_destroy(w->alloc);
    dm_batch_drop_held(w); /* tests: held back past the stop, never sent */
    if (w->waker) uv_close((uv_handle_t *)w->waker, (uv_close_cb)free);
    for (unsigned i = 0; i < DM_GADDR_MAX_NODES; i++) {
        if (i < w->n_nodes && w->conns[i]) w->conns[i]->ops->close(w->conns[i]);
        free(w->uris[i]);
    }
    free(w);
}

/* A pause timer lives on the heap: libuv closes handles asynchronously. */
typedef struct pause_wait {
    uv_timer_t timer;
    dm_coro_t *co;
    int *fired;
} pause_wait_t;

static void pause_closed(uv_handle_t *h)
{
    free(h->data);
}

static void pause_fire(uv_timer_t *t)
{
    pause_wait_t *p = t->data;
    *p->fired = 1;
    dm_coro_t *co = p->co;
    uv_close((uv_handle_t *)t, pause_closed);
    if (co) dm_coro_resume(co);
}

int dm_fault_point(dm_ctx_t *ctx, dm_fault_site_t site)
{
    uint32_t ms = dm_fault_delay_ms(site);
    if (ms) dm_ctx_sleep(ctx, ms * 1000u);
    return ms != 0;
}

void dm_ctx_sleep(dm_ctx_t *ctx, uint32_t us)
{
    int fired = 0;
    pause_wait_t *p = malloc(sizeof(*p));
    if (!p) return;
    p->co = dm_coro_self();
    p->fired = &fired;
    uv_timer_init(ctx->w->loop, &p->timer);
    p->timer.data = p;
    uv_timer_start(&p->timer, pause_fire, (us + 999) / 1000, 0);
    if (p->co)
        dm_coro_yield_on("a timer (sleep)");
    else
        while (!fired)
            uv_run(ctx->w->loop, UV_RUN_ONCE);
}
