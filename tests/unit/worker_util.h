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

#endif
