/* CHIME's remote layouts and the helpers shared by its files (CHIME SOSP'24 §4; docs/NOTES.md §2).
 *
 * Leaf (hopscotch table, §4.2.2 Fig. 10): span/H groups, each = a 32-byte metadata replica
 * followed by H 32-byte entries, then a 64-byte line holding the 8-byte lock word. Objects
 * are 32-byte aligned, so none straddles a 64-byte cache line and every line starts with
 * the version byte of the object that starts it: the line version IS that object's
 * version (docs/NOTES.md §2.3 "cache-line versions"). A version byte is NV:4 | EV:4.
 *   replica: [0] ver [1] valid [2] order hint (CH_ORDER_*: how the split that made this
 *            leaf saw keys arrive; split.c) [8..15] sibling gaddr [16..23] high-fence
 *            record gaddr (0 = +inf: the leaf never split) [24..31] the leaf's tag: a
 *            keyed hash of its own address (ch_leaf_tag), written when the leaf is made,
 *            so a SCAN cursor can only lead to a real leaf (scan.c)
 *   entry:   [0] ver [1] flags [2..3] hop bitmap (LE) [4..5] fingerprint [6] home
 *            [7] inline key length | 0xff, then [8..31] the key (<= 24 bytes) or
 *            [8..15] key record gaddr and [16..31] the key's first 16 bytes
 * Storing the home index lets a reader of a whole leaf rebuild every bitmap without keys.
 *
 * Lock word (§4.2.1), deviation: bit 0 lock, bits 1..31 the holder's lease token (random,
 * fresh per acquisition; dmkv/lease.h times it without trusting any clock but the
 * observer's), bits 32..63 the vacancy bitmap (bit v covers entries
 * [v*span/32, (v+1)*span/32); 1 = all occupied). The paper's 6-bit argmax is replaced by the
 * high-fence record in the replicas: argmax points at a hole after deletes (docs/NOTES.md §2.11),
 * and the lease token lets another gateway take over the lock of a gateway that died.
 *
 * Inner node (B-link, §4.1): DM_CHIME_INNER_BYTES of 64-byte lines, each starting with the
 * node's 8-bit version (all equal = untorn; inner nodes only see node writes, under their
 * lock), 63 payload bytes per line; then a 64-byte lock line. Payload: magic, level, valid,
 * count, sibling, the sibling's first child (cache validation of a last child, §4.2.3),
 * high fence (key, or +inf), then entries {child, separator}: child i covers
 * [sep i, sep i+1); sep 0 is the node's low fence.
 *
 * Key record (immutable; long keys and fences): dmkv/key_record.h, shared with ROLEX:
 * [0..3] magic [4..7] length [8..15] XXH3 of the key, then the key; 64-byte units. */
#ifndef DMKV_CHIME_INTERNAL_H
#define DMKV_CHIME_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "dmkv/chime.h"
#include "dmkv/gaddr.h"
#include "dmkv/key_record.h"

#define CH_OBJ 32u /* bytes per leaf object (entry or replica) */
#define CH_LINE 64u
#define CH_MAX_SPAN 128u

#define CH_F_USED 0x1u
#define CH_F_PENDING 0x2u
#define CH_KLEN_RECORD 0xffu
#define CH_ORDER_ASC 1u  /* replica hint: keys arrived in ascending order */
#define CH_ORDER_DESC 2u /* ... in descending order */

#define CH_INNER_BYTES 8192u /* versioned area of an inner node */
#define CH_INNER_PAYLOAD (CH_INNER_BYTES / CH_LINE * (CH_LINE - 1))
#define CH_INNER_MAGIC 0x4e494b44u /* "DKIN" */
#define CH_INNER_HDR 40u

#define CH_LEASE_MS 3000u    /* a lock word seen unchanged this long is presumed dead */
#define CH_HOLD_MAX_MS 2000u /* a holder that held it this long gives up before writing */

/* chime_geo word (superblock): span | nbhd << 16 | CH_GEO_TAGGED. Pools made before
 * 2026-11-29 lack the flag: their leaves carry no tag, and a cursor's leaf is not checked. */
#define CH_GEO_TAGGED (1ull << 32)

/* Root word in the superblock: level (8 bits) << 48 | gaddr. */
static inline uint64_t ch_root_word(unsigned level, dm_gaddr_t a)
{
    return ((uint64_t)level << 48) | a;
}
static inline unsigned ch_root_level(uint64_t w)
{
    return (unsigned)(w >> 48) & 0xff;
}
static inline dm_gaddr_t ch_root_addr(uint64_t w)
{
    return w & ((1ull << 48) - 1);
}

