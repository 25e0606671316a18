/* The linearizability checker (tests/lincheck) on hand-made histories: linearizable ones
 * must pass, each kind of violation the concurrency tests look for must be caught. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "lincheck/lincheck.h"
#include "lincheck/scancheck.h"

/* Helpers: times in "ticks" (any unit). */
static size_t inv(lc_history_t *h, int c, lc_op_t op, unsigned fl, const char *k, const char *a,
                  uint64_t t)
{
    return lc_invoke(h, c, op, fl, k, strlen(k), a, a ? strlen(a) : 0, t);
}
static void ret_nil(lc_history_t *h, size_t i, uint64_t t)
{
    lc_result_t r = {.kind = LC_R_NIL};
    lc_return(h, i, &r, t);
}
static void ret_ok(lc_history_t *h, size_t i, uint64_t t)
{
    lc_result_t r = {.kind = LC_R_OK};
    lc_return(h, i, &r, t);
}
static void ret_str(lc_history_t *h, size_t i, const char *s, uint64_t t)
{
    lc_result_t r = {.kind = LC_R_STR, .str = s, .len = strlen(s)};
    lc_return(h, i, &r, t);
}
static void ret_int(lc_history_t *h, size_t i, long long v, uint64_t t)
{
    lc_result_t r = {.kind = LC_R_INT, .num = v};
    lc_return(h, i, &r, t);
}

static int check(lc_history_t *h, const char *bad_key)
{
    lc_report_t rep;
    int rc = lc_check(h, 0, &rep, NULL);
    if (rc == 1 && bad_key) CHECKF(!strcmp(rep.first_bad_key, bad_key), "%s", rep.first_bad_key);
    /* The file format round-trips to the same verdict. */
    FILE *f = tmpfile();
    CHECK(f && lc_history_write(h, f) == 0);
    rewind(f);
    char err[128];
    lc_history_t *h2 = lc_history_read(f, err, sizeof(err));
    CHECKF(h2, "%s", err);
    lc_report_t rep2;
    CHECK(lc_check(h2, 0, &rep2, NULL) == rc && rep2.ops == rep.ops && rep2.unknown == rep.unknown);
    lc_history_free(h2);
    fclose(f);
    lc_history_free(h);
    return rc;
}

