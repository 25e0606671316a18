/* The per-node stacks of returned blocks (returned.h). A lock-free stack (Treiber) with a
 * tagged head, as the free-range stack (superblock.h DM_FREE_*): a pop's CAS succeeds only
 * if the head did not change since it was read, so the top's link it read is still true. */
#include "returned.h"

#include <stdlib.h>

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"
#include "size_class.h"

#define TRIES 8 /* CAS attempts on a head before giving up */

/* The pool-wide count of returned bytes, without waiting (INFO only). */
static void count_bytes(dm_ctx_t *ctx, int64_t delta)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_faa(&b, dm_gaddr_make(0, DM_SB_OFF(returned_bytes)), (uint64_t)delta);
    dm_batch_post_async(ctx, &b);
}

int dm_pool_returned_bytes(dm_ctx_t *ctx, uint64_t *bytes)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(returned_bytes)), bytes, 8);
    int rc = dm_batch_exec(ctx, &b);
    if ((int64_t)*bytes < 0) *bytes = 0; /* a pop's FAA landed before its push's */
    return rc;
}

/* which: the superblock offset of the stack's head word (block_free or log_free). */
static int push_on(dm_ctx_t *ctx, size_t which, dm_gaddr_t addr, uint64_t bytes, uint64_t *head)
{
    unsigned node = dm_gaddr_node(addr);
    uint64_t off = dm_gaddr_off(addr);
    if (off % DM_UNIT || bytes % DM_UNIT || bytes < DM_RETURN_MIN_BYTES) return DM_EINVAL;
    dm_batch_t b;
    int rc;
    if (!*head) {
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make(node, which), head, 8);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
    }
    for (int tries = 0; tries < TRIES; tries++) {
        dm_chunk_hdr_t h = {.magic = DM_RETURNED_MAGIC,
                            .bytes = bytes,
                            .owner = 0,
                            .created_ms = dm_wall_ms(),
                            .next_free = dm_free_head_off(*head)};
        /* The link is in place before the CAS makes the block reachable. */
        dm_batch_init(&b);
        dm_batch_write(&b, addr, &h, sizeof(h));
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
        uint64_t want = dm_free_head(dm_free_head_tag(*head) + 1, off);
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(node, which), *head, want);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
        if (v->result == *head) {
            *head = want;
            count_bytes(ctx, (int64_t)bytes);
            return 1;
        }
        *head = v->result;
    }
    return 0;
}

/* The header of a returned block is believable: its node's, aligned, its link too. */
static int hdr_ok(const dm_worker_t *w, unsigned node, uint64_t off, const dm_chunk_hdr_t *h)
{
    uint64_t size = w->conns[node]->region_size;
    return h->magic == DM_RETURNED_MAGIC && h->owner == 0 && h->bytes % DM_UNIT == 0 &&
           h->bytes >= DM_RETURN_MIN_BYTES && h->bytes <= size - off &&
           h->next_free % DM_UNIT == 0 &&
           (h->next_free == 0 || (h->next_free >= DM_SB_FIRST_CHUNK && h->next_free < size));
}

static int pop(dm_ctx_t *ctx, size_t which, unsigned node, uint64_t head, dm_gaddr_t *start,
               uint64_t *bytes)
{
    for (int tries = 0; tries < TRIES; tries++) {
        uint64_t off = dm_free_head_off(head);
        if (!off || off < DM_SB_FIRST_CHUNK || off >= ctx->w->conns[node]->region_size) return 0;
        dm_chunk_hdr_t h;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make(node, off), &h, sizeof(h));
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        int ok = hdr_ok(ctx->w, node, off, &h);
        dm_batch_init(&b);
        /* A header that is not believable: the head moved on (the block was taken and
         * reused) or the stack is corrupt; a CAS that still sees this head cuts the stack
         * there rather than hand out what it links. */
        dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(node, which), head,
                                    dm_free_head(dm_free_head_tag(head) + 1, ok ? h.next_free : 0));
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
        if (v->result == head) {
            if (!ok) return 0;
            *start = dm_gaddr_make(node, off);
            *bytes = h.bytes;
            count_bytes(ctx, -(int64_t)h.bytes);
            return 1;
        }
        head = v->result;
    }
    return 0;
}

