/* Client eviction (client_evict.h). */
#include "server/client_evict.h"

#include "dmkv/log.h"
#include "resp/parser.h"
#include "server/server.h"
#include "server/stats.h"

static uint64_t limit_bytes;

uint64_t gw_evict_limit(void)
{
    return __atomic_load_n(&limit_bytes, __ATOMIC_RELAXED);
}

void gw_evict_set_limit(uint64_t bytes)
{
    __atomic_store_n(&limit_bytes, bytes, __ATOMIC_RELAXED);
}

static uint64_t own_mem(const gw_conn_t *c)
{
    uint64_t n = c->qbytes + resp_parser_pending_bytes(&c->parser) + c->out.cap + c->out_inflight;
    for (const gw_slot_t *s = c->shead; s; s = s->next)
        n += s->out.cap;
    return n;
}

uint64_t gw_client_mem(const gw_conn_t *c)
{
    return own_mem(c) + c->monitor_feed.cap;
}

static void evict(gw_conn_t *c, uint64_t mem, const char *why)
{
    dm_log(DM_LOG_WARNING, "Evicting client: id=%llu addr=%s mem=%llu (%s, maxmemory-clients %llu)",
           (unsigned long long)c->id, c->addr, (unsigned long long)mem, why,
           (unsigned long long)gw_evict_limit());
    GW_STAT_ADD(evicted_clients, 1);
    gw_conn_close(c);
}

bool gw_evict_if_over(gw_conn_t *c)
{
    uint64_t limit = gw_evict_limit();
    if (!limit || c->no_evict || c->closing) return false;
    uint64_t mem = own_mem(c);
    if (mem <= limit) return false;
    evict(c, mem, "alone over the limit");
    return true;
}

void gw_evict_tick(gw_thread_t *th)
{
    uint64_t limit = gw_evict_limit();
    uint64_t sum = 0, big = 0;
    gw_conn_t *victim = NULL;
    if (!limit) {
        __atomic_store_n(&th->clients_mem, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&th->biggest_client_mem, 0, __ATOMIC_RELAXED);
        th->evict_over_ticks = 0;
        return;
    }
    uv_mutex_lock(&th->lock);
    for (gw_conn_t *x = th->conns; x; x = x->next) {
        uint64_t m = gw_client_mem(x);
        sum += m;
        if (!x->no_evict && !x->kill && !x->closing && m > big) {
            big = m;
            victim = x;
        }
    }
    uv_mutex_unlock(&th->lock);
    __atomic_store_n(&th->clients_mem, sum, __ATOMIC_RELAXED);
    __atomic_store_n(&th->biggest_client_mem, big, __ATOMIC_RELAXED);
    uint64_t total = 0;
    int biggest_here = victim != NULL;
    for (int t = 0; t < gw_server.nthreads; t++) {
        const gw_thread_t *o = &gw_server.threads[t];
        total += __atomic_load_n(&o->clients_mem, __ATOMIC_RELAXED);
        uint64_t ob = __atomic_load_n(&o->biggest_client_mem, __ATOMIC_RELAXED);
        if (o != th && (ob > big || (ob == big && o->index < th->index)))
            biggest_here = 0; /* another thread holds the biggest: its tick closes it */
    }
    /* The other threads' sums are as of their last tick (up to 100 ms old): a client that
     * has just finished a big command may still be counted. Over on two ticks in a row
     * before anyone is closed. */
    th->evict_over_ticks = total > limit ? th->evict_over_ticks + 1 : 0;
    if (!biggest_here || th->evict_over_ticks < 2) return;
    th->evict_over_ticks = 0;
    __atomic_store_n(&th->clients_mem, sum - big, __ATOMIC_RELAXED);
    __atomic_store_n(&th->biggest_client_mem, 0, __ATOMIC_RELAXED);
    evict(victim, big, "the biggest while all clients are over the limit");
}
