/* ROLEX unit tests on the local transport (dmcore/rolex/): key images; bulk build and
 * search of numeric-like keys and keys sharing their first 8 bytes (one image: a synonym
 * chain), present and absent; a scan of all keys; round trips per search. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/lease.h"
#include "dmkv/rolex.h"
#include "dmkv/stats.h"
#include "dmkv/transport.h"
#include "harness.h"
#include "../dmcore/rolex/rolex_internal.h"

static dm_worker_t *bare_worker(uv_loop_t *loop, const char *uri)
{
    char err[256];
    const char *uris[1] = {uri};
    dm_worker_t *w = dm_worker_create(loop, uris, 1, err, sizeof(err));
    CHECKF(w, "%s", err);
    return w;
}

static void worker_done(dm_worker_t *w, uv_loop_t *loop)
{
    dm_worker_destroy(w);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
}

/* The key set: i in [0, NK) -> "k%07d" (numeric, images differ), then "prefix00%05d"
 * (NP keys, one image), then "user:%010d" (NU keys, one image "user:000"). */
enum { NK = 6000, NP = 200, NU = 100, NALL = NK + NP + NU };
static void key_of(int i, char *k, size_t cap)
{
    if (i < NK)
        snprintf(k, cap, "k%07d", i);
    else if (i < NK + NP)
        snprintf(k, cap, "prefix00%05d", i - NK);
    else
        snprintf(k, cap, "user:%010d", i - NK - NP);
}

/* Build from the keys i with in[i] set (ascending i is ascending key order). */
static dm_gaddr_t build(dm_ctx_t *ctx, const char *in, const dm_rolex_cfg_t *cfg)
{
    static char kb[NALL][32];
    static const char *keys[NALL];
    static size_t lens[NALL];
    size_t n = 0;
    for (int i = 0; i < NALL; i++)
        if (in[i]) {
            key_of(i, kb[n], sizeof(kb[n]));
            keys[n] = kb[n];
            lens[n] = strlen(kb[n]);
            n++;
        }
    dm_gaddr_t root;
    int rc = dm_rolex_build(ctx, keys, lens, n, cfg, &root);
    CHECKF(rc == 0, "build rc=%d", rc);
    return root;
}

static int search(dm_ctx_t *ctx, dm_rolex_t *r, int i)
{
    char k[32];
    key_of(i, k, sizeof(k));
    int rc = dm_rolex_search(ctx, r, k, strlen(k));
    CHECKF(rc == 0 || rc == 1, "search %s rc=%d", k, rc);
    return rc;
}

/* A scan from key i (or from "" with i < 0) of max keys equals the reference in[]. */
static void check_scan(dm_ctx_t *ctx, dm_rolex_t *r, const char *in, int i, size_t max)
{
    static dm_rolex_key_t out[NALL];
    char k[32] = "";
    if (i >= 0) key_of(i, k, sizeof(k));
    size_t got;
    int rc = dm_rolex_scan(ctx, r, k, strlen(k), max, out, &got);
    CHECKF(rc == 0, "scan rc=%d", rc);
    size_t m = 0;
    for (int j = i < 0 ? 0 : i; j < NALL && m < max; j++) {
        if (!in[j]) continue;
        char want[32];
        key_of(j, want, sizeof(want));
        CHECKF(m < got, "scan from %d: %zu keys, %s missing", i, got, want);
        CHECKF(out[m].len == strlen(want) && !memcmp(out[m].key, want, out[m].len),
               "scan from %d: key %zu is %.*s, want %s", i, m, out[m].len, out[m].key, want);
        m++;
    }
    CHECKF(got == m, "scan from %d: %zu keys, want %zu", i, got, m);
}

static void test_image(void)
{
    CHECK(dm_rolex_image("", 0) == 0);
    CHECK(dm_rolex_image("a", 1) == 0x6100000000000000ull);
    CHECK(dm_rolex_image("abcdefghij", 10) == dm_rolex_image("abcdefgh", 8));
    const char *k[] = {"", "\x01", "a", "a\x00", "ab", "abcdefgh", "abcdefgi", "b", "\xff\xff"};
    for (unsigned i = 1; i < sizeof(k) / sizeof(k[0]); i++) {
        size_t la = strlen(k[i - 1]) + (i - 1 == 3), lb = strlen(k[i]) + (i == 3);
        CHECK(dm_rolex_image(k[i - 1], la) <= dm_rolex_image(k[i], lb));
    }
}

static void test_build_search(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    dm_worker_t *w = bare_worker(&loop, "local:rxbuild");
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    static char in[NALL];
    for (int i = 0; i < NALL; i++)
        in[i] = i >= NK || i % 2 == 0; /* odd numeric keys absent */
    dm_rolex_cfg_t cfg = {.eps = 2, .fill = 12};
    dm_gaddr_t root = build(&ctx, in, &cfg);
    dm_rolex_t *r;
    CHECK(dm_rolex_open(&ctx, root, &r) == 0);
    uint64_t prim, syn;
    CHECK(dm_rolex_leaf_counts(&ctx, r, &prim, &syn) == 0);
    fprintf(stderr, "  %d keys: %lu primary leaves, %lu synonym leaves, %lu segments\n",
            NK / 2 + NP + NU, (unsigned long)prim, (unsigned long)syn,
            (unsigned long)r->hdr.segments);
    CHECK(syn >= (NP - 1) / DM_ROLEX_SLOTS); /* the one-image groups chain */
    dm_cls_stats_t s0, s1;
    dm_ctx_init(&ctx, w, DM_CLS_GET);
    dm_stats_get(DM_CLS_GET, &s0);
    for (int i = 0; i < NK; i++)
        CHECKF(search(&ctx, r, i) == in[i], "k%07d: want %d", i, in[i]);
    dm_stats_get(DM_CLS_GET, &s1);
    fprintf(stderr, "  search of a numeric key: %.2f RTTs\n", (double)(s1.rtts - s0.rtts) / NK);
    CHECK(s1.rtts - s0.rtts == NK); /* one batch: the predicted leaves */
    for (int i = NK; i < NALL; i++)
        CHECKF(search(&ctx, r, i) == 1, "key %d absent", i);
    const char *absent[] = {
        "prefix00", "prefix0000000x", "prefix01", "user:", "user:0000000100", "a", "zzz",
        "k",        "k0000001",       "k9999999"};
    for (unsigned i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
        CHECKF(dm_rolex_search(&ctx, r, absent[i], strlen(absent[i])) == 0, "%s found", absent[i]);
    check_scan(&ctx, r, in, -1, NALL);
    dm_rolex_close(r);
    worker_done(w, &loop);
}

int main(void)
{
    dm_local_set_size(256ull << 20);
    RUN(test_image);
    RUN(test_build_search);
    fprintf(stderr, "test_rolex: all passed\n");
    return 0;
}
