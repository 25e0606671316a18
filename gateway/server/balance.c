/* Client connections spread evenly over the worker threads (balance.h). */
#include "server/balance.h"

#include <stdlib.h>
#include <unistd.h>

#include "net/conn.h"
#include "server/server.h"

/* Clients th serves or will serve: registered plus passed to it and not yet registered. */
static size_t load_of(gw_thread_t *th)
{
    uv_mutex_lock(&th->lock);
    size_t n = th->nconns;
    uv_mutex_unlock(&th->lock);
    return n + __atomic_load_n(&th->handoffs_in, __ATOMIC_ACQUIRE);
}

static int takes_passes(gw_thread_t *th)
{
    uv_mutex_lock(&th->handoff_lock);
    int open = th->handoff_open;
    uv_mutex_unlock(&th->handoff_lock);
    return open;
}

static void on_handoff(uv_async_t *a)
{
    gw_thread_t *th = a->data;
    for (;;) {
        uv_mutex_lock(&th->handoff_lock);
        int fd = th->handoff_n ? th->handoff_fds[--th->handoff_n] : -1;
        uv_mutex_unlock(&th->handoff_lock);
        if (fd < 0) return;
        gw_conn_adopt(th, fd); /* in nconns from here on */
        __atomic_fetch_sub(&th->handoffs_in, 1, __ATOMIC_RELEASE);
    }
}

int gw_balance_open(gw_thread_t *th)
{
    int rc = uv_async_init(&th->loop, &th->handoff_async, on_handoff);
    if (rc) return rc;
    th->handoff_async.data = th;
    uv_mutex_lock(&th->handoff_lock);
    th->handoff_open = true;
    uv_mutex_unlock(&th->handoff_lock);
    return 0;
}

void gw_balance_close(gw_thread_t *th)
{
    uv_mutex_lock(&th->handoff_lock);
    th->handoff_open = false;
    size_t n = th->handoff_n;
    for (size_t i = 0; i < n; i++)
        close(th->handoff_fds[i]);
    th->handoff_n = 0;
    uv_mutex_unlock(&th->handoff_lock);
    __atomic_fetch_sub(&th->handoffs_in, n, __ATOMIC_RELEASE);
}

gw_thread_t *gw_balance_target(gw_thread_t *th)
{
    if (gw_server.nthreads < 2 || !gw_server.threads) return NULL;
    size_t mine = load_of(th) + 1; /* with the one just accepted */
    gw_thread_t *best = NULL;
    size_t best_load = 0;
    for (int i = 0; i < gw_server.nthreads; i++) {
        gw_thread_t *o = &gw_server.threads[i];
        if (o == th || !takes_passes(o)) continue;
        size_t l = load_of(o);
        if (l + 1 < mine && (!best || l < best_load)) {
            best = o;
            best_load = l;
        }
    }
    return best;
}

int gw_balance_pass(gw_thread_t *to, int fd)
{
    uv_mutex_lock(&to->handoff_lock);
    int rc = -1;
    if (to->handoff_open && to->handoff_n == to->handoff_cap) {
        size_t cap = to->handoff_cap ? to->handoff_cap * 2 : 16;
        int *nf = realloc(to->handoff_fds, cap * sizeof(*nf));
        if (nf) {
            to->handoff_fds = nf;
            to->handoff_cap = cap;
        }
    }
    if (to->handoff_open && to->handoff_n < to->handoff_cap) {
        to->handoff_fds[to->handoff_n++] = fd;
        __atomic_fetch_add(&to->handoffs_in, 1, __ATOMIC_RELEASE);
        uv_async_send(&to->handoff_async); /* under the lock: the handle is not closed yet */
        rc = 0;
    }
    uv_mutex_unlock(&to->handoff_lock);
    return rc;
}

void gw_balance_free(gw_thread_t *th)
{
    free(th->handoff_fds);
    th->handoff_fds = NULL;
    th->handoff_n = th->handoff_cap = 0;
}
