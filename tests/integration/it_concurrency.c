/* Many clients at once: 50 connections (one thread each) spread over two gateways on one
 * memory node (or one multi-threaded gateway when only the local pool is available) hammer
 * 200 shared keys with SET/GET/DEL/EXISTS/MSET/MGET, and each also writes its own keys.
 * Afterwards: every reply had the right type, each client's own keys hold exactly what it
 * wrote last, and both gateways agree on every shared key, on DBSIZE and on SCAN. */
#include <pthread.h>
#include <stdint.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define NCLIENTS 50
#define OPS 1500
#define SHARED 200
#define OWN 20

static int ports[2];
static int nports;
static int ops; /* OPS scaled by DMKV_IT_SCALE */

static void *client_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    redisContext *c = it_connect(ports[id % nports]);
    uint64_t x = 88172645463325252ull ^ (uint64_t)(id + 1) * 0x9E3779B97F4A7C15ull;
    int own_last[OWN];
    for (int i = 0; i < OWN; i++)
        own_last[i] = -1;
    for (int j = 0; j < ops; j++) { /* an error reply fails with its text, before its type */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int k = (int)(x % SHARED), op = (int)((x >> 20) % 8);
        redisReply *r;
        switch (op) {
        case 0:
        case 1:
            r = it_cmd(c, "SET s:%d c%d:%d", k, id, j);
            CHECKF(r->type != REDIS_REPLY_ERROR, "client %d op %d: %s", id, op, r->str);
            CHECK(r->type == REDIS_REPLY_STATUS);
            break;
        case 2:
            r = it_cmd(c, "GET s:%d", k);
            CHECKF(r->type != REDIS_REPLY_ERROR, "client %d op %d: %s", id, op, r->str);
            CHECK(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL);
            if (r->type == REDIS_REPLY_STRING)
                CHECK(r->str[0] == 'c' || r->str[0] == 'm'); /* never torn or foreign */
            break;
        case 3:
            r = it_cmd(c, "DEL s:%d", k);
            CHECKF(r->type != REDIS_REPLY_ERROR, "client %d op %d: %s", id, op, r->str);
            CHECK(r->type == REDIS_REPLY_INTEGER && (r->integer == 0 || r->integer == 1));
            break;
        case 4:
            r = it_cmd(c, "EXISTS s:%d s:%d", k, (k + 1) % SHARED);
            CHECKF(r->type != REDIS_REPLY_ERROR, "client %d op %d: %s", id, op, r->str);
            CHECK(r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && r->integer <= 2);
            break;
        case 5:
            r = it_cmd(c, "MSET s:%d m%d s:%d m%d", k, id, (k + 7) % SHARED, id);
            CHECKF(r->type != REDIS_REPLY_ERROR, "client %d op %d: %s", id, op, r->str);
            CHECK(r->type == REDIS_REPLY_STATUS);
            break;
        case 6:
            r = it_cmd(c, "MGET s:%d s:%d s:%d", k, (k + 1) % SHARED, (k + 2) % SHARED);
            CHECKF(r->type != REDIS_REPLY_ERROR, "client %d op %d: %s", id, op, r->str);
            CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
            break;
        default: {
            int o = (int)((x >> 32) % OWN);
            r = it_cmd(c, "SET own:%d:%d %d", id, o, j);
            CHECKF(r->type != REDIS_REPLY_ERROR, "client %d op %d: %s", id, op, r->str);
            CHECK(r->type == REDIS_REPLY_STATUS);
            own_last[o] = j;
            break;
        }
        }
        freeReplyObject(r);
    }
    /* own keys: exactly the last write, seen through the other gateway too */
    redisContext *o = nports > 1 ? it_connect(ports[(id + 1) % nports]) : c;
    for (int i = 0; i < OWN; i++) {
        redisReply *r = it_cmd(o, "GET own:%d:%d", id, i);
        if (own_last[i] < 0) {
            CHECK(r->type == REDIS_REPLY_NIL);
            freeReplyObject(r);
        } else {
            char want[32];
            snprintf(want, sizeof(want), "%d", own_last[i]);
            EXPECT_BULKS(r, want);
        }
    }
    if (o != c) redisFree(o);
    redisFree(c);
    return NULL;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* All keys via full SCAN, sorted and de-duplicated; returns count. */