/* ---- leaf geometry ---- */
typedef struct ch_geo {
    unsigned span, nbhd, groups;
    uint32_t bytes;    /* whole leaf incl. lock line */
    uint32_t lock_off; /* offset of the lock word */
} ch_geo_t;

/* Fill g for leaves of span entries in groups of nbhd (span a multiple of nbhd): each
 * group is a metadata replica and nbhd entries, CH_OBJ bytes each, the lock word on a
 * line of its own after them (the picture above; CHIME §4.2.2). */
void ch_geo_init(ch_geo_t *g, unsigned span, unsigned nbhd);
static inline uint32_t ch_entry_off(const ch_geo_t *g, unsigned i)
{
    return (i / g->nbhd) * (g->nbhd + 1) * CH_OBJ + CH_OBJ + (i % g->nbhd) * CH_OBJ;
}
static inline uint32_t ch_replica_off(const ch_geo_t *g, unsigned grp)
{
    return grp * (g->nbhd + 1) * CH_OBJ;
}

/* ---- leaf entry accessors (e points at 32 bytes) ---- */
static inline unsigned ch_nv(uint8_t v)
{
    return v >> 4;
}
static inline unsigned ch_ev(uint8_t v)
{
    return v & 15;
}
static inline uint16_t ch_e_bitmap(const uint8_t *e)
{
    return (uint16_t)(e[2] | (e[3] << 8));
}
static inline void ch_e_set_bitmap(uint8_t *e, uint16_t b)
{
    e[2] = (uint8_t)b;
    e[3] = (uint8_t)(b >> 8);
}
static inline uint16_t ch_e_fp(const uint8_t *e)
{
    return (uint16_t)(e[4] | (e[5] << 8));
}
static inline int ch_e_used(const uint8_t *e)
{
    return e[1] & CH_F_USED;
}
static inline dm_gaddr_t ch_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void ch_put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}
/* Bump the entry-level version of an entry (entry / hop-range write, §4.1.1). */
static inline void ch_e_bump(uint8_t *e)
{
    e[0] = (uint8_t)((e[0] & 0xf0) | ((e[0] + 1) & 0x0f));
}

/* ---- key hashing: home and fingerprint from one hash of the full key ---- */
typedef struct ch_khash {
    uint64_t h;
    unsigned home;
    uint16_t fp;
} ch_khash_t;
void ch_hash_key(const ch_geo_t *g, const void *key, size_t klen, ch_khash_t *out);

/* Fill entry e (32 bytes, version byte left alone) for key; rec = its record when the key
 * is longer than DM_CHIME_INLINE. */
void ch_entry_fill(uint8_t *e, const ch_khash_t *kh, const void *key, size_t klen, dm_gaddr_t rec,
                   unsigned flags);
/* Compare key with entry e as far as the entry allows: returns 0 equal, <0 / >0 ordered,
 * or 2 when only the record can tell (long key with an equal 16-byte prefix). */
int ch_entry_cmp_key(const uint8_t *e, const void *key, size_t klen, int *need_record);

/* Order of keys: memcmp, then shorter first. */
int ch_key_cmp(const void *a, size_t al, const void *b, size_t bl);

/* ---- lock word ---- */
static inline int ch_lock_held(uint64_t w)
{
    return (int)(w & 1);
}
static inline uint32_t ch_lock_vacancy(uint64_t w)
{
    return (uint32_t)(w >> 32);
}
/* Vacancy bits of a leaf image (1 = every entry the bit covers is used). */
uint32_t ch_vacancy_of(const ch_geo_t *g, const uint8_t *leaf);
/* vac with the bits of fully read groups replaced by what img shows. */
uint32_t ch_vacancy_of_known(const ch_geo_t *g, const uint8_t *img, const uint8_t *have,
                             uint32_t vac);
/* Vacancy bits in use (one per entry for spans under 32), the bit covering entry i, and
 * the entries [lo, hi) a bit covers. */
static inline unsigned ch_vac_bits(const ch_geo_t *g)
{
    return g->span < 32 ? g->span : 32;
}
static inline unsigned ch_vac_bit(const ch_geo_t *g, unsigned i)
{
    return i * ch_vac_bits(g) / g->span;
}
static inline unsigned ch_vac_lo(const ch_geo_t *g, unsigned bit)
{
    return (bit * g->span + ch_vac_bits(g) - 1) / ch_vac_bits(g);
}
static inline unsigned ch_vac_hi(const ch_geo_t *g, unsigned bit)
{
    return ch_vac_lo(g, bit + 1);
}

