/* ROLEX internals shared by the files of dmcore/rolex/.
 *
 * Pool layout (little-endian; sizes in bytes):
 *
 * Root (RX_ROOT_BYTES = 64, fixed for the index's life; its gaddr is the index's root):
 *   [0]  u64 magic  [8] u64 model word: version << 1 | slot, the current model (version v
 *        lives in arena slot `slot`); only a retrainer changes it (retrain.c), gateways read
 *        it, in the batch of every operation's predicted leaves (sync.c)
 *   [16] u64 primaries (L: leaves 0..L-1, the chain heads, laid out by the build)
 *   [24] u64 model arena gaddr: two slots of rx_slot_bytes(capacity) each, written only by
 *        the one retrainer of the index (retrain.c: why two, and why no allocation)
 *   [32] u64 eps (LT positions)  [40] u64 leaf region gaddr
 *   [48] u64 alloc_num: leaves taken from the leaf region (FAA; primaries first)
 *   [56] u64 capacity: leaves the region holds
 *
 * Model (RX_MODEL_HDR + 32 * segments + 16 * entries, at most rx_slot_bytes(capacity): the
 * LT lists each leaf at most once; written whole into the slot the model word does not
 * name, then the word swung to it; rewritten two retrains later):
 *   [0]  u64 magic  [8] u64 version (1 at build, +1 per retrain)  [16] u64 entries (n, the
 *   LT's length)  [24] u64 segments  [32] u64 root (back pointer)  [40] u64 taken: the
 *   root's alloc_num when its chains were read (the trigger's base: host.c)  [48] u64 sum:
 *   checksum over [8, 48) and the body (a reader of a slot being rewritten reads again)
 *   [56] u64 asks: writers' requests for a retrain of this model, FAA by gateways whose walk
 *        was long (host.c; outside the checksum, 0 when written)
 *   [64] segments, 32 bytes each, ascending: u64 first image, u64 first position,
 *        u64 last position, f64 slope (positions per image unit).
 *   A segment predicts pos(x) = first position + slope * (x - first image), clamped to
 *   [first position, last position]; the segment of x is the last whose first image <= x.
 *   Then the leaf table (LT), n entries of 16 ascending by low: u64 low image, u32 leaf
 *   number, u32 head (the leaf number of the chain head whose lock covers this leaf).
 *   Entry e covers images [low(e), low(e + 1)). Every head is an entry, with low = its
 *   leaf's lo; a synonym leaf promoted by a retrain is an entry with head != leaf.
 *
 * Leaf region (RX_LEAF_BYTES * capacity): leaf i at region + i * RX_LEAF_BYTES. The heads
 * are 0..L-1 in key order; synonym leaves follow, taken by FAA on alloc_num (ROLEX §3.3:
 * no RPC, no memory-node CPU). One block: one memory node, whose verbs run in posting order.
 *
 * Leaf (RX_LEAF_BYTES = 48 + 16 * 48 = 816):
 *   [0]  u64 lock: 0 free, else lease token << 1 | 1 (dmkv/lease.h). A chain head's guards
 *        the chain's leaves of label 0; a promoted leaf T's, once a writer cut it off
 *        (domain.c), the leaves of label T + 1 (the paper's LT entry lock, which covers the
 *        entry's synonyms too).
 *   [8]  u64 low image of the chain: its head covers keys with lo(h) <= image < lo(h + 1);
 *        lo(0) = 0. Immutable; every synonym leaf repeats its head's, promoted or not (a
 *        promoted leaf's own low lives in the LT: a leaf serves every model at once).
 *   [16] u64 next: gaddr of the next synonym leaf, 0 = end of chain
 *   [24] u32 count: entries in use (a prefix, sorted by key; the chain's leaves in chain
 *        order are sorted as a whole: every key of a leaf is below every key of the leaves
 *        after it, empty leaves aside)
 *   [28] u32 label: the leaf's lock domain (domain.c): 0, the chain head's; else leaf
 *        number + 1 of the leaf whose lock word guards it (0 in pools built before domains:
 *        the u64 count's upper half)
 *   [32] u64 checksum over [16, 32) and [40, 816) (a reader re-reads a torn leaf)
 *   [40] u64 version: +1 on every write of the leaf's body (rx_put_body; WATCH signatures
 *        of the range role), 0 in a build
 *   [48] 16 entries of 48: u16 key length (bit 15: RX_PENDING, the range role's pending
 *        flag), then a short key (length <= 46 = DM_ROLEX_INLINE) whole, zero padded, or
 *        for a long key (47..32767 bytes): its first 30 bytes (RX_PREFIX), u64 XXH3 of the
 *        whole key (rx_key_hash), u64 gaddr of its key record (below)
 *   A writer holding the lock rewrites [16, 816) with one WRITE.
 *
 * Key record (dmkv/key_record.h, CHIME's format and code, shared): u32 magic, u32 length,
 * u64 XXH3 of the key, the key; 64-byte units from the worker's allocator, anywhere in the
 * pool. Immutable. Written so that it lands before the leaf WRITE that names it: in the
 * same batch, ahead of it, when the record is on the leaf region's memory node (one node's
 * verbs run in posting order; the batch may ride with the point role's: no RTT), else in a
 * batch of its own, waited for, before (1 RTT: two nodes' verbs are not ordered); freed
 * with the allocator's quarantine (DM_GRACE_US, longer than any operation lives:
 * dm_ctx_check) after the WRITE that drops its last entry (remove, unlock(0), a settle), or
 * when an insert gives up with nothing sent. A copy a shift cut short left names the same
 * record: it is freed only when no entry of the run (or, for a settle, of the chain) names
 * it. Readers check magic, length and hash (dm_keyrec_read: torn or freed, read again, then
 * DM_ECORRUPT) and that it is their entry's key (length, prefix and entry hash agree),
 * never trusting a length they read.
 *
 * Order (leaves, chains, scans; "the order"): compare the first 30 bytes (memcmp, the
 * shorter first when a key is under 30 bytes); with those equal, short keys come before
 * long ones; two short keys compare by the rest memcmp-style; two long ones by their entry
 * hash, then length, then bytes (only the last needs the records). Why: among short keys
 * it is memcmp order, so pools built before long keys read the same; it is decided from
 * the entries alone unless two long keys agree in prefix, hash and length, which for
 * distinct keys takes a 64-bit hash collision (tests force one: rx_hash_hook); and it
 * refines the 8-byte image order (a < b gives image(a) <= image(b): the first criterion
 * covers the image's bytes), so models, LT, chains and the scans' guarantees stand as they
 * were. It is not memcmp order inside a 30-byte group: Redis's SCAN promises no order, and
 * a prefix seek with a prefix over 30 bytes starts at its 30-byte group and lets the
 * gateway filter (range_read.c); dm_rolex_scan returns the order.
 *
 * Equality of a searched key with a long entry (same prefix, hash and length) is confirmed
 * from the entry's record, never assumed from the hash: a false match would make an insert
 * skip the key and a SCAN miss it. rx_probe_t carries the key and the records' answers;
 * rx_probe_prepare reads the records of all entries of the leaves at hand that tie with the
 * key in one batch (1 RTT, only when one ties: a search for a present long key, or a
 * collision), and the pure searches of leaf_image.c then consult the answers. Scans (which
 * return whole keys) and settles read the records of the long entries they return or probe,
 * a batch at a time.
 *
 * Invariants: a key lives in the chain of the head covering its image; chains are never
 * cut (no leaf is unlinked, moved or copied; lock domains, domain.c, only label leaves). Within a
 * chain a key moves only forward (an insert shifts keys into the next leaves or splits a leaf into
 * a new one linked after it; the later leaf is written first), so a reader walking the chain that
 * sees each leaf at some instant sees every key present throughout, and a search may stop at the
 * first leaf whose last key is above its key. An insert puts its key into the leaf of its successor
 * (the first leaf whose last key is above it), or into the chain's last leaf when it has
 * none (insert.c). Hence for every LT entry e of every model: every key of e's chain whose
 * image is >= low(e) is in leaf(e) or after it (I(e), retrain.c argues it), so a search
 * walks forward from leaf(e) alone, and a model never goes wrong while the leaves change.
 *
 * Deviations from the paper (why):
 *  - Models predict the LT position covering an image (trained over the entries' low
 *    images), not a slot position divided by delta: leaves are never re-split, and keys
 *    with equal images must stay in one chain. Clamping to the segment and a monotone
 *    slope bound any image's covering position j to ceil(f - eps - 1) <= j <= floor(f + eps).
 *  - The LT holds each entry's low image and head too, and gateways cache all of it
 *    (16 bytes a leaf): a promoted synonym's low cannot live in its leaf.
 *  - No SLT in the pool: synonyms are linked from their leaf; a search pays one RTT per
 *    synonym hop past the leaves of its window (the paper's cached SLT reads them in the
 *    first batch). Retraining promotes synonyms to LT entries; the chains stay linked. Each
 *    handle keeps the synonyms its locked walks read, with image and key bounds, so a lock
 *    starts next to its key (slt.c); lock-free searches do not use them.
 *  - Retraining takes no lock (retrain.c): synonyms made meanwhile are linked after a leaf
 *    the new LT reaches, and I(e) holds for every new entry from the moment it was read.
 *  - Retraining is whole-index and hosted by node 0's memory node (host.c, memnode/
 *    mn_retrainer.c), triggered by the growth of alloc_num it polls, not by a CirQ that
 *    compute nodes append to. A model goes into one of two fixed arena slots per index, not
 *    into allocated space: the host must not FAA node 0's alloc_ptr, which gateways FAA by
 *    RNIC (CPU and RNIC atomics do not mix); models carry a checksum and the model word its
 *    version, so a load of a slot being rewritten is seen and read again.
 *  - Compute nodes notice a new model by the model word read in the batch of every
 *    operation's predicted leaves and load it after the operation (sync.c); the paper says
 *    only that they update the cached models on seeing the model pointer change.
 *  - Chains are kept sorted as the paper's are, but keys move only forward: a full leaf
 *    shifts its last key into the next leaf with room (up to 4 leaves on) or splits into a
 *    new leaf after it, and never gives keys to an earlier leaf (a reader walking forward
 *    would miss them). Scans still sort and deduplicate each chain's keys (leaves are read
 *    at different instants).
 *  - Keys are byte strings stored inline (<= 46 bytes) or, longer, in key records named by
 *    their entries (up to 32767 bytes), not 8-byte integers, and a leaf holds keys only
 *    (values live in the point index).
 *  - The build fills primaries to cfg.fill (12 of 16) to leave room for inserts.
 *  - No reclaiming queue for emptied leaves (§3.3): removes never empty a chain out, and
 *    a head stays an LT entry even when empty.
 *  - The upper model is a binary search over the cached segments.
 */