static void test_linearizable(void)
{
    lc_history_t *h = lc_history_new(); /* sequential */
    ret_ok(h, inv(h, 0, LC_SET, 0, "k", "a", 1), 2);
    ret_str(h, inv(h, 0, LC_GET, 0, "k", NULL, 3), "a", 4);
    ret_int(h, inv(h, 0, LC_DEL, 0, "k", NULL, 5), 1, 6);
    ret_nil(h, inv(h, 0, LC_GET, 0, "k", NULL, 7), 8);
    CHECK(check(h, NULL) == 0);

    h = lc_history_new(); /* overlapping SETs, later GET sees either */
    size_t a = inv(h, 0, LC_SET, 0, "k", "a", 1), b = inv(h, 1, LC_SET, 0, "k", "b", 2);
    ret_ok(h, b, 5);
    ret_ok(h, a, 6);
    ret_str(h, inv(h, 2, LC_GET, 0, "k", NULL, 7), "a", 8);
    ret_str(h, inv(h, 2, LC_GET, 0, "k", NULL, 9), "a", 10);
    CHECK(check(h, NULL) == 0);

    h = lc_history_new(); /* GET overlapping a SET: old or new */
    ret_ok(h, inv(h, 0, LC_SET, 0, "k", "old", 1), 2);
    size_t s = inv(h, 0, LC_SET, 0, "k", "new", 3);
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 4), "new", 5);
    ret_str(h, inv(h, 2, LC_GET, 0, "k", NULL, 6), "old", 7); /* starts after "new" was read */
    ret_ok(h, s, 8);
    CHECK(check(h, "k") == 1); /* both inside the SET, but "old" came after "new" */

    h = lc_history_new();
    ret_ok(h, inv(h, 0, LC_SET, 0, "k", "old", 1), 2);
    s = inv(h, 0, LC_SET, 0, "k", "new", 3);
    ret_str(h, inv(h, 2, LC_GET, 0, "k", NULL, 4), "old", 5);
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 6), "new", 7);
    ret_ok(h, s, 8);
    CHECK(check(h, NULL) == 0);

    h = lc_history_new(); /* SET NX race, one winner; INCR chain; APPEND; GETSET; GETDEL */
    size_t n1 = inv(h, 0, LC_SET, LC_NX, "lock", "x", 1),
           n2 = inv(h, 1, LC_SET, LC_NX, "lock", "y", 1);
    ret_nil(h, n1, 4);
    ret_ok(h, n2, 5);
    ret_str(h, inv(h, 0, LC_GET, 0, "lock", NULL, 6), "y", 7);
    ret_int(h, inv(h, 0, LC_INCR, 0, "n", NULL, 1), 1, 3);
    size_t i2 = inv(h, 1, LC_INCR, 0, "n", NULL, 2), i3 = inv(h, 2, LC_INCR, 0, "n", NULL, 2);
    ret_int(h, i3, 2, 5);
    ret_int(h, i2, 3, 6);
    ret_int(h, inv(h, 0, LC_APPEND, 0, "s", "ab", 1), 2, 2);
    ret_int(h, inv(h, 0, LC_APPEND, 0, "s", "cd", 3), 4, 4);
    ret_str(h, inv(h, 0, LC_GETSET, 0, "s", "z", 5), "abcd", 6);
    ret_str(h, inv(h, 0, LC_GETDEL, 0, "s", NULL, 7), "z", 8);
    ret_nil(h, inv(h, 0, LC_GETDEL, 0, "s", NULL, 9), 10);
    ret_str(h, inv(h, 0, LC_SET, LC_GETOLD, "s", "q", 11), "", 12); /* wrong: s absent */
    CHECK(check(h, "s") == 1);

    h = lc_history_new(); /* INCR over a string: a definite error */
    ret_ok(h, inv(h, 0, LC_SET, 0, "n", "abc", 1), 2);
    size_t e = inv(h, 0, LC_INCR, 0, "n", NULL, 3);
    lc_result_t notint = {.kind = LC_R_NOTINT};
    lc_return(h, e, &notint, 4);
    ret_nil(h, inv(h, 0, LC_SET, LC_GETOLD | LC_XX, "m", "v", 5), 6);
    CHECK(check(h, NULL) == 0);
}

static void test_unknown(void)
{
    lc_history_t *h = lc_history_new(); /* applied: a later GET sees it */
    inv(h, 0, LC_SET, 0, "k", "lost?", 1);
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 10), "lost?", 11);
    CHECK(check(h, NULL) == 0);
    h = lc_history_new(); /* not applied */
    inv(h, 0, LC_SET, 0, "k", "lost?", 1);
    ret_nil(h, inv(h, 1, LC_GET, 0, "k", NULL, 10), 11);
    CHECK(check(h, NULL) == 0);
    h = lc_history_new(); /* but it cannot take effect before it was invoked */
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 1), "late", 2);
    inv(h, 0, LC_SET, 0, "k", "late", 5);
    CHECK(check(h, "k") == 1);
    h = lc_history_new(); /* nor twice: seen, then gone, then seen again */
    inv(h, 0, LC_SET, 0, "k", "v", 1);
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 2), "v", 3);
    ret_nil(h, inv(h, 1, LC_GET, 0, "k", NULL, 4), 5);
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 6), "v", 7);
    CHECK(check(h, "k") == 1);
    /* Unknown writes of values nobody read are first left out (check_key's witness
     * pass); when only such a write explains a reply, the full search still finds it. */
    h = lc_history_new(); /* a DEL answers 1: the unread SET took effect */
    inv(h, 0, LC_SET, 0, "k", "unread", 1);
    ret_int(h, inv(h, 1, LC_DEL, 0, "k", NULL, 10), 1, 11);
    CHECK(check(h, NULL) == 0);
    h = lc_history_new(); /* an APPEND's length counts an unread APPEND's bytes */
    ret_int(h, inv(h, 1, LC_APPEND, 0, "k", "ab", 1), 2, 2);
    inv(h, 0, LC_APPEND, 0, "k", "unread", 3);
    ret_int(h, inv(h, 1, LC_APPEND, 0, "k", "cd", 10), 10, 11);
    CHECK(check(h, NULL) == 0);
    h = lc_history_new(); /* but no unread write makes an absent key's DEL answer 1 twice */
    inv(h, 0, LC_SET, 0, "k", "unread", 1);
    ret_int(h, inv(h, 1, LC_DEL, 0, "k", NULL, 10), 1, 11);
    ret_int(h, inv(h, 2, LC_DEL, 0, "k", NULL, 12), 1, 13);
    CHECK(check(h, "k") == 1);
}