/* ---- key records ---- */
/* The format and its I/O are shared with ROLEX: dmkv/key_record.h (dm_keyrec_*). */
static inline long ch_record_check(const uint8_t *r, uint32_t bytes) /* tests/fuzz/fuzz_chime.c */
{
    return dm_keyrec_check(r, bytes);
}

/* ---- inner nodes (parsed) ---- */
typedef struct ch_sep {
    uint8_t *key;
    uint32_t len;
} ch_sep_t;

typedef struct ch_inner {
    dm_gaddr_t addr;
    unsigned level;
    int valid;
    unsigned count;
    dm_gaddr_t sibling, sib_first_child;
    int has_high;
    ch_sep_t high;
    ch_sep_t *sep;     /* count separators (sep[0] = low fence) */
    dm_gaddr_t *child; /* count children */
    size_t bytes;      /* memory held (cache accounting) */
    uint64_t gen;      /* numbers this cached copy (dm_chime_t.cache_gen), 0 until cached */
    struct ch_inner *next_in_bucket;
    uint8_t *arena;   /* the decoded keys' bytes (sep[].key and high.key point into it) */
    size_t arena_len; /* keys inserted later are malloc'd each (ch_inner_free tells) */
} ch_inner_t;

/* p lies in n's arena (freed with it, not on its own). */
static inline int ch_inner_owns(const ch_inner_t *n, const void *p)
{
    const uint8_t *b = p;
    return n->arena && b >= n->arena && b < n->arena + n->arena_len;
}

/* Free a decoded inner node and its key arena (NULL is fine). */
void ch_inner_free(ch_inner_t *n);
/* Decode a node image read from the pool (CH_INNER_BYTES). NULL when torn or not a node. */
ch_inner_t *ch_inner_decode(dm_gaddr_t addr, const uint8_t *img);
/* Encode into img (CH_INNER_BYTES) with every line version = ver. Returns 0 or DM_EFULL
 * when the node does not fit. */
int ch_inner_encode(const ch_inner_t *n, uint8_t ver, uint8_t *img);
/* Payload bytes the node needs. */
size_t ch_inner_size(const ch_inner_t *n);
/* Child index for key: the last i with sep[i] <= key. */
unsigned ch_inner_route(const ch_inner_t *n, const void *key, size_t klen);

/* ---- per-worker state ---- */
#define CH_CACHE_BUCKETS 4096u
#define CH_CACHE_MAX_BYTES (64u << 20)
#define CH_HOT_SLOTS 32768u  /* hotspot buffer entries per worker (16 B each: 512 KiB) */
#define CH_FENCE_SLOTS 4096u /* 2-way sets (inner.c fence_find) */

typedef struct ch_hot {
    dm_gaddr_t leaf;
    uint16_t idx, fp;
    uint32_t count;
} ch_hot_t;

typedef struct ch_fence_cache {
    dm_gaddr_t addr;
    uint8_t *key;
    uint32_t len;
} ch_fence_cache_t;

#define CH_READING_SLOTS 8

struct dm_chime {
    ch_geo_t geo;
    uint64_t secret;               /* keyed cursor check and leaf tags (superblock) */
    int tagged;                    /* the pool's leaves carry tags (CH_GEO_TAGGED) */
    unsigned node_bits;            /* bits of a memory node number in a SCAN cursor (scan.c) */
    uint64_t root;                 /* cached root word, 0 = unknown */
    dm_chime_presence_fn presence; /* the point index's presence check (settle.c) */
    ch_inner_t *cache[CH_CACHE_BUCKETS];
    size_t cache_bytes, cache_nodes;
    uint64_t cache_gen; /* the last ch_inner_t.gen given to a cached copy */
    ch_hot_t hot[CH_HOT_SLOTS];
    ch_fence_cache_t fence[CH_FENCE_SLOTS];
    uint64_t lockguess[256];  /* last lock word seen per leaf hash: the CAS fallback's guess */
    uint64_t busy_until[256]; /* per leaf hash: monotonic µs until which a lock of it found
                                 busy counts as contended (no early lock: leaf.c) */
    struct ch_group *groups;  /* this worker's shared leaf holds (share.c) */
    unsigned share_credit;    /* holds that may go unjoined before sharing pauses */
    unsigned share_probe;     /* inserts seen while paused */
    dm_gaddr_t reading[CH_READING_SLOTS]; /* inner nodes being read (inner.c), 0 = free */
    struct {
        dm_gaddr_t left, right; /* a half-split seen on a fresh descent (repair.c) */
        uint64_t since_us;      /* when first seen */
    } halfsplit[8];
};

