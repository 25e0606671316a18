/* The header at offset 0 of every memory node; node 0's is also the pool's superblock with
 * the well-known roots every gateway starts from (docs/DESIGN.md "Memory node"). All fields are
 * 8-byte words changed only by one-sided CAS/FAA/WRITE. */
#ifndef DMKV_SUPERBLOCK_H
#define DMKV_SUPERBLOCK_H

#include <stddef.h>
#include <stdint.h>

#define DM_SB_MAGIC 0x31764b4d44ull /* "DMKv1" */
#define DM_SB_VERSION 2             /* 2: clock board, 24-byte KV block header with a write id */
#define DM_SB_SIZE 4096             /* bytes reserved at offset 0 */
#define DM_CHUNK_SIZE (16u << 20)   /* bytes handed out per chunk FAA */

typedef struct dm_superblock {
    uint64_t magic;         /* DM_SB_MAGIC once formatted */
    uint64_t version;       /* DM_SB_VERSION */
    uint64_t region_size;   /* bytes */
    uint64_t alloc_ptr;     /* next free byte offset; chunks are taken by FAA(+chunk bytes) */
    uint64_t chunk_free;    /* head of this node's free-range stack (DM_FREE_*), 0 = empty */
    uint64_t race_root;     /* node 0: gaddr of the RACE table header, 0 = not created */
    uint64_t chime_root;    /* node 0: CHIME root word (issue 3) */
    uint64_t key_count;     /* node 0: number of keys (DBSIZE) and a change sequence, kept
                               with FAA of dm_key_count_delta() (below) */
    uint64_t maxmemory;     /* node 0: pool-wide limit on chunk bytes taken, 0 = none */
    uint64_t pool_used;     /* node 0: chunk bytes taken from all nodes, kept with FAA */
    uint64_t chime_geo;     /* node 0: CHIME leaf span | neighborhood << 16, set before the root */
    uint64_t cursor_secret; /* random at format: keyed check of SCAN cursors (node 0's) */
    uint64_t volatile_seen; /* node 0: 1 once any gateway stored a key with an expiry */
    uint64_t clock_board[32]; /* node 0: one word per gateway, tag:16 | wall ms:48 (clock.h) */
    uint64_t incarnation;     /* random at format: which life of this node's memory it is;
                                 reported in the handshake (a gateway refuses a node whose
                                 incarnation changed: it restarted without its data) */
    uint64_t live_bytes;      /* node 0: bytes in blocks allocated and not freed, pool-wide;
                                 each gateway worker adds its net change with FAA every cron
                                 tick (dm_alloc_flush_live) */
    uint64_t block_free;      /* head of this node's stack of returned blocks (freed blocks
                                 past their quarantine that a gateway's worker did not need,
                                 for any worker to take: pool/returned.h) of any size, in
                                 pools made before 2026-12-05 (since: block_free_class);
                                 still popped, never pushed; tagged as chunk_free, 0 = empty */
    uint64_t returned_bytes;  /* node 0: bytes on every node's returned-block stack, kept with
                                 FAA beside each push and pop (INFO pool_returned_bytes) */
    uint64_t engines;         /* node 0: the index engines the pool was created with, point
                                 engine id | range engine id << 8 (kv/engines.c), set by CAS
                                 from 0; 0 in pools made before 2026-11-27: RACE + CHIME */
    uint64_t log_free;        /* head of this node's stack of free-log blocks a clean stop
                                 gave back (pool/returned.h), for the next log's opening,
                                 tagged as chunk_free, 0 = empty (also in pools made before
                                 2026-11-28: the word was reserved) */
    uint64_t sephash_root;    /* node 0: gaddr of the SepHash table header when SepHash is the
                                 point engine, 0 = not created (2026-11-29: was reserved) */
    uint64_t rolex_root;      /* node 0: gaddr of the ROLEX root whose retraining this memory
                                 node hosts (memnode/mn_retrainer.c), set by CAS from 0 by the
                                 index's builder (dm_rolex_host_record), 0 = none; never changed
                                 after (2026-12-01: was reserved) */
    uint64_t reserved[11];
    uint64_t alloc_board[32];      /* node 0: per clock-board slot, the gaddr of that gateway's
                                      allocation record (dmkv/alloc.h dm_alloc_register), 0 =
                                      none: a dead gateway's unused chunk tails are found here */
    uint64_t spare_board[16];      /* node 0: chunk tails taken over from dead gateways and not
                                      carved yet, as tail words (pool/tails.h), 0 = empty; any
                                      gateway's worker takes one by CAS before a new chunk */
    uint64_t fence_box[2 * 16];    /* every node: the fence mailbox (dmkv/fence.h), 16 entries
                                      of a request word (holder id | nonce << 16, 0 = free),
                                      claimed by CAS, and the node's ack (the request it
                                      carried out: the holder's connections are cut) */
    uint64_t clock_delay[32];      /* node 0: per clock-board slot, how late that gateway's
                                      words landed: its previous word's wall ms:42 | the
                                      most any of its words of the 2 s before landed late,
                                      ms:22 (pool/clock.c); zero in pools made before
                                      2026-12-04 */
    uint64_t block_free_class[64]; /* heads of this node's stacks of returned blocks by size
                                      class, 8 per doubling from 16 KiB: class i holds blocks
                                      of at least its size and under the next one's (the
                                      last: 3.75 MiB and more), so a block of class i fits
                                      every need of that class (pool/returned.h); tagged as
                                      chunk_free, 0 = empty; zero in pools made before
                                      2026-12-05, whose returned blocks are on block_free */
} dm_superblock_t;

