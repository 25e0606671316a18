#include "keyq.h"

#include "dmkv/spares.h"

#include <stdlib.h>
#include <string.h>

#define KEYQ_BUCKETS 1024
#define KEYQ_SMALL_KEY 64 /* bytes of key a kept record holds */
#define KEYQ_SPARES 256   /* records kept for reuse (one per keyed write otherwise) */

/* A key in flight: its current writer and the writes queued behind it. */
typedef struct busy_key {
    uint64_t hash;
    size_t klen;
    size_t cap;                   /* bytes of key[] */
    dm_keyq_entry_t *head, *tail; /* waiting writes, in arrival order */
    struct busy_key *next;
    uint8_t key[]; /* a copy: the owner's entry may go before the queue does */
} busy_key_t;

struct dm_keyq {
    busy_key_t *b[KEYQ_BUCKETS];
    dm_spares_t spare; /* records of KEYQ_SMALL_KEY bytes of key */
};

static busy_key_t *busy_new(dm_keyq_t *q, size_t klen)
{
    size_t cap = klen <= KEYQ_SMALL_KEY ? KEYQ_SMALL_KEY : klen;
    busy_key_t *k = cap == KEYQ_SMALL_KEY ? dm_spares_take(&q->spare) : NULL;
    if (!k) k = malloc(sizeof(*k) + cap);
    if (k) k->cap = cap;
    return k;
}

static void busy_put(dm_keyq_t *q, busy_key_t *k)
{
    if (k->cap == KEYQ_SMALL_KEY)
        dm_spares_put(&q->spare, k, KEYQ_SPARES);
    else
        free(k);
}

dm_keyq_t *dm_keyq_create(void)
{
    return calloc(1, sizeof(dm_keyq_t));
}

void dm_keyq_destroy(dm_keyq_t *q)
{
    if (!q) return;
    for (int i = 0; i < KEYQ_BUCKETS; i++)
        while (q->b[i]) {
            busy_key_t *k = q->b[i];
            q->b[i] = k->next;
            free(k);
        }
    dm_spares_free(&q->spare);
    free(q);
}

static busy_key_t **find(dm_keyq_t *q, const dm_keyq_entry_t *e)
{
    busy_key_t **p = &q->b[e->hash % KEYQ_BUCKETS];
    while (*p && ((*p)->hash != e->hash || (*p)->klen != e->klen ||
                  (e->klen && memcmp((*p)->key, e->key, e->klen) != 0)))
        p = &(*p)->next;
    return p;
}

int dm_keyq_enter(dm_worker_t *w, dm_keyq_entry_t *e)
{
    e->next = e->riders = NULL;
    e->absorbed = 0;
    busy_key_t **p = find(w->keyq, e);
    if (!*p) {
        busy_key_t *k = busy_new(w->keyq, e->klen);
        if (!k) return 1; /* no queue: just race at the CAS */
        k->head = k->tail = NULL;
        k->next = NULL;
        k->hash = e->hash;
        k->klen = e->klen;
        if (e->klen) memcpy(k->key, e->key, e->klen);
        *p = k;
        return 1;
    }
    busy_key_t *k = *p;
    if (k->tail)
        k->tail->next = e;
    else
        k->head = e;
    k->tail = e;
    dm_worker_park(w, &e->wake, "an earlier command on its key (key queue)");
    return !e->absorbed;
}

void dm_keyq_leave(dm_worker_t *w, dm_keyq_entry_t *e, int rc)
{
    for (dm_keyq_entry_t *r = e->riders, *next; r; r = next) {
        next = r->next;
        r->absorbed = 1;
        r->result = rc;
        dm_worker_wake(w, &r->wake);
    }
    busy_key_t **p = find(w->keyq, e);
    busy_key_t *k = *p;
    if (!k) return;
    if (!k->head) {
        *p = k->next;
        busy_put(w->keyq, k);
        return;
    }
    /* The next writer: the last of a leading run of plain SETs carries the others. */
    dm_keyq_entry_t *owner = k->head, *run = NULL;
    if (owner->blind) {
        while (owner->next && owner->next->blind) {
            dm_keyq_entry_t *r = owner;
            owner = owner->next;
            r->next = run;
            run = r;
        }
    }
    k->head = owner->next;
    if (!k->head) k->tail = NULL;
    owner->next = NULL;
    owner->riders = run;
    dm_worker_wake(w, &owner->wake);
}
