/* KV blocks: out-of-place, immutable once published (docs/DESIGN.md "KV block").
 * Two layouts, all little-endian, 32-byte aligned, size a multiple of DM_KV_UNIT (32) bytes.
 * Full (any key and value; every block that has or may be given an expiry):
 *   [0]  u32 key_len (< 2^31)   [4] u32 val_len   [8] u64 expire_ms (0 = none)
 *   [16] u64 write id: unique per dm_kvblock_build (per-thread random base + counter), so
 *        a block reused for the same key with the same length never looks like the old
 *        write to WATCH (a slot word alone recurs once a freed block is reused)
 *   [24] key bytes, value bytes, zero padding to 8
 *   [..] u64 checksum = XXH3-64 of bytes [0, 24 + key_len + val_len)
 * Compact (key <= 255 bytes, value < 8 MiB, no expiry): 16 bytes of overhead, not 32, so a
 * 16-byte key with a 32-byte value takes 64 bytes, not 96 (issue 11's bytes per key):
 *   [0]  u32 1 << 31 | val_len << 8 | key_len   [4] u32 write id (its low half; odd)
 *   [8]  key bytes, value bytes, zero padding to 8
 *   [..] u64 checksum = XXH3-64 of bytes [0, 8 + key_len + val_len)
 * Bit 31 of the first word tells them apart: a full block's key length never has it.
 * A RACE slot's 8-bit length gives the block size in 32-byte units, saturating at 255:
 * a reader reads that much first and, for bigger blocks, the rest after the header.
 * The checksum lets readers detect a block torn by a concurrent rewrite or freed. */
#ifndef DMKV_KVBLOCK_H
#define DMKV_KVBLOCK_H

#include <stddef.h>
#include <stdint.h>

#define DM_KV_MAX_KEY (512u << 20)   /* bytes, Redis's proto-max-bulk-len */
#define DM_KV_MAX_VALUE (512u << 20) /* bytes */

#define DM_KV_HDR 24u            /* bytes: a full block's header; enough to size any block */
#define DM_KV_UNIT 32u           /* bytes per unit of a block size and of a slot length */
#define DM_KV_LEN_MAX_UNITS 255u /* slot length field saturates here (8160 bytes) */

typedef struct dm_kv_view {
    const uint8_t *key;
    uint32_t key_len;
    const uint8_t *val;
    uint32_t val_len;
    uint64_t expire_ms;
    uint64_t write_id; /* the block's write id (see the layout above) */
    uint64_t version;  /* the item's version token (dm_point_item_t.version; RACE: its slot
                          word), set for decide callbacks */
} dm_kv_view_t;

/* Total block bytes (multiple of DM_KV_UNIT) for a key and value of these lengths; timed:
 * the block has or may be given an expiry (a KEEPTTL SET's block: ops.c keep_expiry), so it
 * takes the full layout. */
uint64_t dm_kvblock_size(size_t klen, size_t vlen, int timed);

/* Serialize into buf (dm_kvblock_size(klen, vlen, timed || expire_ms) bytes, zero-filled
 * padding): the compact layout when the lengths allow it and the block is not timed. */
void dm_kvblock_build(uint8_t *buf, const void *key, size_t klen, const void *val, size_t vlen,
                      uint64_t expire_ms, int timed);

/* Slot length field (DM_UNIT units, saturating at 255) for a block of this many bytes. */
uint8_t dm_kvblock_len_units(uint64_t block_bytes);

/* The header in buf (have bytes): its size in bytes (8 compact, DM_KV_HDR full), and the
 * key and value lengths in klen, vlen; 0 when too short for its layout or implausible. */
uint64_t dm_kvblock_header(const uint8_t *buf, size_t have, uint32_t *klen, uint32_t *vlen);

/* Block size announced by the header in buf (have >= DM_KV_HDR bytes, or >= 8 for a
 * compact block), or 0 when the lengths are implausible (zeroed/garbage block). */
uint64_t dm_kvblock_size_from_hdr(const uint8_t *buf, size_t have);

/* Parse and verify a block of have bytes. Returns 0 and fills v (pointing into buf),
 * DM_ECORRUPT when the lengths or checksum are wrong (torn, freed or reused block). */
int dm_kvblock_parse(const uint8_t *buf, size_t have, dm_kv_view_t *v);

/* The expiry (ms, 0 = none) in the header of a block this process built (buf holds its
 * header; nothing is checked: dm_kvblock_parse verifies a block read from the pool). */
uint64_t dm_kvblock_expire(const uint8_t *buf);

/* Give a full-layout block in buf (have bytes) the expiry expire_ms in place and rebuild its
 * checksum (KEEPTTL: race/ops.c keep_expiry). Returns 0, or DM_ECORRUPT for a compact or
 * short block (a compact block has no room for an expiry: build it timed). */
int dm_kvblock_set_expire(uint8_t *buf, size_t have, uint64_t expire_ms);

/* 1 if the block in buf (have >= DM_KV_HDR + key_len bytes covers the header and key in
 * both layouts) names exactly this key. Checks only the header and key bytes: call
 * dm_kvblock_parse for the full verification. */
int dm_kvblock_key_equals(const uint8_t *buf, size_t have, const void *key, size_t klen);

#endif
