/* SepHash internals shared by layout.c, search.c, append.c, merge.c and split.c.
 *
 * Pool layout (all little-endian; sizes in bytes):
 *
 * Table header, at the root (SH_TABLE_BYTES = 64 + 8 * 2^SH_MAX_DEPTH = 524352):
 *   [0]  u64 magic  [8] u64 global depth (GD)  [16] u64 directory lock (0 free, else a
 *        lease token << 1 | 1, dmkv/lease.h)
 *   [24] u64 main_max (MainSegment bound, entries)  [32] i64 key count (FAA by merges:
 *        the MainSegments' entries, dm_sephash_count)  [40] i64 live key count (FAA by
 *        counted conditional appends: dm_sephash_live_count)  [48..64) reserved
 *   [64] directory: 2^SH_MAX_DEPTH entries of 8 bytes (the base never moves; [0, 2^GD) in
 *        use), each local depth:8 (bits 48-55) | CurSegment gaddr:48. Slot j holds the
 *        segment whose suffix is the low local-depth bits of j (extendible hashing).
 *
 * CurSegment (SH_CUR_BYTES = 1600, 64-aligned; never freed, so its address names the
 * segment for good):
 *   [0]   CurSegMeta word: sign:1 (63) | lock:1 (62) | local depth:6 (56-61) |
 *         MainSegment entry count:14 (42-55) | MainSegment gaddr / 64:42 (0-41)
 *   [8]   merge lock word: 0 free, else lease token << 1 | 1 (dmkv/lease.h; the meta word
 *         has no room for a token). The meta's lock bit is set only by a holder of this
 *         word; merge.c has the protocol.
 *   [64]  filter[2][256]: filter[s][fp] = 1 when the round with meta sign s may hold an
 *         entry of fingerprint fp (SepHash §4.4.1's bitmap, one byte per fp: see below)
 *   [576] 128 entries of 8 bytes: sign:1 (63) | len:3 (60-62) | dep:4 (56-59) |
 *         KV block gaddr:48 (8-55) | fp:8 (0-7)
 *   An entry is empty when its sign equals the meta's sign (§4.2.1 (3)). Appends fill the
 *   entries in order with the other sign; a merge flips the meta sign when all 128 are
 *   full, which empties them all at once. The meta word changes only by CAS: lock (merge
 *   starts) and the merge's unlock, which installs the new MainSegment and flips the sign
 *   in the same CAS. Its MainSegment address changes at every merge and a freed one is
 *   quarantined (DM_GRACE_US), so within an operation's life (DM_OP_TIMEOUT_US) equal meta
 *   words (lock bit aside) mean the same round: no merge in between.
 *
 * MainSegment (SH_MAIN_HDR + 9 * n, 64-aligned, immutable once published):
 *   [0]   u64 n (entries)  [8] u16 start[257]: entries with fp f are [start[f], start[f+1])
 *         (the FPTable, §4.2.1 (4); cached per worker by segment)  [522..576) zero
 *   [576] n entries sorted by fp (sign 0, otherwise as CurSegment entries)
 *   [576 + 8n] n bytes: fp2 of each entry (a second 8-bit fingerprint, §4.2.1 (4))
 *
 * Entry fields. len: the KV block's size in 64-byte units, 1..7, 7 meaning "7 or more" (the
 * reader reads 448 bytes, then the rest the header announces; blocks are allocated in
 * 64-byte multiples, dm_sephash_block_bytes, so the rounded READ stays in the block); RACE's unit
 * is 32 bytes in 8 bits, which 3 bits cannot carry. len 0 marks a tombstone (its block holds the
 * key and an empty value; read 64 bytes, then the rest). dep: the 4 bits of the key's hash suffix
 * of the segment's current split round, bits [4 * (ld / 4), 4 * (ld / 4) + 4) (§4.2.1 (3), Figure
 * 6): a split at local depth ld sorts by dep bit ld % 4 without reading the KV block; a split that
 * ends a round (ld + 1 a multiple of 4) reads the blocks to refill dep. fp: hash bits 64-71, fp2:
 * bits 72-79 (the high word: independent of the suffix).
 *
 * Deviations from the paper (why): the filter is a byte per fp, two of them (one per meta
 * sign), not a 256-bit bitmap written after the CAS: a one-sided WRITE of one byte sets it
 * without a read-modify-write, and writing it before the entry CAS in the same message
 * (verbs to one node run in order) means no reader can see the entry without the filter
 * byte (the paper's zero-wait write can miss an acknowledged insert); the second filter
 * lets a merge clear the next round's filter before it flips the sign while readers still
 * use this round's. fp2 of CurSegment entries is not stored (the paper WRITEs it after the
 * CAS, so a reader could see it stale): a merge reads every CurSegment entry's block
 * instead (128 small READs in 2 RTTs), which also gives it the key for dedup. The FPTable
 * is cached whole (514 bytes per segment), not compressed into record points (§4.4.2).
 */