#ifndef DMKV_ROLEX_INTERNAL_H
#define DMKV_ROLEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dmkv/batch.h"
#include "dmkv/lease_lock.h"
#include "dmkv/rolex.h"

#define RX_MAGIC 0x33584c4f52534d44ull       /* "DMSROLX3" (the root; 3: model arena) */
#define RX_MODEL_MAGIC 0x4c444f4d58524d44ull /* "DMRXMODL" */
#define RX_ROOT_BYTES 64ull
#define RX_MODEL_HDR 64ull
#define RX_SEG_BYTES 32ull
#define RX_LT_BYTES 16ull
#define RX_OFF_MODEL 8ull
#define RX_OFF_ALLOC 48ull
#define RX_ENTRY_BYTES 48u
#define RX_LEAF_HDR 48u
#define RX_LEAF_BYTES (RX_LEAF_HDR + DM_ROLEX_SLOTS * RX_ENTRY_BYTES)
#define RX_LEAF_BODY 16u /* the WRITE of a locked leaf starts here */
/* Hops before a chain is taken as corrupt (a cycle): an index built empty is one chain. */
#define RX_CHAIN_MAX (1u << 26)
#define RX_EPS_MAX 16u /* window of 2 eps + 2 leaves fits one batch */
#define RX_OFF_ARENA 24ull
#define RX_LOAD_TRIES 64u /* model loads that found their slot rewritten, before DM_ERETRY */

