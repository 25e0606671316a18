/* Write guards for WATCH (kv.h): per-thread list of active guard sets, each owned by the
 * coroutine that began it, so other connections' commands on the same thread are never
 * guarded by a transaction they are not part of. */
#include <string.h>

#include "dmkv/coro.h"
#include "guard.h"

static _Thread_local dm_kv_guard_set_t *active;

void dm_kv_guard_begin(dm_kv_guard_set_t *s)
{
    s->tripped = 0;
    s->writes = 0;
    s->owner = dm_coro_self();
    s->next = active;
    active = s;
}

void dm_kv_guard_end(dm_kv_guard_set_t *s)
{
    for (dm_kv_guard_set_t **p = &active; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            return;
        }
}

dm_kv_guard_set_t *kv_guard_current(void)
{
    void *me = dm_coro_self();
    for (dm_kv_guard_set_t *s = active; s; s = s->next)
        if (s->owner == me) return s;
    return NULL;
}

dm_kv_guard_t *kv_guard_find(dm_kv_guard_set_t *s, const void *key, size_t klen)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (s->g[i].klen == klen && memcmp(s->g[i].key, key, klen) == 0) return &s->g[i];
    return NULL;
}
