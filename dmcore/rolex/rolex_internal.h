/* ROLEX internals shared by layout.c, model.c, leaf.c, lease.c, search.c, insert.c and
 * scan.c.
 *
 * Pool layout (little-endian; sizes in bytes):
 *
 * Model region, at the root (RX_HDR_BYTES + 32 * segments, 64-aligned):
 *   [0]  u64 magic  [8] u64 version (1; retraining would bump it)  [16] u64 primaries (L)
 *   [24] u64 segments  [32] u64 eps (leaves)  [40] u64 leaf region gaddr
 *   [48] u64 alloc_num: leaves taken from the leaf region (FAA; primaries first)
 *   [56] u64 capacity: leaves the region holds
 *   [64] segments, 32 bytes each, ascending: u64 first image, u64 first leaf,
 *        u64 last leaf, f64 slope (leaves per image unit).
 *   A segment predicts leaf(x) = first leaf + slope * (x - first image), clamped to
 *   [first leaf, last leaf]; the segment of x is the last whose first image <= x.
 *
 * Leaf region (RX_LEAF_BYTES * capacity): leaf i at region + i * RX_LEAF_BYTES. Primary leaves
 * are 0..L-1 in key order; synonym leaves follow, taken by FAA on alloc_num (ROLEX §3.3:
 * no RPC, no memory-node CPU).
 *
 * Leaf (RX_LEAF_BYTES = 48 + 16 * 48 = 816):
 *   [0]  u64 lock: 0 free, else lease token << 1 | 1 (dmkv/lease.h). Only a primary's is
 *        used: it covers its synonym chain (the paper's LT entry lock covers synonyms too).
 *   [8]  u64 low image: the primary covers keys with lo(i) <= image < lo(i + 1); lo(0) = 0.
 *        Immutable; a synonym leaf repeats its primary's.
 *   [16] u64 next: gaddr of the next synonym leaf, 0 = end of chain
 *   [24] u64 count: entries in use (a prefix, sorted by key; the chain's leaves in chain
 *        order are sorted as a whole: every key of a leaf is below every key of the leaves
 *        after it, empty leaves aside)
 *   [32] u64 checksum over [16, 32) and [40, 816) (a reader re-reads a torn leaf)
 *   [40] u64 reserved
 *   [48] 16 entries of 48: u16 key length, 46 key bytes (zero padded)
 *   A writer holding the lock rewrites [16, 816) with one WRITE.
 *
 * Invariants: a key lives in the chain of the primary covering its image. Within the chain it
 * moves only forward (an insert shifts keys into the next leaves or splits a leaf into a new
 * one linked after it; the later leaf is written first), so a reader walking the chain that
 * sees each leaf at some instant sees every key present throughout, and a search may stop at
 * the first leaf whose last key is above its key.
 *
 * Deviations from the paper (why):
 *  - Models predict the covering primary leaf directly (trained over the leaves' low
 *    images), not a slot position divided by delta: leaves are never re-split, and keys
 *    with equal images must stay in one chain. Clamping to the segment and a monotone
 *    slope bound any image's covering leaf j to ceil(f - eps - 1) <= j <= floor(f + eps).
 *  - No LT/SLT tables: primaries are contiguous (LT is the identity without retraining) and
 *    synonyms are linked from their leaf (the SLT): a search pays one RTT per synonym hop,
 *    where the paper's cached SLT lets it read them in the first batch.
 *  - Chains are kept sorted as the paper's are, but keys move only forward: a full leaf
 *    shifts its last key into the next leaf with room (up to 4 leaves on) or splits into a
 *    new leaf after it, and never gives keys to an earlier leaf (a reader walking forward
 *    would miss them). The price: a range filled in ascending order leaves fuller leaves
 *    behind it less often (test_rolex: 396 synonym leaves for 6300 inserts against 268 when
 *    any leaf with room took a key). Scans still sort and deduplicate each chain's keys
 *    (leaves are read at different instants).
 *  - Keys are byte strings stored inline (<= 46 bytes), not 8-byte integers, and a leaf
 *    holds keys only (values live in the point index).
 *  - The build fills primaries to cfg.fill (12 of 16) to leave room for inserts.
 *  - No reclaiming queue for emptied leaves (§3.3): removes never empty a chain out.
 *  - The upper model is a binary search over the cached segments.
 */
#ifndef DMKV_ROLEX_INTERNAL_H
#define DMKV_ROLEX_INTERNAL_H

#include <stdint.h>

#include "dmkv/batch.h"
#include "dmkv/lease_lock.h"
#include "dmkv/rolex.h"

