/* The header at offset 0 of every memory node; node 0's is also the pool's superblock with
 * the well-known roots every gateway starts from (DESIGN.md "Memory node"). All fields are
 * 8-byte words changed only by one-sided CAS/FAA/WRITE. */
#ifndef DMKV_SUPERBLOCK_H
#define DMKV_SUPERBLOCK_H

#include <stddef.h>
#include <stdint.h>

#define DM_SB_MAGIC 0x31764b4d44ull /* "DMKv1" */
#define DM_SB_VERSION 1
#define DM_SB_SIZE 4096           /* bytes reserved at offset 0 */
#define DM_CHUNK_SIZE (16u << 20) /* bytes handed out per chunk FAA */

typedef struct dm_superblock {
    uint64_t magic;       /* DM_SB_MAGIC once formatted */
    uint64_t version;     /* DM_SB_VERSION */
    uint64_t region_size; /* bytes */
    uint64_t alloc_ptr;   /* next free byte offset; chunks are taken by FAA(+chunk bytes) */
    uint64_t chunk_free;  /* head of the returned-chunk free list (0 = empty), issue 5 */
    uint64_t race_root;   /* node 0: gaddr of the RACE table header, 0 = not created */
    uint64_t chime_root;  /* node 0: CHIME root word (issue 3) */
    uint64_t key_count;   /* node 0: number of keys (DBSIZE), kept with FAA */
    uint64_t maxmemory;   /* node 0: pool-wide limit on chunk bytes taken, 0 = none */
    uint64_t pool_used;   /* node 0: chunk bytes taken from all nodes, kept with FAA */
    uint64_t reserved[54];
} dm_superblock_t;

#define DM_SB_OFF(field) offsetof(dm_superblock_t, field)

/* Every range a gateway takes from a node's alloc_ptr (a chunk, or an extent for a large
 * value or a subtable) starts with this header, so a node's memory can be walked from
 * DM_SB_FIRST_CHUNK to alloc_ptr, and the chunks of a gateway that died can be found by
 * their owner (see bench/pool_info.c). */
#define DM_CHUNK_MAGIC 0x4b4e484355484b44ull /* "DKHUCHNK" */
#define DM_SB_FIRST_CHUNK 65536u
typedef struct dm_chunk_hdr {
    uint64_t magic;
    uint64_t bytes;      /* of the whole range, header included */
    uint64_t owner;      /* dm_alloc_owner_id() of the process that took it */
    uint64_t created_ms; /* wall clock */
    uint64_t reserved[4];
} dm_chunk_hdr_t;

#endif
