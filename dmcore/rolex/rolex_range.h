/* ROLEX as the range role (dmkv/index.h; docs/DESIGN.md "ROLEX: the path to a range engine"
 * step 5): what the files of the role share (range.c: the worker's handle and the locked
 * path; range_read.c: lock-free reads and SCAN; range_admin.c: FLUSHALL, reset, objects,
 * stats; cursor.c: SCAN cursors; index_ops.c: the table).
 *
 * The lock is the covering chain head's lease (lease.c's word, docs/leases.md), held across
 * the hybrid protocol's steps. A pending entry carries RX_PENDING in its length word. */
#ifndef DMKV_ROLEX_RANGE_H
#define DMKV_ROLEX_RANGE_H

#include "dmkv/index.h"
#include "rolex_internal.h"

/* A worker's range role: its handle (not thread-safe: one per worker) and what it was given. */
typedef struct rr_role {
    dm_rolex_t *r;
    dm_point_probe_fn presence; /* the point index's presence check (set_presence) */
    uint64_t secret;            /* the pool's cursor_secret (superblock) */
} rr_role_t;

/* w's role (attached), or NULL. Lock-free; a thread-local cache makes it a compare. */
rr_role_t *rr_of(dm_worker_t *w);

/* A held range lock (dm_range_lock_t of this engine). */
typedef struct rr_lock {
    rx_hold_t hd;            /* the head's lease: addr, word, until_us (no write after it) */
    uint64_t async_failures; /* dm_async_failures() before the lock CAS */
    uint64_t posted_us;      /* when the (last) lock CAS was posted */
    int took_over;           /* taken from an expired holder */
    int abandoned;           /* a ride with its writes failed: write nothing more */
    int keyless;             /* a DEL of a key too long to be stored: no lock at all */
    uint64_t model;          /* the model word read with the window (rx_notice at unlock) */
    rx_run_t run;            /* the chain from the covering entry's leaf to key's successor */
    rx_probe_t pr;           /* the key (run.pr): a long key's record answers, kept */
    size_t klen;
    uint8_t *recbuf; /* a long key's record as written by mark_pending (rides: kept to the end) */
    uint8_t key[];   /* klen bytes, in the lock's own allocation */
} rr_lock_t;

static inline rr_lock_t *rr_lk(dm_range_lock_t *lk)
{
    return (rr_lock_t *)(void *)lk;
}
static inline const rr_lock_t *rr_clk(const dm_range_lock_t *lk)
{
    return (const rr_lock_t *)(const void *)lk;
}

/* Take the lease of the head leaf at head (waits while a live holder has it; takes an
 * expired lease over), with the n reads (any addresses, e.g. the entry's leaf and the model
 * word; none: NULL, 0) and the verbs of extra (NULL: none; *extra_fresh as
 * dm_lease_lock_try_reads sets it) in the batch of each CAS, behind it. 0 or DM_E*. */
int rr_take(dm_ctx_t *ctx, dm_gaddr_t head, rx_hold_t *hd, const dm_lease_read_t *reads, unsigned n,
            const dm_batch_t *extra, int *extra_fresh, int *took_over, uint64_t *async_failures);
/* The hold's writes may still go out (hold not over, no posted write failed since). */
int rr_hold_ok(const rx_hold_t *hd, uint64_t async_failures);
/* Under the lease hd (a lock word whose leaves carry label `label`, rolex/domain.c): settle
 * the entries of those leaves (all = 0: pending ones; 1: every entry, FLUSHALL) against the
 * point index, walking the chain from the leaf at `from`: present keys lose the flag, absent
 * ones their entry. stretch 0: on to the chain's end, past leaves of other labels (a
 * takeover: the dead holder's leaves may be anywhere after the lock's leaf); 1: up to the
 * first leaf of another label, whose address goes to *beyond (0: the chain's end). Takes the
 * lease again when it runs low (keys only move forward, so the walk misses none). Entries
 * removed, or DM_E*. */