#define DM_FENCE_BOX 16 /* entries of fence_box */
_Static_assert(sizeof(dm_superblock_t) <= DM_SB_SIZE, "superblock fits its reserved bytes");
_Static_assert(offsetof(dm_superblock_t, alloc_board) == 512 &&
                   offsetof(dm_superblock_t, clock_delay) == 1152 &&
                   offsetof(dm_superblock_t, block_free_class) == 1408,
               "fields after reserved keep their place");

#define DM_SB_OFF(field) offsetof(dm_superblock_t, field)

/* key_count: bits 0..39 the number of keys (two's complement in 40 bits), bits 40..63 a
 * sequence that every presence change advances, so a recount can tell that no key came or
 * went while it walked the table (dm_race_recount). Pools written before the sequence
 * existed hold a plain count: sequence 0. */
#define DM_KEY_COUNT_BITS 40
static inline uint64_t dm_key_count_delta(int64_t d)
{
    return (1ull << DM_KEY_COUNT_BITS) + (uint64_t)d;
}
static inline int64_t dm_key_count_value(uint64_t w)
{
    return (int64_t)(w << (64 - DM_KEY_COUNT_BITS)) >> (64 - DM_KEY_COUNT_BITS);
}
static inline uint64_t dm_key_count_seq(uint64_t w)
{
    return w >> DM_KEY_COUNT_BITS;
}

/* Every range a gateway takes from a node's alloc_ptr (a chunk, or an extent for a large
 * value or a subtable) starts with this header, so a node's memory can be walked from
 * DM_SB_FIRST_CHUNK to alloc_ptr, and the chunks of a gateway that died can be found by
 * their owner (see bench/pool_info.c). */
#define DM_CHUNK_MAGIC 0x4b4e484355484b44ull /* "DKHUCHNK" */
#define DM_SB_FIRST_CHUNK 65536u
typedef struct dm_chunk_hdr {
    uint64_t magic;
    uint64_t bytes;      /* of the whole range, header included */
    uint64_t owner;      /* dm_alloc_owner_id() of the process that took it, 0 = free */
    uint64_t created_ms; /* wall clock */
    uint64_t next_free;  /* free ranges only: byte offset of the next one's header, 0 = last */
    uint64_t reserved[3];
} dm_chunk_hdr_t;

/* Pool-wide free list of returned ranges (issue 5), one per memory node: the node's
 * superblock word chunk_free is the head of a lock-free stack (Treiber) of ranges that keep
 * their dm_chunk_hdr_t (magic, bytes) with owner = 0, linked by next_free. The head word is
 * tagged against ABA: bits 40..63 a tag incremented by every successful CAS of the head,
 * bits 0..39 the byte offset of the top range's header on that node (0 = empty).
 *   pop:  READ head, READ the top's header, CAS head (tag, top) -> (tag + 1, top.next_free)
 *   push: READ head, WRITE hdr.next_free = head's offset (owner 0), CAS head -> (tag + 1, hdr)
 * Gateways pop a range only when its bytes equal what they would otherwise take from
 * alloc_ptr (dmcore/pool/alloc.c); ranges are pushed by dmkv-pool-reclaim (offline). */
#define DM_FREE_OFF_BITS 40
#define DM_FREE_OFF_MASK ((1ull << DM_FREE_OFF_BITS) - 1)
#define DM_FREE_TAG_MASK ((1ull << 24) - 1)
static inline uint64_t dm_free_head(uint64_t tag, uint64_t off)
{
    return ((tag & DM_FREE_TAG_MASK) << DM_FREE_OFF_BITS) | (off & DM_FREE_OFF_MASK);
}
static inline uint64_t dm_free_head_off(uint64_t head)
{
    return head & DM_FREE_OFF_MASK;
}
static inline uint64_t dm_free_head_tag(uint64_t head)
{
    return head >> DM_FREE_OFF_BITS;
}

#endif