/* Cache of inner nodes (inner.c). */
ch_inner_t *ch_cache_get(dm_chime_t *c, dm_gaddr_t a);
void ch_cache_put(dm_chime_t *c, ch_inner_t *n);
void ch_cache_drop(dm_chime_t *c, dm_gaddr_t a);
void ch_cache_clear(dm_chime_t *c);

/* Read an inner node fresh from the pool (re-read while torn) and cache it. */
int ch_inner_read(dm_ctx_t *ctx, dm_gaddr_t a, ch_inner_t **out);

/* A key bound of up to DM_CHIME_INLINE bytes; len CH_BOUND_NONE: not known (or longer),
 * CH_BOUND_INF: +inf (upper bounds). */
#define CH_BOUND_NONE (-1)
#define CH_BOUND_INF (-2)
typedef struct ch_bound {
    int len;
    uint8_t key[DM_CHIME_INLINE];
} ch_bound_t;

static inline void ch_bound_set(ch_bound_t *b, const void *key, size_t len)
{
    b->len = len > DM_CHIME_INLINE ? CH_BOUND_NONE : (int)len;
    if (b->len >= 0) memcpy(b->key, key, len);
}

/* Where a key's leaf is, as the traversal found it (§4.2.3). */
typedef struct ch_path {
    dm_gaddr_t leaf;
    dm_gaddr_t expect_next; /* the leaf's sibling if nothing split since (0 = rightmost) */
    dm_gaddr_t parent;      /* level-1 node the leaf came from, 0 when the root is a leaf */
    int from_cache;         /* the parent came from the cache */
    ch_bound_t lo, hi;      /* the leaf's bounds by that parent: [sep i, sep i+1) */
} ch_path_t;

/* Find the leaf for key: cached inner nodes, fresh reads where missing. fresh = 1 forces
 * the level-1 parent to be read from the pool. */
int ch_find_leaf(dm_ctx_t *ctx, const void *key, size_t klen, int fresh, ch_path_t *p);
#define CH_MEMO_NODES 8
/* A path found over cached nodes alone: the root word and the cached copies it went
 * through (zeroed: none yet). */
typedef struct ch_find_memo {
    int kept; /* a path is kept */
    uint64_t root;
    unsigned n; /* cached copies on it */
    dm_gaddr_t addr[CH_MEMO_NODES];
    uint64_t gen[CH_MEMO_NODES]; /* ch_inner_t.gen of each */
} ch_find_memo_t;
/* ch_find_leaf (fresh = 0) for a loop that finds the same key's leaf again after each wait:
 * keeps *p while the root and every cached node the descent went through are as memo saw
 * them (cached nodes never change in place, so a new descent would give the same path;
 * 3,700 of an insert's 36,000 instructions were such descents, and with the whole cache
 * as the test, not the nodes on the way, a load still re-descended 1.3 times an insert).
 * Errors as ch_find_leaf. */
int ch_find_leaf_again(dm_ctx_t *ctx, const void *key, size_t klen, ch_path_t *p,
                       ch_find_memo_t *memo);
/* Leaves right of leaf (which covers key; key NULL: position unknown, the parent is found
 * by leaf's address) as the cached level-1 parents list them, following cached right
 * siblings, without remote reads: SCAN's guesses of the sibling chain, checked by the
 * caller against the leaves' sibling pointers. Returns how many (<= max). */
unsigned ch_cached_next_leaves(dm_chime_t *c, const void *key, size_t klen, dm_gaddr_t leaf,
                               dm_gaddr_t *out, unsigned max);
/* Read the root word (1 RTT) into c->root. */
int ch_read_root(dm_ctx_t *ctx);

/* Insert (sep, right) into the level-`level` node covering sep after a split of `left`
 * (Sherman's up-propagation, §4.4); makes a new root when left was the root. */
int ch_propagate(dm_ctx_t *ctx, unsigned level, dm_gaddr_t left, const uint8_t *sep,
                 uint32_t seplen, dm_gaddr_t right);

/* The fence key (*len bytes) of the record at rec: from this worker's fence cache, or read
 * (1 RTT) and cached. Returns 0 or the read's DM_E*. *key points into the cache: an
 * eviction frees it, and any yield may evict, so copy or compare it before the next remote
 * operation (ch_repair_half_split copies). */
