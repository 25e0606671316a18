/* Unit tests: a worker on one pool URI ("local:name" for an in-process region). */
#ifndef DMKV_TEST_WORKER_UTIL_H
#define DMKV_TEST_WORKER_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/kv.h"
#include "dmkv/transport.h"
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

/* Issue 12, item 7: SET key to a 200,000-byte value, then with every batch of the `local`
 * transport delayed 0.4-1.2 s (past the 1 s operation deadline) GET it twice through w: the
 * value must come back whole. The delay stays on when it returns (the caller turns it off
 * with dm_local_inject(0, 0, NULL, NULL)), so it may walk the pool slowly too. */
static inline void check_slow_large_get(dm_worker_t *w, const char *key)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_GET);
    size_t n = 200000, klen = strlen(key);
    uint8_t *buf = malloc(n);
    CHECK(buf);
    for (size_t j = 0; j < n; j++)
        buf[j] = (uint8_t)(j * 7);
    CHECK(dm_kv_set(&ctx, key, klen, buf, n, 0, 0, NULL) == 1);
    dm_local_inject(800000, 0, NULL, NULL);
    for (int i = 0; i < 2; i++) {
        dm_value_t v;
        dm_ctx_init(&ctx, w, DM_CLS_GET);
        uint64_t t0 = dm_now_us();
        int rc = dm_kv_get(&ctx, key, klen, &v);
        fprintf(stderr, "  GET of %zu bytes at 0.4-1.2 s per batch: rc %d after %.1f s\n", n, rc,
                (double)(dm_now_us() - t0) / 1e6);
        CHECK(rc == 1 && v.len == n && memcmp(v.data, buf, n) == 0);
        dm_value_free(&v);
    }
    free(buf);
}

#endif