typedef struct rx_root {
    uint64_t magic, model, primaries, arena, eps, region, alloc_num, capacity;
} rx_root_t;

typedef struct rx_mhdr {
    uint64_t magic, version, entries, segments, root, taken, sum, asks;
} rx_mhdr_t;

typedef struct rx_seg {
    uint64_t first_img, first_pos, last_pos;
    double slope;
} rx_seg_t;

typedef struct rx_lt {
    uint64_t lo;
    uint32_t leaf, head;
} rx_lt_t;

typedef struct rx_entry {
    uint16_t len;
    char key[DM_ROLEX_INLINE]; /* a short key whole; a long one: RX_PREFIX bytes, hash, rec */
} rx_entry_t;

/* The entry's length word: the key's bytes, and RX_PENDING on an entry of the range role
 * (range.c) whose key's presence in the point index is not settled yet. */
#define RX_PENDING 0x8000u
#define RX_LEN_MASK 0x7fffu
#define RX_PREFIX 30u   /* key bytes a long entry holds */
#define RX_OFF_HASH 30u /* in a long entry's key[]: u64 rx_key_hash of the whole key */
#define RX_OFF_REC 38u  /* u64 gaddr of its key record */
static inline unsigned rx_elen(const rx_entry_t *e)
{
    return e->len & RX_LEN_MASK;
}
/* A long entry: its key is over DM_ROLEX_INLINE bytes and lives in a key record. */
static inline int rx_elong(const rx_entry_t *e)
{
    return rx_elen(e) > DM_ROLEX_INLINE;
}
/* An entry's 8-byte image (its key's first 8 bytes, big-endian: dm_rolex_image). */
static inline uint64_t rx_eimage(const rx_entry_t *e)
{
    return dm_rolex_image(e->key, rx_elen(e));
}
static inline uint64_t rx_ehash(const rx_entry_t *e)
{
    uint64_t h;
    memcpy(&h, e->key + RX_OFF_HASH, 8);
    return h;
}
static inline dm_gaddr_t rx_erec(const rx_entry_t *e)
{
    dm_gaddr_t a;
    memcpy(&a, e->key + RX_OFF_REC, 8);
    return a;
}
/* Key bytes of e held inline (the whole key, or RX_PREFIX of a long one). */
static inline unsigned rx_einline(const rx_entry_t *e)
{
    return rx_elong(e) ? RX_PREFIX : rx_elen(e);
}