#ifndef DMKV_SEPHASH_INTERNAL_H
#define DMKV_SEPHASH_INTERNAL_H

#include <stdint.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/gaddr.h"
#include "dmkv/lease_lock.h"
#include "dmkv/sephash.h"

#define SH_MAGIC 0x3148534850455321ull /* "!SEPHSH1" */
#define SH_MAX_DEPTH 16
#define SH_INIT_DEPTH 2
#define SH_DIR_OFF 64ull
#define SH_TABLE_BYTES (SH_DIR_OFF + (8ull << SH_MAX_DEPTH))
#define SH_HDR_GD_OFF 8ull
#define SH_HDR_LOCK_OFF 16ull
#define SH_HDR_COUNT_OFF 32ull
#define SH_HDR_LIVE_OFF 40ull

#define SH_CUR_N DM_SH_CUR_ENTRIES
#define SH_WINDOW 16u        /* entries an append reads at a time (the sliding window, §4.3) */
#define SH_CUR_LOCK_OFF 8ull /* the merge lock word (a lease, sh_hold_t) */
#define SH_CUR_FILTER_OFF 64ull
#define SH_CUR_ENTRY_OFF 576ull
#define SH_CUR_BYTES (SH_CUR_ENTRY_OFF + 8ull * SH_CUR_N)

#define SH_MAIN_HDR 576ull
#define SH_LEN_MAX 7u /* entry len saturates here (64-byte units) */

typedef struct sh_table_hdr {
    uint64_t magic;
    uint64_t global_depth;
    uint64_t dir_lock;
    uint64_t main_max;
    uint64_t key_count;
    uint64_t live_count;
    uint64_t reserved[2];
} sh_table_hdr_t;

/* A MainSegment of n entries as allocated (SH_MAIN_HDR + 9 n bytes, dm_alloc_block_bytes):
 * frees and the offline walk name this size (the unrounded one filed freed MainSegments a
 * size class below the one MainSegments are taken from, and the live byte count drifted). */
static inline uint64_t sh_main_bytes(uint32_t n)
{
    return dm_alloc_block_bytes(SH_MAIN_HDR + 9ull * n);
}

/* ---- CurSegMeta word ---- */
#define SH_META_SIGN (1ull << 63)
#define SH_META_LOCK (1ull << 62)
static inline uint64_t sh_meta(unsigned sign, unsigned ld, uint32_t cnt, dm_gaddr_t main)
{
    uint64_t p = ((uint64_t)dm_gaddr_node(main) << 34) | (dm_gaddr_off(main) >> 6);
    return (sign ? SH_META_SIGN : 0) | ((uint64_t)(ld & 63) << 56) |
           ((uint64_t)(cnt & 0x3fff) << 42) | p;
}
static inline unsigned sh_meta_sign(uint64_t m)
{
    return (unsigned)(m >> 63);
}
static inline unsigned sh_meta_ld(uint64_t m)
{
    return (unsigned)(m >> 56) & 63;
}
static inline uint32_t sh_meta_cnt(uint64_t m)
{
    return (uint32_t)(m >> 42) & 0x3fff;
}
static inline dm_gaddr_t sh_meta_main(uint64_t m)
{
    uint64_t p = m & ((1ull << 42) - 1);
    return dm_gaddr_make((unsigned)(p >> 34), (p & ((1ull << 34) - 1)) << 6);
}
/* The round a meta word names: the word without its lock bit. */
static inline uint64_t sh_round(uint64_t m)
{
    return m & ~SH_META_LOCK;
}

