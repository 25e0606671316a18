/* Helpers shared by the ordered-SCAN integration tests (it_chime_storm, it_scan_guarantee,
 * it_scan_1m): binary-safe key lists, memcmp order (a prefix sorts first), SCAN pages and
 * full iterations that check the order of everything returned, a reference glob matcher
 * with Redis's semantics, and pipelined GET/SET helpers. Header-only (static inline). */
#ifndef DMKV_IT_SCAN_UTIL_H
#define DMKV_IT_SCAN_UTIL_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "integration/it_check.h"
#include "integration/procs.h"

/* ---- key lists ---- */

typedef struct su_key {
    char *p;
    size_t n;
} su_key_t;

typedef struct su_keys {
    su_key_t *v;
    size_t n, cap;
} su_keys_t;

static inline void su_add(su_keys_t *s, const void *p, size_t n)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        CHECK(s->v);
    }
    s->v[s->n].p = malloc(n + 1);
    CHECK(s->v[s->n].p);
    memcpy(s->v[s->n].p, p, n);
    s->v[s->n].p[n] = 0;
    s->v[s->n].n = n;
    s->n++;
}

static inline void su_free(su_keys_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].p);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

/* Lexicographic byte order, a proper prefix first (Redis's and CHIME's key order). */
static inline int su_cmp(const void *a, size_t an, const void *b, size_t bn)
{
    int r = memcmp(a, b, an < bn ? an : bn);
    if (r) return r;
    return an < bn ? -1 : an > bn;
}

static inline int su_key_cmp(const void *a, const void *b)
{
    const su_key_t *x = a, *y = b;
    return su_cmp(x->p, x->n, y->p, y->n);
}

/* Sort s and drop repeats; returns how many repeats were dropped. */
static inline size_t su_sort_uniq(su_keys_t *s)
{
    if (s->n > 1) qsort(s->v, s->n, sizeof(*s->v), su_key_cmp);
    size_t keep = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (keep && su_key_cmp(&s->v[keep - 1], &s->v[i]) == 0)
            free(s->v[i].p);
        else
            s->v[keep++] = s->v[i];
    }
    size_t dropped = s->n - keep;
    s->n = keep;
    return dropped;
}

/* Is p[0..n) in the sorted list s? */
static inline bool su_contains(const su_keys_t *s, const void *p, size_t n)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = su_cmp(s->v[mid].p, s->v[mid].n, p, n);
        if (r == 0) return true;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* Printable form of a binary key for messages (\xNN escapes, cut at about 120 bytes). */
static inline const char *su_show(const void *p, size_t n, char *buf, size_t bufsz)
{
    const unsigned char *s = p;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < bufsz; i++) {
        if (o > 120) {
            o += (size_t)snprintf(buf + o, bufsz - o, "...(%zu bytes)", n);
            break;
        }
        if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
            buf[o++] = (char)s[i];
        else
            o += (size_t)snprintf(buf + o, bufsz - o, "\\x%02x", s[i]);
    }
    buf[o < bufsz ? o : bufsz - 1] = 0;
    return buf;
}

/* Fail unless got (sorted, unique) and want (sorted, unique) hold the same keys; names the
 * first few keys missing from got and the first few that should not be there. */
static inline void su_expect_same(const su_keys_t *got, const su_keys_t *want, const char *what)
{
    size_t i = 0, j = 0, missing = 0, extra = 0;
    char b[512];
    while (i < got->n || j < want->n) {
        int r = i == got->n    ? 1
                : j == want->n ? -1
                               : su_cmp(got->v[i].p, got->v[i].n, want->v[j].p, want->v[j].n);
        if (r == 0) {
            i++, j++;
        } else if (r < 0) {
            if (extra++ < 5)
                fprintf(stderr, "%s: unexpected key '%s'\n", what,
                        su_show(got->v[i].p, got->v[i].n, b, sizeof(b)));
            i++;
        } else {
            if (missing++ < 5)
                fprintf(stderr, "%s: missing key '%s'\n", what,
                        su_show(want->v[j].p, want->v[j].n, b, sizeof(b)));
            j++;
        }
    }
    CHECKF(missing == 0 && extra == 0, "%s: %zu keys, want %zu: %zu missing, %zu unexpected", what,
           got->n, want->n, missing, extra);
}

/* ---- SCAN ---- */

/* Send SCAN cursor [COUNT count] [MATCH match] (count 0 = no COUNT, match NULL = no MATCH)
 * and return the raw reply (may be an error; caller frees). */