int ch_fence_get(dm_ctx_t *ctx, dm_gaddr_t rec, uint8_t **key, uint32_t *len);
/* The fence key at rec if this worker's cache holds it (no round trip): 1, or 0. *key
 * points into the cache, as for ch_fence_get. */
int ch_fence_cached(dm_chime_t *c, dm_gaddr_t rec, const uint8_t **key, uint32_t *len);
/* Put the fence key (len bytes) of the record at rec, just written by this worker's split,
 * in its fence cache (records never change while linked). Out of memory: not cached. */
void ch_fence_note(dm_chime_t *c, dm_gaddr_t rec, const uint8_t *key, uint32_t len);

/* Hotspot buffer (hotspot.c, §4.3). */
void ch_hot_touch(dm_chime_t *c, dm_gaddr_t leaf, unsigned idx, uint16_t fp);
/* Best candidate entry of leaf inside [home, home+H) with fingerprint fp; -1 if none. */
int ch_hot_find(dm_chime_t *c, dm_gaddr_t leaf, unsigned home, uint16_t fp);
/* Forget the record of entry idx of leaf (its key was removed): a later lock of that key
 * must not speculate on an entry that is gone. */
void ch_hot_forget(dm_chime_t *c, dm_gaddr_t leaf, unsigned idx);
/* Leaves found torn for good under their lock and rewritten whole (settle.c), process-wide. */
uint64_t ch_torn_repairs(void);

/* A leaf's tag (replica bytes 24..31): XXH3 of its address keyed by the pool's cursor
 * secret, never 0. Only a gateway of the pool can compute it, so bytes a client wrote (a
 * value laid out like a leaf) or a leaf image copied elsewhere never carry the right one. */
uint64_t ch_leaf_tag(const dm_chime_t *c, dm_gaddr_t leaf);
/* Write leaf's tag into every replica of the whole image img. */
void ch_stamp_leaf(const dm_chime_t *c, uint8_t *img, dm_gaddr_t leaf);
/* Does every replica of the whole image img carry leaf's tag? 1 or 0. */
int ch_leaf_tag_ok(const dm_chime_t *c, const uint8_t *img, dm_gaddr_t leaf);
/* SCAN cursors (scan.c has why): a decimal below 2^53 made of the leaf's offset in 64-byte
 * units (34 bits), its node number (c->node_bits) and a keyed check in the bits left.
 * ch_cursor_of: the cursor that names leaf, 0 for none. ch_cursor_leaf: the leaf a cursor
 * names, 0, or DM_EINVAL when its check fails, it names gaddr 0 or its node is not below
 * n_nodes (the leaf itself is checked by its tag once read). */
uint64_t ch_cursor_of(const dm_chime_t *c, dm_gaddr_t leaf);
int ch_cursor_leaf(const dm_chime_t *c, unsigned n_nodes, uint64_t cur, dm_gaddr_t *leaf);

/* Leaf consistency checks on an image (§4.1): reads is the list of byte ranges fetched.
 * Returns 0 when every NV seen agrees and (if home >= 0) home's bitmap matches the entries
 * fetched in its neighborhood. */
int ch_leaf_check(const ch_geo_t *g, const uint8_t *img, const uint8_t *have, int home);
/* Is a whole-leaf image untorn: one NV, and every home's bitmap equal to its entries? */
int ch_leaf_consistent(const ch_geo_t *g, const uint8_t *img);

/* A move right from left to right on a descent whose parent was read fresh: left's parent
 * lacks the separator of right (a split not yet propagated). The first sighting of (left,
 * right) is remembered; one at least the repair delay later (5 s, beyond a live splitter's
 * lease; DMKV_SEP_REPAIR_MS in tests) inserts the separator sep (left's high fence key)
 * with ch_propagate, as a splitter that died mid-propagation never will (issue 12). Safe
 * against a splitter that is alive after all: the insert links a separator once. Counts
 * every move in ch_stats.right_moves. Returns 0 or DM_E* (a failed repair is retried at
 * the next sighting). */
int ch_repair_half_split(dm_ctx_t *ctx, dm_gaddr_t left, dm_gaddr_t right, const uint8_t *sep,
                         uint32_t seplen);

/* Process-wide counters. */
typedef struct ch_counters {
    uint64_t cache_nodes, cache_bytes, hot_lookups, hot_hits, leaf_splits, inner_splits, roots,
        scan_pages, scan_rtts, lock_waits, takeovers, right_moves, sep_repairs, share_holds,
        share_joins, share_joins_direct, share_splits;
} ch_counters_t;
extern ch_counters_t ch_stats;
static inline void ch_count(uint64_t *c, uint64_t n)
{
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

#endif
