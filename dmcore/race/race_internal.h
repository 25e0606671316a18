/* RACE internals shared by table.c, ops.c, resize.c and scan.c: pool layout, hashing,
 * bucket views, the directory cache. */
#ifndef DMKV_RACE_INTERNAL_H
#define DMKV_RACE_INTERNAL_H

#include <stdint.h>

#include "dmkv/race.h"

#define RACE_MAGIC 0x32454341524dull /* "MRACE2" */

/* Table layout in the pool, at superblock.race_root:
 *   [0]                 race_table_hdr_t (64 bytes)
 *   [RACE_DIR_OFF]      directory: 2^DM_RACE_MAX_DEPTH entries of 8 bytes (reserved, RACE
 *                       §3.4: the base never moves; only [0, 2^GD) is in use)
 *   [RACE_LOCK_OFF]     split locks: one lease word per subtable suffix value */
#define RACE_DIR_OFF 64ull
#define RACE_LOCK_OFF (RACE_DIR_OFF + (8ull << DM_RACE_MAX_DEPTH))
#define RACE_TABLE_BYTES (RACE_LOCK_OFF + (8ull << DM_RACE_MAX_DEPTH))

typedef struct race_table_hdr {
    uint64_t magic;
    uint64_t global_depth; /* GD; changed only by CAS under the directory lock */
    uint64_t groups;       /* bucket groups per subtable */
    uint64_t max_depth;
    uint64_t dir_lock; /* lease word serializing directory writes (doubling, entries) */
    uint64_t reserved[3];
} race_table_hdr_t;

#define RACE_HDR_GD_OFF 8ull
#define RACE_HDR_DIRLOCK_OFF 32ull

/* Directory entry: local depth:8 (bits 48-55) | subtable gaddr:48. */
static inline uint64_t race_dir_entry(dm_gaddr_t st, unsigned ld)
{
    return ((uint64_t)ld << 48) | (st & 0xffffffffffffull);
}
static inline dm_gaddr_t race_dir_addr(uint64_t e)
{
    return e & 0xffffffffffffull;
}
static inline unsigned race_dir_ld(uint64_t e)
{
    return (unsigned)(e >> 48) & 0xff;
}

/* Slot: fp:8 | len:8 (64-byte units) | ptr:48. ptr 0 = empty. KV blocks are 64-byte
 * aligned, so bit 0 of ptr is free: it is the MOVING mark a splitter sets before copying
 * a slot into the new subtable (docs/NOTES.md §1.9 "resize windows"). */
#define RACE_SLOT_MOVING 1ull
static inline uint64_t race_slot(uint8_t fp, uint8_t len, dm_gaddr_t ptr)
{
    return ((uint64_t)fp << 56) | ((uint64_t)len << 48) | (ptr & 0xffffffffffffull);
}
static inline uint8_t race_slot_fp(uint64_t s)
{
    return (uint8_t)(s >> 56);
}
static inline uint8_t race_slot_len(uint64_t s)
{
    return (uint8_t)(s >> 48);
}
static inline dm_gaddr_t race_slot_ptr(uint64_t s)
{
    return s & 0xffffffffffffull & ~RACE_SLOT_MOVING;
}
static inline int race_slot_moving(uint64_t s)
{
    return (s & RACE_SLOT_MOVING) != 0;
}

/* Bucket header: local depth (bits 0-7), MOVING-IN flag (bit 8: this subtable is still
 * receiving keys from the one it split from), suffix (bits 32-63). */
#define RACE_HDR_MOVING (1ull << 8)
static inline uint64_t race_bucket_hdr(uint32_t ld, uint32_t suffix)
{
    return ((uint64_t)suffix << 32) | (ld & 0xff);
}
static inline unsigned race_hdr_ld(uint64_t h)
{
    return (unsigned)(h & 0xff);
}
static inline uint32_t race_hdr_suffix(uint64_t h)
{
    return (uint32_t)(h >> 32);
}

struct dm_race {
    dm_gaddr_t root; /* table header */
    unsigned global_depth;
    uint64_t groups;
    uint16_t owner;        /* this worker's id in lease words */
    uint64_t *dir;         /* cached directory, 2^DM_RACE_MAX_DEPTH entries, [0, 2^GD) valid */
    uint64_t installs;     /* snapshots installed into dir (refresh, publish) */
    uint32_t write_rtt_us; /* recent round trip of a SET's batch, averaged (ops.c) */
    void *acache;          /* validated address cache (addr_cache.c), shared by the process's
                              workers on this pool; NULL when turned off */
    /* Searches that timed out retry one at a time per worker (ops.c slow_enter). */
    int slow_held;
    struct dm_wake *slow_head, *slow_tail;
};

