/* dmkv-memnode's ROLEX retrainer thread (see mn_retrainer.h). Only the memory node whose region
 * holds node 0's superblock acts: rolex_root is a node-0 word, and dm_rolex_host_record keeps
 * the root, its leaf region and its model arena on node 0 (the ROLEX index lives on node 0
 * today), so this node's `local` worker reaches all of them as node 0. */
#include "mn_retrainer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "dmkv/errors.h"
#include "dmkv/gaddr.h"
#include "dmkv/log.h"
#include "dmkv/rolex.h"
#include "dmkv/superblock.h"
#include "dmkv/transport.h"
#include "dmkv/worker.h"

#define FAIL_LOG_US 10000000ull /* a failure repeated is logged again after 10 s */

/* Wait up to ms for stop; returns 1 once stopping. */
static int wait_stop(mn_retrainer_t *t, unsigned ms)
{
    pthread_mutex_lock(&t->lock);
    if (!t->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&t->cond, &t->lock, &ts);
    }
    int s = t->stop;
    pthread_mutex_unlock(&t->lock);
    return s;
}

static void host(mn_retrainer_t *t, dm_worker_t *w, dm_gaddr_t root)
{
    dm_rolex_host_t h;
    dm_rolex_host_init(&h, root);
    int logged_rc = 0;
    uint64_t logged_us = 0;
    while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
        int rc = dm_rolex_host_step(&ctx, &h);
        if (rc == 1) {
            __atomic_store_n(&t->retrains, h.retrains, __ATOMIC_RELAXED);
            __atomic_store_n(&t->total_us, h.total_us, __ATOMIC_RELAXED);
            __atomic_store_n(&t->max_us, h.max_us, __ATOMIC_RELAXED);
            __atomic_store_n(&t->version, h.last.version, __ATOMIC_RELEASE);
            dm_log(DM_LOG_NOTICE,
                   "ROLEX retrain %llu: model version %llu, LT %llu -> %llu entries, %llu "
                   "segments, %llu leaves read, %.1f ms (%llu so far asked for by writers)",
                   (unsigned long long)h.retrains, (unsigned long long)h.last.version,
                   (unsigned long long)h.last.entries_before, (unsigned long long)h.last.entries,
                   (unsigned long long)h.last.segments, (unsigned long long)h.last.leaves,
                   (double)h.last_us_taken / 1000, (unsigned long long)h.asked);
        } else if (rc < 0) {
            __atomic_store_n(&t->failures, h.failures, __ATOMIC_RELAXED);
            uint64_t now = dm_now_us();
            if (rc != logged_rc || now - logged_us > FAIL_LOG_US) {
                dm_log(DM_LOG_WARNING, "ROLEX retrainer: root %#llx: %s (failures so far %llu)",
                       (unsigned long long)root, dm_strerror(rc), (unsigned long long)h.failures);
                logged_rc = rc, logged_us = now;
            }
        }
        dm_ctx_sleep(&ctx, MN_RETRAINER_POLL_MS * 1000u);
    }
}

static void *retrainer_main(void *arg)
{
    mn_retrainer_t *t = arg;
    const dm_superblock_t *sb = (const dm_superblock_t *)t->base;
    dm_gaddr_t root;
    /* Idle: one in-process load per period, no verbs, nothing else. */
    while (!(root = __atomic_load_n(&sb->rolex_root, __ATOMIC_ACQUIRE)))
        if (wait_stop(t, MN_RETRAINER_IDLE_MS)) return NULL;
    __atomic_store_n(&t->root, root, __ATOMIC_RELEASE);
    if (dm_gaddr_node(root) || dm_gaddr_off(root) >= t->size) {
        dm_log(DM_LOG_WARNING, "ROLEX retrainer: root %#llx is not in this region: not hosted",
               (unsigned long long)root);
        while (!wait_stop(t, 1000))
            ;
        return NULL;
    }
    char uri[64], err[256];
    snprintf(uri, sizeof(uri), "local:%s", t->name);
    const char *uris[1] = {uri};
    uv_loop_t loop;
    dm_worker_t *w = NULL;
    if (t->gate) mn_exec_gate_lock(t->gate); /* the tcp executor takes line locks from now */
    int rc = dm_local_region_adopt(t->name, t->base, t->size);
    if (!rc && uv_loop_init(&loop) == 0) {
        w = dm_worker_create(&loop, uris, 1, err, sizeof(err));
        if (!w) uv_loop_close(&loop);
    } else {
        snprintf(err, sizeof(err), "%s", rc ? dm_strerror(rc) : "no event loop");
    }
    if (!w) {
        dm_log(DM_LOG_WARNING, "ROLEX retrainer: no local worker on the region: %s", err);
        while (!wait_stop(t, 1000))
            ;
        return NULL;
    }
    dm_log(DM_LOG_NOTICE,
           "ROLEX retrainer: hosting the retraining of the index at root %#llx (this node's "
           "only index code)",
           (unsigned long long)root);
    host(t, w, root);
    dm_worker_destroy(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return NULL;
}

int mn_retrainer_start(mn_retrainer_t *t, uint8_t *base, uint64_t size, mn_exec_gate_t *gate,
                       const char *name)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    t->base = base, t->size = size, t->gate = gate;
    snprintf(t->name, sizeof(t->name), "%s", name);
    int e = pthread_create(&t->thread, NULL, retrainer_main, t);
    if (e) {
        errno = e;
        return -1;
    }
    t->running = 1;
    return 0;
}

void mn_retrainer_stop(mn_retrainer_t *t)
{
    if (!t->running) return;
    pthread_mutex_lock(&t->lock);
    __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    t->running = 0;
    if (t->retrains)
        dm_log(DM_LOG_NOTICE, "ROLEX retrainer stopped: %llu retrains, %.1f ms on average",
               (unsigned long long)t->retrains, (double)t->total_us / 1000 / (double)t->retrains);
}
