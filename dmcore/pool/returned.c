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

int returned_push_many(dm_ctx_t *ctx, const dm_gaddr_t *addr, const uint64_t *bytes, int *out,
                       size_t n)
{
    if (n > DM_RETURN_MANY_MAX) return DM_EINVAL;
    /* Blocks of one stack form a chain: each links to the next, the last to the head. */
    size_t stack_of[DM_RETURN_MANY_MAX], first[DM_RETURN_MANY_MAX], last[DM_RETURN_MANY_MAX];
    size_t next[DM_RETURN_MANY_MAX];
    unsigned key[DM_RETURN_MANY_MAX];
    uint64_t head[DM_RETURN_MANY_MAX];
    int member[DM_RETURN_MANY_MAX] = {0}; /* pushable: in a chain */
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = 0;
        if (dm_gaddr_off(addr[i]) % DM_UNIT || bytes[i] % DM_UNIT || bytes[i] < DM_RETURN_MIN_BYTES)
            continue;
        unsigned k = dm_gaddr_node(addr[i]) * DM_RETURNED_CLASSES + returned_class(bytes[i]);
        size_t s = 0;
        while (s < ns && key[s] != k)
            s++;
        if (s == ns) {
            key[ns] = k;
            first[ns] = i;
            ns++;
        } else {
            next[last[s]] = i;
        }
        last[s] = i;
        next[i] = SIZE_MAX;
        stack_of[i] = s;
        member[i] = 1;
    }
    if (!ns) return 0;
    dm_batch_t b;
    dm_batch_init(&b);
    for (size_t s = 0; s < ns; s++)
        dm_batch_read(
            &b,
            dm_gaddr_make(key[s] / DM_RETURNED_CLASSES, class_head(key[s] % DM_RETURNED_CLASSES)),
            &head[s], 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc; /* nothing written: every block is still the caller's */
    dm_chunk_hdr_t *h = malloc(n * sizeof(*h));
    if (!h) return DM_ENOMEM;
    int left = (int)ns; /* stacks not pushed yet */
    int done[DM_RETURN_MANY_MAX] = {0};
    for (int tries = 0; tries < TRIES && left && !rc; tries++) {
        /* The links (all of them the first time, then the last block's of each stack the
         * CAS missed) are in place before a CAS makes the blocks reachable. */
        dm_batch_init(&b);
        for (size_t i = 0; i < n && !rc; i++) {
            if (!member[i] || done[stack_of[i]] || (tries && next[i] != SIZE_MAX)) continue;
            h[i] = (dm_chunk_hdr_t){.magic = DM_RETURNED_MAGIC,
                                    .bytes = bytes[i],
                                    .owner = 0,
                                    .created_ms = dm_wall_ms(),
                                    .next_free = next[i] == SIZE_MAX
                                                     ? dm_free_head_off(head[stack_of[i]])
                                                     : dm_gaddr_off(addr[next[i]])};
            if (b.n == DM_BATCH_MAX) {
                rc = dm_batch_exec(ctx, &b);
                dm_batch_init(&b);
            }
            dm_batch_write(&b, addr[i], &h[i], sizeof(h[i]));
        }
        if (!rc && b.n) rc = dm_batch_exec(ctx, &b);
        if (rc) break; /* no CAS sent: nothing reachable */
        dm_verb_t *v[DM_RETURN_MANY_MAX];
        dm_batch_init(&b);
        for (size_t s = 0; s < ns; s++)
            if (!done[s])
                v[s] = dm_batch_cas(
                    &b,
                    dm_gaddr_make(key[s] / DM_RETURNED_CLASSES,
                                  class_head(key[s] % DM_RETURNED_CLASSES)),
                    head[s],
                    dm_free_head(dm_free_head_tag(head[s]) + 1, dm_gaddr_off(addr[first[s]])));
        int crc = dm_batch_exec(ctx, &b);
        if (crc) { /* outcome unknown: the blocks may be on their stacks */
            for (size_t i = 0; i < n; i++)
                if (member[i] && !done[stack_of[i]]) out[i] = crc;
            free(h);
            return crc;
        }
        for (size_t s = 0; s < ns; s++) {
            if (done[s]) continue;
            if (v[s]->result != head[s]) {
                head[s] = v[s]->result; /* contended: link to the new head, CAS again */
                continue;
            }
            done[s] = 1;
            left--;
            uint64_t pushed = 0;
            for (size_t i = first[s]; i != SIZE_MAX; i = next[i]) {
                out[i] = 1;
                pushed += bytes[i];
            }
            count_bytes(ctx, (int64_t)pushed);
        }
    }
    free(h);
    return rc; /* stacks still contended, or links not written: those blocks stay the caller's */
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