typedef struct rx_leaf {
    uint64_t lock, lo, next;
    uint32_t count, label;
    uint64_t sum, reserved;
    rx_entry_t e[DM_ROLEX_SLOTS];
} rx_leaf_t;

_Static_assert(sizeof(rx_entry_t) == RX_ENTRY_BYTES, "entry layout");
_Static_assert(sizeof(rx_leaf_t) == RX_LEAF_BYTES, "leaf layout");
_Static_assert(sizeof(rx_root_t) == RX_ROOT_BYTES, "root layout");
_Static_assert(sizeof(rx_mhdr_t) == RX_MODEL_HDR, "model header layout");
_Static_assert(sizeof(rx_seg_t) == RX_SEG_BYTES, "segment layout");
_Static_assert(sizeof(rx_lt_t) == RX_LT_BYTES, "LT entry layout");

/* What a handle caches of the root and its model (as read at open; alloc_num is not kept:
 * read the pool's). */
typedef struct rx_view {
    uint64_t primaries, entries, segments, eps, region, capacity, version, arena, taken;
} rx_view_t;

struct dm_rolex {
    dm_gaddr_t root;
    uint64_t model; /* the model word of the cached model (version << 1 | slot) */
    rx_view_t hdr;
    rx_seg_t *segs;
    rx_lt_t *lt;
    uint64_t *pos_of;   /* leaf << 32 | LT position, ascending (rx_leaf_pos); NULL until built */
    struct rx_slt *slt; /* synonyms learned by this handle's walks, ascending (slt.c) */
    uint64_t nslt;
    uint32_t *dom; /* dom[leaf]: the leaf's label as this handle last read it (domain.c) */
    uint64_t ndom;
    int pinned;     /* dm_rolex_follow(r, 0): keeps its model, reads no model word */
    uint64_t asked; /* the model word this handle asked a retrain of (host.c), 0 none */
};

/* model.c */
/* Greedy PLA (a shrinking cone from each segment's first point) over n strictly ascending
 * images x[i] -> position i, error eps positions. segs holds n; returns the segments
 * written. */
uint64_t rx_train(const uint64_t *x, uint64_t n, unsigned eps, rx_seg_t *segs);
/* The predicted position (real) of image x. */
double rx_predict(const rx_seg_t *segs, uint64_t nsegs, uint64_t x);
/* LT positions [*a, *b] that hold the covering entry of x. */
void rx_window(const dm_rolex_t *r, uint64_t x, uint64_t *a, uint64_t *b);
/* 0 when every entry's low predicts a window holding it (the bound the readers rely on),
 * else DM_ECORRUPT. */
int rx_check_model(const dm_rolex_t *r);

/* leaf_image.c: the order (see "Order" above) and the pure searches of a leaf. */
/* The hash a long entry keeps: XXH3_64bits of the whole key, or rx_hash_hook's (tests: a
 * forced tie). */
uint64_t rx_key_hash(const void *key, size_t len);
extern uint64_t (*rx_hash_hook)(const void *key, size_t len);
/* A key as the order sees it: its first bytes (p: the whole key when full is set or len <=
 * DM_ROLEX_INLINE, else RX_PREFIX bytes), its length, its hash (long keys) and, when known,
 * its whole bytes. */
typedef struct rx_kview {
    const uint8_t *p;
    size_t len;
    uint64_t hash;
    const uint8_t *full;
} rx_kview_t;
#define RX_CMP_RECORD 2 /* only the keys' records can tell (equal prefix, hash and length) */
/* a vs b in the order: -1, 0, 1, or RX_CMP_RECORD when both are long, alike up to their
 * records, and one's full bytes are not known. */
