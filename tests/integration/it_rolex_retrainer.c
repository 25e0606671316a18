/* ROLEX retraining hosted by a real dmkv-memnode (memnode/mn_retrainer.c; ROLEX §3.5, §4.6).
 * This process builds a small index through a worker of its own on the node's URI, records
 * its root in node 0's superblock (dm_rolex_host_record) and inserts a few thousand keys, so
 * that chains of synonym leaves grow; the memory node's thread sees the leaves taken and
 * retrains the index with no gateway's help. Checked: the model version moves within 30 s
 * (a handle notices it by itself, on a search) and the node logs the retrains; every key is
 * found and a scan returns exactly the key set; a search through the node's model costs fewer
 * round trips than through the build's; the node stops cleanly on SIGTERM, thread joined.
 * Skips with the in-process `local` pool (no memory node process to host anything). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmkv/errors.h"
#include "dmkv/rolex.h"
#include "dmkv/stats.h"
#include "dmkv/worker.h"
#include "integration/it_check.h"
#include "integration/procs.h"

enum { N = 4000, STEP = 20 }; /* keys 0..N-1; the build holds every STEP-th */

static char in[N];

static void key_of(int i, char *k, size_t cap)
{
    snprintf(k, cap, "rx%07d", i);
}

/* Every key as in[] through r, and a scan of everything returns exactly the keys present. */
static void check_keys(dm_worker_t *w, dm_rolex_t *r)
{
    static dm_rolex_key_t out[N + 1];
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_SCAN);
    size_t got, m = 0;
    CHECK(dm_rolex_scan(&ctx, r, "", 0, N + 1, out, &got) == 0);
    char k[32];
    for (int i = 0; i < N; i++) {
        key_of(i, k, sizeof(k));
        int rc = dm_rolex_search(&ctx, r, k, strlen(k));
        CHECKF(rc == in[i], "%s: search %d, want %d", k, rc, in[i]);
        if (!in[i]) continue;
        CHECKF(m < got && out[m].len == strlen(k) && !memcmp(out[m].key, k, out[m].len),
               "scan key %zu: want %s", m, k);
        m++;
    }
    CHECKF(got == m, "scan: %zu keys, want %zu", got, m);
}

/* Round trips per search of every key through r. */
static double search_rtts(dm_worker_t *w, dm_rolex_t *r)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_GET);
    dm_cls_stats_t s0, s1;
    char k[32];
    dm_stats_get(DM_CLS_GET, &s0);
    for (int i = 0; i < N; i++) {
        key_of(i, k, sizeof(k));
        CHECK(dm_rolex_search(&ctx, r, k, strlen(k)) == in[i]);
    }
    dm_stats_get(DM_CLS_GET, &s1);
    return (double)(s1.rtts - s0.rtts) / N;
}

int main(void)
{
    it_begin("it_rolex_retrainer", 400);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    const char *uris[1] = {pool.uri};
    dm_worker_t *w = dm_worker_create(&loop, uris, 1, err, sizeof(err));
    CHECKF(w, "worker on %s: %s", pool.uri, err);
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);

    static char kb[N / STEP][16];
    static const char *keys[N / STEP];
    static size_t lens[N / STEP];
    size_t n = 0;
    for (int i = 0; i < N; i += STEP) {
        key_of(i, kb[n], sizeof(kb[n]));
        keys[n] = kb[n], lens[n] = strlen(kb[n]), n++;
        in[i] = 1;
    }
    dm_rolex_cfg_t cfg = {.eps = 1, .fill = 12, .spare = 2000};
    dm_gaddr_t root;
    CHECK(dm_rolex_build(&ctx, keys, lens, n, &cfg, &root) == 0);
    CHECK(dm_rolex_host_record(&ctx, root) == 0);
    CHECK(dm_rolex_retrain(&ctx, root, NULL) == DM_EINVAL); /* the node's to retrain now */
    dm_rolex_t *r, *stale;
    CHECK(dm_rolex_open(&ctx, root, &r) == 0);
    CHECK(dm_rolex_open(&ctx, root, &stale) == 0);
    dm_rolex_follow(stale, 0); /* keeps the build's model, for the comparison */
    fprintf(stderr, "built %zu keys, root %#llx recorded for the memory node\n", n,
            (unsigned long long)root);

    /* DMKV_IT_SCALE shortens the inserts (the rxe guest: 52 ms each), down to 60%, which
     * still takes the synonym leaves a retrain needs. */
    int upto = it_scaled(N) < N * 3 / 5 ? N * 3 / 5 : it_scaled(N);
    char k[32];
    long long t0 = it_now_ms();
    for (int i = 0; i < upto; i++) {
        if (in[i]) continue;
        key_of(i, k, sizeof(k));
        int rc = dm_rolex_insert(&ctx, r, k, strlen(k));
        CHECKF(rc == 0, "insert %s: %d", k, rc);
        in[i] = 1;
        if (i % 7 == 0) {
            CHECKF(dm_rolex_remove(&ctx, r, k, strlen(k)) == 1, "remove %s", k);
            in[i] = 0;
        }
    }
    uint64_t prim, syn;
    CHECK(dm_rolex_leaf_counts(&ctx, r, &prim, &syn) == 0);
    fprintf(stderr, "inserted in %lld ms: %llu primary leaves, %llu synonym leaves\n",
            it_now_ms() - t0, (unsigned long long)prim, (unsigned long long)syn);
    CHECK(syn >= 2 * DM_ROLEX_RETRAIN_MIN);

    /* The node retrains by itself; this handle notices the new model on a search. */
    long long w0 = it_now_ms();
    while (dm_rolex_model_version(r) < 2 || !it_log_count(&pool.memnode, "ROLEX retrain ")) {
        CHECKF(it_now_ms() - w0 < 30000, "no retrain after 30 s (model version %llu)",
               (unsigned long long)dm_rolex_model_version(r));
        usleep(100 * 1000);
        dm_ctx_init(&ctx, w, DM_CLS_GET);
        CHECK(dm_rolex_search(&ctx, r, "rx0000000", 9) == 1);
    }
    usleep(300 * 1000); /* let a retrain under way (taken grew since the last) finish */
    dm_ctx_init(&ctx, w, DM_CLS_GET);
    CHECK(dm_rolex_search(&ctx, r, "rx0000000", 9) == 1);
    int logged = it_log_count(&pool.memnode, "ROLEX retrain ");
    fprintf(stderr, "model version %llu after %lld ms; the memory node logged %d retrains\n",
            (unsigned long long)dm_rolex_model_version(r), it_now_ms() - w0, logged);
    CHECK(it_log_count(&pool.memnode, "ROLEX retrainer: hosting") == 1);
    CHECK(logged >= 1 && dm_rolex_model_version(stale) == 1);

    check_keys(w, r);
    check_keys(w, stale);
    double after = search_rtts(w, r), before = search_rtts(w, stale);
    fprintf(stderr, "search: %.2f RTTs through the memory node's model, %.2f through the build's\n",
            after, before);
    CHECK(after < before);

    dm_rolex_close(r);
    dm_rolex_close(stale);
    dm_worker_destroy(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    int st = it_proc_stop(&pool.memnode);
    CHECKF(st == 0, "memory node exit status %d", st);
    CHECK(it_log_count(&pool.memnode, "ROLEX retrainer stopped") == 1);
    fprintf(stderr, "it_rolex_retrainer: all passed\n");
    return 0;
}
