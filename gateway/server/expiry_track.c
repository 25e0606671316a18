/* Binary min-heap of (expire_ms, key) per worker thread (expiry_track.h). */
#include "server/expiry_track.h"

#include <stdlib.h>
#include <string.h>

struct gw_expiry_entry {
    uint64_t at; /* absolute wall-clock ms */
    char *key;
    size_t klen;
};

static void swap(gw_expiry_entry_t *a, gw_expiry_entry_t *b)
{
    gw_expiry_entry_t t = *a;
    *a = *b;
    *b = t;
}

void gw_expiry_track(gw_thread_t *th, const void *key, size_t klen, uint64_t expire_ms)
{
    if (!expire_ms || th->exp_n >= GW_EXPIRY_TRACK_MAX) return;
    if (th->exp_n == th->exp_cap) {
        size_t cap = th->exp_cap ? th->exp_cap * 2 : 64;
        gw_expiry_entry_t *h = realloc(th->exp_heap, cap * sizeof(*h));
        if (!h) return;
        th->exp_heap = h;
        th->exp_cap = cap;
    }
    char *k = malloc(klen ? klen : 1);
    if (!k) return;
    memcpy(k, key, klen);
    size_t i = th->exp_n++;
    th->exp_heap[i] = (gw_expiry_entry_t){.at = expire_ms, .key = k, .klen = klen};
    while (i > 0 && th->exp_heap[(i - 1) / 2].at > th->exp_heap[i].at) {
        swap(&th->exp_heap[(i - 1) / 2], &th->exp_heap[i]);
        i = (i - 1) / 2;
    }
}

int gw_expiry_pop_due(gw_thread_t *th, uint64_t now_ms, char **key, size_t *klen)
{
    if (th->exp_n == 0 || th->exp_heap[0].at > now_ms) return 0;
    *key = th->exp_heap[0].key;
    *klen = th->exp_heap[0].klen;
    th->exp_heap[0] = th->exp_heap[--th->exp_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < th->exp_n && th->exp_heap[l].at < th->exp_heap[m].at) m = l;
        if (r < th->exp_n && th->exp_heap[r].at < th->exp_heap[m].at) m = r;
        if (m == i) break;
        swap(&th->exp_heap[i], &th->exp_heap[m]);
        i = m;
    }
    return 1;
}

void gw_expiry_free(gw_thread_t *th)
{
    for (size_t i = 0; i < th->exp_n; i++)
        free(th->exp_heap[i].key);
    free(th->exp_heap);
    th->exp_heap = NULL;
    th->exp_n = th->exp_cap = 0;
}