int rx_kview_cmp(const rx_kview_t *a, const rx_kview_t *b);
rx_kview_t rx_entry_view(const rx_entry_t *e);
rx_kview_t rx_key_view(const void *key, size_t len); /* hash computed when long */
/* A key searched for in leaves, and what the records it tied with said (entry vs key). */
typedef struct rx_probe {
    const uint8_t *key;
    size_t len;
    uint64_t hash;
    unsigned n, cap;
    dm_gaddr_t *rec;
    int8_t *cmp;
    unsigned miss; /* compares that met a tie no rec[] resolves (taken as "entry above") */
} rx_probe_t;
void rx_probe_init(rx_probe_t *p, const void *key, size_t len);
void rx_probe_free(rx_probe_t *p);
/* Record that the key of record rec compares c (-1, 0, 1) with p's key. 0 or DM_ENOMEM. */
int rx_probe_set(rx_probe_t *p, dm_gaddr_t rec, int c);
/* Entry e vs p's key (-1, 0, 1); a tie p has no answer for counts a miss and gives 1. */
int rx_entry_cmp(const rx_entry_t *e, rx_probe_t *p);
/* 1 when e ties with p's key and p has no answer for its record. */
int rx_probe_needs(const rx_probe_t *p, const rx_entry_t *e);
/* Read the records of the entries of leaves l[0..n) that tie with p's key (a long key
 * alike in prefix, hash and length: the key itself, or a collision) and p has no answer
 * for, in one batch (1 RTT; none when no entry ties), checked against their entries.
 * Returns 0, DM_ECORRUPT (a record unreadable, or of another key) or DM_E*. */
int rx_probe_prepare(dm_ctx_t *ctx, rx_probe_t *p, const rx_leaf_t *l, unsigned n);
/* The records of the long entries e[0..n) (recs[i] 0 for the short ones): keys[i] malloc'd
 * (NULL for short ones), checked against their entries (length, prefix, hash). One batch of
 * up to DM_BATCH_MAX records at a time. 0, DM_ECORRUPT or DM_E*; on error nothing is left
 * allocated. */
int rx_entries_read(dm_ctx_t *ctx, const rx_entry_t *const *e, unsigned n, uint8_t **keys);
/* Set e for key (len bytes; rec: its record when len > DM_ROLEX_INLINE) with flags. */
void rx_entry_set(rx_entry_t *e, const void *key, size_t len, uint16_t flags, dm_gaddr_t rec);

/* leaf.c */
dm_gaddr_t rx_leaf_addr(const dm_rolex_t *r, uint64_t i);
/* DM_ECORRUPT, after a warning in the process's log naming the check that failed (file, line
 * and what it found): ROLEX returns DM_ECORRUPT from many checks, and an error reply alone
 * does not say which. Rate-limited (the first 64 lines, then one in 1024). */
int rx_corrupt_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define RX_CORRUPT(...) rx_corrupt_at(__FILE__, __LINE__, __VA_ARGS__)
/* The number of the leaf at gaddr at: 0, or DM_ECORRUPT when at is no leaf of r's region. */
int rx_leaf_no(const dm_rolex_t *r, dm_gaddr_t at, uint64_t *leaf);
uint64_t rx_leaf_sum(const rx_leaf_t *l);
int rx_leaf_ok(const rx_leaf_t *l);
/* memcmp order, shorter prefix first. */
int rx_key_cmp(const void *a, size_t alen, const void *b, size_t blen);
/* Index in l of p's key, or -(insertion point) - 1 (prepare l first: rx_probe_prepare). */
int rx_leaf_find(const rx_leaf_t *l, rx_probe_t *p);
/* 1 when l's last key is above p's key: key is not in a leaf after l (sorted chains). */
int rx_leaf_above(const rx_leaf_t *l, rx_probe_t *p);
/* Read leaves numbered [a, b] in one batch (b - a < DM_BATCH_MAX), re-reading torn ones. */
int rx_read_leaves(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t a, uint64_t b, rx_leaf_t *out);
/* Read the leaves of LT positions [a, b] of r's model now in one batch, ascending, re-reading
 * torn ones (the same leaves if the model changes meanwhile); with
 * model non-NULL (then b - a < DM_BATCH_MAX - 1), the root's model word too, in the batch. */
int rx_read_positions(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t a, uint64_t b, rx_leaf_t *out,
                      uint64_t *model);
/* Read one leaf at gaddr, re-reading a torn one. */
int rx_read_leaf(dm_ctx_t *ctx, dm_gaddr_t at, rx_leaf_t *out);
/* The chains of k leaves (heads, already read), one batch per hop over all of them. out[i]
 * is malloc'd (n[i] leaves, heads[i] first). */
int rx_read_chains(dm_ctx_t *ctx, const rx_leaf_t *heads, unsigned k, rx_leaf_t **out, unsigned *n);

/* A window: the leaves of LT positions [a, e] read in one batch (ascending, so in chain
 * order in time), j the position covering the image asked for (a <= j <= b <= e).
 *
 * Positions are the cached model's: the coroutines of a worker share its handle, and one of
 * them may load a new model (rx_notice) while another is parked on a read. Whoever holds
 * positions across a read compares gen with r->model after it and drops them (reads alone,
 * or starts again) when the model moved on (CI of 39b1e74: a SCAN read past a new LT). */
