/* Per-worker block allocator: chunk FAA on the superblock, bump allocation inside the
 * chunk, per-size FIFO free lists with a quarantine timestamp. */
#include "dmkv/alloc.h"

#include <stdlib.h>
#include <unistd.h>

#include "dmkv/errors.h"
#include "dmkv/superblock.h"

#define MAX_CLASS 256 /* size classes 1..256 units; bigger blocks go back to class 0 */

typedef struct freed {
    dm_gaddr_t addr;
    uint64_t units;
    uint64_t freed_us;
    struct freed *next;
} freed_t;

struct dm_alloc {
    dm_worker_t *w;
    dm_gaddr_t cur;     /* next free byte in the current chunk */
    uint64_t cur_left;  /* bytes left in it */
    unsigned next_node; /* round robin */
    uint64_t chunk_bytes;
    freed_t *head[MAX_CLASS + 1], *tail[MAX_CLASS + 1];
};

dm_alloc_t *dm_alloc_create(dm_worker_t *w)
{
    dm_alloc_t *a = calloc(1, sizeof(*a));
    if (a) a->w = w;
    return a;
}

void dm_alloc_destroy(dm_alloc_t *a)
{
    if (!a) return;
    for (int c = 0; c <= MAX_CLASS; c++)
        while (a->head[c]) {
            freed_t *f = a->head[c];
            a->head[c] = f->next;
            free(f);
        }
    free(a);
}

int dm_ctx_check(const dm_ctx_t *ctx)
{
    return dm_now_us() - ctx->start_us > DM_OP_TIMEOUT_US ? DM_ERETRY : 0;
}

/* Take bytes (multiple of 64) straight from some node's alloc_ptr by FAA, round robin
 * over the pool's nodes (so chunks, hence KV blocks and subtables, spread evenly), within
 * the pool-wide maxmemory budget. */
static int take_from_pool(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t bytes, dm_gaddr_t *out)
{
    dm_worker_t *w = a->w;
    /* The pool-wide budget first (maxmemory): FAA the usage ‖ read the limit. */
    dm_batch_t b;
    uint64_t limit = 0;
    dm_batch_init(&b);
    dm_verb_t *u = dm_batch_faa(&b, dm_gaddr_make(0, DM_SB_OFF(pool_used)), bytes);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(maxmemory)), &limit, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (limit && u->result + bytes > limit) {
        dm_batch_init(&b);
        dm_batch_faa(&b, dm_gaddr_make(0, DM_SB_OFF(pool_used)), (uint64_t) - (int64_t)bytes);
        dm_batch_exec(ctx, &b);
        return DM_ENOMEM;
    }
    for (unsigned tries = 0; tries < w->n_nodes; tries++) {
        unsigned node = a->next_node++ % w->n_nodes;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_faa(&b, dm_gaddr_make(node, DM_SB_OFF(alloc_ptr)), bytes);
        rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        uint64_t old = v->result;
        if (old + bytes <= w->conns[node]->region_size && old + bytes > old) {
            *out = dm_gaddr_make(node, old);
            a->chunk_bytes += bytes;
            return 0;
        }
        /* This node is full: the overshoot stays (every later FAA fails the same way). */
    }
    dm_batch_init(&b);
    dm_batch_faa(&b, dm_gaddr_make(0, DM_SB_OFF(pool_used)), (uint64_t) - (int64_t)bytes);
    dm_batch_exec(ctx, &b);
    return DM_ENOMEM;
}

static freed_t *take_freed(dm_alloc_t *a, uint64_t units)
{
    int c = units <= MAX_CLASS ? (int)units : 0;
    freed_t *f = a->head[c], *prev = NULL;
    uint64_t now = dm_now_us();
    for (int scanned = 0; f && scanned < 8; prev = f, f = f->next, scanned++) {
        if (now - f->freed_us < DM_GRACE_US) return NULL; /* FIFO: the rest are younger */
        if (f->units != units) continue;
        if (prev)
            prev->next = f->next;
        else
            a->head[c] = f->next;
        if (a->tail[c] == f) a->tail[c] = prev;
        return f;
    }
    return NULL;
}

uint64_t dm_alloc_owner_id(void)
{
    static uint64_t id;
    uint64_t v = __atomic_load_n(&id, __ATOMIC_RELAXED);
    if (!v) {
        v = (dm_now_us() * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)getpid() << 32) ^ dm_wall_ms();
        v |= 1;
        uint64_t zero = 0;
        if (!__atomic_compare_exchange_n(&id, &zero, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            v = zero;
    }
    return v;
}

/* Take payload bytes behind a chunk header; the header is written without waiting (it is
 * read only by pool walks, never on the data path). */
static int take_range(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t payload, dm_gaddr_t *out)
{
    uint64_t total = payload + sizeof(dm_chunk_hdr_t);
    dm_gaddr_t start;
    int rc = take_from_pool(ctx, a, total, &start);
    if (rc) return rc;
    dm_chunk_hdr_t h = {.magic = DM_CHUNK_MAGIC,
                        .bytes = total,
                        .owner = dm_alloc_owner_id(),
                        .created_ms = dm_wall_ms()};
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, start, &h, sizeof(h));
    dm_batch_post_async(ctx, &b);
    *out = start + sizeof(dm_chunk_hdr_t);
    return 0;
}

int dm_alloc_block(dm_ctx_t *ctx, uint64_t bytes, dm_gaddr_t *out)
{
    dm_alloc_t *a = ctx->w->alloc;
    uint64_t units = (bytes + DM_UNIT - 1) / DM_UNIT;
    if (units == 0) units = 1;
    uint64_t need = units * DM_UNIT;
    freed_t *f = take_freed(a, units);
    if (f) {
        *out = f->addr;
        free(f);
        return 0;
    }
    if (need > DM_CHUNK_SIZE / 4) /* big values get their own extent */
        return take_range(ctx, a, need, out);
    if (a->cur_left < need) {
        dm_gaddr_t chunk;
        uint64_t payload = DM_CHUNK_SIZE - sizeof(dm_chunk_hdr_t);
        int rc = take_range(ctx, a, payload, &chunk);
        if (rc) return rc;
        /* The rest of the old chunk is abandoned (small: < a quarter chunk). */
        a->cur = chunk;
        a->cur_left = payload;
    }
    *out = a->cur;
    a->cur += need;
    a->cur_left -= need;
    return 0;
}

void dm_alloc_free(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes)
{
    uint64_t units = (bytes + DM_UNIT - 1) / DM_UNIT;
    if (units == 0) units = 1;
    freed_t *f = malloc(sizeof(*f));
    if (!f) return; /* leak rather than fail a free */
    f->addr = addr;
    f->units = units;
    f->freed_us = dm_now_us();
    f->next = NULL;
    int c = units <= MAX_CLASS ? (int)units : 0;
    if (a->tail[c])
        a->tail[c]->next = f;
    else
        a->head[c] = f;
    a->tail[c] = f;
}

uint64_t dm_alloc_chunk_bytes(const dm_alloc_t *a)
{
    return a->chunk_bytes;
}

int dm_pool_set_maxmemory(dm_ctx_t *ctx, uint64_t bytes)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(maxmemory)), &bytes, 8);
    return dm_batch_exec(ctx, &b);
}

int dm_pool_usage(dm_ctx_t *ctx, uint64_t *maxmemory, uint64_t *used)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(maxmemory)), maxmemory, 8);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(pool_used)), used, 8);
    return dm_batch_exec(ctx, &b);
}
