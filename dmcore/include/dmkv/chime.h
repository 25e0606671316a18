/* CHIME range index on one-sided verbs (CHIME, SOSP'24, §4): a B-link tree whose inner nodes
 * hold full-key separators and whose leaves are hopscotch tables (span 64, neighborhood 8 by
 * default). dmkv's CHIME holds key identity only (values live in RACE): a leaf entry is a
 * key (inline up to 24 bytes, else a pointer to an immutable key record) placed by a hash of
 * the full key, with a 16-bit fingerprint and a pending flag used by the hybrid protocol
 * (docs/DESIGN.md "The hybrid index", kv/hybrid.c).
 *
 * Synchronization (§4.1): leaves are written under the leaf lock; readers never lock and
 * check node-level versions (all NVs equal), entry-level versions and the hopscotch bitmap
 * of the key's home. Leaf layout, lock word and deviations from the paper: chime/chime_internal.h.
 * Every call runs on a coroutine of ctx->w's thread (or on that thread outside any). */
#ifndef DMKV_CHIME_H
#define DMKV_CHIME_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/index.h" /* CHIME is a range index: its key type is the role's */
#include "dmkv/worker.h"

#define DM_CHIME_SPAN 64      /* leaf entries (default) */
#define DM_CHIME_NBHD 8       /* hopscotch neighborhood H (default) */
#define DM_CHIME_INLINE 24    /* keys up to this many bytes live in the leaf entry */
#define DM_CHIME_SEP_MAX 1024 /* bytes: longest separator an inner node takes */

typedef struct dm_chime dm_chime_t;

/* Leaf geometry for trees this process creates (span a multiple of nbhd, span <= 128,
 * 2 <= nbhd <= 16). Attaching to an existing tree uses the tree's own geometry. Tests use
 * small spans to force splits. Returns 0 or DM_EINVAL. */
int dm_chime_set_create_geometry(unsigned span, unsigned nbhd);

/* Most children an inner node written by this process takes before it splits (default:
 * as many as fit in its 8 KiB). Tests use small fanouts to grow the tree. */
void dm_chime_set_inner_fanout(unsigned max_children);

/* CHIME's table as the range role (chime/index_ops.c), listed by kv/engines.c. */
extern const dm_range_index_ops_t dm_chime_range_index;

/* Attach this worker to the pool's CHIME tree, creating it (an empty root leaf published by
 * CAS on the superblock's chime_root) if no gateway has yet. 1-3 RTTs. Returns 0 or DM_E*. */
int dm_chime_attach(dm_ctx_t *ctx, dm_chime_t **out);

/* The point index's presence check (dm_point_probe_fn; expire_ms is passed NULL). CHIME
 * settles pending entries (a dead locker's, FLUSHALL, repairs) with it and so never names
 * the point index. */
typedef dm_point_probe_fn dm_chime_presence_fn;
/* Give c the presence check (the range role's set_presence, which the composer calls
 * right after attach). Until then a settle that needs it fails with DM_EINVAL. */
void dm_chime_set_presence(dm_chime_t *c, dm_chime_presence_fn fn);
void dm_chime_detach(dm_chime_t *c);

/* Offline: fn for every inner node, leaf (sibling pointers followed), long key's record and
 * fence record the tree reaches from the superblock's root word. 0, fn's error, DM_ECORRUPT
 * (a node that does not decode, a bad geometry word) or DM_E*. The range index's objects()
 * (index.h); chime/objects.c. */
int dm_chime_objects(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg);

/* Replace the tree with one empty leaf: the root word is CASed from the one just read to a
 * new empty leaf's. The old nodes are left where they are (unreachable; dmkv-pool-reclaim
 * frees ranges left without live objects). Offline only (dmkv-index-rebuild): gateways
 * that cached the old tree keep using it. Returns 0, DM_ERETRY when the root changed
 * meanwhile (someone is writing), or DM_E*. */
int dm_chime_reset(dm_ctx_t *ctx);

/* A held leaf lock and what the holder knows of the leaf: the range role's opaque lock
 * (dm_range_lock_t), defined by CHIME alone (chime/leaf_lock.h), so the role's table points
 * at these functions directly. */
typedef dm_range_lock_t dm_chime_lock_t;

