/* 100k keys (scaled by DMKV_IT_SCALE) written with one pipeline, then: DBSIZE exact, SCAN full
 * iteration returns exactly the key set (COUNT 10/1000, MATCH, TYPE), KEYS with patterns, deletion
 * of half and the same checks again. */
#include <stdint.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define NKEYS 100000

static redisContext *c;

typedef struct keyset {
    char **k;
    size_t *len;
    size_t n, cap;
} keyset_t;

static void ks_add(keyset_t *s, const char *p, size_t n)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->k = realloc(s->k, s->cap * sizeof(char *));
        s->len = realloc(s->len, s->cap * sizeof(size_t));
    }
    s->k[s->n] = malloc(n + 1);
    memcpy(s->k[s->n], p, n);
    s->k[s->n][n] = 0;
    s->len[s->n] = n;
    s->n++;
}

static void ks_free(keyset_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->k[i]);
    free(s->k);
    free(s->len);
    memset(s, 0, sizeof(*s));
}

typedef struct kv {
    const char *p;
    size_t n;
} kv_t;

static int kv_cmp(const void *a, const void *b)
{
    const kv_t *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int r = memcmp(x->p, y->p, n);
    return r ? r : (x->n < y->n ? -1 : x->n > y->n);
}

/* Sorted, de-duplicated view of s (pointers into s). */
static kv_t *ks_sorted(const keyset_t *s, size_t *n)
{
    kv_t *v = malloc((s->n + 1) * sizeof(kv_t));
    for (size_t i = 0; i < s->n; i++)
        v[i] = (kv_t){s->k[i], s->len[i]};
    qsort(v, s->n, sizeof(kv_t), kv_cmp);
    size_t keep = 0;
    for (size_t i = 0; i < s->n; i++)
        if (!keep || kv_cmp(&v[keep - 1], &v[i]) != 0) v[keep++] = v[i];
    *n = keep;
    return v;
}

static void expect_same(const keyset_t *got, const keyset_t *want, const char *what)
{
    size_t ng, nw;
    kv_t *g = ks_sorted(got, &ng), *w = ks_sorted(want, &nw);
    CHECKF(ng == nw, "%s: %zu distinct keys, want %zu", what, ng, nw);
    for (size_t i = 0; i < ng; i++)
        CHECKF(kv_cmp(&g[i], &w[i]) == 0, "%s: key %zu differs ('%.*s' vs '%.*s')", what, i,
               (int)g[i].n, g[i].p, (int)w[i].n, w[i].p);
    free(g);
    free(w);
}

/* Full SCAN iteration with extra arguments; returns the keys seen. */
static void scan_all(keyset_t *out, const char *count, const char *match, const char *type)
{
    char cursor[32] = "0";
    int pages = 0;
    do {
        const char *argv[10];
        size_t lens[10];
        int n = 0;
        argv[n++] = "SCAN";
        argv[n++] = cursor;
        if (count) {
            argv[n++] = "COUNT";
            argv[n++] = count;
        }
        if (match) {
            argv[n++] = "MATCH";
            argv[n++] = match;
        }
        if (type) {
            argv[n++] = "TYPE";
            argv[n++] = type;
        }
        for (int i = 0; i < n; i++)
            lens[i] = strlen(argv[i]);
        redisReply *r = redisCommandArgv(c, n, argv, lens);
        CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        CHECK(r->element[0]->type == REDIS_REPLY_STRING);
        CHECK(r->element[1]->type == REDIS_REPLY_ARRAY);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        /* Every cursor fits a double exactly (node-redis keeps it as a JavaScript number). */
        CHECKF(strtoull(cursor, NULL, 10) < (1ull << 53), "cursor %s is 2^53 or more", cursor);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            redisReply *k = r->element[1]->element[i];
            CHECK(k->type == REDIS_REPLY_STRING);
            ks_add(out, k->str, k->len);
        }
        freeReplyObject(r);
        CHECKF(++pages < 10000000, "SCAN does not terminate");
    } while (strcmp(cursor, "0") != 0);
}

static void keys_cmd(keyset_t *out, const char *pattern)
{
    redisReply *r = it_cmd(c, "KEYS %s", pattern);
    CHECK(r->type == REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < r->elements; i++)
        ks_add(out, r->element[i]->str, r->element[i]->len);
    freeReplyObject(r);
}