static inline redisReply *su_scan_raw(redisContext *c, const char *cursor, long count,
                                      const char *match, size_t mlen)
{
    const char *argv[6];
    size_t lens[6];
    char cnt[24];
    int n = 0;
    argv[n] = "SCAN", lens[n++] = 4;
    argv[n] = cursor, lens[n++] = strlen(cursor);
    if (count > 0) {
        snprintf(cnt, sizeof(cnt), "%ld", count);
        argv[n] = "COUNT", lens[n++] = 5;
        argv[n] = cnt, lens[n++] = strlen(cnt);
    }
    if (match) {
        argv[n] = "MATCH", lens[n++] = 5;
        argv[n] = match, lens[n++] = mlen;
    }
    redisReply *r = redisCommandArgv(c, n, argv, lens);
    CHECKF(r, "SCAN %s: connection failed: %s", cursor, c->errstr);
    return r;
}

/* One SCAN page that must succeed: checks the reply's shape and copies the next cursor to
 * next (32 bytes). Returns the reply (caller frees); the keys are r->element[1]. */
static inline redisReply *su_scan_page(redisContext *c, const char *cursor, long count,
                                       const char *match, size_t mlen, char *next)
{
    redisReply *r = su_scan_raw(c, cursor, count, match, mlen);
    CHECKF(r->type == REDIS_REPLY_ARRAY && r->elements == 2, "SCAN %s: reply type %d%s%s", cursor,
           r->type, r->type == REDIS_REPLY_ERROR ? ": " : "",
           r->type == REDIS_REPLY_ERROR ? r->str : "");
    CHECKF(r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len > 0 &&
               r->element[0]->len < 32,
           "SCAN %s: cursor is not a bulk string", cursor);
    CHECKF(r->element[1]->type == REDIS_REPLY_ARRAY, "SCAN %s: keys are not an array", cursor);
    for (size_t i = 0; i < r->element[1]->elements; i++)
        CHECKF(r->element[1]->element[i]->type == REDIS_REPLY_STRING,
               "SCAN %s: key %zu is not a bulk string", cursor, i);
    memcpy(next, r->element[0]->str, r->element[0]->len);
    next[r->element[0]->len] = 0;
    return r;
}

/* What a full iteration saw. */
typedef struct su_iter {
    size_t pages;           /* SCAN calls, the last one (cursor 0) included */
    size_t keys;            /* keys returned */
    size_t pages_after_end; /* calls after the page holding the last key returned */
} su_iter_t;

/* A full SCAN iteration from cursor 0 to cursor 0, page i sent to cs[i % ncs] (so cursors
 * hop between gateways when ncs > 1). Appends every key returned to out (when not NULL).
 * Fails (naming what) unless the keys of the whole iteration come in strictly increasing
 * memcmp order (so no key is returned twice). max_pages bounds the walk. */
static inline su_iter_t su_scan_all(redisContext **cs, int ncs, long count, const char *match,
                                    size_t mlen, su_keys_t *out, size_t max_pages, const char *what)
{
    su_iter_t it = {0};
    char cursor[32] = "0", next[32];
    char *prev = NULL;
    size_t prevn = 0, last_key_page = 0;
    char b1[512], b2[512];
    do {
        redisContext *c = cs[it.pages % (size_t)ncs];
        redisReply *r = su_scan_page(c, cursor, count, match, mlen, next);
        it.pages++;
        redisReply *ks = r->element[1];
        for (size_t i = 0; i < ks->elements; i++) {
            const char *k = ks->element[i]->str;
            size_t kn = ks->element[i]->len;
            if (prev) {
                int o = su_cmp(prev, prevn, k, kn);
                CHECKF(o < 0,
                       "%s: page %zu (cursor %s) returns '%s' after '%s': SCAN must be in "
                       "strictly increasing order (%s)",
                       what, it.pages, cursor, su_show(k, kn, b1, sizeof(b1)),
                       su_show(prev, prevn, b2, sizeof(b2)), o == 0 ? "a repeat" : "out of order");
            }
            prev = realloc(prev, kn + 1);
            memcpy(prev, k, kn);
            prevn = kn;
            if (out) su_add(out, k, kn);
            it.keys++;
            last_key_page = it.pages;
        }
        freeReplyObject(r);
        memcpy(cursor, next, sizeof(cursor));
        CHECKF(it.pages < max_pages, "%s: SCAN did not end within %zu calls", what, max_pages);
    } while (strcmp(cursor, "0") != 0);
    it.pages_after_end = it.pages - last_key_page;
    free(prev);
    return it;
}

