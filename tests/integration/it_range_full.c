/* A ROLEX pool whose leaf region is full (issue 14: ROLEX's region does not grow): SETs of
 * new keys answer "-OOM dmkv: the range index has no free leaf left ...", not maxmemory's
 * text (the pool has memory), and nothing else changes: every key acknowledged reads back,
 * every refused one is absent, DBSIZE and SCAN count exactly the acknowledged ones, and
 * updates of present keys still succeed; INFO shows the region's leaves all taken. The region is
 * made small with --rolex-leaves 3 (3 leaves of 16 keys) in the gateway that creates the pool;
 * a second gateway given another --rolex-leaves joins the pool as it is (the option only
 * shapes a pool being created). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "integration/it_check.h"
#include "integration/procs.h"
#include "integration/scan_util.h"

#define KEYS 200
#define FULL_TEXT "OOM dmkv: the range index has no free leaf left in its leaf region"

int main(void)
{
    it_begin("range_full", 300);
    it_expect_refused("DMKV_GATEWAY", "--memnode local --range-index rolex --rolex-leaves 1",
                      "Invalid rolex-leaves '1'");
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    const char *uris[] = {pool.uri};
    const char *extra[] = {"--range-index", "rolex", "--rolex-leaves", "3", NULL};
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 1, extra);
    redisContext *c = it_connect(gw.port);

    int ok[KEYS], n_ok = 0, n_full = 0;
    for (int i = 0; i < KEYS; i++) {
        redisReply *r = it_cmd(c, "SET full:%03d v%d", i, i);
        ok[i] = r->type == REDIS_REPLY_STATUS;
        if (ok[i]) {
            n_ok++;
        } else {
            CHECKF(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, FULL_TEXT, strlen(FULL_TEXT)),
                   "SET full:%03d: %s", i,
                   r->type == REDIS_REPLY_ERROR ? r->str : "(not an error)");
            n_full++;
        }
        freeReplyObject(r);
    }
    fprintf(stderr, "%d SETs acknowledged, %d refused as the leaf region is full\n", n_ok, n_full);
    CHECK(n_ok >= 16 && n_full > 0);
    /* INFO shows the region's room and that it is all taken */
    CHECK(it_info_field(c, "everything", "rolex_leaf_capacity") == 3);
    CHECK(it_info_field(c, "everything", "rolex_leaves_taken") == 3);

    for (int i = 0; i < KEYS; i++) {
        char want[16];
        snprintf(want, sizeof(want), "v%d", i);
        redisReply *r = it_cmd(c, "GET full:%03d", i);
        if (ok[i])
            EXPECT_BULKS(r, want);
        else
            EXPECT_NIL(r);
    }
    EXPECT_INT(it_cmd(c, "DBSIZE"), n_ok);
    su_keys_t want = {0}, got = {0};
    for (int i = 0; i < KEYS; i++) {
        char k[16];
        int n = snprintf(k, sizeof(k), "full:%03d", i);
        if (ok[i]) su_add(&want, k, (size_t)n);
    }
    su_scan_all(&c, 1, 100, NULL, 0, &got, 1000, "SCAN of a full ROLEX pool");
    su_expect_same(&got, &want, "SCAN of a full ROLEX pool");
    su_free(&want);
    su_free(&got);

    for (int i = 0; i < KEYS; i++) /* a present key changes no leaf: still writable */
        if (ok[i]) EXPECT_STATUS(it_cmd(c, "SET full:%03d again", i), "OK");

    /* A gateway asked for another room joins the pool as it was created. */
    const char *extra2[] = {"--range-index", "rolex", "--rolex-leaves", "1000", NULL};
    it_proc_t gw2;
    it_gateway_start(&gw2, uris, 1, 1, extra2);
    redisContext *c2 = it_connect(gw2.port);
    CHECK(it_info_field(c2, "everything", "rolex_leaf_capacity") == 3);
    redisReply *r = it_cmd(c2, "SET full:new v");
    CHECKF(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, FULL_TEXT, strlen(FULL_TEXT)),
           "SET of a new key through the second gateway: %s",
           r->type == REDIS_REPLY_ERROR ? r->str : "(not an error)");
    freeReplyObject(r);
    redisFree(c2);
    CHECK(it_proc_stop(&gw2) == 0);

    redisFree(c);
    int st = it_proc_stop(&gw);
    if (st != 0) it_proc_dump_log(&gw);
    CHECKF(st == 0, "gateway exit status %d", st);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_range_full: OK\n");
    return 0;
}