/* ---- entries ---- */
static inline uint64_t sh_entry(unsigned sign, unsigned len, unsigned dep, dm_gaddr_t ptr,
                                uint8_t fp)
{
    return ((uint64_t)(sign & 1) << 63) | ((uint64_t)(len & 7) << 60) |
           ((uint64_t)(dep & 15) << 56) | ((ptr & 0xffffffffffffull) << 8) | fp;
}
static inline unsigned sh_entry_sign(uint64_t e)
{
    return (unsigned)(e >> 63);
}
static inline unsigned sh_entry_len(uint64_t e)
{
    return (unsigned)(e >> 60) & 7;
}
static inline unsigned sh_entry_dep(uint64_t e)
{
    return (unsigned)(e >> 56) & 15;
}
static inline dm_gaddr_t sh_entry_ptr(uint64_t e)
{
    return (e >> 8) & 0xffffffffffffull;
}
static inline uint8_t sh_entry_fp(uint64_t e)
{
    return (uint8_t)e;
}
static inline uint64_t sh_entry_with_dep(uint64_t e, unsigned dep)
{
    return (e & ~(15ull << 56)) | ((uint64_t)(dep & 15) << 56);
}
/* A version token (dm_point_item_t.version): the entry word without its sign and dep, which
 * merges and splits rewrite; what is left (block pointer, len, fp) names one append for as
 * long as its block is not reused (DM_GRACE_US after a merge dropped it). */
static inline uint64_t sh_version(uint64_t e)
{
    return e & ~((1ull << 63) | (15ull << 56));
}
/* The dep bits of hash suffix lo for a segment of local depth ld (Figure 6). */
static inline unsigned sh_dep(uint64_t lo, unsigned ld)
{
    return (unsigned)(lo >> (4 * (ld / 4))) & 15;
}

/* ---- directory entries ---- */
static inline uint64_t sh_dir_entry(dm_gaddr_t seg, unsigned ld)
{
    return ((uint64_t)(ld & 0xff) << 48) | (seg & 0xffffffffffffull);
}
static inline dm_gaddr_t sh_dir_seg(uint64_t e)
{
    return e & 0xffffffffffffull;
}
static inline unsigned sh_dir_ld(uint64_t e)
{
    return (unsigned)(e >> 48) & 0xff;
}

/* What a worker remembers of one segment (per directory slot).
 *
 * Why it ages. Equal meta words name the same round only within DM_GRACE_US: a merge frees
 * the old MainSegment, the allocator hands its address out again after the quarantine, and
 * a later merge of the same segment can get it with the same count and sign. A meta word
 * equal to the cached round then names another MainSegment (another FPTable) and a new
 * CurSegment round (other full entries). So the cache is trusted only while a read that
 * saw its round current was posted less than SH_CACHE_TRUST_US ago: the reads of an
 * operation that use it land within DM_OP_TIMEOUT_US of their posting (older ones are
 * redone), so before that round's MainSegment could be reused. Older, sh_cache forgets it
 * and it is read again. */