/* Lock the leaf that covers key (masked CAS on the leaf's lock word, batched with the read
 * of the key's neighborhood; §4.4 "Insert"), following half-splits. Waits (with backoff)
 * while another gateway holds it; takes over a lock whose lease expired and settles that
 * leaf's pending entries against RACE first. *out is malloc'd; release it with
 * dm_chime_unlock. 1 RTT when the inner nodes are cached, +1 for a long key's record.
 * Returns 1 when key has an entry in the leaf (pending or not), 0 when not, or DM_E*. */
int dm_chime_lock_key(dm_ctx_t *ctx, const void *key, size_t klen, dm_chime_lock_t **out);

/* dm_chime_lock_key for a key expected to have an entry (DEL): when the hotspot buffer
 * knows where it was (§4.3), the lock batch reads that entry and the home entry (64 bytes)
 * instead of the neighborhood; a wrong guess reads the neighborhood under the lock (+1 RTT).
 * Same results. */
int dm_chime_lock_existing(dm_ctx_t *ctx, const void *key, size_t klen, dm_chime_lock_t **out);
/* dm_chime_lock_key (existing = 0) or dm_chime_lock_existing (1) that also sends extra's
 * verbs (READs into the caller's buffers) in every lock batch, behind the CAS and fenced.
 * *fresh = 1 when the batch that won the lock carried them all to the lock's memory node,
 * so they executed after the lock was taken (the hybrid protocol reads the key's RACE
 * buckets this way: a state only the holder may change, docs/throughput.md); 0 when they
 * went elsewhere (no order across nodes) or did not fit. Same returns as those. */
int dm_chime_lock_with(dm_ctx_t *ctx, const void *key, size_t klen, int existing,
                       const dm_batch_t *extra, int *fresh, dm_chime_lock_t **out);
/* dm_chime_lock_with (existing = 0) for an insert that may share the leaf's lock with the
 * other inserts of this worker (chime/share.c: Sherman-style combining; keys of up to
 * DM_CHIME_INLINE bytes): it joins a hold of the leaf the thread has (no round trip), or
 * locks reading the whole leaf when its connection has later commands in flight. The
 * handle is used as any other; dm_chime_mark_pending may then also return DM_EYIELD (the
 * leaf is full and shared: unlock with -1 and come back after the turn). Same returns. */
int dm_chime_lock_insert(dm_ctx_t *ctx, const void *key, size_t klen, const dm_batch_t *extra,
                         int *fresh, dm_chime_lock_t **out);

/* Flag key's entry pending (an entry write), inserting it first (hopping, §2.3; a failed hop
 * splits the leaf and propagates the separator up, §4.4) when it has none. On a split the
 * lock moves to whichever leaf now covers key. 1 RTT without split. Returns 0 or DM_E*
 * (DM_ENOMEM: pool full, DM_EFULL: keys share a prefix longer than DM_CHIME_SEP_MAX so the
 * leaf cannot split; the leaf is unchanged). */
int dm_chime_mark_pending(dm_ctx_t *ctx, dm_chime_lock_t *lk);

/* Settle key's entry and unlock, posted without waiting (a write batch; the unlock WRITE
 * carries the new vacancy bitmap, §4.2.1): present = 1 keeps the entry (pending cleared),
 * 0 removes it (and its home's hop bit), -1 (outcome unknown) leaves it pending for SCAN to
 * settle. Frees lk. Returns 0 or DM_E*. */
int dm_chime_unlock(dm_ctx_t *ctx, dm_chime_lock_t *lk, int present);

/* 1 while lk's holder may still change its leaf or its key's presence: the lock was taken
 * less than 2 s ago (a waiter takes an expired lease over after 3 s). 0 after that. */
int dm_chime_lock_valid(const dm_chime_lock_t *lk);

/* 1 when a write that completed just now may have landed after a waiter took lk's lease
 * over: more than CH_LEASE_MS (3 s) passed since the acquiring CAS was posted (a stall, a
 * stopped process, a slow network). The caller then repairs what the write touched
 * (dm_hybrid_reconcile). dmkv/lease.h has the timing argument. */
int dm_chime_lock_in_doubt(const dm_chime_lock_t *lk);
/* Monotonic time (µs) until which lk's holder is sure no other holder's presence change of
 * its keys can overlap its own: the end of its lease (dm_chime_lock_in_doubt afterwards),
 * or 0 when the lock was taken over from an expired holder whose writes may still land. */
uint64_t dm_chime_lock_sure_until(const dm_chime_lock_t *lk);
/* Monotonic µs until which a write that depends on the lock may still be posted (its hold
 * bound, CH_HOLD_MAX_MS after the acquiring CAS was posted: dm_chime_lock_valid). */