/* Where a key lives: its subtable and its two combined buckets. */
typedef struct race_loc {
    uint8_t fp;
    uint64_t hash; /* low 64 bits of the key hash: the suffix is its low bits */
    unsigned ld;
    dm_gaddr_t subtable;
    uint64_t first_bucket[2]; /* bucket index of each combined bucket's first bucket */
} race_loc_t;

/* Two combined buckets as read: 2 x 2 buckets. */
typedef struct race_cbs {
    uint64_t raw[2][2 * DM_RACE_BUCKET / 8];
} race_cbs_t;

/* One slot of a combined-bucket read, with its canonical position. */
typedef struct race_slotref {
    uint64_t canon; /* bucket index * 7 + slot index: the duplicate rule's order */
    dm_gaddr_t addr;
    uint64_t word;
} race_slotref_t;

/* The key's 128-bit hash (XXH3 with RACE's seed): returns the low word (directory suffix,
 * bucket 1) and sets *high (if not NULL; bucket 2 and the fingerprint), RACE §3.1. */
uint64_t race_key_hash(const void *key, size_t klen, uint64_t *high);
/* Give r the process's address cache of the pool whose node 0 has this incarnation and
 * whose table header is r->root (created on the first attach; left NULL when
 * DMKV_ADDR_CACHE=off or out of memory). */
void race_addr_cache_attach(dm_race_t *r, uint64_t incarnation);
/* Let go of r's cache; the last worker of the pool frees it. */
void race_addr_cache_detach(dm_race_t *r);
/* Remember that key's slot at slot_addr holds word, as seen by a verb posted after seen_us
 * (monotonic us, dm_now_us) (addr_cache.c); a word the cache cannot use (empty, MOVING, a
 * block over 16 KB) forgets the key instead. */
void race_addr_cache_put(dm_race_t *r, const void *key, size_t klen, dm_gaddr_t slot_addr,
                         uint64_t word, uint64_t seen_us);
/* 1 and the remembered slot address, word and seen_us of key, and in *mine whether r's
 * worker stored or last saw it (seen_us and mine may be NULL), or 0 when the cache has none. */
int race_addr_cache_get(dm_race_t *r, const void *key, size_t klen, dm_gaddr_t *slot_addr,
                        uint64_t *word, uint64_t *seen_us, int *mine);
/* 1 when the cache has an entry for key, wherever its slot is now (a key a split moved is
 * still most likely present): the gateway's pipeline window asks (dm_kv_cache_knows). */
int race_addr_cache_knows(const dm_race_t *r, const void *key, size_t klen);
/* The remembered word was gone: forget key and count it (INFO race_addr_cache_dropped). */
void race_addr_cache_stale(dm_race_t *r, const void *key, size_t klen);
/* Count an answer given through the cache (INFO race_addr_cache_hits). */
void race_addr_cache_hit(void);
/* Count a one-round-trip SET through it (and a hit; INFO race_addr_cache_blind_sets). */
void race_addr_cache_blind_set(void);
/* Add to b a READ of the slot word at sa (into *word) and a READ of len bytes of the block
 * at blk (into buf) that executes after it, and run b (1 RTT; 2 when slot and block are on
 * different memory nodes, whose connections do not order against each other). A block read
 * before the slot read could see what the block held before it was freed and reused for the
 * same key (2 s earlier) while the slot read then sees the recurring word. Returns 0 or
 * DM_E*. race/addr_cache.c */
int race_read_slot_then_block(dm_ctx_t *ctx, dm_batch_t *b, dm_gaddr_t sa, uint64_t *word,
                              dm_gaddr_t blk, void *buf, uint32_t len);
void race_locate(const dm_race_t *r, const void *key, size_t klen, race_loc_t *loc);
/* Same key, buckets in another subtable (same bucket indices). */
void race_locate_in(race_loc_t *loc, dm_gaddr_t subtable, unsigned ld);
dm_gaddr_t race_bucket_addr(const race_loc_t *loc, uint64_t bucket);
/* Append the two combined-bucket READs to b. */
int race_read_cbs(dm_batch_t *b, const race_loc_t *loc, race_cbs_t *cbs);
/* Check the four bucket headers (RACE §3.4.1, Algorithm 5). Returns 0 when the buckets
 * are right for the key (cases 1 and 2), DM_ERETRY when the directory is stale (case 3).
 * *moving is set when a bucket is still receiving keys from its parent subtable. */