static void test_violations(void)
{
    lc_history_t *h = lc_history_new(); /* stale read */
    ret_ok(h, inv(h, 0, LC_SET, 0, "k", "a", 1), 2);
    ret_ok(h, inv(h, 0, LC_SET, 0, "k", "b", 3), 4);
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 5), "a", 6);
    CHECK(check(h, "k") == 1);

    h = lc_history_new(); /* two SET NX winners */
    size_t a = inv(h, 0, LC_SET, LC_NX, "lock", "x", 1),
           b = inv(h, 1, LC_SET, LC_NX, "lock", "y", 1);
    ret_ok(h, a, 3);
    ret_ok(h, b, 3);
    CHECK(check(h, "lock") == 1);

    h = lc_history_new(); /* lost INCR */
    a = inv(h, 0, LC_INCR, 0, "n", NULL, 1);
    b = inv(h, 1, LC_INCR, 0, "n", NULL, 1);
    ret_int(h, a, 1, 2);
    ret_int(h, b, 1, 2);
    CHECK(check(h, "n") == 1);

    h = lc_history_new(); /* acknowledged SET, then nil without a DEL */
    ret_ok(h, inv(h, 0, LC_SET, 0, "k", "v", 1), 2);
    ret_nil(h, inv(h, 1, LC_GET, 0, "k", NULL, 3), 4);
    CHECK(check(h, "k") == 1);

    h = lc_history_new(); /* flicker v, nil, v with one SET */
    ret_ok(h, inv(h, 0, LC_SET, 0, "k", "v", 1), 2);
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 3), "v", 4);
    ret_nil(h, inv(h, 1, LC_GET, 0, "k", NULL, 5), 6);
    ret_str(h, inv(h, 1, LC_GET, 0, "k", NULL, 7), "v", 8);
    CHECK(check(h, "k") == 1);

    h = lc_history_new(); /* DEL of a never-set key says 1 */
    ret_int(h, inv(h, 0, LC_DEL, 0, "k", NULL, 1), 1, 2);
    CHECK(check(h, "k") == 1);

    h = lc_history_new(); /* wrong APPEND length */
    ret_int(h, inv(h, 0, LC_APPEND, 0, "k", "abc", 1), 3, 2);
    ret_int(h, inv(h, 0, LC_APPEND, 0, "k", "d", 3), 5, 4);
    CHECK(check(h, "k") == 1);

    h = lc_history_new(); /* many keys, one bad: it is named */
    for (int i = 0; i < 50; i++) {
        char k[16];
        snprintf(k, sizeof(k), "good%02d", i);
        ret_ok(h, inv(h, i % 4, LC_SET, 0, k, "v", (uint64_t)i * 10), (uint64_t)i * 10 + 5);
        ret_str(h, inv(h, i % 4, LC_GET, 0, k, NULL, (uint64_t)i * 10 + 6), "v",
                (uint64_t)i * 10 + 7);
    }
    ret_ok(h, inv(h, 0, LC_SET, 0, "bad", "1", 1000), 1001);
    ret_ok(h, inv(h, 0, LC_SET, 0, "bad", "2", 1002), 1003);
    ret_str(h, inv(h, 1, LC_GET, 0, "bad", NULL, 1004), "1", 1005);
    CHECK(check(h, "bad") == 1);
}

/* A random history produced by running the model: each op takes effect at an instant
 * inside [invoke, return] of its client; overlapping intervals across 8 clients. */
