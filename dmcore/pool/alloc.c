/* Per-worker block allocator: chunks popped from a node's free-range stack or taken by FAA
 * on its alloc_ptr, bump allocation inside the chunk, per-size FIFO free lists with a
 * quarantine timestamp. Blocks up to 16 KB have a class per 32-byte size; bigger ones are
 * rounded up to one of 8 classes per doubling (at most 1/8 more than asked), so a freed
 * 150 KB block serves the next 140-160 KB request instead of waiting for an exact size
 * that random value sizes almost never repeat (the pool grew without bound). */
#include "dmkv/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/log.h"
#include "dmkv/superblock.h"
#include "free_log.h"
#include "returned.h"
#include "alloc_internal.h"
#include "size_class.h"
#include "tails.h"

#define MAX_CLASS DM_SIZE_CLASS_EXACT   /* exact size classes 1..512 grains (16 KB) */
#define LARGE_STEPS DM_SIZE_CLASS_STEPS /* rounded classes per doubling above MAX_CLASS grains */
#define LARGE_DOUBLINGS 26              /* 16 KB .. 2^40 bytes */
#define NCLASSES (MAX_CLASS + 1 + LARGE_STEPS * LARGE_DOUBLINGS)

/* Reserve kept above the carve point by trim_reserve: at least TRIM_KEEP_MIN, and twice
 * what the worker carved in small blocks in the last free-log tick. */
#define TRIM_KEEP_MIN (16u << 10)
/* A block this big or bigger raises the watermark for itself: to its end plus the reserve
 * small blocks need (a->keep), not by DM_TAIL_STEP, and is not counted in the rate the
 * reserve follows. A reserve twice a tick's carving of 20-200 KB values was what deaths
 * lost most (docs/leases.md "The reserve comes back down"); a raise is one CAS per such
 * block, next to a transfer of 16 KB or more. */
#define LARGE_CARVE TRIM_KEEP_MIN
#define BIG_EXTENT (DM_CHUNK_SIZE / 4) /* blocks over this get an extent of their own */
#define RETURNED_EMPTY_US 100000u      /* take_returned: an empty stack is looked at again after */

typedef struct freed {
    dm_gaddr_t addr;
    uint64_t units;
    uint64_t freed_us;
    struct freed *next;
    unsigned char need_claim; /* a large block in the free log: claimed there before it leaves
                                 the lists (free_log.h FREE_LOG_CLAIM) */
    unsigned char logged;     /* in the free log: a reuse is named there (free_log_window) */
    unsigned char claim_more; /* the middle of a batch claimed ahead: its reuse stages the next
                                 batch (claim_old) */
    uint64_t claim_tick; /* a claim staged ahead of use: held once that free-log tick is done */
} freed_t;

_Static_assert(FREE_LOG_LARGE_UNITS == MAX_CLASS, "the log's large blocks are the large classes");

struct dm_alloc {
    dm_worker_t *w;
    dm_gaddr_t cur;              /* next free byte in the current region */
    uint64_t cur_left;           /* bytes left in it */
    dm_gaddr_t wm;               /* carve below this: the watermark registered (tails.h),
                                    the region's end when it is not registered */
    int entry;                   /* our word in the process's record (tails.h), -1 none */
    uint64_t entry_word;         /* the value we last put there */
    int fenced;                  /* a repairer took our region over: never register again */
    int busy;                    /* a coroutine is switching regions or raising wm */
    struct refill_wait *waiters; /* coroutines waiting for it */
    unsigned next_node;          /* round robin */
    uint64_t chunk_bytes;
    int64_t live_delta;       /* bytes allocated minus bytes freed since the last flush */
    int64_t listed_delta;     /* change of the bytes on its lists since the last flush (INFO) */
    int64_t claimed_delta;    /* and of those claimed ahead of use (claim_old) */
    int64_t unlogged_delta;   /* and of those no free log names (a death loses them) */
    uint64_t freed_delta;     /* bytes freed since the last flush (INFO) */
    uint64_t region_reported; /* cur_left as last added to region_bytes */
    uint64_t carved;          /* bytes of small blocks carved from regions, ever
                                 (trim_reserve's rate; see LARGE_CARVE) */
    uint64_t carved_at_trim;  /* carved at the last free-log tick */
    uint64_t keep;            /* the reserve trim_reserve last aimed at */
    freed_t *head[NCLASSES], *tail[NCLASSES];
    freed_t *spare;    /* unused list entries (freed_new) */
    free_log_t log;    /* what it freed, in the pool, and the reuse horizon (free_log.h) */
    uint64_t floor_us; /* the latest dm_now_us() its lists were dated by: never ahead of now */
    uint64_t reused_us[MAX_CLASS + 1];       /* when a small block of that class was last taken off
                                                the lists (claim_ready keeps those classes ready) */
    uint64_t claim_waited_us[MAX_CLASS + 1]; /* that class's last wait for claims (claim) */
    uint32_t claim_batch[MAX_CLASS + 1];     /* its claims ahead (claim_ahead), 0: the least */
    uint64_t claims_due;                     /* the tick a batch claimed at its middle rides
                                                (claim): called for at once */
    uint64_t returned_empty_until[DM_RETURNED_CLASSES]; /* the returned stacks of that class
                                                           and above were empty: no pop
                                                           before then */
    struct freed_slab *slabs;
};

/* List entries come FREED_SLAB at a time: a SET-heavy worker queues and takes one per
 * write, and 2 s of quarantine holds hundreds of thousands of them, too many for malloc's
 * per-thread cache (its consolidation showed up at ~2% of a SET's CPU). */
#define FREED_SLAB 1024
typedef struct freed_slab {
    struct freed_slab *next;
    freed_t v[FREED_SLAB];
} freed_slab_t;

static freed_t *freed_new(dm_alloc_t *a)
{
    if (!a->spare) {
        freed_slab_t *s = malloc(sizeof(*s));
        if (!s) return NULL;
        s->next = a->slabs;
        a->slabs = s;
        for (int i = 0; i < FREED_SLAB; i++) {
            s->v[i].next = a->spare;
            a->spare = &s->v[i];
        }
    }
    freed_t *f = a->spare;
    a->spare = f->next;
    return f;
}

static void freed_put(dm_alloc_t *a, freed_t *f)
{
    f->next = a->spare;
    a->spare = f;
}

/* Bytes in every worker's free lists, quarantined or reusable (INFO): each worker adds
 * its change once per cron tick (dm_alloc_flush_live), not once per block, so the SET
 * path does no atomic read-modify-write on a line that every thread shares. */
static _Atomic int64_t listed_bytes;

/* Listed blocks claimed ahead of use (claim_old), flushed as listed_bytes is: a death loses
 * them (INFO allocator_claimed_ahead_bytes). */
static _Atomic int64_t claimed_bytes;

/* Listed blocks in no free log, flushed as listed_bytes is: a death loses them (INFO
 * allocator_unlogged_free_bytes). */
static _Atomic int64_t unlogged_bytes;

static void listed(dm_alloc_t *a, const freed_t *f, int sign)
{
    a->listed_delta += sign * (int64_t)(f->units * DM_GRAIN);
    if (f->claim_tick) a->claimed_delta += sign * (int64_t)(f->units * DM_GRAIN);
    if (!f->logged) a->unlogged_delta += sign * (int64_t)(f->units * DM_GRAIN);
}

/* Listed block f is now in the free log, or in none: its bytes move in or out of the
 * unlogged count (listed() reads f->logged). */
static void listed_set_logged(dm_alloc_t *a, freed_t *f, int logged)
{
    unsigned char v = logged != 0;
    if (f->logged != v) a->unlogged_delta += (v ? -1 : 1) * (int64_t)(f->units * DM_GRAIN);
    f->logged = v;
}

/* Bytes left in every worker's current region (INFO), updated as listed_bytes is. */
static _Atomic int64_t region_bytes;

static void flush_region(dm_alloc_t *a, uint64_t now_left)
{
    atomic_fetch_add_explicit(&region_bytes, (int64_t)now_left - (int64_t)a->region_reported,
                              memory_order_relaxed);
    a->region_reported = now_left;
}

uint64_t dm_alloc_free_log_bytes(void)
{
    return free_log_open_bytes();
}

uint64_t dm_alloc_region_bytes(void)
{
    int64_t v = atomic_load_explicit(&region_bytes, memory_order_relaxed);
    return v > 0 ? (uint64_t)v : 0;
}

static _Atomic uint64_t freed_bytes; /* flushed as listed_bytes is */

uint64_t dm_alloc_freed_bytes(void)
{
    return atomic_load_explicit(&freed_bytes, memory_order_relaxed);
}

