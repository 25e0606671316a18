/* Key records: a key too long for an index entry, written once into its own pool block and
 * named by its gaddr from the entry (CHIME §3.4's "key records" for long keys and leaf
 * fences; ROLEX's long keys, dmcore/rolex/rolex_internal.h). Immutable: a record is written
 * whole before any entry that names it is visible, and freed (quarantined, dm_alloc_free)
 * only once no entry names it, so a reader that finds it torn or failing its check reads it
 * again, and gives up with DM_ECORRUPT.
 *
 * Layout (little-endian, dm_alloc_block units of 64 bytes):
 *   [0..3] u32 magic DM_KEYREC_MAGIC  [4..7] u32 key length  [8..15] u64 XXH3_64bits of the
 *   key, then the key, zero padded to the block. */
#ifndef DMKV_KEY_RECORD_H
#define DMKV_KEY_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/gaddr.h"
#include "dmkv/worker.h"

#define DM_KEYREC_MAGIC 0x43524b44u /* "DKRC" */
#define DM_KEYREC_HDR 16u

/* Bytes of the record of a key of klen bytes (the header and the key, rounded up to 64). */
static inline uint32_t dm_keyrec_bytes(size_t klen)
{
    return (uint32_t)((DM_KEYREC_HDR + klen + 63) / 64 * 64);
}

/* The record of key (klen bytes) serialized, malloc'd (dm_keyrec_bytes(klen) bytes into
 * *bytes), or NULL out of memory. Pure. */
uint8_t *dm_keyrec_build(const void *key, size_t klen, uint32_t *bytes);

/* Check a record image of bytes bytes read from the pool (any bytes: a torn write, a freed
 * block): the key length when its magic, length (inside the image) and hash hold, else -1.
 * Reads only inside [0, bytes). Pure; inline so that the fuzz targets (tests/fuzz) link no
 * pool code. */
static inline long dm_keyrec_check(const uint8_t *r, uint32_t bytes)
{
    uint32_t magic, len;
    uint64_t h;
    if (bytes < DM_KEYREC_HDR) return -1; /* not even a header */
    memcpy(&magic, r, 4);
    memcpy(&len, r + 4, 4);
    memcpy(&h, r + 8, 8);
    if (magic != DM_KEYREC_MAGIC || DM_KEYREC_HDR + (uint64_t)len > bytes) return -1;
    if (h != XXH3_64bits(r + DM_KEYREC_HDR, len)) return -1;
    return len;
}

/* Allocate (dm_alloc_block: may cost 1 RTT for a chunk) and write the record of key, 1 RTT:
 * *out its gaddr; free it with dm_alloc_free(a, *out, dm_keyrec_bytes(klen)) (or
 * dm_alloc_unused while never published). Returns 0, DM_ENOMEM or a verb error. */
int dm_keyrec_write(dm_ctx_t *ctx, const void *key, size_t klen, dm_gaddr_t *out);

/* Read n records (recs[i], gaddrs) into keys[i] (malloc'd, the key alone) and lens[i]: one
 * batch of DM_BATCH_MAX at a time (1 RTT), of the whole record when want (the key lengths
 * the caller knows, want[i]) is given, else of 256-byte heads plus one read for each longer
 * record; a record that fails dm_keyrec_check (torn, freed, its length over max_len or not
 * want[i]) is read again, yielding between tries, up to 64 times. Returns 0, DM_ECORRUPT (a
 * record kept failing: none of keys[] is left allocated), DM_ENOMEM or a verb error. */
int dm_keyrec_read(dm_ctx_t *ctx, const dm_gaddr_t *recs, unsigned n, uint64_t max_len,
                   const uint32_t *want, uint8_t **keys, uint32_t *lens);

#endif