static void test_random_generated(void)
{
    srand(12345);
    lc_history_t *h = lc_history_new();
    /* sequential model per key (4 keys) */
    char val[4][64] = {{0}};
    int present[4] = {0};
    uint64_t busy_until[8] = {0};
    uint64_t t = 0;
    for (int n = 0; n < 2000; n++) {
        t += 1 + (uint64_t)(rand() % 3); /* the linearization instant */
        int c = rand() % 8;
        if (busy_until[c] >= t) continue; /* one op at a time per client */
        int k = rand() % 4;
        char key[8];
        snprintf(key, sizeof(key), "k%d", k);
        uint64_t ti = t - (uint64_t)(rand() % 10), tr = t + (uint64_t)(rand() % 10);
        if (ti <= busy_until[c]) ti = busy_until[c] + 1;
        if (ti > t) ti = t;
        busy_until[c] = tr;
        int which = rand() % 5;
        char v[32];
        snprintf(v, sizeof(v), "%d", n);
        if (which == 0) {
            size_t i = inv(h, c, LC_GET, 0, key, NULL, ti);
            if (present[k])
                ret_str(h, i, val[k], tr);
            else
                ret_nil(h, i, tr);
        } else if (which == 1 || which == 2) {
            unsigned fl = which == 2 ? LC_NX : 0;
            size_t i = inv(h, c, LC_SET, fl, key, v, ti);
            if (fl && present[k]) {
                ret_nil(h, i, tr);
            } else {
                strcpy(val[k], v);
                present[k] = 1;
                ret_ok(h, i, tr);
            }
        } else if (which == 3) {
            size_t i = inv(h, c, LC_DEL, 0, key, NULL, ti);
            ret_int(h, i, present[k], tr);
            present[k] = 0;
        } else {
            size_t i = inv(h, c, LC_INCR, 0, key, NULL, ti);
            long long x = present[k] ? atoll(val[k]) : 0;
            snprintf(val[k], sizeof(val[k]), "%lld", x + 1);
            present[k] = 1;
            ret_int(h, i, x + 1, tr);
        }
    }
    size_t ops = lc_history_size(h);
    clock_t c0 = clock();
    lc_report_t rep;
    CHECK(lc_check(h, 0, &rep, NULL) == 0);
    printf("random history: %zu ops on %zu keys linearizable, %llu steps, %.3f s\n", ops, rep.keys,
           (unsigned long long)rep.steps, (double)(clock() - c0) / CLOCKS_PER_SEC);
    lc_history_free(h);
}

/* A key's history where a burst of operations (a killed gateway's) never returned: some
 * took effect, some did not. Values look like the integration test's ("c3.1207"). stale:
 * 1 adds a GET, before the burst, of a value overwritten long before; 2 adds it after. */
static lc_history_t *burst_history(unsigned seed, int stale)
{
    srand(seed);
    lc_history_t *h = lc_history_new();
    char val[64] = {0}, first[32] = {0};
    int present = 0;
    uint64_t busy_until[12] = {0}, t = 0;
    for (int n = 0; n < 3000; n++) {
        t += 2 + (uint64_t)(rand() % 3);
        if (first[0] && ((stale == 1 && n == 1000) || (stale == 2 && n == 2999))) {
            ret_str(h, inv(h, 99, LC_GET, 0, "k", NULL, t), first, t + 1);
            continue;
        }
        int c = rand() % 12;
        if (busy_until[c] >= t) continue;
        uint64_t ti = t - (uint64_t)(rand() % 8), tr = t + 1 + (uint64_t)(rand() % 8);
        if (ti <= busy_until[c]) ti = busy_until[c] + 1;
        if (ti > t) ti = t;
        int unknown = n >= 1500 && n < 1560 && rand() % 3 == 0;
        int applied = !unknown || rand() % 2;
        busy_until[c] = unknown ? ti : tr; /* a lost client reconnects as another */
        char v[32];
        snprintf(v, sizeof(v), "c%d.%d", c, n);
        int which = rand() % 4;
        size_t i;
        if (which == 0) {
            i = inv(h, c, LC_GET, 0, "k", NULL, ti);
            if (unknown) continue;
            if (present)
                ret_str(h, i, val, tr);
            else
                ret_nil(h, i, tr);
        } else if (which == 1) {
            i = inv(h, c, LC_SET, 0, "k", v, ti);
            if (applied) {
                strcpy(val, v);
                present = 1;
            }
            if (!unknown) ret_ok(h, i, tr);
            if (n > 10 && n < 100 && !first[0]) strcpy(first, v); /* overwritten soon */
        } else if (which == 2) {
            i = inv(h, c, LC_DEL, 0, "k", NULL, ti);
            int was = present;
            if (applied) present = 0;
            if (!unknown) ret_int(h, i, was, tr);
        } else {
            i = inv(h, c, LC_APPEND, 0, "k", v, ti);
            size_t len = present ? strlen(val) : 0;
            if (applied && len + strlen(v) < sizeof(val)) {
                if (!present) val[0] = 0;
                strcat(val, v);
                present = 1;
            } else if (applied) { /* keeps values short: this one acts as a SET */
                strcpy(val, v);
                present = 1;
            }
            if (!unknown) ret_int(h, i, applied ? (long long)strlen(val) : (long long)len, tr);
        }
    }
    return h;
}

