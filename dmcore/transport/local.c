/* The `local` backend: the memory node's region lives in this process; verbs are memcpy
 * and __atomic ops (dm_region_exec). Used by unit tests, fault simulation and embedded
 * mode. Fault injection delays execution (each batch runs from its own libuv timer, with
 * jitter, so batches from different coroutines interleave and reorder), fails batches, or
 * calls a hook before each verb. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dmkv/superblock.h"
#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "dmkv/region_exec.h"
#include "dmkv/transport.h"

typedef struct local_region {
    char name[64];
    uint8_t *base;
    uint64_t size;
    struct local_region *next;
} local_region_t;

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static local_region_t *regions;
static uint64_t default_size = 256ull << 20;

static struct {
    uint32_t delay_us;
    uint32_t fail_every;
    dm_local_hook_fn hook;
    void *hook_arg;
    uint64_t batches;
    uint32_t cut_every;
    uint64_t write_batches, cut;
    uint32_t lost; /* batches left whose completion is lost after they ran */
} inject;

typedef struct local_conn {
    dm_conn_t base;
    uv_loop_t *loop;
    local_region_t *region;
    unsigned outstanding;
    int closing;
} local_conn_t;

typedef struct delayed_batch {
    uv_timer_t timer;
    local_conn_t *c;
    dm_verb_t *verbs;
    size_t n;
    dm_post_cb cb;
    void *arg;
} delayed_batch_t;

void dm_local_set_size(uint64_t bytes)
{
    pthread_mutex_lock(&regions_lock);
    default_size = bytes;
    pthread_mutex_unlock(&regions_lock);
}

void dm_local_inject(uint32_t delay_us, uint32_t fail_every, dm_local_hook_fn hook, void *arg)
{
    /* Other threads' batches read these without the lock (run_batch, local_post): atomic
     * stores, the hook last so its argument is in place before anyone calls it. */
    pthread_mutex_lock(&regions_lock);
    __atomic_store_n(&inject.delay_us, delay_us, __ATOMIC_RELAXED);
    __atomic_store_n(&inject.fail_every, fail_every, __ATOMIC_RELAXED);
    __atomic_store_n(&inject.hook_arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&inject.hook, hook, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&regions_lock);
}

void dm_local_inject_lost(uint32_t n)
{
    __atomic_store_n(&inject.lost, n, __ATOMIC_RELAXED);
}

/* Whether this batch's completion is to be lost (dm_local_inject_lost): takes one. */
static int lose_reply(void)
{
    uint32_t n = __atomic_load_n(&inject.lost, __ATOMIC_RELAXED);
    while (n && !__atomic_compare_exchange_n(&inject.lost, &n, n - 1, 0, __ATOMIC_RELAXED,
                                             __ATOMIC_RELAXED))
        ;
    return n != 0;
}

uint64_t dm_local_inject_cut(uint32_t cut_every)
{
    __atomic_store_n(&inject.cut_every, cut_every, __ATOMIC_RELAXED);
    return __atomic_load_n(&inject.cut, __ATOMIC_RELAXED);
}

/* How many of n verbs to run: n, or a prefix when this batch is to be cut. */
static size_t cut_point(const dm_verb_t *verbs, size_t n)
{
    uint32_t every = __atomic_load_n(&inject.cut_every, __ATOMIC_RELAXED);
    if (!every) return n;
    unsigned writes = 0;
    for (size_t i = 0; i < n; i++)
        writes += verbs[i].op == DM_OP_WRITE;
    if (writes < 2 || __atomic_add_fetch(&inject.write_batches, 1, __ATOMIC_RELAXED) % every)
        return n;
    __atomic_add_fetch(&inject.cut, 1, __ATOMIC_RELAXED);
    return n / 2;
}

static local_region_t *region_find(const char *name, int create)
{
    pthread_mutex_lock(&regions_lock);
    local_region_t *r;
    for (r = regions; r; r = r->next)
        if (strcmp(r->name, name) == 0) break;
    if (!r && create) {
        r = calloc(1, sizeof(*r));
        if (r) {
            snprintf(r->name, sizeof(r->name), "%s", name);
            r->size = default_size;
            r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (r->base == MAP_FAILED) {
                free(r);
                r = NULL;
            } else {
                dm_region_format(r->base, r->size);
                r->next = regions;
                regions = r;
            }
        }
    }
    pthread_mutex_unlock(&regions_lock);
    return r;
}

int dm_local_region_adopt(const char *name, uint8_t *base, uint64_t size)
{
    if (!name || strlen(name) >= sizeof(((local_region_t *)0)->name) || !base ||
        size < DM_SB_SIZE || ((const dm_superblock_t *)base)->magic != DM_SB_MAGIC)
        return DM_EINVAL;
    pthread_mutex_lock(&regions_lock);
    local_region_t *r;
    for (r = regions; r; r = r->next)
        if (strcmp(r->name, name) == 0) break;
    int rc = 0;
    if (r) {
        rc = r->base == base && r->size == size ? 0 : DM_EINVAL;
    } else if (!(r = calloc(1, sizeof(*r)))) {
        rc = DM_ENOMEM;
    } else { /* not formatted, never unmapped here: the range is the caller's */
        snprintf(r->name, sizeof(r->name), "%s", name);
        r->base = base;
        r->size = size;
        r->next = regions;
        regions = r;
    }
    pthread_mutex_unlock(&regions_lock);
    return rc;
}