#define SH_CACHE_TRUST_US (DM_GRACE_US - DM_OP_TIMEOUT_US)
/* Whether a cache last seen current at seen_us is no longer to be trusted at at_us. */
static inline int sh_cache_stale(uint64_t seen_us, uint64_t at_us)
{
    return at_us > seen_us && at_us - seen_us > SH_CACHE_TRUST_US;
}
typedef struct sh_seg_cache {
    dm_gaddr_t seg;   /* the CurSegment this is about (0: nothing) */
    uint64_t round;   /* meta word (lock bit clear) the rest was read under */
    uint64_t seen_us; /* a read posted then saw round current (microseconds, dm_now_us) */
    uint32_t off;     /* entries [0, off) were full in that round (sliding window) */
    int fpt_ok;       /* start[] is the FPTable of round's MainSegment */
    uint16_t start[257];
    /* Entries this worker's own entry CASes found full in round kf_round (won: its
     * fingerprint; lost: the winner's), so an append places its CAS past them instead of
     * losing it (append.c place_commit). Each is trusted for SH_KNOWN_WINDOW_US from its
     * CAS's posting, kf_us[i] (0: not known): a round word recurs (above). */
    uint64_t kf_round;
    uint64_t kf_us[SH_CUR_N];
    uint8_t kf_fp[SH_CUR_N];
    uint64_t kf_busy[SH_CUR_N / 64]; /* entries a CAS of this worker is posted to, not done */
} sh_seg_cache_t;
_Static_assert(SH_CUR_N % 64 == 0, "kf_busy holds SH_CUR_N bits");

/* How long a known-full entry stays trusted (microseconds): its CAS and a lookup posted
 * less than DM_OP_TIMEOUT_US before the placing ran at the memory node less than
 * DM_GRACE_US apart, the least time before a round's word can recur, so in the same round. */
#define SH_KNOWN_WINDOW_US 250000u
_Static_assert(SH_KNOWN_WINDOW_US + DM_OP_TIMEOUT_US < DM_GRACE_US,
               "known-full entries outlive a round");

struct dm_sephash {
    dm_gaddr_t root;
    unsigned global_depth;
    uint32_t main_max;
    int died;               /* tests: sh_test_hook made this handle "die" (sh_die) */
    uint64_t installs;      /* directory snapshots installed (refresh) */
    uint64_t *dir;          /* cached directory: 2^SH_MAX_DEPTH entries, [0, 2^GD) valid */
    sh_seg_cache_t **cache; /* per directory slot, allocated on first use */
    dm_sephash_stats_t st;
    struct sh_place_waiter *place_waiters; /* appends waiting for a busy entry's outcome */
};

/* An append parked until an outcome of this worker's (append.c place_commit). */
typedef struct sh_place_waiter {
    dm_wake_t wk;
    struct sh_place_waiter *next;
} sh_place_waiter_t;

/* ---- leases on the merge and directory locks (dmkv: not in the paper) ----
 * docs/leases.md's rules, as CHIME's leaf lock (chime/leaf.c ch_lock_leaf): the word holds
 * a fresh token; the holder times its hold from before its lock CAS was posted and sends
 * nothing under the lock after sh_hold_ms (every such batch carries send_by_us = until);
 * a waiter takes over only a word it has seen unchanged for sh_lease_ms, after fencing
 * the holder (dm_lease_takeover_ready). Variables so tests can shorten them; lease > hold
 * is what keeps a live holder's writes ahead of a taker's. */
extern uint32_t sh_lease_ms; /* 3000, as CHIME's CH_LEASE_MS */
extern uint32_t sh_hold_ms;  /* 2000, as CH_HOLD_MAX_MS */

typedef dm_lease_hold_t sh_hold_t; /* until_us: no batch under the lock leaves after it */

/* One attempt at the lock word at addr: 1 when taken (*hd filled; *took_over = 1 when it
 * was taken from a holder presumed dead), 0 when held by a live holder (or one not yet
 * seen held for sh_lease_ms), DM_E*. lease.c */
int sh_lease_try(dm_ctx_t *ctx, dm_gaddr_t addr, sh_hold_t *hd, int *took_over);
/* Free the lock: CAS from our word to 0, fire and forget and unbounded (a taker's word
 * differs, so it cannot free a taker's lock). Returns 0 or a posting error. */
int sh_lease_release(dm_ctx_t *ctx, const sh_hold_t *hd);