int64_t rr_settle_chain(dm_ctx_t *ctx, rr_role_t *rr, dm_gaddr_t from, uint32_t label, int stretch,
                        int all, rx_hold_t *hd, uint64_t *async_failures, dm_gaddr_t *beyond);

/* Process-wide counters (INFO), relaxed atomics. */
typedef struct rr_counters {
    uint64_t lock_waits, takeovers, settled, removed, scan_leaves, too_long, leaves_seen,
        model_version, lt_entries, leaf_capacity;
} rr_counters_t;
/* domain.c's counters, this process (relaxed atomics): cuts made; locks given up because
 * the start leaf's label named another (switches) or the key's place lay past the stretch
 * (passes). */
extern uint64_t rx_dom_cuts, rx_dom_switches, rx_dom_passes;
extern rr_counters_t rr_stats;
static inline void rr_count(uint64_t *c, uint64_t n)
{
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}
/* What r's model says, into the counters. */
void rr_note_model(const dm_rolex_t *r);

/* cursor.c: a SCAN cursor names a leaf of the index at root: a decimal below 2^53 of the
 * leaf's number (RR_CURSOR_LEAF_BITS) and a keyed check of it and the root in the bits left,
 * so that a forged one is refused before anything is read, and one that passes (one guess
 * in 2^27) still names a leaf of the region, nothing else. */
#define RR_CURSOR_LEAF_BITS 26
#define RR_CURSOR_LEAVES ((1ull << RR_CURSOR_LEAF_BITS) - 1) /* leaf numbers a cursor holds */
uint64_t rr_cursor_of(uint64_t secret, dm_gaddr_t root, uint64_t leaf);
/* The leaf number cur names (below capacity), or DM_EINVAL. */
int rr_cursor_leaf(uint64_t secret, dm_gaddr_t root, uint64_t capacity, uint64_t cur,
                   uint64_t *leaf);

/* The index operations (index_ops.c's table). */
int rr_attach(dm_ctx_t *ctx, dm_worker_t *w);
void rr_set_presence(dm_worker_t *w, dm_point_probe_fn probe);
void rr_detach(dm_worker_t *w);
int rr_lock(dm_ctx_t *ctx, const void *key, size_t klen, int existing, const dm_batch_t *extra,
            int *fresh, dm_range_lock_t **out);
int rr_lock_insert(dm_ctx_t *ctx, const void *key, size_t klen, const dm_batch_t *extra, int *fresh,
                   dm_range_lock_t **out);
int rr_mark_pending(dm_ctx_t *ctx, dm_range_lock_t *lk);
int rr_unlock(dm_ctx_t *ctx, dm_range_lock_t *lk, int present);
/* Free lk without giving the lease back (tests: a gateway that died holding it). */
void rr_lock_forget(dm_range_lock_t *lk);
int rr_lock_valid(const dm_range_lock_t *lk);
int rr_lock_in_doubt(const dm_range_lock_t *lk);
uint64_t rr_lock_sure_until(const dm_range_lock_t *lk);
uint64_t rr_lock_hold_until(const dm_range_lock_t *lk);
uint64_t rr_lock_posted_us(const dm_range_lock_t *lk);
uint64_t rr_lock_range(const dm_range_lock_t *lk);
int rr_search(dm_ctx_t *ctx, const void *key, size_t klen, int *pending);
int rr_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix, size_t plen,
            dm_range_key_t **keys, size_t *n, size_t *cap, uint64_t *next);
int rr_random_cursor(dm_ctx_t *ctx, uint64_t *cursor);
int rr_watch_sig(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *sig);
uint64_t rr_key_bytes(dm_ctx_t *ctx, size_t klen);
int64_t rr_settle_all(dm_ctx_t *ctx);
int rr_reset(dm_ctx_t *ctx);
int rr_objects(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg);
size_t rr_stats_get(dm_index_stat_t *out);

/* A new empty index for the range role (node 0, dm_rolex_set_create_leaves' room): its root. */
int rr_build_empty(dm_ctx_t *ctx, dm_gaddr_t *root);

#endif