typedef struct rx_win {
    uint64_t a, b, e, j;
    rx_leaf_t *buf; /* malloc'd: position p's leaf is buf[p - a] */
    uint64_t model; /* the root's model word read in the same batch (0: pinned handle) */
    uint64_t gen;   /* r->model whose positions a, b, e and j are */
} rx_win_t;
/* Read the window of image x and `extra` positions after it (at most DM_BATCH_MAX - 1 in
 * all) and, unless r is pinned, the root's model word (step 4 of DESIGN.md's plan): 1 RTT,
 * another when r's model changed during the read (positions of r's model on return: gen ==
 * r->model). Returns 0 (free w->buf; pass w->model to rx_notice once done) or DM_E*;
 * DM_ECORRUPT when the model's bound failed, DM_ERETRY when the model changed at every one of
 * RX_LOAD_TRIES reads. */
int rx_win_read(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t x, uint64_t extra, rx_win_t *w);
/* The leaf after *p's in w, when it is position *p + 1's leaf of the same chain: a walker
 * that has read nothing since the window may take it (its reads stay in chain order in
 * time). Advances *p and returns it, else NULL (also when r's model is no longer w's). */
const rx_leaf_t *rx_win_next(const dm_rolex_t *r, const rx_win_t *w, uint64_t *p);
/* The LT position of leaf number `leaf` in r's model, or -1 when no entry names it (a synonym
 * not promoted yet). O(log n) over r->pos_of. */
int64_t rx_leaf_pos(const dm_rolex_t *r, uint64_t leaf);
/* Build r->pos_of for r's LT (after the LT changed): 0 or DM_ENOMEM (then rx_leaf_pos
 * answers -1 for every leaf: correct, only slower). */
int rx_pos_build(dm_rolex_t *r);
/* The LT position covering image x, from r's cached model alone (no read): 0, or
 * DM_ECORRUPT when the model's error bound failed. */
int rx_cover(const dm_rolex_t *r, uint64_t x, uint64_t *j);
/* The covering LT position of image x and its leaf (1 RTT); *leaf its leaf number. */
int rx_locate(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t x, uint64_t *leaf, rx_leaf_t *out);

/* insert.c: a chain's leaves read under its lock, from an entry's leaf on (v[0..n), ad[]
 * their gaddrs), and the changes made to it. */
typedef struct rx_run {
    rx_leaf_t *v;
    dm_gaddr_t *ad;
    unsigned n, cap;
    rx_probe_t *pr;      /* the key the run is read for: every leaf read is prepared for it */
    uint32_t label;      /* its leaves' lock domain (v[0]'s label, domain.c) */
    dm_gaddr_t beyond;   /* the leaf after the run, of another label (0: none read) */
    uint32_t beyond_lab; /* that leaf's label */
} rx_run_t;
/* Append src's leaves to dst (a walk kept over several runs): 0 or DM_ENOMEM. */
int rx_run_append(rx_run_t *dst, const rx_run_t *src);
/* Read the leaf after the run's last (1 RTT, +1 when it holds an entry tying with the key). */
int rx_run_more(dm_ctx_t *ctx, rx_run_t *c);
/* 1 when the run reaches the end of its chain or of its lock domain (beyond set). */
int rx_run_complete(const rx_run_t *c);
/* Where the key goes: the first leaf of the run whose last key is above key (its
 * successor's leaf), or n when there is none. */
unsigned rx_run_place(const rx_run_t *c);
/* Prepare the run's leaves for its key, then read on until the run holds key's successor's
 * leaf or the chain's end (1 RTT a leaf). */
int rx_run_read(dm_ctx_t *ctx, rx_run_t *c);
/* Position of the key in leaf *k of the run (the first leaf holding it), or -1. */
int rx_run_find(const rx_run_t *c, unsigned *k);
void rx_run_free(rx_run_t *c);
/* The body of leaf l (next, count, version, checksum, entries) to at, in b; the leaf's
 * version (its reserved word) goes up by one. */
void rx_put_body(dm_batch_t *b, dm_gaddr_t at, rx_leaf_t *l);
/* Add the run's key (absent from the run, read by rx_run_read) with flags (RX_PENDING or
 * 0) and rec (its key record, written already, when it is long) to the run under its lock:
 * the leaves' WRITEs go into b, in the order they must land (a new leaf before the link to
 * it), pointing into the run (it must stay as it is until b is posted). May read leaves (to
 * shift into) and take a synonym leaf (FAA). 0 or DM_E*. */
int rx_run_add(dm_ctx_t *ctx, dm_rolex_t *r, dm_batch_t *b, rx_run_t *c, uint16_t flags,
               dm_gaddr_t rec);
/* The key record of a long key written (1 RTT; +1 for a chunk): a build's. */
int rx_rec_write(dm_ctx_t *ctx, const void *key, size_t len, dm_gaddr_t *rec);
/* The key record of a long key for an insert under the lock: allocated (*rec; 0 when the
 * allocation failed) and built into *buf (malloc'd: free it once b is sent, or given up);
 * its WRITE put first into b when it is on the leaf region's memory node (one node's verbs
 * run in posting order: it lands before the leaf WRITEs added after it, no RTT), else
 * written now and waited for (1 RTT). 0 or DM_E* (with *rec set: give it back). */