static void flush_listed(dm_alloc_t *a)
{
    if (a->freed_delta) {
        atomic_fetch_add_explicit(&freed_bytes, a->freed_delta, memory_order_relaxed);
        a->freed_delta = 0;
    }
    if (a->claimed_delta) {
        atomic_fetch_add_explicit(&claimed_bytes, a->claimed_delta, memory_order_relaxed);
        a->claimed_delta = 0;
    }
    if (a->unlogged_delta) {
        atomic_fetch_add_explicit(&unlogged_bytes, a->unlogged_delta, memory_order_relaxed);
        a->unlogged_delta = 0;
    }
    if (!a->listed_delta) return;
    atomic_fetch_add_explicit(&listed_bytes, a->listed_delta, memory_order_relaxed);
    a->listed_delta = 0;
}

/* Allocations that waited for a quarantined block with the pool full; blocks returned to
 * the pool and taken from it (INFO). */
static _Atomic uint64_t oom_waits, blocks_returned, blocks_taken, reserve_trims, claims,
    claim_waits;

void dm_alloc_returned_stats(uint64_t *returned, uint64_t *taken)
{
    *returned = atomic_load_explicit(&blocks_returned, memory_order_relaxed);
    *taken = atomic_load_explicit(&blocks_taken, memory_order_relaxed);
}

uint64_t dm_alloc_reserve_trims(void)
{
    return atomic_load_explicit(&reserve_trims, memory_order_relaxed);
}

uint64_t dm_alloc_claims(void)
{
    return atomic_load_explicit(&claims, memory_order_relaxed);
}

uint64_t dm_alloc_claim_waits(void)
{
    return atomic_load_explicit(&claim_waits, memory_order_relaxed);
}

uint64_t dm_alloc_oom_waits(void)
{
    return atomic_load_explicit(&oom_waits, memory_order_relaxed);
}

uint64_t dm_alloc_claimed_ahead_bytes(void)
{
    int64_t v = atomic_load_explicit(&claimed_bytes, memory_order_relaxed);
    return v > 0 ? (uint64_t)v : 0;
}

uint64_t dm_alloc_unlogged_free_bytes(void)
{
    int64_t v = atomic_load_explicit(&unlogged_bytes, memory_order_relaxed);
    return v > 0 ? (uint64_t)v : 0;
}

uint64_t dm_alloc_listed_bytes(void)
{
    int64_t v = atomic_load_explicit(&listed_bytes, memory_order_relaxed);
    return v > 0 ? (uint64_t)v : 0;
}

dm_alloc_t *dm_alloc_create(dm_worker_t *w)
{
    dm_alloc_t *a = calloc(1, sizeof(*a));
    if (!a) return NULL;
    a->w = w;
    a->keep = TRIM_KEEP_MIN;
    a->entry = tails_entry_index();
    free_log_init(&a->log);
    return a;
}

void dm_alloc_destroy(dm_alloc_t *a)
{
    if (!a) return;
    for (int c = 0; c < NCLASSES; c++)
        while (a->head[c]) {
            freed_t *f = a->head[c];
            a->head[c] = f->next;
            listed(a, f, -1);
        }
    flush_listed(a);
    flush_region(a, 0);
    free_log_release(&a->log);
    while (a->slabs) {
        freed_slab_t *s = a->slabs;
        a->slabs = s->next;
        free(s);
    }
    free(a);
}

int dm_ctx_check(const dm_ctx_t *ctx)
{
    return dm_now_us() - ctx->start_us > DM_OP_TIMEOUT_US ? DM_ERETRY : 0;
}

#define FREE_TRIES 16 /* CAS attempts on a free-range stack head before giving up */

static void uncharge(dm_ctx_t *ctx, uint64_t bytes)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_faa(&b, dm_gaddr_make(0, DM_SB_OFF(pool_used)), (uint64_t) - (int64_t)bytes);
    dm_batch_exec(ctx, &b);
}

/* A free range's header is believable: inside the node, 64-byte aligned, its link too. */
static int free_hdr_ok(const dm_worker_t *w, unsigned node, uint64_t off, const dm_chunk_hdr_t *h)
{
    uint64_t size = w->conns[node]->region_size;
    return h->magic == DM_CHUNK_MAGIC && h->owner == 0 && h->bytes % DM_UNIT == 0 &&
           h->bytes >= sizeof(*h) && h->bytes <= size - off && h->next_free % DM_UNIT == 0 &&
           (h->next_free == 0 || (h->next_free >= DM_SB_FIRST_CHUNK && h->next_free < size));
}

/* Pop the top of node's free-range stack if it is exactly bytes long (superblock.h
 * DM_FREE_*); a range of another size is left where it is. head is the head word as last
 * read. Returns 1 and *out (the range's header), 0 when nothing fits, or DM_E*. */
static int pop_free(dm_ctx_t *ctx, unsigned node, uint64_t head, uint64_t bytes, dm_gaddr_t *out)
{
    dm_gaddr_t head_addr = dm_gaddr_make(node, DM_SB_OFF(chunk_free));
    for (int tries = 0; tries < FREE_TRIES; tries++) {
        uint64_t off = dm_free_head_off(head);
        if (!off) return 0;
        dm_chunk_hdr_t h;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make(node, off), &h, sizeof(h));
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        if (!free_hdr_ok(ctx->w, node, off, &h) || h.bytes != bytes) return 0;
        /* The tag changes on every successful CAS: success means the stack did not change
         * since head was read, so h.next_free is still the top's link. */
        uint64_t want = dm_free_head(dm_free_head_tag(head) + 1, h.next_free);
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, head_addr, head, want);
        rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        if (v->result == head) {
            *out = dm_gaddr_make(node, off);
            return 1;
        }
        head = v->result;
    }
    return 0; /* contended: take fresh memory instead */
}

/* Take bytes (multiple of 64) from some node, round robin over the pool's nodes (so chunks,
 * hence KV blocks and subtables, spread evenly), within the pool-wide maxmemory budget: a
 * returned range of exactly this size from the node's free list, else fresh memory by FAA
 * on its alloc_ptr. */
