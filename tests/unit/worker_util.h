/* Unit tests: a worker on one pool URI ("local:name" for an in-process region). */
#ifndef DMKV_TEST_WORKER_UTIL_H
#define DMKV_TEST_WORKER_UTIL_H

#include "dmkv/kv.h"
#include "harness.h"

/* Connect a worker to uri; the test fails with the connect error otherwise. */
static inline dm_worker_t *worker_on(uv_loop_t *loop, const char *uri)
{
    char err[256];
    const char *uris[1] = {uri};
    dm_worker_t *w = dm_kv_worker_create(loop, uris, 1, err, sizeof(err));
    CHECKF(w, "%s", err);
    return w;
}

/* A worker on uri with no index attached (tests of one index structure on its own). */
static inline dm_worker_t *bare_worker(uv_loop_t *loop, const char *uri)
{
    char err[256];
    const char *uris[1] = {uri};
    dm_worker_t *w = dm_worker_create(loop, uris, 1, err, sizeof(err));
    CHECKF(w, "%s", err);
    return w;
}

/* Destroy w and run its loop until every handle closed. */
static inline void worker_done(dm_worker_t *w, uv_loop_t *loop)
{
    dm_worker_destroy(w);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
}

#endif