static void filter(const keyset_t *in, keyset_t *out, const char *prefix)
{
    for (size_t i = 0; i < in->n; i++)
        if (in->len[i] >= strlen(prefix) && memcmp(in->k[i], prefix, strlen(prefix)) == 0)
            ks_add(out, in->k[i], in->len[i]);
}

static void check_everything(const keyset_t *want)
{
    redisReply *r = it_cmd(c, "DBSIZE");
    CHECKF(r->type == REDIS_REPLY_INTEGER && r->integer == (long long)want->n,
           "DBSIZE %lld, want %zu", r->integer, want->n);
    freeReplyObject(r);

    keyset_t got = {0};
    scan_all(&got, NULL, NULL, NULL);
    expect_same(&got, want, "SCAN");
    ks_free(&got);
    scan_all(&got, "1000", NULL, "string");
    expect_same(&got, want, "SCAN COUNT 1000 TYPE string");
    ks_free(&got);
    scan_all(&got, "1000", NULL, "hash");
    CHECK(got.n == 0);
    ks_free(&got);

    keyset_t sub = {0};
    filter(want, &sub, "key:0001");
    scan_all(&got, "500", "key:0001*", NULL);
    expect_same(&got, &sub, "SCAN MATCH key:0001*");
    ks_free(&got);
    keys_cmd(&got, "key:0001*");
    expect_same(&got, &sub, "KEYS key:0001*");
    CHECK(got.n == sub.n); /* KEYS never repeats a key */
    ks_free(&got);
    ks_free(&sub);

    keys_cmd(&got, "*");
    expect_same(&got, want, "KEYS *");
    CHECK(got.n == want->n);
    ks_free(&got);
}

int main(void)
{
    it_begin("scan", 600);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 1, NULL);
    c = it_connect(gw.port);
    EXPECT_STATUS(it_cmd(c, "FLUSHALL"), "OK");

    keyset_t want = {0};
    char key[64];
    const int nkeys = it_scaled(NKEYS);
    for (int i = 0; i < nkeys; i++) {
        int n = snprintf(key, sizeof(key), "key:%06d", i);
        if (i % 1000 == 7) /* a few binary keys */
            n = snprintf(key, sizeof(key), "bin\r\n%d", i), key[3] = 0;
        ks_add(&want, key, (size_t)n);
        redisAppendCommand(c, "SET %b v%d", key, (size_t)n, i);
        if (i % 5000 == 4999 || i == nkeys - 1) {
            for (int j = 0; j < (i % 5000) + 1; j++) {
                redisReply *r;
                CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
                EXPECT_STATUS(r, "OK");
            }
        }
    }
    fprintf(stderr, "wrote %d keys\n", nkeys);
    check_everything(&want);

    /* KEYS with '?' and a class */
    keyset_t got = {0};
    keys_cmd(&got, "key:00010[0-4]");
    CHECK(got.n == 5);
    ks_free(&got);
    keys_cmd(&got, "key:00010?");
    CHECK(got.n == 10);
    ks_free(&got);
    keys_cmd(&got, "key:000100");
    CHECK(got.n == 1);
    ks_free(&got);

    /* delete every other key (pipelined), check again */
    keyset_t left = {0};
    size_t pending = 0;
    for (size_t i = 0; i < want.n; i++) {
        if (i % 2 == 0) {
            redisAppendCommand(c, "DEL %b", want.k[i], want.len[i]);
            pending++;
        } else {
            ks_add(&left, want.k[i], want.len[i]);
        }
        if (pending == 5000 || (i == want.n - 1 && pending)) {
            for (size_t j = 0; j < pending; j++) {
                redisReply *r;
                CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
                EXPECT_INT(r, 1);
            }
            pending = 0;
        }
    }
    fprintf(stderr, "deleted half\n");
    check_everything(&left);
    ks_free(&left);
    ks_free(&want);

    EXPECT_STATUS(it_cmd(c, "FLUSHALL"), "OK");
    EXPECT_INT(it_cmd(c, "DBSIZE"), 0);
    redisReply *r = it_cmd(c, "SCAN 0 COUNT 1000");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->element[1]->elements == 0);
    freeReplyObject(r);
    redisFree(c);
    int st = it_proc_stop(&gw);
    if (st != 0) it_proc_dump_log(&gw);
    CHECKF(st == 0, "gateway exit status %d", st);
    if (pool.shared) it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_scan: OK\n");
    return 0;
}