/* The pruning of unknown operations keeps the checker sound: bursts of operations of
 * unknown outcome (some applied, some not) are linearizable, and a stale read before the
 * burst is still caught. A violation after such a burst needs the whole search space to
 * prove: the checker may then say "undecided", which fails a test as "not linearizable"
 * does. (The hard case for speed is a real history: tests/lincheck/histories.) */
static void test_unknown_bursts(void)
{
    for (unsigned seed = 1; seed <= 8; seed++) {
        for (int stale = 0; stale <= 2; stale++) {
            if (stale == 2 && seed > 1) continue;
            lc_history_t *h = burst_history(seed, stale);
            lc_report_t rep;
            int rc = lc_check(h, 20000000, &rep, NULL);
            printf("burst seed %u%s: %zu ops, %zu unknown, %llu steps, %s\n", seed,
                   stale == 1   ? " + stale read before"
                   : stale == 2 ? " + stale read after"
                                : "",
                   rep.ops, rep.unknown, (unsigned long long)rep.steps,
                   rc == 0   ? "linearizable"
                   : rc == 1 ? "NOT linearizable"
                             : "undecided");
            fflush(stdout);
            CHECK(rep.unknown >= 10);
            CHECK(stale == 2 ? rc != 0 : rc == stale);
            lc_history_free(h);
        }
    }
}

/* SCAN's guarantee: a key present (absent) for a whole scan must (must not) be returned;
 * keys that may have changed during a scan, or whose state is unproven, are not judged. */
static void test_scan_guarantee(void)
{
    enum { KEYS = 4 };
    sc_log_t *l = sc_log_new(KEYS);
    sc_log_op(l, 0, SC_MAKES | SC_SAW_PRESENT, 10, 20);    /* key 0 set before scans */
    sc_log_op(l, 1, SC_DELETES | SC_SAW_ABSENT, 10, 20);   /* key 1 deleted before */
    sc_log_op(l, 2, SC_MAKES | SC_SAW_PRESENT, 10, 20);    /* key 2 set, then a DEL ... */
    sc_log_op(l, 2, SC_DELETES | SC_SAW_ABSENT, 105, 107); /* ... during scan 1 */
    sc_log_op(l, 3, SC_MAKES, 15, SC_UNKNOWN);             /* key 3: an unknown SET */
    sc_log_op(l, 3, SC_SAW_ABSENT, 30, 40);
    unsigned char good[KEYS] = {1, 0, 0, 1};
    sc_log_scan(l, 50, 60, (unsigned char[KEYS]){1, 0, 1, 0}); /* scan 0: right */
    sc_log_scan(l, 100, 110, good);                            /* scan 1: key 2 either way */
    size_t judged;
    CHECK(sc_check(l, stderr, &judged) == 0);
    CHECK(judged == 2);
    sc_log_scan(l, 200, 210, (unsigned char[KEYS]){0, 0, 0, 1}); /* scan 2 misses key 0 */
    sc_log_scan(l, 300, 310, (unsigned char[KEYS]){1, 1, 0, 0}); /* scan 3: phantom key 1 */
    CHECK(sc_check(l, NULL, NULL) == 2);
    sc_log_free(l);
    /* A change whose interval touches the witness's start may act after it: unproven. */
    l = sc_log_new(1);
    sc_log_op(l, 0, SC_MAKES | SC_SAW_PRESENT, 10, 20);
    sc_log_op(l, 0, SC_DELETES, 5, 10);
    sc_log_scan(l, 50, 60, (unsigned char[1]){0});
    CHECK(sc_check(l, NULL, &judged) == 0 && judged == 0);
    sc_log_free(l);
}

int main(void)
{
    RUN(test_scan_guarantee);
    RUN(test_linearizable);
    RUN(test_unknown);
    RUN(test_violations);
    RUN(test_random_generated);
    RUN(test_unknown_bursts);
    return 0;
}
