/* Process-wide per-class counters. Each thread counts in its own block (one writer: plain
 * relaxed load and store, no locked instruction on the data path: four atomic adds per
 * batch on shared words cost ~2.5% of a SET's gateway CPU); a reader sums the blocks.
 * They are statistics, not state: a reader may see one thread's batch half counted, and a
 * thread that could not allocate its block counts nothing. */
#include "dmkv/stats.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct tstats {
    dm_cls_stats_t c[DM_CLS_COUNT];
    struct tstats *next;
} tstats_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static tstats_t *all;                     /* every thread's block, never freed (reachable) */
static dm_cls_stats_t base[DM_CLS_COUNT]; /* the sums at the last reset */
static _Thread_local tstats_t *mine;

const char *dm_cls_name(dm_cls_t c)
{
    static const char *names[DM_CLS_COUNT] = {"get", "set", "del", "scan", "admin", "split"};
    return (unsigned)c < DM_CLS_COUNT ? names[c] : "?";
}

static tstats_t *self(void)
{
    if (mine) return mine;
    tstats_t *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    pthread_mutex_lock(&mu);
    t->next = all;
    all = t;
    pthread_mutex_unlock(&mu);
    return mine = t;
}

/* Add v to a counter of this thread's block (its one writer). */
static void add(uint64_t *x, uint64_t v)
{
    __atomic_store_n(x, __atomic_load_n(x, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

#define NFIELDS (sizeof(dm_cls_stats_t) / sizeof(uint64_t))

void dm_stats_op(dm_cls_t c)
{
    tstats_t *t = self();
    if (t) add(&t->c[c].ops, 1);
}

void dm_stats_batch(dm_cls_t c, int waited, uint64_t verbs, uint64_t bytes_read,
                    uint64_t bytes_written)
{
    tstats_t *t = self();
    if (!t) return;
    dm_cls_stats_t *s = &t->c[c];
    add(waited ? &s->rtts : &s->async_batches, 1);
    add(&s->verbs, verbs);
    add(&s->bytes_read, bytes_read);
    add(&s->bytes_written, bytes_written);
}

/* The sums over every block of class c (mu held). */
static void sum(dm_cls_t c, uint64_t *out)
{
    memset(out, 0, NFIELDS * sizeof(*out));
    for (tstats_t *t = all; t; t = t->next)
        for (size_t f = 0; f < NFIELDS; f++)
            out[f] += __atomic_load_n((uint64_t *)&t->c[c] + f, __ATOMIC_RELAXED);
}

void dm_stats_get(dm_cls_t c, dm_cls_stats_t *out)
{
    uint64_t s[NFIELDS];
    pthread_mutex_lock(&mu);
    sum(c, s);
    for (size_t f = 0; f < NFIELDS; f++)
        s[f] -= ((uint64_t *)&base[c])[f];
    pthread_mutex_unlock(&mu);
    memcpy(out, s, sizeof(*out));
}

void dm_stats_reset(void)
{
    pthread_mutex_lock(&mu);
    for (int c = 0; c < DM_CLS_COUNT; c++)
        sum((dm_cls_t)c, (uint64_t *)&base[c]);
    pthread_mutex_unlock(&mu);
}