static int take_from_pool(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t bytes, dm_gaddr_t *out)
{
    dm_worker_t *w = a->w;
    /* The pool-wide budget first (maxmemory): FAA the usage ‖ read the limit ‖ read the
     * first candidate node's free-list head (no extra round trip while the list is empty). */
    dm_batch_t b;
    uint64_t limit = 0, head = 0;
    unsigned node = a->next_node % w->n_nodes;
    dm_batch_init(&b);
    dm_verb_t *u = dm_batch_faa(&b, dm_gaddr_make(0, DM_SB_OFF(pool_used)), bytes);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(maxmemory)), &limit, 8);
    dm_batch_read(&b, dm_gaddr_make(node, DM_SB_OFF(chunk_free)), &head, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (limit && u->result + bytes > limit) {
        uncharge(ctx, bytes);
        return DM_ENOMEM;
    }
    for (unsigned tries = 0; tries < w->n_nodes; tries++) {
        node = a->next_node++ % w->n_nodes;
        if (tries > 0) {
            dm_batch_init(&b);
            dm_batch_read(&b, dm_gaddr_make(node, DM_SB_OFF(chunk_free)), &head, 8);
            if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
        }
        rc = pop_free(ctx, node, head, bytes, out);
        if (rc < 0) return rc;
        if (rc == 1) {
            a->chunk_bytes += bytes;
            return 0;
        }
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
    uncharge(ctx, bytes);
    return DM_ENOMEM;
}

/* Size class of a block of *units grains, rounding *units up to the class's size (blocks
 * over MAX_CLASS grains: 8 classes per doubling). Class 0: beyond every class (exact size,
 * never expected). */
static int class_of(uint64_t *units)
{
    uint64_t u = *units ? *units : 1;
    if (u <= MAX_CLASS) {
        *units = u;
        return (int)u;
    }
    uint64_t rounded, idx = dm_size_class_large(u, 1, &rounded);
    if (idx >= LARGE_STEPS * LARGE_DOUBLINGS) return 0;
    *units = rounded;
    return MAX_CLASS + 1 + (int)idx;
}

/* Take f (after prev, NULL when first) off class c's list. Returns f. */
static freed_t *unlink_freed(dm_alloc_t *a, int c, freed_t *prev, freed_t *f)
{
    if (prev)
        prev->next = f->next;
    else
        a->head[c] = f->next;
    if (a->tail[c] == f) a->tail[c] = prev;
    listed(a, f, -1);
    return f;
}

/* Wait until the free-log tick numbered want has written its claims and won its horizon
 * CAS, running ticks on this coroutine (one at a time per worker: while another is on the
 * wire, look again every 200 µs). Returns 0 (the claims hold) or -1 (they may not: the log
 * stopped, a write failed, or a second went by; the blocks are not ours to use). */
static int claims_wait(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t want)
{
    /* Bounded like an operation: a block given up on stays unused (lost), so not soon. */
    uint64_t give_up = dm_now_us() + DM_OP_TIMEOUT_US;
    for (;;) {
        if (a->log.state != FREE_LOG_ON) return -1;
        if (a->log.done >= want) return 0;
        if (dm_now_us() > give_up) return -1;
        if (a->log.busy) {
            dm_ctx_sleep(ctx, 200);
            continue;
        }
        if (dm_alloc_log_tick(ctx) != 0) return -1;
    }
}

/* Whether f's claim staged ahead of use (claim_old) was written by a tick whose horizon
 * CAS won: f is then ours alone, and a repairer leaves it. */
static int claim_held(const dm_alloc_t *a, const freed_t *f)
{
    return f->claim_tick && a->log.done >= f->claim_tick;
}

/* Stage claims of up to `want` old small blocks (freed the names window before top, logged
 * and not claimed yet) among the first `walk` reusable ones of class c; they are ours once
 * the tick that writes the claims is done (claim_held). Used ahead of a claim a write waits
 * for (a backlog then waits for one tick per batch, not per reuse), before every tick
 * (claim_ready), and at the middle of a batch: the block there is marked (claim_more), and
 * its reuse stages the next batch, so a backlog reused fast finds its blocks claimed by the
 * time it gets to them and does not wait at all. The walk ends at the first logged block
 * that is not old: logged small blocks are listed in the order they were freed, so the rest
 * are younger (a stop too early only stages fewer claims). Returns how many it staged. A
 * death loses what is claimed and unused. */
static int claim_old(dm_alloc_t *a, int c, uint64_t top, int walk, int want)
{
    int n = 0, staged = 0;
    uint64_t window = free_log_window(&a->log);
    for (freed_t *f = a->head[c]; f && n < walk && staged < want && f->freed_us < a->log.horizon;
         f = f->next, n++) {
        if (!f->logged || f->claim_tick) continue;
        if (f->freed_us + window >= top) break;
        uint64_t t = free_log_stage_claim(&a->log, f->addr, f->units);
        if (!t) break;
        f->claim_tick = t;
        a->claimed_delta += (int64_t)(f->units * DM_GRAIN);
        if (++staged == want / 2 && want > FREE_LOG_CLAIM_READY) f->claim_more = 1;
    }
    return staged;
}

/* claim_old for a batch of `want` claims ahead: the walk passes the blocks still claimed
 * from the last batch (at most about as many) and the new ones. */
#define CLAIM_WALK(want) (4 * (want))

/* How many old blocks of small class c claim_old claims ahead now (a reuse waits for a claim,
 * or reached the middle of the last batch): FREE_LOG_CLAIM_AHEAD, doubled at each batch that
 * comes within CLAIM_AGAIN_US of the class's last one (up to FREE_LOG_CLAIM_AHEAD_BYTES of
 * blocks) and halved after a quiet one. A backlog of old blocks reused fast then stages a
 * batch every CLAIM_AGAIN_US or so, and a slow one keeps what a death loses small. */
#define CLAIM_AGAIN_US 50000u
static int claim_ahead(dm_alloc_t *a, int c, uint64_t now)
{
    uint32_t n = a->claim_batch[c] ? a->claim_batch[c] : FREE_LOG_CLAIM_AHEAD;
    uint32_t most = FREE_LOG_CLAIM_AHEAD_BYTES / ((uint32_t)c * DM_GRAIN);
    if (now - a->claim_waited_us[c] < CLAIM_AGAIN_US)
        n = n * 2 <= most ? n * 2 : n > most ? n : most;
    else if (now - a->claim_waited_us[c] > 4 * CLAIM_AGAIN_US)
        n = n / 2 > FREE_LOG_CLAIM_AHEAD ? n / 2 : FREE_LOG_CLAIM_AHEAD;
    a->claim_batch[c] = n;
    a->claim_waited_us[c] = now;
    return (int)n;
}

/* Claim f (unlinked from the lists) before it is used or given away, when a repairer could
 * otherwise take it from our free log: a large block logged free (docs/leases.md "Claims"),
 * or a small one freed the names window before our highest horizon (with up to
 * FREE_LOG_CLAIM_AHEAD more of its size); a fresher small one is only named, without a wait
 * (docs/leases.md "Names: small blocks reused late"). One round trip or two (a free-log
 * tick) for a claim, none otherwise. Returns 0 (f is ours to use) or -1 (f was put back in
 * the pool's account: dropped, a repairer may hold it). */
static int claim(dm_ctx_t *ctx, dm_alloc_t *a, freed_t *f)
{
    if (!f->need_claim && !f->logged) return 0;
    if (f->claim_more && a->log.state == FREE_LOG_ON) { /* half a batch left: the next one */
        int c = (int)f->units;
        int want = claim_ahead(a, c, dm_now_us());
        if (claim_old(a, c, free_log_top(&a->log), CLAIM_WALK(want), want) > 0) {
            a->claims_due = a->log.started + 1; /* the next tick: sooner than the timer's */
            if (a->w->log_due) a->w->log_due(a->w->log_due_arg);
        }
    }
    if (a->log.state == FREE_LOG_ON && claim_held(a, f)) {
        f->need_claim = f->logged = 0; /* claimed ahead (claim_old) */
        atomic_fetch_add_explicit(&claims, 1, memory_order_relaxed);
        return 0;
    }
    /* Claimed ahead and its tick not done: wait for that tick, staging nothing more. */
    uint64_t want = a->log.state == FREE_LOG_ON ? f->claim_tick : 0;
    if (!want) {
        uint64_t top = free_log_top(&a->log);
        want = free_log_stage_claim(&a->log, f->addr, f->units);
        /* A small block freed less than the names window before our highest horizon is
         * used at once: a repairer leaves it alone (its window is no smaller, its horizon no
         * higher), and the entry just staged names it before any raise that would let a
         * repairer take it wins. An older one waits for its name, as a claim. */
        if (!f->need_claim && want && f->freed_us + free_log_window(&a->log) >= top) {
            f->logged = 0;
            return 0;
        }
        if (!f->need_claim && want) {
            int c = (int)f->units;
            int ahead = claim_ahead(a, c, dm_now_us());
            claim_old(a, c, top, CLAIM_WALK(ahead), ahead);
        }
    }
    if (want) atomic_fetch_add_explicit(&claim_waits, 1, memory_order_relaxed);
    if (want && claims_wait(ctx, a, want) == 0) {
        f->need_claim = f->logged = 0;
        atomic_fetch_add_explicit(&claims, 1, memory_order_relaxed);
        return 0;
    }
    freed_put(a, f);
    return -1;
}

/* The first block of class c past its quarantine with `units` grains (0: any) and
 * aligned to align, unlinked and claimed (claim); NULL when none among the first 8. */
static freed_t *take_from_class(dm_ctx_t *ctx, dm_alloc_t *a, int c, uint64_t units, uint64_t align)
{
    freed_t *f = a->head[c], *prev = NULL;
    if (!f) return NULL;
    /* The clock is read only when the oldest block looks young by the latest time seen (a
     * floor of now: a block old enough by it is old enough; every listed block is dated
     * at or before it). */
    if (a->floor_us - f->freed_us < DM_GRACE_US) a->floor_us = dm_now_us();
    uint64_t now = a->floor_us;
    for (int scanned = 0; f && scanned < 8; prev = f, f = f->next, scanned++) {
        if (now - f->freed_us < DM_GRACE_US) return NULL; /* FIFO: the rest are younger */
        if (f->freed_us >= a->log.horizon) return NULL;   /* a repairer could take it */
        if ((units && f->units != units) || f->addr % align) continue;
        unlink_freed(a, c, prev, f);
        if (c <= MAX_CLASS) a->reused_us[c] = now;
        return claim(ctx, a, f) == 0 ? f : NULL;
    }
    return NULL;
}

static freed_t *take_freed(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t units, uint64_t align)
{
    int c = class_of(&units);
    return take_from_class(ctx, a, c, units, align);
}

static void queue_block(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes, int now_reusable);
/* now_reusable of queue_block: reusable at once and in the free log (a repairer takes it:
 * a large block unless claimed, a small one by the names rule). 1: reusable at once and in
 * no log, for the slivers (under DM_UNIT) a returned block's alignment cuts off only. */
#define REUSABLE_LOGGED 2

/* Largest class size (grains) not above u: a piece of a split block must not claim more
 * than it has. */
static uint64_t class_floor(uint64_t u)
{
    if (u <= MAX_CLASS) return u;
    uint64_t rounded;
    dm_size_class_large(u, 0, &rounded);
    return rounded;
}

/* Queue [addr, addr + bytes) cut into pieces of class sizes: reusable now, or quarantined
 * from now. */
static void queue_pieces_as(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes, int now_reusable)
{
    while (bytes >= DM_GRAIN) {
        uint64_t piece = class_floor(bytes / DM_GRAIN) * DM_GRAIN;
        queue_block(a, addr, piece, now_reusable);
        addr += piece;
        bytes -= piece;
    }
}

/* Best fit for a large block (over MAX_CLASS grains) whose own class has nothing reusable:
 * a block of one of the next classes up to a doubling larger, its tail queued as pieces
 * reusable at once (the whole block passed its quarantine). Random value sizes then reuse
 * each other's blocks instead of waiting for their exact class; before, rewriting a key
 * with 20-200 KB values took a new chunk every few seconds for half a minute. */
static void queue_pieces(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes)
{
    queue_pieces_as(a, addr, bytes, 1);
}

void alloc_queue_quarantined(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes)
{
    queue_pieces_as(a, addr, bytes, 0);
}

static freed_t *take_larger(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t units, uint64_t align)
{
    int c = class_of(&units);
    if (c <= MAX_CLASS) return NULL;
    for (int up = c + 1; up <= c + LARGE_STEPS && up < NCLASSES; up++) {
        freed_t *f = take_from_class(ctx, a, up, 0, align);
        if (!f) continue;
        /* The rest is logged: a death would otherwise lose it (it is reusable at once). */
        queue_pieces_as(a, f->addr + units * DM_GRAIN, (f->units - units) * DM_GRAIN,
                        REUSABLE_LOGGED);
        f->units = units;
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

/* Take payload bytes behind a chunk header, reusing a returned range of the same size when
 * the node has one; the header (our owner id, next_free 0) is written without waiting (it
 * is read only by pool walks and free-list pops, never on the data path). */
static int take_range(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t payload, dm_gaddr_t *out)
{
    uint64_t total = payload + sizeof(dm_chunk_hdr_t);
    dm_gaddr_t start = 0;
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

int alloc_take_log_block(dm_ctx_t *ctx, uint64_t bytes, dm_gaddr_t *out)
{
    dm_alloc_t *a = ctx->w->alloc;
    dm_gaddr_t start;
    uint64_t got;
    int rc = returned_take_log(ctx, &start, &got);
    if (rc < 0) return rc;
    if (rc == 1 && got == bytes) {
        *out = start;
        a->live_delta += (int64_t)bytes;
        return 0;
    }
    if (rc == 1) alloc_queue_quarantined(a, start, got); /* another log size: pieces */
    return dm_alloc_block(ctx, bytes, out);
}

void alloc_put_log_block(dm_ctx_t *ctx, dm_gaddr_t blk, uint64_t bytes)
{
    dm_alloc_t *a = ctx->w->alloc;
    int rc = returned_push_log(ctx, blk, bytes);
    if (rc == 0 || rc == DM_EINVAL) /* not pushed: reusable at once, in the handoff */
        dm_alloc_unused(a, blk, bytes);
    else /* pushed, or unknown (it may be on the stack: not ours any more) */
        a->live_delta -= (int64_t)bytes;
}

typedef struct refill_wait {
    dm_wake_t wk; /* its next belongs to the worker's ready list */
    struct refill_wait *next;
} refill_wait_t;

/* One coroutine of the worker at a time switches regions or raises the watermark while the
 * others wait and then look again: without this, every writer of a burst that crosses a
 * chunk boundary took a chunk of its own and all but the last were abandoned almost empty.
 * Returns 1 when the caller may go on (it then calls unbusy), 0 when it waited. */
static int busy(dm_alloc_t *a)
{
    if (a->busy) {
        refill_wait_t rw = {.next = a->waiters};
        a->waiters = &rw;
        dm_worker_park(a->w, &rw.wk, "another coroutine's region switch (allocator)");
        return 0;
    }
    a->busy = 1;
    return 1;
}

static void unbusy(dm_alloc_t *a)
{
    a->busy = 0;
    refill_wait_t *list = a->waiters;
    a->waiters = NULL;
    for (refill_wait_t *rw = list, *next; rw; rw = next) {
        next = rw->next; /* read before the wake: rw lives on the waiter's stack */
        dm_worker_wake(a->w, &rw->wk);
    }
}

static void log_fenced(void)
{
    dm_log(DM_LOG_WARNING, "allocator: another gateway took this worker's chunk tail over (it "
                           "found this gateway dead); its next chunks are not registered");
}

/* CAS our entry from the word we last wrote to want. Returns 0 (done), 1 (a repairer took
 * our region: nothing of ours can be registered again) or DM_E* (outcome unknown: our
 * next CAS then fails if this one landed, and we fence ourselves then). */
static int cas_entry(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t want)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *v = dm_batch_cas(&b, tails_entry_addr(a->entry), a->entry_word, want);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (v->result != a->entry_word) {
        if (!a->fenced) log_fenced();
        a->fenced = 1;
        return 1;
    }
    a->entry_word = want;
    return 0;
}

/* The watermark a region is registered with: its first DM_TAIL_STEP already reserved, so
 * that registering costs one CAS, not two. */
static dm_gaddr_t first_wm(dm_gaddr_t start, dm_gaddr_t end)
{
    return end - start > DM_TAIL_STEP ? start + DM_TAIL_STEP : end;
}

int dm_alloc_register(dm_ctx_t *ctx)
{
    if (dm_alloc_record()) return 0;
    dm_alloc_t *a = ctx->w->alloc;
    uint64_t words[DM_TAIL_RECORD_WORDS] = {DM_TAIL_MAGIC};
    dm_gaddr_t rec;
    int rc = dm_alloc_block(ctx, sizeof(words), &rec);
    if (rc) return rc;
    /* A reused block holds old bytes: every entry starts empty. */
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, rec, words, sizeof(words));
    if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
    tails_set_record(rec);
    /* The region the record came from is registered from here on (carving went on
     * unregistered before: everything below cur is ours). */
    if (a->entry >= 0 && !a->fenced && a->cur_left) {
        dm_gaddr_t end = a->cur + a->cur_left;
        a->wm = first_wm(a->cur, end);
        rc = cas_entry(ctx, a, tail_word(a->wm, end - a->wm));
        if (rc == 1) { /* someone else's word in our entry: carve none of this region */
            a->cur_left = 0;
            rc = 0;
        }
    }
    return rc;
}

/* Make [start, start + bytes) the current region (registered when we can), and queue what
 * is left of the old one as pieces reusable at once (never handed out). Returns 0 or DM_E*
 * (the region is current all the same). */
static int switch_region(dm_ctx_t *ctx, dm_alloc_t *a, dm_gaddr_t start, uint64_t bytes)
{
    dm_gaddr_t old = a->cur, old_end = a->cur + a->cur_left;
    dm_gaddr_t old_mine = a->wm < old_end ? a->wm : old_end; /* below wm: ours in any case */
    int rc = 0;
    a->cur = start;
    a->cur_left = bytes;
    a->wm = start + bytes; /* unregistered: carve it all */
    if (!a->fenced && tails_entry_addr(a->entry)) {
        /* Nothing is carved while the CAS is out: another coroutine of this worker that
         * found room would otherwise carve past the watermark being registered. */
        a->wm = start;
        dm_gaddr_t wm = first_wm(start, start + bytes);
        rc = cas_entry(ctx, a, tail_word(wm, start + bytes - wm));
        if (rc == 0) {
            a->wm = wm; /* registered with its first step reserved */
            old_mine = old_end;
        } else if (rc == 1) {
            a->wm = start + bytes; /* the old tail was taken over; this one is ours alone */
            rc = 0;
        } /* else it may have landed: reserve before carving (wm stays at start) */
    }
    if (old_mine > old) queue_pieces_as(a, old, old_mine - old, REUSABLE_LOGGED);
    return rc;
}

/* Open a new current region of at least need bytes: a spare region adopted from a dead
 * gateway or a returned block when one is big enough, else a new chunk. Returned blocks are
 * popped at most DM_REFILL_POPS_MAX at a time (three round trips each, the write that
 * needed the region waiting; one took 70 in 1.5 s before the bound). Smaller ones on the way are
 * queued as pieces quarantined from now, hence logged: queued reusable at once they were in no log,
 * and a gateway killed before it reused them lost them all (it_gateway_death: a restarted
 * gateway took 70 returned blocks back in 1.5 s, and 3.1 MB was lost to five deaths).
 * Returns 0 (the current region may have changed) or DM_E*. */
static int refill(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t need)
{
    if (!busy(a)) return 0;
    dm_gaddr_t start;
    uint64_t bytes;
    int rc = 0, got = 0;
    while (!got && tails_pop_spare(&start, &bytes)) {
        if (bytes >= need + DM_UNIT)
            got = 1;
        else
            alloc_queue_quarantined(a, start, bytes);
    }
    while (!got && (rc = tails_board_take(ctx, &start, &bytes)) == 1) {
        if (bytes >= need + DM_UNIT)
            got = 1;
        else
            alloc_queue_quarantined(a, start, bytes);
    }
    for (unsigned pops = 0; !got && rc >= 0 && pops < DM_REFILL_POPS_MAX &&
                            (rc = returned_take(ctx, need + DM_UNIT, &start, &bytes)) == 1;
         pops++) {
        atomic_fetch_add_explicit(&blocks_taken, 1, memory_order_relaxed);
        if (bytes >= need + DM_UNIT)
            got = 1;
        else
            alloc_queue_quarantined(a, start, bytes);
    }
    if (rc < 0) {
        unbusy(a);
        return rc;
    }
    rc = 0;
    if (!got) {
        bytes = DM_CHUNK_SIZE - sizeof(dm_chunk_hdr_t);
        rc = take_range(ctx, a, bytes, &start);
    }
    if (!rc) rc = switch_region(ctx, a, start, bytes);
    unbusy(a);
    return rc;
}

/* Raise the registered watermark to cover [cur, target): by DM_TAIL_STEP at least (a
 * LARGE_CARVE block: to target plus a->keep), to the region's end at most. Returns 0 (look
 * again: wm or the region changed) or DM_E*. */
static int advance(dm_ctx_t *ctx, dm_alloc_t *a, dm_gaddr_t target, int large)
{
    if (!busy(a)) return 0;
    int rc = 0;
    dm_gaddr_t end = a->cur + a->cur_left;
    if (target > a->wm) {
        dm_gaddr_t nw = large                           ? target + a->keep
                        : a->wm + DM_TAIL_STEP > target ? a->wm + DM_TAIL_STEP
                                                        : target;
        nw = (nw + DM_UNIT - 1) / DM_UNIT * DM_UNIT;
        if (nw > end) nw = end;
        rc = a->fenced ? 1 : cas_entry(ctx, a, tail_word(nw, end - nw));
        if (rc == 0) {
            a->wm = nw;
        } else if (rc == 1) { /* the region ends at our watermark now */
            a->cur_left = a->wm > a->cur ? a->wm - a->cur : 0;
            a->wm = a->cur + a->cur_left;
            rc = 0;
        }
    }
    unbusy(a);
    return rc;
}

/* Microseconds until the oldest quarantined block that could serve units grains (its own
 * class, or for a large block the next LARGE_STEPS classes) passes its quarantine; 0 when
 * none is still in quarantine (one already past it that was not taken never will be:
 * misaligned, or beyond the 8 a take scans). */
static uint64_t quarantine_wait_us(const dm_alloc_t *a, uint64_t units)
{
    int c = class_of(&units);
    int last = c > MAX_CLASS ? c + LARGE_STEPS : c;
    uint64_t now = dm_now_us(), best = 0;
    for (int k = c; k <= last && k < NCLASSES; k++)
        for (const freed_t *f = a->head[k]; f; f = f->next) {
            uint64_t ready = f->freed_us + DM_GRACE_US;
            if (f->freed_us >= a->log.horizon && ready < now + 100000u)
                ready = now + 100000u; /* a free-log tick raises the horizon by then */
            if (f->units < units || ready <= now) continue;
            if (!best || ready - now < best) best = ready - now;
            break; /* FIFO: the first that fits is the oldest */
        }
    return best;
}

static int alloc_fresh(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t need, uint64_t align,
                       dm_gaddr_t *out);

#define OOM_POLLS 5         /* looks at the returned blocks before -OOM... */
#define OOM_POLL_US 100000u /* ...this far apart (a gateway cron tick) */

/* A large block (LARGE_CARVE and over) none of our lists has: up to DM_TAKE_RETURNED_POPS
 * blocks off the returned stacks before carving. A gateway that frees little (SepHash frees
 * old values in the merges of whichever gateway merges) otherwise took every such block
 * from new chunks while its peer returned hundreds of MB it had no use for: refills pop at
 * most DM_REFILL_POPS_MAX per chunk (sephash/it_pool_memory, release build: -OOM after
 * 7,500 rewrites of 20-200 KB, 360 MB on the stack). The stacks are per size class
 * (returned.h), so the first block popped fits but on an older pool's single stack. The
 * rest of it, and a block too small, is queued as pieces quarantined from now, hence
 * logged: queued reusable at once, its pieces of 16 KB or less were in no log, and the
 * release build's SepHash fast death in it_gateway_death lost twice as much (15-19% of
 * live against 8-10%). An empty stack is not looked at again for 100 ms. Returns 1 (*out),
 * 0 (carve) or DM_E*. 3 RTTs per block popped, 1 when none. */
static int take_returned(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t need, uint64_t align,
                         dm_gaddr_t *out)
{
    uint64_t now = dm_now_us();
    unsigned cls = returned_need_class(need);
    if (now < a->returned_empty_until[cls]) return 0;
    for (unsigned pops = 0; pops < DM_TAKE_RETURNED_POPS; pops++) {
        dm_gaddr_t start;
        uint64_t bytes;
        int rc = returned_take(ctx, need, &start, &bytes);
        if (rc <= 0) {
            if (rc == 0) a->returned_empty_until[cls] = now + RETURNED_EMPTY_US;
            return rc;
        }
        atomic_fetch_add_explicit(&blocks_taken, 1, memory_order_relaxed);
        if (bytes < need || start % align) {
            alloc_queue_quarantined(a, start, bytes);
            continue;
        }
        if (bytes > need) alloc_queue_quarantined(a, start + need, bytes - need);
        *out = start;
        return 1;
    }
    return 0;
}

/* Carve need bytes (a multiple of DM_GRAIN) aligned to align (DM_GRAIN or DM_UNIT). When
 * the pool is full (maxmemory, or every node) but one of this worker's quarantined blocks
 * would fit, wait for its quarantine to pass (at most DM_GRACE_US) instead of failing;
 * with none, look for blocks other gateways returned for half a second: -OOM then means
 * the memory is not coming back, not that it is 2 s away or held by another gateway. */
static int alloc_aligned(dm_ctx_t *ctx, uint64_t need, uint64_t align, dm_gaddr_t *out)
{
    dm_alloc_t *a = ctx->w->alloc;
    uint64_t units = need / DM_GRAIN;
    class_of(&units); /* large blocks take their class's size: any freed one then fits */
    need = units * DM_GRAIN;
    int polls = 0;
    uint64_t give_up = 0; /* set at the first DM_ENOMEM: the waits below end by then */
    for (;;) {
        freed_t *f = take_freed(ctx, a, units, align);
        if (!f) f = take_larger(ctx, a, units, align);
        if (f) {
            *out = f->addr;
            freed_put(a, f);
            a->live_delta += (int64_t)need;
            return 0;
        }
        int rc =
            need >= LARGE_CARVE && need <= BIG_EXTENT ? take_returned(ctx, a, need, align, out) : 0;
        if (rc == 1) {
            a->live_delta += (int64_t)need;
            return 0;
        }
        if (rc == 0) rc = alloc_fresh(ctx, a, need, align, out);
        if (rc != DM_ENOMEM) return rc;
        if (!give_up) give_up = dm_now_us() + DM_GRACE_US + OOM_POLLS * OOM_POLL_US;
        if (dm_now_us() >= give_up) return rc;
        uint64_t wait = quarantine_wait_us(a, units);
        /* Nothing of ours would fit: other gateways return their unused blocks under
         * pressure (dm_alloc_return_idle, every cron tick); look again a few times. */
        if (!wait && polls++ < OOM_POLLS) wait = OOM_POLL_US;
        if (!wait) return rc;
        atomic_fetch_add_explicit(&oom_waits, 1, memory_order_relaxed);
        dm_ctx_sleep(ctx, (uint32_t)(wait < DM_GRACE_US ? wait : DM_GRACE_US) + 1000);
    }
}

/* need bytes of memory no block was freed from: the current region, a new one, or (big
 * blocks) an extent of their own. */
static int alloc_fresh(dm_ctx_t *ctx, dm_alloc_t *a, uint64_t need, uint64_t align, dm_gaddr_t *out)
{
    if (need > BIG_EXTENT) { /* big values get their own extent */
        int rc = take_range(ctx, a, need, out);
        if (!rc) a->live_delta += (int64_t)need;
        return rc;
    }
    uint64_t pad;
    for (;;) { /* regions start 64-byte aligned: a fresh one needs no pad */
        pad = a->cur % align ? align - a->cur % align : 0;
        int rc = 0;
        if (a->cur_left < need + pad)
            rc = refill(ctx, a, need);
        else if (a->cur + pad + need > a->wm)
            rc = advance(ctx, a, a->cur + pad + need, need >= LARGE_CARVE);
        else
            break;
        if (rc) return rc;
    }
    if (pad) { /* the gap before an aligned block: never published, reusable at once */
        queue_block(a, a->cur, pad, REUSABLE_LOGGED);
        a->cur += pad;
        a->cur_left -= pad;
    }
    *out = a->cur;
    a->cur += need;
    a->cur_left -= need;
    if (need < LARGE_CARVE) a->carved += need;
    a->live_delta += (int64_t)need;
    return 0;
}

#define RETURN_IDLE_US 1000000u /* reusable and unused this long: returned to the pool */
#define RETURN_MAX 64           /* blocks returned per call */
_Static_assert(RETURN_MAX <= DM_RETURN_MANY_MAX, "one push of them all");

/* Put f, unlinked by take_idle, back at the head of its class (it was among the oldest). */
static void queue_listed(dm_alloc_t *a, freed_t *f)
{
    uint64_t units = f->units;
    int c = class_of(&units);
    f->next = a->head[c];
    a->head[c] = f;
    if (!a->tail[c]) a->tail[c] = f;
    listed(a, f, 1);
}

/* Unlink one block of a large class that sat reusable and unused for idle_us past its
 * quarantine (peek: only find it); NULL when none among the first 8 of each class (FIFO:
 * the oldest come first). */
static freed_t *take_idle(dm_alloc_t *a, uint64_t now, uint64_t idle_us, int peek)
{
    for (int c = MAX_CLASS + 1; c < NCLASSES; c++) {
        freed_t *f = a->head[c], *prev = NULL;
        for (int scanned = 0; f && scanned < 8; prev = f, f = f->next, scanned++) {
            if (now - f->freed_us < DM_GRACE_US + idle_us || f->freed_us >= a->log.horizon)
                continue;
            if (f->units * DM_GRAIN < DM_RETURN_MIN_BYTES + 2 * DM_UNIT) continue;
            return peek ? f : unlink_freed(a, c, prev, f);
        }
    }
    return NULL;
}

/* The pool is over 3/4 full (of maxmemory, or of its nodes' memory): 1, 0 or DM_E*. */
static int pool_pressed(dm_ctx_t *ctx)
{
    uint64_t limit = 0, used = 0, cap = 0;
    int rc = dm_pool_usage(ctx, &limit, &used);
    if (rc) return rc;
    for (unsigned n = 0; n < ctx->w->n_nodes; n++)
        cap += ctx->w->conns[n]->region_size;
    if (limit && limit < cap) cap = limit;
    return used > cap / 4 * 3;
}

int dm_alloc_return_idle(dm_ctx_t *ctx)
{
    dm_alloc_t *a = ctx->w->alloc;
    /* Nothing past its quarantine: nothing to return, and no round trip for the pool's
     * usage (this runs on every cron tick of every thread). */
    if (!take_idle(a, dm_now_us(), 0, 1)) return 0;
    int rc = pool_pressed(ctx);
    if (rc < 0) return rc;
    /* Under pressure every block past its quarantine goes back: another gateway may be
     * out of memory while this one holds it for a size it may never be asked again. */
    uint64_t idle_us = rc ? 0 : RETURN_IDLE_US;
    rc = 0;
    /* Claimed first, all in one free-log tick: on the stack they are anyone's, and a
     * repairer must not take them from our log then. */
    freed_t *v[RETURN_MAX];
    int nv = 0;
    uint64_t want = 0;
    while (nv < RETURN_MAX) {
        freed_t *f = take_idle(a, dm_now_us(), idle_us, 0);
        if (!f) break;
        if (f->need_claim) {
            uint64_t t = free_log_stage_claim(&a->log, f->addr, f->units);
            if (!t) { /* not claimable: keep it listed as it was */
                queue_listed(a, f);
                break;
            }
            want = t;
        }
        v[nv++] = f;
    }
    int claimed = !want || claims_wait(ctx, a, want) == 0;
    /* All pushed at once (returned_push_many: 3 RTTs): a death between the claims and a
     * block's push loses that block, and one push after another left 2 RTTs a block of
     * that window. */
    dm_gaddr_t lo[RETURN_MAX];
    uint64_t len[RETURN_MAX];
    int out[RETURN_MAX];
    int np = 0;
    for (int n = 0; n < nv; n++) {
        freed_t *f = v[n];
        if (f->need_claim && !claimed) { /* a repairer may hold it */
            freed_put(a, f);
            continue;
        }
        if (f->need_claim) atomic_fetch_add_explicit(&claims, 1, memory_order_relaxed);
        /* The stack's headers are 64-byte aligned: the slivers stay here. */
        dm_gaddr_t l = (f->addr + DM_UNIT - 1) / DM_UNIT * DM_UNIT,
                   h = (f->addr + f->units * DM_GRAIN) / DM_UNIT * DM_UNIT;
        if (l > f->addr) queue_pieces(a, f->addr, l - f->addr);
        if (h < f->addr + f->units * DM_GRAIN)
            queue_pieces(a, h, f->addr + f->units * DM_GRAIN - h);
        lo[np] = l;
        len[np++] = h - l;
        freed_put(a, f);
    }
    rc = np ? returned_push_many(ctx, lo, len, out, (size_t)np) : 0;
    for (int i = 0; i < np; i++) {
        if (out[i] == 1)
            atomic_fetch_add_explicit(&blocks_returned, 1, memory_order_relaxed);
        else if (out[i] == 0) /* not pushed: kept, reusable (claimed, so ours alone) */
            queue_pieces_as(a, lo[i], len[i], REUSABLE_LOGGED);
        /* else unknown: it may be on the stack, so it is not ours any more */
    }
    return rc < 0 ? rc : 0;
}

/* Take off the lists every block freed in [lo, hi], every large block not claimed and
 * every logged small block not claimed freed the names window before the horizon the
 * repairer replaced (lo, our last raise won, or a raise whose outcome we never learnt; the
 * higher horizon and the smaller window of the two): a repairer took them over from our
 * free log and may hand them out. The rest are ours alone: no log names their reuse any
 * more. */
static void drop_logged(dm_alloc_t *a, uint64_t lo, uint64_t hi)
{
    uint64_t dropped = 0, top = lo > a->log.unsure ? lo : a->log.unsure;
    uint64_t window = free_log_window(&a->log);
    for (int c = 0; c < NCLASSES; c++) {
        freed_t *prev = NULL;
        for (freed_t *f = a->head[c]; f;) {
            freed_t *next = f->next;
            if ((f->freed_us >= lo && f->freed_us <= hi) || f->need_claim ||
                (f->logged && !claim_held(a, f) && f->freed_us + window < top)) {
                dropped += f->units * DM_GRAIN;
                freed_put(a, unlink_freed(a, c, prev, f));
            } else {
                listed_set_logged(a, f, 0);
                prev = f;
            }
            f = next;
        }
    }
    if (dropped)
        dm_log(DM_LOG_WARNING,
               "allocator: %llu bytes of free blocks left to the gateway that "
               "took this worker's free log over",
               (unsigned long long)dropped);
}

/* Lower the registered watermark towards the carve point: a raise reserves DM_TAIL_STEP
 * (128 KB) or more at once, and a repairer of a dead gateway takes only what lies above
 * the watermark, so the reserved rest was lost to every death (about half a step per
 * worker: most of what it_gateway_death lost). The watermark comes down to the carve point
 * plus twice the last tick's carving (at least TRIM_KEEP_MIN): what a death loses is then
 * bounded by the worker's rate, and a steady writer still raises once per step, no more
 * often. One CAS, off the data path, when that frees TRIM_KEEP_MIN or more: after a raise,
 * or when the worker's rate fell.
 * Lowered locally before the CAS: nothing is carved above the new mark meanwhile (a carve
 * past it waits in advance for busy). Returns 0 or DM_E* (outcome unknown: the next CAS on
 * the entry tells, as for a raise). */
static int trim_reserve(dm_ctx_t *ctx, dm_alloc_t *a)
{
    uint64_t rate = a->carved - a->carved_at_trim;
    a->carved_at_trim = a->carved;
    dm_gaddr_t end = a->cur + a->cur_left;
    /* Registered: our word names exactly this region's watermark and end. */
    if (a->fenced || !a->entry_word || tail_wm(a->entry_word) != a->wm ||
        a->wm + tail_left(a->entry_word) != end || a->wm <= a->cur)
        return 0;
    uint64_t keep = 2 * rate > TRIM_KEEP_MIN ? 2 * rate : TRIM_KEEP_MIN;
    a->keep = keep;
    dm_gaddr_t target = (a->cur + keep + DM_UNIT - 1) / DM_UNIT * DM_UNIT;
    if (target + TRIM_KEEP_MIN > a->wm) return 0; /* not worth a round trip */
    /* busy() yields only when it returns 0, so what was checked above still holds. */
    if (!busy(a)) return 0; /* a raise or a refill is running: the next tick */
    a->wm = target;
    int rc = cas_entry(ctx, a, tail_word(target, end - target));
    if (rc == 1) { /* taken over: the region ends at our (lowered) watermark */
        a->cur_left = a->wm - a->cur;
        rc = 0;
    } else if (rc == 0) {
        atomic_fetch_add_explicit(&reserve_trims, 1, memory_order_relaxed);
    }
    unbusy(a);
    return rc;
}

/* Whether a repairer may take listed block f from our log, so a growth writes it again:
 * freed at or after the horizon, large and not claimed, or small, logged and not claimed
 * (the names of reused blocks stay in the old ring, and so do their frees). */
static int kept_in_log(const dm_alloc_t *a, const freed_t *f)
{
    return f->freed_us >= a->log.horizon || f->need_claim || (f->logged && !claim_held(a, f));
}

/* The free log laps within a quarantine: move it to the larger block its growth began with
 * (free_log_grow_begin, a tick ago), with every listed block a repairer would take as its
 * first entries (free_log_grow). */
static void grow_log(dm_ctx_t *ctx, dm_alloc_t *a)
{
    size_t n = 0;
    for (int c = 0; c < NCLASSES; c++)
        for (freed_t *f = a->head[c]; f; f = f->next)
            n += kept_in_log(a, f);
    free_log_entry_t *keep = malloc((n + 1) * sizeof(*keep)); /* and the old block */
    size_t k = 0;
    for (int c = 0; c < NCLASSES && keep; c++)
        for (freed_t *f = a->head[c]; f; f = f->next)
            if (kept_in_log(a, f))
                keep[k++] = (free_log_entry_t){f->addr, f->units, f->freed_us, 0};
    a->log.busy = 1; /* no tick meanwhile (another coroutine's) */
    /* keep NULL (no memory): no growth (the block goes back on our lists), the ring laps. */
    int rc = free_log_grow(ctx, &a->log, a->entry, keep, n);
    a->log.busy = 0;
    if (rc && rc != DM_EINVAL)
        dm_log(DM_LOG_WARNING,
               "allocator: the free log could not grow (%s): a death now loses "
               "what its ring no longer holds",
               dm_strerror(rc));
    free(keep);
}

/* Before a free-log tick: claim the old blocks among the first FREE_LOG_CLAIM_READY of each
 * small size reused in the last quarantine, so that a write seldom waits for a claim
 * (it_addr_cache: a SET on an idle gateway took a claim's two round trips more). Sizes not
 * reused that long are left unclaimed: a repairer takes them (SepHash frees old
 * MainSegments of many sizes that nobody asks for again: claimed ready, they were most of
 * what its deaths lost, docs/leases.md "Names: small blocks reused late"). */
static void claim_ready(dm_alloc_t *a)
{
    if (a->log.state != FREE_LOG_ON) return;
    /* The lists' clock (floor_us) moves only when the worker takes or frees: an idle worker
     * keeps the sizes it last reused ready. */
    uint64_t top = free_log_top(&a->log), now = a->floor_us;
    for (int c = 1; c <= MAX_CLASS; c++)
        if (a->head[c] && a->reused_us[c] && now - a->reused_us[c] < DM_GRACE_US)
            claim_old(a, c, top, FREE_LOG_CLAIM_READY, FREE_LOG_CLAIM_READY);
}

int dm_alloc_log_tick(dm_ctx_t *ctx)
{
    dm_alloc_t *a = ctx->w->alloc;
    if (!a || a->entry < 0) return 0;
    int rc, begun = 0;
    /* A growth in two steps: its block is named in this log by the tick below, and the
     * switch comes after a later tick that won (docs/leases.md "A growth that dies
     * halfway"). */
    uint64_t room;
    if (!a->log.grow_blk && (room = free_log_wants_room(&a->log)) != 0) {
        rc = free_log_grow_begin(ctx, &a->log, room);
        begun = rc == 0;
        if (rc && rc != DM_EINVAL)
            dm_log(DM_LOG_WARNING, "allocator: the free log could not grow (%s)", dm_strerror(rc));
    }
    uint64_t lo = 1, hi = 0;
    int was_off = a->log.state == FREE_LOG_OFF;
    if (!a->log.busy) claim_ready(a);
    rc = free_log_tick(ctx, &a->log, a->entry, &lo, &hi);
    if (rc == 1) {
        drop_logged(a, lo, hi);
        rc = 0;
    } else if (!rc && !begun && free_log_grow_ready(&a->log)) {
        grow_log(ctx, a);
    }
    int trc = trim_reserve(ctx, a);
    if (!rc) rc = trc;
    /* Just opened: what is listed already (blocks freed, or handed over by a stopped or
     * dead gateway, before the first tick; pieces kept reusable) is logged too. Those
     * reusable before the horizon were left out until 2026-12-06 (ours to reuse unnamed
     * then), and a death lost them: 16-18 KB at each restarted gateway's death in
     * it_gateway_death (the rest of the first region, switched from before the log
     * opened). */
    if (was_off && a->log.state == FREE_LOG_ON)
        for (int c = 0; c < NCLASSES; c++)
            for (freed_t *f = a->head[c]; f; f = f->next)
                if (!f->logged && free_log_stage(&a->log, f->addr, f->units, f->freed_us) >= 0) {
                    f->need_claim = f->units > MAX_CLASS;
                    listed_set_logged(a, f, 1);
                }
    return rc;
}

int dm_alloc_log_due(const dm_worker_t *w)
{
    const dm_alloc_t *a = w->alloc;
    if (!a) return 0;
    /* A batch claimed ahead whose tick has not started (it was staged while one was on the
     * wire) is due as well. */
    return free_log_due(&a->log) ||
           (a->log.state == FREE_LOG_ON && !a->log.busy && a->claims_due > a->log.started);
}

/* At a stop: close the free log (the handoff carries the lists instead), and get its block
 * back when it was ours to the end. */
static void close_log(dm_ctx_t *ctx, dm_alloc_t *a)
{
    int was_on = a->log.state == FREE_LOG_ON;
    dm_gaddr_t blk = a->log.blk, old = a->log.old_blk, grow = a->log.grow_blk;
    uint64_t bytes = a->log.blk_bytes, old_bytes = a->log.old_bytes, grow_bytes = a->log.grow_bytes;
    uint64_t lo = 1, hi = 0;
    int rc = free_log_close(ctx, &a->log, a->entry, &lo, &hi);
    if (rc) {
        drop_logged(a, lo, hi);
    } else {
        for (int c = 0; c < NCLASSES; c++) /* closed: nobody takes them from the log now */
            for (freed_t *f = a->head[c]; f; f = f->next) {
                f->need_claim = 0;
                listed_set_logged(a, f, 0);
            }
    }
    if (!rc && was_on && blk) { /* nobody reads them any more (the horizon is closed) */
        alloc_put_log_block(ctx, blk, bytes);
        if (old) dm_alloc_free(a, old, old_bytes);
        if (grow) alloc_put_log_block(ctx, grow, grow_bytes); /* a growth begun */
    }
}

/* Everything this worker holds free: its free lists (emptied), the reserved rest of its
 * region (which it stops carving) and the process's spare regions, as (gaddr, bytes)
 * pairs appended to v (room for max). Returns how many. */
static size_t gather_free(dm_alloc_t *a, uint64_t *v, size_t max)
{
    size_t n = 0;
    for (int c = 0; c < NCLASSES; c++)
        for (freed_t *f = a->head[c]; f && n < max; f = a->head[c]) {
            v[2 * n] = f->addr;
            v[2 * n++ + 1] = f->units * DM_GRAIN;
            a->head[c] = f->next;
            listed(a, f, -1);
            freed_put(a, f);
        }
    for (int c = 0; c < NCLASSES; c++) /* beyond max: leaked, as before */
        while (a->head[c]) {
            freed_t *f = a->head[c];
            a->head[c] = f->next;
            listed(a, f, -1);
            freed_put(a, f);
        }
    memset(a->tail, 0, sizeof(a->tail));
    dm_gaddr_t end = a->cur + a->cur_left, mine = a->wm < end ? a->wm : end;
    if (mine > a->cur && n < max) {
        v[2 * n] = a->cur;
        v[2 * n++ + 1] = mine - a->cur;
    }
    a->cur_left = 0; /* [wm, end) stays registered: the adopter takes it as a tail */
    dm_gaddr_t sp;
    uint64_t sb;
    while (n < max && tails_pop_spare(&sp, &sb)) {
        v[2 * n] = sp;
        v[2 * n++ + 1] = sb;
    }
    return n;
}

int dm_alloc_handoff(dm_ctx_t *ctx, uint64_t *pieces, uint64_t *bytes)
{
    dm_alloc_t *a = ctx->w->alloc;
    *pieces = *bytes = 0;
    close_log(ctx, a);
    dm_gaddr_t word = tails_handoff_addr(a->entry);
    if (!word || a->fenced) return 0;
    size_t max = 2; /* the region's rest, a spare */
    for (int c = 0; c < NCLASSES; c++)
        for (freed_t *f = a->head[c]; f; f = f->next)
            max++;
    dm_alloc_tail_stats_t ts;
    dm_alloc_tail_stats(&ts);
    max += ts.spare_bytes ? 64 : 0;
    uint64_t blk_bytes = 16 + 16 * (uint64_t)max;
    uint64_t *v = malloc(blk_bytes);
    if (!v) return DM_ENOMEM;
    dm_gaddr_t blk;
    int rc = dm_alloc_block(ctx, blk_bytes, &blk); /* first: it may take a listed block */
    if (rc) {
        free(v);
        return rc;
    }
    size_t n = gather_free(a, v + 2, max);
    v[0] = DM_HANDOFF_MAGIC;
    v[1] = n;
    for (size_t i = 0; i < n; i++)
        *bytes += v[2 + 2 * i + 1];
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, blk, v, 16 + 16 * n);
    rc = dm_batch_exec(ctx, &b);
    free(v);
    if (rc) return rc;
    dm_batch_init(&b);
    dm_verb_t *cas = dm_batch_cas(&b, word, 0, blk);
    if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
    if (cas->result != 0) return 0; /* our record was taken over meanwhile: left as it is */
    *pieces = n;
    return 0;
}

int dm_alloc_block(dm_ctx_t *ctx, uint64_t bytes, dm_gaddr_t *out)
{
    return alloc_aligned(ctx, dm_alloc_block_bytes(bytes), DM_UNIT, out);
}

uint64_t dm_alloc_kv_block_bytes(uint64_t bytes)
{
    uint64_t units = (bytes + DM_GRAIN - 1) / DM_GRAIN;
    if (!units) units = 1;
    class_of(&units);
    return units * DM_GRAIN;
}

/* Large blocks are 64-byte aligned: a returned block's header must be, and a block of a
 * class size that lost 32 bytes at each end when returned went on the stack of the class
 * below, where cutting it left a piece too small for the next large write. */
int dm_alloc_kv_block(dm_ctx_t *ctx, uint64_t bytes, dm_gaddr_t *out)
{
    uint64_t need = dm_alloc_kv_block_bytes(bytes);
    return alloc_aligned(ctx, need, need >= LARGE_CARVE ? DM_UNIT : DM_GRAIN, out);
}

/* Queue a block on its size class: at the tail with its free time now (quarantine, FIFO),
 * or at the head dated 0 (reusable now). now: a monotonic time (µs) read after the block
 * was unlinked and not before the last queued block's (the FIFO stays in order). */
static void queue_block_at(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes, int now_reusable,
                           uint64_t now)
{
    uint64_t units = (bytes + DM_GRAIN - 1) / DM_GRAIN;
    int c = class_of(&units); /* as alloc_aligned rounded it */
    freed_t *f = freed_new(a);
    if (!f) return; /* leak rather than fail a free */
    if (now > a->floor_us) a->floor_us = now;
    /* A block reusable now is dated as if its quarantine just ended: its age then says how
     * long it sat unused (dm_alloc_return_idle). */
    *f = (freed_t){.addr = addr,
                   .units = units,
                   .freed_us = now_reusable ? (now > DM_GRACE_US ? now - DM_GRACE_US : 0) : now};
    /* Logged: quarantined blocks, and pieces kept reusable at once (REUSABLE_LOGGED) so that
     * a repairer takes them if we die before using them. Small pieces were not logged until
     * 2026-12-06: a best fit's remainder under 16 KB is a size that 100-byte values never
     * ask for, so it stayed listed until the death and was lost then (docs/leases.md
     * "Pieces kept reusable"). */
    if (now_reusable != 1) {
        int st = free_log_stage(&a->log, addr, units, f->freed_us);
        f->need_claim = st >= 0 && units > MAX_CLASS;
        f->logged = st >= 0;
        if (st == 1 && a->w->log_due) a->w->log_due(a->w->log_due_arg);
    }
    listed(a, f, 1);
    if (now_reusable) {
        f->next = a->head[c];
        a->head[c] = f;
        if (!a->tail[c]) a->tail[c] = f;
    } else {
        if (a->tail[c])
            a->tail[c]->next = f;
        else
            a->head[c] = f;
        a->tail[c] = f;
    }
}

static void queue_block(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes, int now_reusable)
{
    queue_block_at(a, addr, bytes, now_reusable, dm_now_us());
}

void dm_alloc_free(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes)
{
    dm_alloc_free_at(a, addr, bytes, dm_now_us());
}

void dm_alloc_free_at(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes, uint64_t unlinked_us)
{
    uint64_t taken = dm_alloc_kv_block_bytes(bytes);
    a->live_delta -= (int64_t)taken;
    a->freed_delta += taken;
    queue_block_at(a, addr, bytes, 0, unlinked_us);
}

void dm_alloc_unused(dm_alloc_t *a, dm_gaddr_t addr, uint64_t bytes)
{
    a->live_delta -= (int64_t)dm_alloc_kv_block_bytes(bytes);
    queue_block(a, addr, bytes, REUSABLE_LOGGED);
}

int dm_alloc_flush_live(dm_ctx_t *ctx, int wait)
{
    dm_alloc_t *a = ctx->w->alloc;
    if (a) flush_listed(a);
    if (a) flush_region(a, a->cur_left);
    if (!a || !a->live_delta) return 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_faa(&b, dm_gaddr_make(0, DM_SB_OFF(live_bytes)), (uint64_t)a->live_delta);
    a->live_delta = 0;
    return wait ? dm_batch_exec(ctx, &b) : dm_batch_post_async(ctx, &b);
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

/* Two superblock words of node 0 in one batch. */
static int read_sb_words(dm_ctx_t *ctx, size_t off1, uint64_t *v1, size_t off2, uint64_t *v2)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, off1), v1, 8);
    dm_batch_read(&b, dm_gaddr_make(0, off2), v2, 8);
    return dm_batch_exec(ctx, &b);
}