#define RX_MAGIC 0x31584c4f52534d44ull /* "DMSROLX1" */
#define RX_HDR_BYTES 64ull
#define RX_SEG_BYTES 32ull
#define RX_OFF_ALLOC 48ull
#define RX_ENTRY_BYTES 48u
#define RX_LEAF_HDR 48u
#define RX_LEAF_BYTES (RX_LEAF_HDR + DM_ROLEX_SLOTS * RX_ENTRY_BYTES)
#define RX_LEAF_BODY 16u   /* the WRITE of a locked leaf starts here */
#define RX_CHAIN_MAX 4096u /* hops before a chain is taken as corrupt */

typedef struct rx_hdr {
    uint64_t magic, version, primaries, segments, eps, region, alloc_num, capacity;
} rx_hdr_t;

typedef struct rx_seg {
    uint64_t first_img, first_leaf, last_leaf;
    double slope;
} rx_seg_t;

typedef struct rx_entry {
    uint16_t len;
    char key[DM_ROLEX_KEY_MAX];
} rx_entry_t;

typedef struct rx_leaf {
    uint64_t lock, lo, next, count, sum, reserved;
    rx_entry_t e[DM_ROLEX_SLOTS];
} rx_leaf_t;

_Static_assert(sizeof(rx_entry_t) == RX_ENTRY_BYTES, "entry layout");
_Static_assert(sizeof(rx_leaf_t) == RX_LEAF_BYTES, "leaf layout");
_Static_assert(sizeof(rx_hdr_t) == RX_HDR_BYTES, "header layout");
_Static_assert(sizeof(rx_seg_t) == RX_SEG_BYTES, "segment layout");

struct dm_rolex {
    dm_gaddr_t root;
    rx_hdr_t hdr; /* as read at open (alloc_num is stale: read the pool's) */
    rx_seg_t *segs;
};

/* model.c */
/* Greedy PLA (a shrinking cone from each segment's first point) over n strictly ascending
 * images x[i] -> leaf i, error eps leaves. segs holds n; returns the segments written. */
uint64_t rx_train(const uint64_t *x, uint64_t n, unsigned eps, rx_seg_t *segs);
/* The predicted leaf (real) of image x. */
double rx_predict(const rx_seg_t *segs, uint64_t nsegs, uint64_t x);
/* Leaves [*a, *b] that hold the covering leaf of x. */
void rx_window(const dm_rolex_t *r, uint64_t x, uint64_t *a, uint64_t *b);

/* leaf.c */
dm_gaddr_t rx_leaf_addr(const dm_rolex_t *r, uint64_t i);
uint64_t rx_leaf_sum(const rx_leaf_t *l);
int rx_leaf_ok(const rx_leaf_t *l);
int rx_key_cmp(const void *a, size_t alen, const void *b, size_t blen);
/* Index in l of key, or -(insertion point) - 1. */
int rx_leaf_find(const rx_leaf_t *l, const void *key, size_t len);
/* Read leaves [a, b] in one batch (b - a < DM_BATCH_MAX), re-reading torn ones. */
int rx_read_leaves(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t a, uint64_t b, rx_leaf_t *out);
/* Read one leaf at gaddr, re-reading a torn one. */
int rx_read_leaf(dm_ctx_t *ctx, dm_gaddr_t at, rx_leaf_t *out);
/* A chain read: the primary (already read, in *first) and its synonyms. *out is malloc'd
 * (n leaves, addrs their gaddrs). */
int rx_read_chain(dm_ctx_t *ctx, const rx_leaf_t *first, dm_gaddr_t first_at, rx_leaf_t **out,
                  dm_gaddr_t **addrs, unsigned *n);
/* The chains of k primaries, one batch per hop over all of them (scan). */
int rx_read_chains(dm_ctx_t *ctx, const rx_leaf_t *heads, unsigned k, rx_leaf_t **out, unsigned *n);
/* The covering primary of image x and its leaf (1 RTT). */
int rx_locate(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t x, uint64_t *leaf, rx_leaf_t *out);

/* lease.c */
typedef dm_lease_hold_t rx_hold_t; /* until_us: no write is sent after it */
extern uint32_t rx_lease_ms, rx_hold_ms;
/* Test hook: returns nonzero at site to make the caller "die" there (its lock stays held). */
extern int (*rx_test_hook)(int site);
enum { RX_SITE_LOCKED = 1 };
/* Take the lock of the primary leaf at addr (waits; takes a dead holder's lease over) and,
 * with leaf non-NULL, read the leaf in the same batch, after the CAS. */
int rx_lock(dm_ctx_t *ctx, dm_gaddr_t addr, rx_hold_t *hd, rx_leaf_t *leaf);
int rx_unlock(dm_ctx_t *ctx, const rx_hold_t *hd);

#endif
