/* Objects kept for reuse instead of free(): a LIFO linked through each kept object's first
 * pointer-sized bytes (their contents are dead while kept), at most max of them. One owner
 * (a worker thread's connection or queue): no locking. For objects taken and given back
 * once per batch or per command on the hot path, where malloc and free cost ~2% of a SET's
 * gateway CPU (docs/throughput.md "What a SET costs the gateway"). */
#ifndef DMKV_SPARES_H
#define DMKV_SPARES_H

#include <stdlib.h>
#include <string.h>

typedef struct dm_spares {
    void *head;
    unsigned n;
} dm_spares_t;

/* A kept object (at least pointer-sized), or NULL when none is kept. */
static inline void *dm_spares_take(dm_spares_t *s)
{
    void *p = s->head;
    if (p) {
        memcpy(&s->head, p, sizeof(void *));
        s->n--;
    }
    return p;
}

/* Keep p, or free() it when max are kept already. */
static inline void dm_spares_put(dm_spares_t *s, void *p, unsigned max)
{
    if (s->n >= max) {
        free(p);
        return;
    }
    memcpy(p, &s->head, sizeof(void *));
    s->head = p;
    s->n++;
}

/* free() every kept object. */
static inline void dm_spares_free(dm_spares_t *s)
{
    for (void *p; (p = dm_spares_take(s)) != NULL;)
        free(p);
}

#endif