int dm_pool_memory(dm_ctx_t *ctx, uint64_t *taken, uint64_t *live)
{
    return read_sb_words(ctx, DM_SB_OFF(pool_used), taken, DM_SB_OFF(live_bytes), live);
}

int dm_pool_usage(dm_ctx_t *ctx, uint64_t *maxmemory, uint64_t *used)
{
    return read_sb_words(ctx, DM_SB_OFF(maxmemory), maxmemory, DM_SB_OFF(pool_used), used);
}

int dm_pool_push_free(dm_ctx_t *ctx, dm_gaddr_t hdr, uint64_t bytes)
{
    dm_worker_t *w = ctx->w;
    unsigned node = dm_gaddr_node(hdr);
    uint64_t off = dm_gaddr_off(hdr);
    if (node >= w->n_nodes || off < DM_SB_FIRST_CHUNK || off % DM_UNIT || bytes % DM_UNIT ||
        bytes < sizeof(dm_chunk_hdr_t) || bytes > w->conns[node]->region_size - off)
        return DM_EINVAL;
    dm_gaddr_t head_addr = dm_gaddr_make(node, DM_SB_OFF(chunk_free));
    uint64_t head = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, head_addr, &head, 8);
    int rc = dm_batch_exec(ctx, &b);
    for (int tries = 0; !rc && tries < FREE_TRIES; tries++) {
        dm_chunk_hdr_t h = {.magic = DM_CHUNK_MAGIC,
                            .bytes = bytes,
                            .owner = 0,
                            .created_ms = dm_wall_ms(),
                            .next_free = dm_free_head_off(head)};
        /* The link is in place before the CAS makes the range reachable. */
        dm_batch_init(&b);
        dm_batch_write(&b, hdr, &h, sizeof(h));
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        dm_batch_init(&b);
        dm_verb_t *v =
            dm_batch_cas(&b, head_addr, head, dm_free_head(dm_free_head_tag(head) + 1, off));
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        if (v->result == head) {
            uncharge(ctx, bytes); /* no longer taken: pool_used counts taken ranges */
            return 0;
        }
        head = v->result;
    }
    return rc ? rc : DM_ERETRY;
}

int dm_pool_free_list(dm_ctx_t *ctx, unsigned node, uint64_t *offs, uint64_t max, uint64_t *ranges,
                      uint64_t *bytes)
{
    dm_worker_t *w = ctx->w;
    *ranges = *bytes = 0;
    if (node >= w->n_nodes) return DM_EINVAL;
    uint64_t head = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(node, DM_SB_OFF(chunk_free)), &head, 8);
    int rc = dm_batch_exec(ctx, &b);
    for (uint64_t off = dm_free_head_off(head); !rc && off; (*ranges)++) {
        if (*ranges >= max) return DM_ECORRUPT; /* a cycle, or more than the caller allows */
        dm_chunk_hdr_t h;
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make(node, off), &h, sizeof(h));
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        if (!free_hdr_ok(w, node, off, &h)) return DM_ECORRUPT;
        if (offs) offs[*ranges] = off;
        *bytes += h.bytes;
        off = h.next_free;
    }
    return rc;
}
