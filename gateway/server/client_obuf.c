/* client-output-buffer-limit (client_obuf.h). */
#include "server/client_obuf.h"

#include "dmkv/log.h"
#include "dmkv/worker.h"
#include "server/stats.h"

/* In force (set at start, server.c); fields read and written with relaxed atomics. */
static gw_obuf_limit_t limits[GW_OBUF_CLASSES];

static gw_obuf_limit_t load(int cls)
{
    return (gw_obuf_limit_t){.hard = __atomic_load_n(&limits[cls].hard, __ATOMIC_RELAXED),
                             .soft = __atomic_load_n(&limits[cls].soft, __ATOMIC_RELAXED),
                             .soft_secs =
                                 __atomic_load_n(&limits[cls].soft_secs, __ATOMIC_RELAXED)};
}

void gw_obuf_get(gw_obuf_limit_t lim[GW_OBUF_CLASSES])
{
    for (int i = 0; i < GW_OBUF_CLASSES; i++)
        lim[i] = load(i);
}

void gw_obuf_set(const gw_obuf_limit_t lim[GW_OBUF_CLASSES])
{
    for (int i = 0; i < GW_OBUF_CLASSES; i++) {
        __atomic_store_n(&limits[i].hard, lim[i].hard, __ATOMIC_RELAXED);
        __atomic_store_n(&limits[i].soft, lim[i].soft, __ATOMIC_RELAXED);
        __atomic_store_n(&limits[i].soft_secs, lim[i].soft_secs, __ATOMIC_RELAXED);
    }
}

uint64_t gw_obuf_bytes(const gw_conn_t *c)
{
    uint64_t n = c->out.len + c->out_inflight;
    for (const gw_slot_t *s = c->shead; s; s = s->next)
        n += s->out.len;
    return n;
}

/* Redis's checkClientOutputBufferLimits: the soft limit's clock starts the first time it
 * is seen reached and stops when the output falls under it. */
static bool over_limits(gw_conn_t *c, uint64_t bytes, const gw_obuf_limit_t *l, uint64_t now_ms)
{
    if (l->hard && bytes >= l->hard) return true;
    if (!l->soft || bytes < l->soft) {
        c->obuf_soft_since_ms = 0;
        return false;
    }
    if (!c->obuf_soft_since_ms) {
        c->obuf_soft_since_ms = now_ms;
        return false;
    }
    return now_ms - c->obuf_soft_since_ms > l->soft_secs * 1000;
}

/* c's bytes against the limits l: close c (true) when over them. */
static bool enforce(gw_conn_t *c, uint64_t bytes, const gw_obuf_limit_t *l, uint64_t now_ms)
{
    if (!over_limits(c, bytes, l, now_ms)) return false;
    gw_buf_t d;
    gw_buf_init(&d);
    gw_conn_describe(c, &d);
    if (d.len && d.data[d.len - 1] == '\n') d.len--;
    dm_log(DM_LOG_WARNING,
           "Client %.*s scheduled to be closed ASAP for overcoming of output buffer limits.",
           (int)d.len, d.data ? d.data : "");
    gw_buf_free(&d);
    GW_STAT_ADD(client_output_buffer_limit_disconnections, 1);
    gw_conn_close(c);
    return true;
}

bool gw_obuf_check(gw_conn_t *c, uint64_t now_ms)
{
    if (c->closing) return false;
    gw_obuf_limit_t l = load(GW_OBUF_NORMAL); /* every dmkv client is of class normal */
    if (!l.hard && !l.soft) {
        c->obuf_soft_since_ms = 0; /* no limit: no walk of the pipeline's replies */
        return false;
    }
    return enforce(c, gw_obuf_bytes(c), &l, now_ms);
}

void gw_obuf_tick(gw_thread_t *th)
{
    uint64_t now_ms = dm_now_us() / 1000;
    gw_obuf_limit_t l = load(GW_OBUF_NORMAL);
    /* Closing unlinks the connection (its memory stays until uv_close's callback). */
    for (gw_conn_t *x = th->conns, *next; x; x = next) {
        next = x->next;
        if (x->closing) continue;
        uint64_t bytes = gw_obuf_bytes(x);
        __atomic_store_n(&x->omem, bytes, __ATOMIC_RELAXED); /* CLIENT LIST's omem */
        enforce(x, bytes, &l, now_ms);
    }
}