int race_check_headers(const race_loc_t *loc, const race_cbs_t *cbs, int *moving);
/* Collect occupied slots whose fingerprint is fp, sorted canonically. Returns count. */
unsigned race_fp_slots(const race_loc_t *loc, const race_cbs_t *cbs, uint8_t fp,
                       race_slotref_t *out, unsigned max);
/* Read GD and the used directory entries into dir (a private buffer of 2^16 entries). */
int race_read_dir(dm_ctx_t *ctx, dm_race_t *r, uint64_t *dir, unsigned *gd, uint64_t *groups);
/* Read the whole KV blocks behind n slot words (1 RTT however many: dm_read_kv_blocks; +1 for
 * blocks over 16 KB): bufs[i] malloc'd (NULL for empty slots), lens[i] bytes. Unverified: callers
 * parse them. Returns 0 or DM_E*; on error the caller frees what bufs hold. */
int race_read_blocks(dm_ctx_t *ctx, const uint64_t *words, unsigned n, uint8_t **bufs,
                     uint64_t *lens);
/* Refresh the cached directory from the pool (1 RTT per 64 KiB of directory). */
int race_refresh(dm_ctx_t *ctx, dm_race_t *r);
/* Directory entry the cache gives for suffix value s. */
static inline uint64_t race_dir_get(const dm_race_t *r, uint64_t s)
{
    return r->dir[s & ((1ull << r->global_depth) - 1)];
}

/* Split the subtable holding loc's key (RACE §3.4.2; frozen while it splits), or with
 * help_only just finish a split that a dead gateway left half done. Returns 0 when a
 * split happened or someone else's finished, DM_ERETRY when another gateway holds the
 * lease (wait and retry), DM_EFULL at the maximum depth, or DM_E*. resize.c */
int race_split(dm_ctx_t *ctx, const race_loc_t *loc, int help_only);
/* dm_race_search, also telling whether a split held a frozen copy of the key (*frozen,
 * when not NULL): such a hit must not be remembered by the address cache. ops.c */
int race_search(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_item_t *item, int *frozen);
/* Allocate and format a subtable (local depth ld, suffix s, MOVING-IN flag). table.c */
int race_new_subtable(dm_ctx_t *ctx, uint64_t groups, unsigned ld, uint32_t s, int moving,
                      dm_gaddr_t *out);
/* An empty slot in loc's combined buckets (less-loaded first, main before overflow), one
 * that no insert of this process has claimed (race_claim) if there is one; 0 when both
 * are full. ops.c */
dm_gaddr_t race_pick_empty(const race_loc_t *loc, const race_cbs_t *cbs);
/* Claim the empty slot at slot for an insert's slot CAS about to be posted, so that the
 * process's other inserts (any worker) pick other slots until race_unclaim. A hint only:
 * a later claim that maps to the same entry replaces it, and the CAS still decides. ops.c */
void race_claim(dm_gaddr_t slot);
/* Release slot's claim (after its CAS came back, whatever its result). ops.c */
void race_unclaim(dm_gaddr_t slot);

/* Sleep the current operation for us microseconds (yields on a coroutine). */
void race_pause(dm_ctx_t *ctx, uint32_t us);

/* The key counter (DBSIZE, superblock.h) changes before the operation that adds or removes
 * a key answers: a DBSIZE sent after a DEL's reply, through any gateway, counts it. Every
 * slot CAS that adds or removes a key carries the counter's FAA in its batch, so a gateway
 * killed after its CAS left has sent the FAA too. race_count_with adds that FAA (by delta)
 * to b; its status reads DM_EIO until a memory node executed it, which race_counted tells
 * (NULL: not added). race_count_keys posts one and waits (1 RTT, rare). After a batch of
 * `sent` CASes that each remove a copy of a key (`won` of them did), sent with
 * fv = race_count_with(-sent), race_count_removed gives back what the lost ones counted,
 * or counts the won ones when the FAA did not run (a failed batch counts as won 0).
 * ops.c. */
dm_verb_t *race_count_with(dm_batch_t *b, int64_t delta);
int race_counted(const dm_verb_t *v);
void race_count_keys(dm_ctx_t *ctx, int64_t delta);
void race_count_removed(dm_ctx_t *ctx, const dm_verb_t *fv, int64_t sent, int64_t won);

/* Lease words: owner:16 | expiry (wall ms):48. */
#define RACE_LEASE_MS 3000u
static inline uint64_t race_lease(uint16_t owner, uint64_t expiry_ms)
{
    return ((uint64_t)owner << 48) | (expiry_ms & 0xffffffffffffull);
}
static inline uint64_t race_lease_expiry(uint64_t w)
{
    return w & 0xffffffffffffull;
}

#endif