/* KEYS pattern (binary-safe); appends the keys to out and fails on an error reply. */
static inline void su_keys_cmd(redisContext *c, const char *pat, size_t plen, su_keys_t *out)
{
    const char *argv[2] = {"KEYS", pat};
    size_t lens[2] = {4, plen};
    redisReply *r = redisCommandArgv(c, 2, argv, lens);
    CHECKF(r, "KEYS: connection failed: %s", c->errstr);
    CHECKF(r->type == REDIS_REPLY_ARRAY, "KEYS: reply type %d %s", r->type,
           r->type == REDIS_REPLY_ERROR ? r->str : "");
    for (size_t i = 0; i < r->elements; i++) {
        CHECK(r->element[i]->type == REDIS_REPLY_STRING);
        su_add(out, r->element[i]->str, r->element[i]->len);
    }
    freeReplyObject(r);
}

static inline long long su_dbsize(redisContext *c)
{
    redisReply *r = it_cmd(c, "DBSIZE");
    CHECKF(r->type == REDIS_REPLY_INTEGER, "DBSIZE: reply type %d", r->type);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* ---- pipelines ---- */

/* SET every key of keys[from..to) to a value derived from the key, pipelined in batches of
 * batch; every reply must be OK. */
static inline void su_set_many(redisContext *c, const su_keys_t *keys, size_t from, size_t to,
                               size_t batch)
{
    for (size_t i = from; i < to; i += batch) {
        size_t end = i + batch < to ? i + batch : to;
        for (size_t k = i; k < end; k++) {
            const char *argv[3] = {"SET", keys->v[k].p, "v"};
            size_t lens[3] = {3, keys->v[k].n, 1};
            CHECK(redisAppendCommandArgv(c, 3, argv, lens) == REDIS_OK);
        }
        for (size_t k = i; k < end; k++) {
            redisReply *r;
            CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK, "SET: %s", c->errstr);
            EXPECT_STATUS(r, "OK");
        }
    }
}

typedef struct su_load_arg {
    int port;
    const su_keys_t *keys;
    size_t from, to;
} su_load_arg_t;

static inline void *su_load_main(void *arg)
{
    su_load_arg_t *a = arg;
    redisContext *c = it_connect(a->port);
    su_set_many(c, a->keys, a->from, a->to, 256);
    redisFree(c);
    return NULL;
}

/* SET all keys over nconn connections at once (connection t to ports[t % nports]). */
static inline void su_load(const int *ports, int nports, int nconn, const su_keys_t *keys)
{
    pthread_t th[16];
    su_load_arg_t args[16];
    CHECK(nconn > 0 && nconn <= 16);
    for (int t = 0; t < nconn; t++) {
        args[t] = (su_load_arg_t){ports[t % nports], keys, keys->n * (size_t)t / (size_t)nconn,
                                  keys->n * (size_t)(t + 1) / (size_t)nconn};
        CHECK(pthread_create(&th[t], NULL, su_load_main, &args[t]) == 0);
    }
    for (int t = 0; t < nconn; t++)
        pthread_join(th[t], NULL);
}

/* DEL every key of keys[from..to) pipelined; each must have existed when want_one. */
static inline void su_del_many(redisContext *c, const su_keys_t *keys, size_t from, size_t to,
                               size_t batch, bool want_one)
{
    for (size_t i = from; i < to; i += batch) {
        size_t end = i + batch < to ? i + batch : to;
        for (size_t k = i; k < end; k++) {
            const char *argv[2] = {"DEL", keys->v[k].p};
            size_t lens[2] = {3, keys->v[k].n};
            CHECK(redisAppendCommandArgv(c, 2, argv, lens) == REDIS_OK);
        }
        for (size_t k = i; k < end; k++) {
            redisReply *r;
            CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK, "DEL: %s", c->errstr);
            CHECKF(r->type == REDIS_REPLY_INTEGER && (!want_one || r->integer == 1),
                   "DEL: reply type %d value %lld", r->type, r->integer);
            freeReplyObject(r);
        }
    }
}