/* Pop from the one stack per node whose head word is at which (log_free). */
static int take_from(dm_ctx_t *ctx, size_t which, dm_gaddr_t *start, uint64_t *bytes)
{
    dm_worker_t *w = ctx->w;
    uint64_t heads[DM_BATCH_MAX];
    unsigned n = w->n_nodes < DM_BATCH_MAX ? w->n_nodes : DM_BATCH_MAX;
    dm_batch_t b;
    dm_batch_init(&b);
    for (unsigned i = 0; i < n; i++)
        dm_batch_read(&b, dm_gaddr_make(i, which), &heads[i], 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    for (unsigned i = 0; i < n; i++) {
        if (!dm_free_head_off(heads[i])) continue;
        if ((rc = pop(ctx, which, i, heads[i], start, bytes)) != 0) return rc;
    }
    return 0;
}

/* Class index of units grains rounded down (up: 0 when units <= 512): the allocator's
 * large classes (size_class.h). */
static unsigned class_index(uint64_t units, int up)
{
    if (units <= DM_SIZE_CLASS_EXACT) return 0;
    uint64_t idx = dm_size_class_large(units, up, NULL);
    return idx < DM_RETURNED_CLASSES ? (unsigned)idx : DM_RETURNED_CLASSES;
}

unsigned returned_class(uint64_t bytes)
{
    unsigned c = class_index(bytes / DM_GRAIN, 0);
    return c < DM_RETURNED_CLASSES ? c : DM_RETURNED_CLASSES - 1;
}

unsigned returned_need_class(uint64_t need)
{
    unsigned c = class_index((need + DM_GRAIN - 1) / DM_GRAIN, 1);
    return c < DM_RETURNED_CLASSES ? c : DM_RETURNED_CLASSES - 1;
}

/* The superblock offset of class c's head word. */
static size_t class_head(unsigned c)
{
    return DM_SB_OFF(block_free_class) + 8 * c;
}

_Static_assert(sizeof(((dm_superblock_t *)0)->block_free_class) == 8 * DM_RETURNED_CLASSES,
               "a head word per class");

/* Pop from the first non-empty stack over the nodes whose head word is at which, as read
 * into heads[node]. */
static int take_one(dm_ctx_t *ctx, size_t which, const uint64_t *const *heads, unsigned n,
                    dm_gaddr_t *start, uint64_t *bytes)
{
    for (unsigned i = 0; i < n; i++) {
        if (!dm_free_head_off(*heads[i])) continue;
        int rc = pop(ctx, which, i, *heads[i], start, bytes);
        if (rc != 0) return rc;
    }
    return 0;
}

#define TAKE_NODES (DM_BATCH_MAX / 2) /* nodes one take looks at: two reads each */

int returned_take(dm_ctx_t *ctx, uint64_t need, dm_gaddr_t *start, uint64_t *bytes)
{
    dm_worker_t *w = ctx->w;
    unsigned n = w->n_nodes < TAKE_NODES ? w->n_nodes : TAKE_NODES;
    /* On the heap: coroutine stacks are small, and a pop yields to other coroutines. */
    uint64_t(*cls)[DM_RETURNED_CLASSES] = malloc(n * sizeof(*cls));
    uint64_t legacy[TAKE_NODES];
    if (!cls) return DM_ENOMEM;
    dm_batch_t b;
    dm_batch_init(&b);
    for (unsigned i = 0; i < n; i++) {
        dm_batch_read(&b, dm_gaddr_make(i, DM_SB_OFF(block_free_class)), cls[i], sizeof(cls[i]));
        dm_batch_read(&b, dm_gaddr_make(i, DM_SB_OFF(block_free)), &legacy[i], 8);
    }
    int rc = dm_batch_exec(ctx, &b);
    const uint64_t *heads[TAKE_NODES];
    for (unsigned c = returned_need_class(need); !rc && c < DM_RETURNED_CLASSES; c++) {
        for (unsigned i = 0; i < n; i++)
            heads[i] = &cls[i][c];
        rc = take_one(ctx, class_head(c), heads, n, start, bytes);
    }
    for (unsigned i = 0; i < n; i++)
        heads[i] = &legacy[i];
    if (!rc) rc = take_one(ctx, DM_SB_OFF(block_free), heads, n, start, bytes);
    free(cls);
    return rc;
}

int returned_push(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t bytes, uint64_t *head)
{
    return push_on(ctx, class_head(returned_class(bytes)), addr, bytes, head);
}

int returned_push_log(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t bytes)
{
    uint64_t head = 0;
    return push_on(ctx, DM_SB_OFF(log_free), addr, bytes, &head);
}

int returned_take_log(dm_ctx_t *ctx, dm_gaddr_t *start, uint64_t *bytes)
{
    return take_from(ctx, DM_SB_OFF(log_free), start, bytes);
}