/* Tests: called at the named instants of a merge; returning nonzero makes the handle
 * "die" there: the merge returns DM_EIO at once, leaving every lock as it is. */
enum { SH_AT_LOCKED, SH_AT_DIR_LOCKED, SH_AT_MOVED, SH_AT_COMMIT };
extern int (*sh_test_hook)(dm_sephash_t *h, int site);
/* 1 when the hook says h dies at site (sets h->died). */
int sh_die(dm_sephash_t *h, int site);

/* Where a key goes. */
typedef struct sh_loc {
    uint64_t lo, hi; /* 128-bit hash: the suffix is lo's low bits, fp and fp2 from hi */
    uint8_t fp, fp2;
    uint64_t slot; /* directory slot */
    dm_gaddr_t seg;
    unsigned ld; /* the cached local depth */
} sh_loc_t;

/* The key's 128-bit hash (XXH3, SepHash's seed) as *lo and *hi: the directory suffix and
 * fingerprints come from it (SepHash §4.1). Local, no verbs. */
void sh_hash(const void *key, size_t klen, uint64_t *lo, uint64_t *hi);
/* Hash key and find its segment in the cached directory. */
void sh_locate(const dm_sephash_t *h, const void *key, size_t klen, sh_loc_t *loc);
/* 0 when a CurSegment whose meta word is m holds loc's key, DM_ERETRY when the cached
 * directory entry is stale (the segment split the key away since). */
int sh_meta_check(const sh_loc_t *loc, uint64_t m);
/* The cache of loc's directory slot (allocated on first use, reset when it names another
 * segment, its round forgotten once older than SH_CACHE_TRUST_US), or NULL when out of
 * memory. */
sh_seg_cache_t *sh_cache(dm_sephash_t *h, const sh_loc_t *loc);
/* A read posted at posted_us saw round current: the cache's round is trusted from then. */
void sh_cache_seen(sh_seg_cache_t *c, uint64_t round, uint64_t posted_us);
/* Read the segment's meta word and its MainSegment's FPTable into c (2 RTTs). */
int sh_cache_load(dm_ctx_t *ctx, sh_seg_cache_t *c);
/* Read the directory again (1 RTT + 1 per 64 KiB) and install it. */
int sh_refresh(dm_ctx_t *ctx, dm_sephash_t *h);
/* Read the KV blocks the n entry words point to (1 RTT however many: dm_read_kv_blocks; +1 RTT for
 * blocks over 448 bytes or tombstones over 64): bufs[i] malloc'd, lens[i] bytes read (at least the
 * block). Unverified: callers parse. Returns 0 or DM_E*; the caller frees bufs[] either way. */
int sh_read_blocks(dm_ctx_t *ctx, const uint64_t *words, unsigned n, uint8_t **bufs,
                   uint64_t *lens);
/* 1 when the block in buf (have bytes) parses and holds key; its view in *v. */
int sh_block_is(const uint8_t *buf, uint64_t have, const void *key, size_t klen, dm_kv_view_t *v);
/* Entry len field for a block of bytes (1..7, 64-byte units, saturating). */
unsigned sh_len_units(uint64_t bytes);
/* Append the FAA of d to the live key counter to b: its verb (status 0 once it completed),
 * or NULL when not appended (tests: the 'uncounted' fault point, dmkv/fault.h). */
dm_verb_t *sh_live_count_with(dm_batch_t *b, dm_sephash_t *h, int64_t d);
/* The same FAA posted without waiting (an error leaves the counter off: a recount repairs
 * it). */
void sh_live_count_post(dm_ctx_t *ctx, dm_sephash_t *h, int64_t d);
/* Sleep a little while a merge holds a segment (yields the coroutine). */
void sh_pause(dm_ctx_t *ctx);