/* GET every candidate (pipelined) and append the ones that exist to out. */
static inline void su_existing(redisContext *c, const su_keys_t *cand, su_keys_t *out)
{
    const size_t batch = 500;
    for (size_t i = 0; i < cand->n; i += batch) {
        size_t end = i + batch < cand->n ? i + batch : cand->n;
        for (size_t k = i; k < end; k++) {
            const char *argv[2] = {"GET", cand->v[k].p};
            size_t lens[2] = {3, cand->v[k].n};
            CHECK(redisAppendCommandArgv(c, 2, argv, lens) == REDIS_OK);
        }
        for (size_t k = i; k < end; k++) {
            redisReply *r;
            CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK, "GET: %s", c->errstr);
            CHECKF(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL,
                   "GET: reply type %d %s", r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
            if (r->type == REDIS_REPLY_STRING) su_add(out, cand->v[k].p, cand->v[k].n);
            freeReplyObject(r);
        }
    }
}

/* ---- reference glob (Redis's stringmatchlen without nocase, for terminated classes) ---- */

static inline bool su_glob(const char *pat, size_t pl, const char *str, size_t sl)
{
    const unsigned char *p = (const unsigned char *)pat, *s = (const unsigned char *)str;
    while (pl) {
        switch (p[0]) {
        case '*':
            while (pl > 1 && p[1] == '*')
                p++, pl--;
            if (pl == 1) return true;
            for (size_t i = 0; i <= sl; i++)
                if (su_glob((const char *)p + 1, pl - 1, (const char *)s + i, sl - i)) return true;
            return false;
        case '?':
            if (!sl) return false;
            s++, sl--;
            break;
        case '[': {
            if (!sl) return false;
            p++, pl--;
            bool neg = pl && p[0] == '^', m = false;
            if (neg) p++, pl--;
            while (pl && p[0] != ']') {
                if (pl >= 2 && p[0] == '\\') {
                    p++, pl--;
                    if (p[0] == s[0]) m = true;
                } else if (pl >= 3 && p[1] == '-') {
                    unsigned lo = p[0], hi = p[2];
                    if (lo > hi) {
                        unsigned t = lo;
                        lo = hi, hi = t;
                    }
                    if (s[0] >= lo && s[0] <= hi) m = true;
                    p += 2, pl -= 2;
                } else if (p[0] == s[0]) {
                    m = true;
                }
                p++, pl--;
            }
            CHECKF(pl, "su_glob: unterminated class in a test pattern");
            if (neg) m = !m;
            if (!m) return false;
            s++, sl--;
            break;
        }
        case '\\':
            if (pl >= 2) p++, pl--;
            /* fall through */
        default:
            if (!sl || p[0] != s[0]) return false;
            s++, sl--;
            break;
        }
        p++, pl--;
    }
    return sl == 0;
}

/* The keys of all (sorted) that match pat, in order. */
static inline void su_filter(const su_keys_t *all, const char *pat, size_t pl, su_keys_t *out)
{
    for (size_t i = 0; i < all->n; i++)
        if (su_glob(pat, pl, all->v[i].p, all->v[i].n)) su_add(out, all->v[i].p, all->v[i].n);
}

/* The literal prefix of a glob pattern (escapes resolved), as a prefix seek would use it:
 * up to the first unescaped '*', '?' or '['. Returns its length (out holds plen bytes). */
static inline size_t su_literal_prefix(const char *pat, size_t plen, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < plen; i++) {
        char ch = pat[i];
        if (ch == '*' || ch == '?' || ch == '[') break;
        if (ch == '\\') {
            if (i + 1 == plen) break;
            ch = pat[++i];
        }
        out[n++] = ch;
    }
    return n;
}

/* How many of all's keys start with pat's literal prefix. */
static inline size_t su_in_prefix(const su_keys_t *all, const char *pat, size_t plen)
{
    char *lit = malloc(plen + 1);
    CHECK(lit);
    size_t ln = su_literal_prefix(pat, plen, lit), in = 0;
    for (size_t i = 0; i < all->n; i++)
        in += all->v[i].n >= ln && memcmp(all->v[i].p, lit, ln) == 0;
    free(lit);
    return in;
}

/* How many calls a prefix-seeking iteration of pat may take: proportional to the share of
 * all's keys that start with pat's literal prefix (full_pages calls for all of them), with
 * room for partly filled leaves and the calls at both ends. */
static inline size_t su_seek_bound(const su_keys_t *all, const char *pat, size_t plen,
                                   size_t full_pages)
{
    size_t in = su_in_prefix(all, pat, plen);
    return (size_t)(1.5 * (double)full_pages * (double)in / (double)(all->n ? all->n : 1)) + 3;
}

static inline double su_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* xorshift64 */
static inline uint64_t su_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

#endif
