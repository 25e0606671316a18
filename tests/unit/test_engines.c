/* The index engines a pool is made of (issue 14 item 4, kv/engines.c): chosen by name, recorded
 * in the superblock by the gateway that creates the pool, checked by every one that joins.
 * Unknown names are refused with the engines this build has; a pool recorded with other
 * engines is refused with the pool's own; a pool made before the record (roots set, record
 * 0) is taken for RACE + CHIME and recorded so. */
#include <stdio.h>
#include <string.h>

#include "dmkv/batch.h"
#include "dmkv/index.h"
#include "dmkv/kv.h"
#include "dmkv/superblock.h"
#include "harness.h"
#include "worker_util.h"

static uint64_t engines_word(dm_ctx_t *ctx)
{
    uint64_t v = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(engines)), &v, 8);
    CHECK(dm_batch_exec(ctx, &b) == 0);
    return v;
}

static void set_engines_word(dm_ctx_t *ctx, uint64_t v)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(engines)), &v, 8);
    CHECK(dm_batch_exec(ctx, &b) == 0);
}

static void test_unknown_names(void)
{
    char err[256];
    CHECK(dm_kv_choose_engines("dinomo", NULL, err, sizeof(err)) == -1);
    CHECKF(!strcmp(err, "Unknown point index 'dinomo' (this build has: race, sephash)"), "%s", err);
    CHECK(dm_kv_choose_engines(NULL, "art", err, sizeof(err)) == -1);
    CHECKF(!strcmp(err, "Unknown range index 'art' (this build has: chime, rolex)"), "%s", err);
    CHECK(dm_kv_choose_engines("RACE", "chime", err, sizeof(err)) == 0); /* any case */
    CHECK(!strcmp(dm_kv_point_index()->engine.name, "race"));
    CHECK(!strcmp(dm_kv_range_index()->engine.name, "chime"));
}

static void test_recorded_and_checked(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    dm_worker_t *w = worker_on(&loop, "local:engines");
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    const uint64_t race_chime =
        dm_kv_point_index()->engine.id | (uint64_t)dm_kv_range_index()->engine.id << 8;
    CHECKF(engines_word(&ctx) == race_chime, "recorded %#llx",
           (unsigned long long)engines_word(&ctx));
    /* A pool made with a point engine this build does not have: refused, with its name. */
    set_engines_word(&ctx, 7 | (uint64_t)dm_kv_range_index()->engine.id << 8);
    char err[512];
    const char *uris[1] = {"local:engines"};
    dm_worker_t *w2 = dm_kv_worker_create(&loop, uris, 1, err, sizeof(err));
    CHECK(w2 == NULL);
    CHECKF(strstr(err, "the pool's index engines are #7, which this build does not have (point) "
                       "and chime (range)"),
           "%s", err);
    /* Before the record existed: roots set, record 0. Taken for RACE + CHIME, recorded. */
    set_engines_word(&ctx, 0);
    w2 = worker_on(&loop, "local:engines");
    CHECK(engines_word(&ctx) == race_chime);
    dm_worker_destroy(w2);
    dm_worker_destroy(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

int main(void)
{
    RUN(test_unknown_names);
    RUN(test_recorded_and_checked);
    printf("test_engines: passed\n");
    return 0;
}