static size_t scan_sorted(redisContext *c, char ***out)
{
    size_t n = 0, cap = 1024;
    char **keys = malloc(cap * sizeof(char *));
    char cursor[32] = "0";
    do {
        redisReply *r = it_cmd(c, "SCAN %s COUNT 100", cursor);
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            if (n == cap) keys = realloc(keys, (cap *= 2) * sizeof(char *));
            keys[n++] = strdup(r->element[1]->element[i]->str);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    qsort(keys, n, sizeof(char *), cmp_str);
    size_t keep = 0;
    for (size_t i = 0; i < n; i++) {
        if (keep && strcmp(keys[keep - 1], keys[i]) == 0)
            free(keys[i]);
        else
            keys[keep++] = keys[i];
    }
    *out = keys;
    return keep;
}

/* DBSIZE through one gateway counts every new key and DEL another gateway has answered,
 * even when that gateway's fire-and-forget messages are slow: a third gateway holds every
 * such batch back 400 ms (fault point 'posted'). Before 2026-11-26 the key counter's FAA
 * was one of them, so a DBSIZE sent right after a DEL's reply could still count the key. */
static void dbsize_after_replies(const char *const *uris, redisContext *a)
{
    it_proc_t slow;
    setenv("DMKV_FAULT_STALL", "posted:400:1", 1);
    it_gateway_start(&slow, uris, 1, 1, NULL);
    unsetenv("DMKV_FAULT_STALL");
    redisContext *s = it_connect(slow.port);
    EXPECT_INT(it_cmd(a, "DBSIZE"), 0);
    for (int i = 0; i < 6; i++) {
        EXPECT_STATUS(it_cmd(s, "SET slowpost:%d v", i), "OK");
        EXPECT_INT(it_cmd(a, "DBSIZE"), 1);
        EXPECT_INT(it_cmd(s, "DEL slowpost:%d", i), 1);
        EXPECT_INT(it_cmd(a, "DBSIZE"), 0);
    }
    redisFree(s);
    /* Batches still held back at the stop are freed, not leaked (LeakSanitizer's exit code). */
    int st = it_proc_stop(&slow);
    if (st != 0) it_proc_dump_log(&slow);
    CHECKF(st == 0, "the gateway with held-back batches exited with status %d", st);
}

int main(void)
{
    it_begin("concurrency", 600);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};
    it_proc_t gw[2];
    if (pool.shared) {
        it_gateway_start(&gw[0], uris, 1, 2, NULL);
        it_gateway_start(&gw[1], uris, 1, 1, NULL);
        nports = 2;
    } else {
        fprintf(stderr, "no memory node: one gateway with 4 threads\n");
        it_gateway_start(&gw[0], uris, 1, 4, NULL);
        nports = 1;
    }
    for (int i = 0; i < nports; i++)
        ports[i] = gw[i].port;
    redisContext *a = it_connect(ports[0]);
    redisContext *b = it_connect(ports[nports - 1]);
    EXPECT_STATUS(it_cmd(a, "FLUSHALL"), "OK");

    /* a write through one gateway is visible through the other at once */
    EXPECT_STATUS(it_cmd(a, "SET cross 1"), "OK");
    EXPECT_BULKS(it_cmd(b, "GET cross"), "1");
    EXPECT_STATUS(it_cmd(b, "SET cross 2"), "OK");
    EXPECT_BULKS(it_cmd(a, "GET cross"), "2");
    EXPECT_INT(it_cmd(b, "DEL cross"), 1);
    EXPECT_NIL(it_cmd(a, "GET cross"));

    if (pool.shared) dbsize_after_replies(uris, a);

    ops = it_scaled(OPS);
    pthread_t th[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++)
        CHECK(pthread_create(&th[i], NULL, client_main, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < NCLIENTS; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr, "%d clients x %d ops done\n", NCLIENTS, ops);

    long long existing = 0;
    for (int k = 0; k < SHARED; k++) {
        redisReply *x = it_cmd(a, "GET s:%d", k), *y = it_cmd(b, "GET s:%d", k);
        CHECKF(x->type == y->type, "key s:%d: types %d vs %d", k, x->type, y->type);
        if (x->type == REDIS_REPLY_STRING) {
            CHECK(x->len == y->len && memcmp(x->str, y->str, x->len) == 0);
            existing++;
        }
        freeReplyObject(x);
        freeReplyObject(y);
    }
    redisReply *ra = it_cmd(a, "DBSIZE"), *rb = it_cmd(b, "DBSIZE");
    CHECK(ra->type == REDIS_REPLY_INTEGER && rb->type == REDIS_REPLY_INTEGER);
    CHECKF(ra->integer == rb->integer, "DBSIZE %lld vs %lld", ra->integer, rb->integer);
    long long dbsize = ra->integer;
    freeReplyObject(ra);
    freeReplyObject(rb);
    char **ka, **kb;
    size_t na = scan_sorted(a, &ka), nb = scan_sorted(b, &kb);
    CHECKF(na == nb && (long long)na == dbsize, "SCAN %zu/%zu keys, DBSIZE %lld", na, nb, dbsize);
    long long shared_seen = 0;
    for (size_t i = 0; i < na; i++) {
        CHECK(strcmp(ka[i], kb[i]) == 0);
        if (strncmp(ka[i], "s:", 2) == 0) shared_seen++;
        free(ka[i]);
        free(kb[i]);
    }
    free(ka);
    free(kb);
    CHECKF(shared_seen == existing, "SCAN shows %lld shared keys, GET %lld", shared_seen, existing);

    redisFree(a);
    redisFree(b);
    for (int i = 0; i < nports; i++) {
        int st = it_proc_stop(&gw[i]);
        if (st != 0) it_proc_dump_log(&gw[i]);
        CHECKF(st == 0, "gateway %d exit status %d", i, st);
    }
    if (pool.shared) it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_concurrency: OK\n");
    return 0;
}