uint8_t *dm_local_region_base(const char *name, uint64_t *size)
{
    local_region_t *r = region_find(name, 0);
    if (!r) return NULL;
    if (size) *size = r->size;
    return r->base;
}

/* Execute a batch now; returns the connection status (DM_EIO when injected). */
static int run_batch(local_conn_t *c, dm_verb_t *verbs, size_t n)
{
    dm_local_hook_fn hook = __atomic_load_n(&inject.hook, __ATOMIC_ACQUIRE);
    uint32_t fail_every = __atomic_load_n(&inject.fail_every, __ATOMIC_RELAXED);
    uint64_t seq = __atomic_add_fetch(&inject.batches, 1, __ATOMIC_RELAXED);
    if (fail_every && seq % fail_every == 0) {
        for (size_t i = 0; i < n; i++)
            verbs[i].status = DM_EIO;
        return DM_EIO;
    }
    size_t run = cut_point(verbs, n);
    for (size_t i = 0; i < run; i++) {
        if (hook) hook(&verbs[i], __atomic_load_n(&inject.hook_arg, __ATOMIC_RELAXED));
        verbs[i].status = dm_region_exec(c->region->base, c->region->size, &verbs[i]);
    }
    for (size_t i = run; i < n; i++)
        verbs[i].status = DM_EIO;
    if (run == n && lose_reply()) {
        for (size_t i = 0; i < n; i++)
            verbs[i].status = DM_EIO;
        return DM_EIO;
    }
    return run < n ? DM_EIO : 0;
}

static void delayed_closed(uv_handle_t *h)
{
    free(h->data);
}

static void delayed_fire(uv_timer_t *t)
{
    delayed_batch_t *d = t->data;
    local_conn_t *c = d->c;
    /* Posted verbs execute even when the connection is closing, as on an RNIC. */
    int st = run_batch(c, d->verbs, d->n);
    if (st)
        for (size_t i = 0; i < d->n; i++)
            d->verbs[i].status = st;
    c->outstanding--;
    d->cb(d->arg, st);
    uv_close((uv_handle_t *)&d->timer, delayed_closed);
    if (c->closing && c->outstanding == 0) free(c);
}

static int local_post(dm_conn_t *base, dm_verb_t *verbs, size_t n, dm_post_cb cb, void *arg)
{
    local_conn_t *c = (local_conn_t *)base;
    uint32_t delay = __atomic_load_n(&inject.delay_us, __ATOMIC_RELAXED);
    if (c->closing) return DM_EIO;
    uint32_t late_ms =
        base->send_by_us && dm_fault_armed(DM_FAULT_LATE) ? dm_fault_delay_ms(DM_FAULT_LATE) : 0;
    if (late_ms) usleep(late_ms * 1000u);         /* tests: held back before the check */
    if (dm_conn_send_late(base)) return DM_ELATE; /* not run */
    dm_conn_count_message(base, n);
    if (delay == 0) {
        int st = run_batch(c, verbs, n);
        cb(arg, st);
        return 0;
    }
    delayed_batch_t *d = calloc(1, sizeof(*d));
    if (!d) return DM_ENOMEM;
    d->c = c;
    d->verbs = verbs;
    d->n = n;
    d->cb = cb;
    d->arg = arg;
    d->timer.data = d;
    uv_timer_init(c->loop, &d->timer);
    /* Jitter in [delay/2, 3*delay/2] microseconds; libuv timers have ms resolution. */
    uint64_t us = delay / 2 + (uint64_t)rand() % (delay + 1);
    c->outstanding++;
    uv_timer_start(&d->timer, delayed_fire, us / 1000, 0);
    return 0;
}

static void local_close(dm_conn_t *base)
{
    local_conn_t *c = (local_conn_t *)base;
    c->closing = 1;
    if (c->outstanding == 0) free(c);
}

static const dm_conn_ops_t local_ops = {.post = local_post, .close = local_close};

dm_conn_t *dm_local_open(uv_loop_t *loop, const char *name, char *err, size_t errlen)
{
    local_region_t *r = region_find(name ? name : "default", 1);
    if (!r) {
        snprintf(err, errlen, "cannot allocate local region '%s'", name ? name : "default");
        return NULL;
    }
    local_conn_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->base.ops = &local_ops;
    c->base.caps = DM_CAP_MASKED_CAS;
    c->base.region_size = r->size;
    c->base.incarnation = ((const dm_superblock_t *)r->base)->incarnation;
    c->loop = loop;
    c->region = r;
    return &c->base;
}