int rx_rec_stage(dm_ctx_t *ctx, const dm_rolex_t *r, dm_batch_t *b, const void *key, size_t len,
                 dm_gaddr_t *rec, uint8_t **buf);
/* Key records written and freed by this process (relaxed atomics; INFO, tests). */
extern uint64_t rx_recs_written, rx_recs_freed;
/* The most leaves this process saw taken from a leaf region (INFO rolex_leaves_taken). */
extern uint64_t rx_leaves_taken;
/* *c = max(*c, v), a relaxed atomic (counters read by INFO). */
static inline void rx_max(uint64_t *c, uint64_t v)
{
    uint64_t o = __atomic_load_n(c, __ATOMIC_RELAXED);
    while (v > o && !__atomic_compare_exchange_n(c, &o, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}
/* Give back the record of a long entry no leaf names any more (quarantined). */
void rx_rec_free(dm_ctx_t *ctx, const rx_entry_t *e);
/* The same for the record of len bytes of key at rec that an insert gave up. */
void rx_rec_give_back(dm_ctx_t *ctx, dm_gaddr_t rec, size_t len);
/* 1 when a long entry of the run names e's record (a copy a cut shift left). */
int rx_run_names(const rx_run_t *c, const rx_entry_t *e);
/* Remove entry pos of the run's leaf k, its WRITE into b (its record, if any, is the
 * caller's to free once the WRITE is sent). */
void rx_run_drop(dm_batch_t *b, rx_run_t *c, unsigned k, unsigned pos);

/* layout.c */
/* Give back the blocks of an index built and never published (no reader knows its root: a
 * gateway that lost the race to record its own). */
void rx_discard(dm_ctx_t *ctx, dm_gaddr_t root);
/* Bytes of one arena slot: the largest model (every leaf an LT entry and a segment). */
uint64_t rx_slot_bytes(uint64_t capacity);
/* The gaddr of the slot that model word `word` names. */
dm_gaddr_t rx_model_addr(const dm_rolex_t *r, uint64_t word);

/* host.c: the writers' side of the retrain trigger. A walk under a lock that read the n
 * leaves v in chain order, RX_ASK_WALK or more, over more than one 8-byte image (a run of one
 * image no model can split), asks the host to retrain r's model: an FAA on the model's asks
 * word, in a batch of its own posted without waiting (no round trip), once per handle and
 * model. */
#define RX_ASK_WALK 32
void rx_ask_retrain(dm_ctx_t *ctx, dm_rolex_t *r, const rx_leaf_t *v, uint64_t n);
extern uint64_t rx_retrain_asks; /* asks posted, this process (relaxed atomics) */
/* The checksum of model header h (its [8, 48)) and body (segments, LT: len bytes). */
uint64_t rx_model_sum(const rx_mhdr_t *h, const void *body, uint64_t len);
/* Read the model that word names (header, then segments and LT: 2 RTTs) into r. DM_ERETRY
 * when its slot holds another version or fails its checksum (rewritten since the word was
 * read: read the word again), DM_ECORRUPT, or DM_E*; r unchanged on error. */
int rx_load_model(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t word);
/* Write model `version` (segs, lt; taken: the alloc_num its chains were read at) into slot
 * `slot` of r's arena (1 RTT per 4 MB). Not yet published. */
int rx_write_model(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t version, unsigned slot,
                   uint64_t taken, const rx_seg_t *segs, uint64_t ns, const rx_lt_t *lt,
                   uint64_t n);

/* sync.c */
/* Load the model word names into r, reading the root's word again while its slot was
 * rewritten meanwhile (RX_LOAD_TRIES): 1 loaded, 0 r already had it, DM_E* (r keeps its
 * model). 2 RTTs, +1 per retry. */
int rx_sync_model(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t word);
/* After an operation that read the model word (0: not read) with its predicted leaves:
 * a word other than r's loads the new model (ROLEX §3.5's lazy synchronisation, counted in
 * dm_rolex_stats). The operation's result stands either way. */
void rx_notice(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t word);

/* slt.c: synonym leaves learned from walks under a lock (see the file). An entry bounds the
 * keys its leaf starts: those of image >= lo (klen 0), or those >= key (a short key, of
 * image lo). */
typedef struct rx_slt {
    uint64_t lo;
    uint32_t leaf, head;
    uint16_t klen;
    char key[DM_ROLEX_INLINE];
} rx_slt_t;
/* The learned leaf to start from for the probe's key (of image x) when LT entry e covers it:
 * 1, *out (the leaf, its chain's head and an image bound that holds at it) and *bound (the
 * entry) when an entry of e's chain admits the key and starts closer than e, else 0. */
int rx_slt_find(const dm_rolex_t *r, const rx_probe_t *key, uint64_t x, const rx_lt_t *e,
                rx_lt_t *out, rx_slt_t *bound);
/* Learn from a walk of start's chain: v[0..n) (gaddrs ad[]) read in chain order, each after
 * the one before, v[0] start's leaf (image bound start->lo, head start->head; bound: the
 * learned entry the walk started from, or NULL). */
void rx_slt_learn(dm_rolex_t *r, const rx_lt_t *start, const rx_slt_t *bound, const rx_leaf_t *v,
                  const dm_gaddr_t *ad, unsigned n);
/* Learned entries moved past a run of empty leaves (slt_skip_run), this process (relaxed
 * atomics; INFO rolex_slt_run_skips). */
extern uint64_t rx_slt_skips;

/* retrain.c */
/* dm_rolex_retrain; hosted: called by the index's host (host.c), which may retrain a root
 * recorded in node 0's rolex_root. */
int rx_retrain(dm_ctx_t *ctx, dm_gaddr_t root, int hosted, dm_rolex_retrain_stats_t *st);

/* domain.c: lock domains, the leaves one lock word guards (see the file). */
/* The lock head (a leaf number) of a leaf whose label is `label`, in the chain of primary
 * head `primary`. */
static inline uint64_t rx_dom_head(uint32_t label, uint64_t primary)
{
    return label ? label - 1u : primary;
}
/* The label of the leaves head `head` guards (0 for a chain's primary head). */
static inline uint32_t rx_dom_label_of(const dm_rolex_t *r, uint64_t head)
{
    return head < r->hdr.primaries ? 0u : (uint32_t)(head + 1);
}
/* The lock head to take for start leaf `leaf` of the chain of primary `primary`: by the
 * label this handle last read for it, else the primary. */
uint64_t rx_dom_guess(const dm_rolex_t *r, uint64_t leaf, uint64_t primary);
/* 1 when `label` names no leaf of r's region (a torn or forged header). */
static inline int rx_dom_label_bad(const dm_rolex_t *r, uint32_t label)
{
    return label && label - 1u >= r->hdr.capacity;
}
/* Under the lock of head *head, with the start leaf v[0] read under it: read the run
 * (rx_run_read) unless v[0]'s label names another lock, and remember the labels read.
 * Returns 0 when the key's place lies in the run (do the operation); 1 when the lock is
 * the wrong one or the key's place is past the run's stretch: *start and *head are where to
 * go (unlock, lock *head, read from *start); DM_ECORRUPT for a label naming no leaf, or
 * DM_E* from the reads. */
int rx_dom_read(dm_ctx_t *ctx, dm_rolex_t *r, rx_run_t *c, uint64_t primary, uint64_t *start,
                uint64_t *head);
/* A cut (domain.c): start leaf v[0] of the run, a promoted leaf T in the lock domain held,
 * and the leaves after it up to the next LT entry's leaf become domain T + 1: their new
 * label and checksum written into b (after whatever b holds for them; b points into the
 * run). Only when T is an LT entry of r's model, not a head, the stretch ends within the run
 * or RX_CUT_READS more leaves (read now: call before b points into the run), and b has room.
 * Returns the leaves relabeled (0: no cut) or DM_E*. */
int rx_dom_cut_read(dm_ctx_t *ctx, dm_rolex_t *r, rx_run_t *c, uint64_t held);
void rx_dom_cut_write(dm_rolex_t *r, dm_batch_t *b, rx_run_t *c, unsigned leaves);
/* Lock switches an operation makes before DM_ECORRUPT: each moves forward in the chain (a
 * walk over stretches of other locks costs a switch a stretch, as it cost a hop a leaf). */
#define RX_DOM_TRIES RX_CHAIN_MAX
/* 1 (default): writers of the range role cut; DMKV_ROLEX_CUTS=0 in the environment turns
 * cuts off (benchmarks: the one-lock-per-chain design in the same build). */
int rx_dom_cutting(void);

/* lease.c */
typedef dm_lease_hold_t rx_hold_t; /* until_us: no write is sent after it */
extern uint32_t rx_lease_ms, rx_hold_ms;
/* Test hook: returns nonzero at site to make the caller "die" there (its lock stays held). */
extern int (*rx_test_hook)(int site);
enum { RX_SITE_LOCKED = 1 };
/* Take the lock of the head leaf at addr (waits; takes a dead holder's lease over) and,
 * with leaf non-NULL, read the leaf in the same batch, after the CAS. */
int rx_lock(dm_ctx_t *ctx, dm_gaddr_t addr, rx_hold_t *hd, rx_leaf_t *leaf);
int rx_unlock(dm_ctx_t *ctx, const rx_hold_t *hd);

#endif
