/* RACE internals shared by table.c, ops.c and scan.c: pool layout, hashing, bucket views. */
#ifndef DMKV_RACE_INTERNAL_H
#define DMKV_RACE_INTERNAL_H

#include <stdint.h>

#include "dmkv/race.h"

#define RACE_MAGIC 0x45434152ull /* "RACE" */
#define RACE_DIR_OFF 64          /* directory entries start after the table header */

/* Table header in the pool (at superblock.race_root), followed by the directory. */
typedef struct race_table_hdr {
    uint64_t magic;
    uint64_t global_depth;
    uint64_t groups; /* bucket groups per subtable */
    uint64_t max_depth;
    uint64_t reserved[4];
} race_table_hdr_t;

/* Directory entry: lock:8 | local depth:8 | subtable gaddr:48. */
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

/* Slot: fp:8 | len:8 (64-byte units) | ptr:48. ptr 0 = empty. */
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
    return s & 0xffffffffffffull;
}

/* Bucket header: local depth (low 32 bits) and suffix (high 32 bits). */
static inline uint64_t race_bucket_hdr(uint32_t ld, uint32_t suffix)
{
    return ((uint64_t)suffix << 32) | ld;
}

struct dm_race {
    dm_gaddr_t root; /* table header */
    unsigned global_depth;
    uint64_t groups;
    uint64_t dir[1u << DM_RACE_INIT_DEPTH]; /* cached directory (fixed depth for now) */
};

/* Where a key lives: its subtable and its two combined buckets. */
typedef struct race_loc {
    uint8_t fp;
    unsigned dir_idx;
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

void race_locate(const dm_race_t *r, const void *key, size_t klen, race_loc_t *loc);
dm_gaddr_t race_bucket_addr(const race_loc_t *loc, uint64_t bucket);
/* Append the two combined-bucket READs to b. */
int race_read_cbs(dm_batch_t *b, const race_loc_t *loc, race_cbs_t *cbs);
/* 0 when both bucket headers carry the expected local depth and suffix, else DM_ERETRY. */
int race_check_headers(const race_loc_t *loc, const race_cbs_t *cbs);
/* Collect occupied slots whose fingerprint is fp, sorted canonically. Returns count. */
unsigned race_fp_slots(const race_loc_t *loc, const race_cbs_t *cbs, uint8_t fp,
                       race_slotref_t *out, unsigned max);
/* Refresh the cached directory from the pool (1 RTT). */
int race_refresh(dm_ctx_t *ctx, dm_race_t *r);

#endif
