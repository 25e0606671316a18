/* SCAN's guarantee judged from a history (scancheck.h). */
#include "scancheck.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t t0, t1;
    unsigned key, what;
} sc_op_t;

typedef struct {
    uint64_t t0, t1;
    unsigned char *returned;
} sc_scan_t;

struct sc_log {
    pthread_mutex_t mu;
    unsigned nkeys;
    sc_op_t *ops;
    size_t nops, capops;
    sc_scan_t *scans;
    size_t nscans, capscans;
};

sc_log_t *sc_log_new(unsigned nkeys)
{
    sc_log_t *l = calloc(1, sizeof(*l));
    if (!l) return NULL;
    pthread_mutex_init(&l->mu, NULL);
    l->nkeys = nkeys;
    return l;
}

void sc_log_free(sc_log_t *l)
{
    if (!l) return;
    for (size_t i = 0; i < l->nscans; i++)
        free(l->scans[i].returned);
    free(l->scans);
    free(l->ops);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* Room for element n of *arr (elements of sz bytes, capacity *cap, doubling). */
static void grow(void *arr, size_t n, size_t *cap, size_t sz)
{
    if (n < *cap) return;
    size_t nc = *cap ? *cap * 2 : 256;
    void *p = realloc(*(void **)arr, nc * sz);
    if (!p) abort();
    *(void **)arr = p;
    *cap = nc;
}

void sc_log_op(sc_log_t *l, unsigned key, unsigned what, uint64_t t0, uint64_t t1)
{
    if (key >= l->nkeys || !what) return;
    pthread_mutex_lock(&l->mu);
    grow(&l->ops, l->nops, &l->capops, sizeof(*l->ops));
    l->ops[l->nops++] = (sc_op_t){t0, t1, key, what};
    pthread_mutex_unlock(&l->mu);
}

void sc_log_scan(sc_log_t *l, uint64_t t0, uint64_t t1, const unsigned char *returned)
{
    unsigned char *r = malloc(l->nkeys);
    if (!r) abort();
    memcpy(r, returned, l->nkeys);
    pthread_mutex_lock(&l->mu);
    grow(&l->scans, l->nscans, &l->capscans, sizeof(*l->scans));
    l->scans[l->nscans++] = (sc_scan_t){t0, t1, r};
    pthread_mutex_unlock(&l->mu);
}

/* Witnesses sorted by t1 with a running maximum of t0 ("the latest-starting witness that
 * returned before s0"), and changers sorted by t0 with a running maximum of t1 ("did any
 * change that began by s1 end after the witness began"). */
typedef struct {
    uint64_t key_t, best; /* sort key, running maximum of the other end */
} sc_pt_t;

typedef struct {
    sc_pt_t *p;
    size_t n;
} sc_series_t;

static int cmp_pt(const void *a, const void *b)
{
    const sc_pt_t *x = a, *y = b;
    return x->key_t < y->key_t ? -1 : x->key_t > y->key_t;
}

static void series_finish(sc_series_t *s)
{
    qsort(s->p, s->n, sizeof(*s->p), cmp_pt);
    for (size_t i = 1; i < s->n; i++)
        if (s->p[i - 1].best > s->p[i].best) s->p[i].best = s->p[i - 1].best;
}

/* Running maximum over points with key_t < t (strict) or <= t; 0 and *found = 0 if none. */
static uint64_t series_max_before(const sc_series_t *s, uint64_t t, int inclusive, int *found)
{
    size_t lo = 0, hi = s->n; /* first index with key_t >= t (or > t) */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (inclusive ? s->p[mid].key_t <= t : s->p[mid].key_t < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo > 0;
    return lo ? s->p[lo - 1].best : 0;
}

/* Proven throughout [s0, s1]: a witness (see) ending before s0 after which no change
 * (chg) could act by s1. */
static int proven(const sc_series_t *see, const sc_series_t *chg, uint64_t s0, uint64_t s1)
{
    int any;
    uint64_t w_t0 = series_max_before(see, s0, 0, &any);
    if (!any) return 0;
    int some;
    uint64_t latest_end = series_max_before(chg, s1, 1, &some);
    return !some || latest_end < w_t0;
}

size_t sc_check(sc_log_t *l, FILE *out, size_t *judged)
{
    pthread_mutex_lock(&l->mu);
    /* Per key: [0] saw present, [1] saw absent, [2] deletes, [3] makes. */
    sc_series_t *s = calloc((size_t)l->nkeys * 4, sizeof(*s));
    if (!s) abort();
    for (size_t i = 0; i < l->nops; i++)
        for (int k = 0; k < 4; k++)
            s[l->ops[i].key * 4 + k].n++;
    for (size_t i = 0; i < (size_t)l->nkeys * 4; i++) {
        s[i].p = calloc(s[i].n ? s[i].n : 1, sizeof(sc_pt_t));
        if (!s[i].p) abort();
        s[i].n = 0;
    }
    for (size_t i = 0; i < l->nops; i++) {
        const sc_op_t *o = &l->ops[i];
        sc_series_t *ks = &s[o->key * 4];
        if ((o->what & SC_SAW_PRESENT) && o->t1 != SC_UNKNOWN)
            ks[0].p[ks[0].n++] = (sc_pt_t){o->t1, o->t0};
        if ((o->what & SC_SAW_ABSENT) && o->t1 != SC_UNKNOWN)
            ks[1].p[ks[1].n++] = (sc_pt_t){o->t1, o->t0};
        if (o->what & SC_DELETES) ks[2].p[ks[2].n++] = (sc_pt_t){o->t0, o->t1};
        if (o->what & SC_MAKES) ks[3].p[ks[3].n++] = (sc_pt_t){o->t0, o->t1};
    }
    for (size_t i = 0; i < (size_t)l->nkeys * 4; i++)
        series_finish(&s[i]);
    size_t bad = 0, nj = 0;
    for (size_t i = 0; i < l->nscans; i++) {
        const sc_scan_t *sc = &l->scans[i];
        int any = 0;
        for (unsigned k = 0; k < l->nkeys; k++) {
            const sc_series_t *ks = &s[k * 4];
            int present = proven(&ks[0], &ks[2], sc->t0, sc->t1);
            int absent = proven(&ks[1], &ks[3], sc->t0, sc->t1);
            any |= present || absent;
            if ((present && !sc->returned[k]) || (absent && sc->returned[k])) {
                bad++;
                if (out)
                    fprintf(out, "scan %zu [%llu, %llu]: key %u %s for the whole scan, %s\n", i,
                            (unsigned long long)sc->t0, (unsigned long long)sc->t1, k,
                            present ? "present" : "absent", present ? "not returned" : "returned");
            }
        }
        nj += any;
    }
    for (size_t i = 0; i < (size_t)l->nkeys * 4; i++)
        free(s[i].p);
    free(s);
    pthread_mutex_unlock(&l->mu);
    if (judged) *judged = nj;
    return bad;
}