/* What a lookup found of one key, consistent with one round of its segment. */
typedef struct sh_look {
    sh_loc_t loc;
    uint64_t round; /* the CurSegMeta (lock bit clear) of the round read */
    int cur_read;   /* cur[] and first_empty were read (full_cur, or the filter said so) */
    uint64_t cur[SH_CUR_N];
    unsigned first_empty; /* entries [0, first_empty) were full when entry first_empty was read */
    uint64_t newest;      /* the key's newest entry word (0: none) */
    dm_gaddr_t newest_addr;
    uint8_t *block; /* malloc'd block of newest when it is live (not a tombstone), else NULL */
    uint64_t block_len;
    dm_kv_view_t view; /* into block */
} sh_look_t;

/* Find key's newest entry (SepHash §4.2.1 "Search"), reading the whole CurSegment when
 * full_cur (a conditional append needs every entry before the first empty one), else only
 * when the filter says so. Restarts itself on a stale directory, a merge between its reads
 * or a read older than DM_OP_TIMEOUT_US. Returns 0 (out filled; free out->block) or DM_E*.
 * search.c */
int sh_lookup(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, int full_cur,
              sh_look_t *out);

/* A lookup's result as the point role's item: 1 present (the block moves to item), 0
 * absent (item->version: the tombstone's token or 0). search.c */
int sh_look_item(sh_look_t *o, dm_point_item_t *item);

/* 1 when the meta word of segment seg still names the round of m (1 RTT): no merge
 * committed since m was read, so no block an entry of that round names has been freed
 * (merges are the only point that frees them, merge.c). 0 when it moved or the read
 * failed. Lets a lookup or walk whose block reads outlasted DM_OP_TIMEOUT_US stand. */
int sh_round_unchanged(dm_ctx_t *ctx, dm_gaddr_t seg, uint64_t m);

/* sh_lookup in two steps, so a batch of someone else's can carry the reads (the range
 * lock's: the point role's prefetch). issue: append to b the reads of one attempt (the
 * directory slot, meta, filter bytes, with full_cur the CurSegment and the meta again, the
 * key's MainSegment run by the cached FPTable, loaded first when may_load, else
 * DM_EINVAL); *out malloc'd, sh_reads_free it after b ran. DM_EINVAL too when b has no
 * room. eval: decide from reads that ran, the first of them posted at t0 (monotonic
 * µs): 0 with *out (as sh_lookup), DM_ERETRY when they are stale (look again), DM_E*.
 * May read the CurSegment (not full_cur, the filter set) and the candidates' blocks. */

typedef struct sh_reads sh_reads_t;
int sh_lookup_issue(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, int full_cur,
                    int may_load, dm_batch_t *b, sh_reads_t **out);
int sh_lookup_eval(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, sh_reads_t *r,
                   uint64_t t0, sh_look_t *out);
void sh_reads_free(sh_reads_t *r);

/* Merge the CurSegment seg (full, meta word m, locked or not) into its MainSegment,
 * splitting it when the result is over the bound (SepHash §4.2.2), or finish the merge of a
 * holder presumed dead. Returns 1 when this call merged it, 0 when someone else holds it,
 * merged it first or this hold ended (the caller waits a little and reads again), or DM_E*.
 * merge.c */
int sh_merge(dm_ctx_t *ctx, dm_sephash_t *h, const sh_loc_t *loc, uint64_t m);

/* Point the directory slots of the segment at seg (local depth ld, suffix the low ld bits
 * of lo) whose bit ld is 1 at seg1, and all of them at local depth ld + 1, doubling the
 * directory first when ld = GD; under the directory lock (a lease), its writes sent by
 * until (the merge lock's hold) at the latest. A split a dead merger began is finished:
 * when the directory already names another segment for the 1 half, *used is that one
 * (the caller's seg1 is then unused), else seg1. Returns 0, DM_ERETRY (a hold ended: the
 * slots may be half written, the merge's taker finishes them), DM_ECORRUPT or DM_E*.
 * split.c */
int sh_dir_split(dm_ctx_t *ctx, dm_sephash_t *h, dm_gaddr_t seg, unsigned ld, uint64_t lo,
                 dm_gaddr_t seg1, uint64_t until, dm_gaddr_t *used);

#endif