uint64_t dm_chime_lock_hold_until(const dm_chime_lock_t *lk);
/* The leaf the handle holds (an address in the pool). */
uint64_t dm_chime_lock_leaf(const dm_chime_lock_t *lk);
/* Monotonic time (µs) the batch that took lk was posted (its extra READs are no older). */
uint64_t dm_chime_lock_posted_us(const dm_chime_lock_t *lk);

/* Lock-free point lookup (§4.4 "Search"): speculative single-entry READ when the hotspot
 * buffer has a candidate (§4.3), else the neighborhood; three-level checks, sibling-based
 * cache and half-split validation. Returns 1 (entry present; *pending set when flagged),
 * 0 absent, or DM_E*. */
int dm_chime_search(dm_ctx_t *ctx, const void *key, size_t klen, int *pending);

/* WATCH of an absent key: a signature of the key's leaf neighborhood (leaf address and the
 * versions of the entries a lock-free search reads, §4.1). Creating the key and deleting
 * it again both write an entry there (EV+1 each) and a split changes the node version, so
 * SET k + DEL k changes the signature; so may changes of neighbor keys (a false abort).
 * 1 RTT with cached inner nodes. Returns 0 or DM_E*. */
int dm_chime_watch_sig(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *sig);

/* One key of a leaf as SCAN sees it (dm_range_key_t). */
typedef dm_range_key_t dm_chime_key_t;

/* Read whole leaves starting at the leaf encoded in cursor (0 = the leaf covering prefix,
 * or the leftmost leaf when plen == 0), following sibling pointers, until about count keys
 * were collected. Appends the leaves' keys (all of them, sorted, pending ones flagged: the
 * caller settles them against RACE) to *keys (*n, *cap; realloc'd). *next: cursor of the
 * next leaf, 0 when the walk is done (no sibling, or every later key is > prefix).
 * Cursors are leaf addresses with a keyed 16-bit check (the pool's secret in the
 * superblock), valid on every gateway; leaves never merge, so a cursor stays valid.
 * 1 RTT per page (leaves guessed from the cached parent are read in one batch and their
 * sibling chain checked), +1 for key records. Returns 0, DM_EINVAL (forged or foreign
 * cursor), or DM_E*. */
int dm_chime_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix, size_t plen,
                  dm_chime_key_t **keys, size_t *n, size_t *cap, uint64_t *next);

/* Bytes of CHIME a key of klen bytes takes (MEMORY USAGE): its entry's share of a leaf
 * (leaf bytes / span, the lock line included) plus, for a key longer than DM_CHIME_INLINE,
 * its key record (rounded to DM_UNIT as allocated). Inner nodes are not counted. */
uint64_t dm_chime_key_bytes(dm_ctx_t *ctx, size_t klen);

/* A cursor of a leaf picked by a random descent (a random child at every inner level,
 * cached nodes where possible): RANDOMKEY and the active-expiry sweep's starting points.
 * Returns 0 or DM_E*. */
int dm_chime_random_cursor(dm_ctx_t *ctx, uint64_t *cursor);

/* Remove the entries of keys that are absent from RACE, leaf by leaf under each leaf's
 * lock (FLUSHALL after RACE was emptied; repairs). Returns the number removed or DM_E*. */
int64_t dm_chime_settle_all(dm_ctx_t *ctx);

/* Process-wide counters for INFO. */
typedef struct dm_chime_stats {
    uint64_t cache_nodes, cache_bytes;         /* inner nodes cached, bytes (all workers) */
    uint64_t hotspot_lookups, hotspot_hits;    /* speculative reads tried, succeeded */
    uint64_t leaf_splits, inner_splits, roots; /* splits done by this process, new roots */
    uint64_t scan_pages, scan_rtts;            /* SCAN pages served, round trips they took */
    uint64_t lock_waits, lease_takeovers;      /* lock retries, expired leases taken over */
    uint64_t right_moves; /* moves right past a leaf its fresh parent routed to */
    uint64_t sep_repairs; /* separators a dead splitter left out, inserted (repair.c) */
    uint64_t shared_holds, shared_joins; /* leaf holds shared by a worker's inserts (share.c) */
    uint64_t shared_joins_direct;        /* ... of them found by the hold's key range, no descent */
    uint64_t shared_splits;              /* leaves split under such a hold, its members in it */
} dm_chime_stats_t;
void dm_chime_get_stats(dm_chime_stats_t *out);

#endif
