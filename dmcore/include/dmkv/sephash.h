/* SepHash (Min et al., VLDB'24): a write-optimised hash index on one-sided verbs. Two levels
 * under one extendible directory: per segment a small unordered CurSegment that writers
 * append 8-byte entries to with one CAS (no lock, no re-read: the newest entry of a key is
 * the last one), and a large MainSegment sorted by fingerprint that merges rebuild in bulk
 * when the CurSegment is full; a MainSegment over its bound splits by the next hash bit.
 * Layout and the concurrency argument: dmcore/sephash/sephash_internal.h.
 *
 * The point role (dm_sephash_point_index, --point-index sephash) wraps this table:
 * sephash/index_ops.c, role_write.c. Used alone, the table's root is the caller's to keep
 * (dm_sephash_create), and each worker opens its own handle on it (the directory cache).
 * KV blocks are kvblock.h's; an entry points to one.
 *
 * The merge lock and the directory lock are leases (docs/leases.md, sephash/lease.c): a
 * worker that dies holding one is taken over after 3 s by the next writer that needs it,
 * which finishes the dead merge or split (merge.c, split.c say why that is safe). A key
 * count (counted by merges), scan and flush are dmkv's (count.c, scan.c).
 *
 * Not yet: the FPTable's record points (§4.4.2); fp2 of CurSegment entries; a repair of
 * the merge-based count after a merger died between its commit and its FAA (the point
 * role's live counter has its recount). */
#ifndef DMKV_SEPHASH_H
#define DMKV_SEPHASH_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/index.h"
#include "dmkv/worker.h"

#define DM_SH_CUR_ENTRIES 128u  /* entries per CurSegment (1 KB: SepHash §5.1's default) */
#define DM_SH_MAIN_MAX 8192u    /* MainSegment bound, entries (64 x CurSegment, §5.1) */
#define DM_SH_MAIN_LIMIT 16383u /* hard limit (the meta word's 14-bit count) */

typedef struct dm_sephash dm_sephash_t;

/* Build an empty table in the pool (4 segments, global depth 2) whose MainSegments split
 * above main_max entries (0: DM_SH_MAIN_MAX; at least DM_SH_CUR_ENTRIES, at most
 * DM_SH_MAIN_LIMIT - DM_SH_CUR_ENTRIES). *root: its header's address, for dm_sephash_open.
 * A few RTTs. Returns 0, DM_EINVAL (main_max) or DM_ENOMEM / DM_E*. */
int dm_sephash_create(dm_ctx_t *ctx, uint32_t main_max, dm_gaddr_t *root);

/* A worker's handle on the table at root: reads its directory (1 RTT + 1 per 64 KiB).
 * Returns 0, DM_EPROTO (no table there) or DM_E*. */
int dm_sephash_open(dm_ctx_t *ctx, dm_gaddr_t root, dm_sephash_t **out);
void dm_sephash_close(dm_sephash_t *h);

/* Find key's newest entry (SepHash §4.2.1 "Search", §4.4.1): READ the CurSegMeta, the
 * filter byte of the key's fingerprint and the MainSegment run of that fingerprint (1 RTT);
 * READ the CurSegment only when the filter says it may hold the key (1 RTT); READ the KV
 * blocks of the matching entries and compare keys (1 RTT). Returns 1 and fills *item (its
 * block malloc'd: free it; version = the entry's version token: its word without the sign
 * and dep bits, which merges rewrite), 0 when absent (item->version = the tombstone's
 * token, or 0 when the key has no entry at all), DM_ECORRUPT (a block failed its checksum)
 * or DM_E*. */
int dm_sephash_search(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen,
                      dm_point_item_t *item);

#define DM_SH_TOMBSTONE 1u /* the entry deletes the key (its block names the key) */
#define DM_SH_IF 2u        /* conditional: only while the key's newest entry is `expect` */

/* Pool bytes to allocate (dm_alloc_kv_block) for a KV block of block_len bytes that goes
 * into SepHash: block_len rounded up to 64. Entries give a block's size in 64-byte units and
 * readers read that much, so the rounding must be the block's own, never its neighbour's
 * or past the region's end; a merge frees a dropped version with this size. */
static inline uint64_t dm_sephash_block_bytes(uint64_t block_len)
{
    return (block_len + 63) & ~63ull;
}

/* Append an entry for key pointing to block (block_len bytes, a published KV block of key
 * allocated with dm_sephash_block_bytes(block_len) bytes)
 * to its CurSegment (SepHash §4.3): CAS of the first empty entry, in order (2 RTTs, plus a
 * merge when the CurSegment is full: §4.2.2). An insert, an update and (DM_SH_TOMBSTONE) a
 * delete are all appends; the newest wins. With DM_SH_IF the append happens only while
 * the key's newest entry's version token is still expect (0: the key has no entry), else
 * DM_ECONFLICT (append.c has the argument); expect must have been read within ctx's
 * operation (dm_ctx_check: a token can recur once its block is freed and reused), else
 * DM_ERETRY. *version (if not NULL): the token written. Returns 0, DM_ECONFLICT,
 * DM_ERETRY, DM_EFULL (a MainSegment at the maximum depth is full), DM_ENOMEM or DM_E*. */
int dm_sephash_append(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen,
                      dm_gaddr_t block, uint64_t block_len, unsigned flags, uint64_t expect,
                      uint64_t *version);

/* How a point role's append commits (dmkv: the hybrid protocol). by_us: the entry CAS is
 * the write's commit point (dm_batch_commit, not posted after by_us, monotonic µs; 0: not
 * marked). count: added to the live key counter (dm_sephash_live_count) with the CAS (in
 * its message when the table's header is on the segment's node, taken back if the CAS
 * lost; else posted once it won). look: a lookup with the whole CurSegment
 * (sephash_internal.h sh_lookup) this operation made and decided on: the first attempt
 * CASes from it instead of reading again (NULL: read first). img: the block's bytes
 * (block_len), written before the CAS in its message when the block is on the segment's
 * node, else in a batch of its own first (NULL: the block is written already); written
 * is set once they were sent, so a caller that comes back need not send them again. */
typedef struct dm_sephash_commit {
    uint64_t by_us;
    int64_t count;
    const struct sh_look *look;
    uint64_t look_us; /* monotonic µs before look's reads were posted */
    const void *img;
    int written;
} dm_sephash_commit_t;

/* dm_sephash_append whose entry CAS is marked and counted as cm says (NULL: as
 * dm_sephash_append), any ride of ctx sent before it (dm_ctx_ride_before). Returns as
 * dm_sephash_append, plus DM_ERETRY (by_us passed: not posted) or DM_EYIELD (the turn gave
 * way: not posted). */
int dm_sephash_append_commit(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen,
                             dm_gaddr_t block, uint64_t block_len, unsigned flags, uint64_t expect,
                             dm_sephash_commit_t *cm, uint64_t *version);

/* The live key counter into *n (1 RTT): moved only by conditional appends that know they
 * inserted or deleted a key (dm_sephash_commit_t.count), so exact when every write is one
 * (the point role's); dm_sephash_live_count_set sets it (a recount). 0 or DM_E*. dmkv. */
int dm_sephash_live_count(dm_ctx_t *ctx, dm_sephash_t *h, int64_t *n);
/* CAS the live counter from expect to n: 0, DM_ECONFLICT (it moved) or DM_E*. */
int dm_sephash_live_count_set(dm_ctx_t *ctx, dm_sephash_t *h, int64_t expect, int64_t n);
/* The table's header address (where its root lives). */
dm_gaddr_t dm_sephash_root(const dm_sephash_t *h);

/* Build key's KV block (val, vlen bytes; an empty one for DM_SH_TOMBSTONE), write it to a
 * block of ctx's worker and append it (flags, expect, *version as dm_sephash_append). A
 * block never appended is returned to the allocator. Returns as dm_sephash_append. */
int dm_sephash_put(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, const void *val,
                   size_t vlen, unsigned flags, uint64_t expect, uint64_t *version);

/* Offline: fn for the table, every CurSegment its directory names, their MainSegments and
 * every KV block an entry of either names (bytes as allocated). 0, fn's error, DM_ECORRUPT
 * (a MainSegment whose count is not its meta word's) or DM_E*. 2 RTTs per segment plus a
 * header read per 64 blocks over 384 bytes. sephash/objects.c. */
int dm_sephash_objects(dm_ctx_t *ctx, dm_sephash_t *h, dm_index_object_fn fn, void *arg);

/* The table's key count (1 RTT): the keys in its MainSegments, from a header counter that
 * every merge moves by FAA right after its commit by what it changed (new entries minus
 * old: it knows exactly which keys are live in its segment, having deduplicated them).
 * Exact for every key whose segment merged since its last insert or delete; a key's
 * insert or delete appended since is not counted yet (at most 128 entries per segment:
 * the CurSegments; at rest, dm_sephash_scan counts exactly). Off by a merge's change for
 * good if its merger dies between its commit and its FAA (count.c). Returns the count (>= 0) or
 * DM_E*. dmkv: not in the paper. */
int64_t dm_sephash_count(dm_ctx_t *ctx, dm_sephash_t *h);

/* Called by dm_sephash_scan with one live item: kv's key and value point into a buffer
 * freed when the callback returns (copy what you keep); kv->version is its token. */
typedef void (*dm_sephash_emit_fn)(void *arg, const dm_kv_view_t *kv);

/* Walk the live items (the newest version of each key, tombstones hidden) segment by
 * segment, from directory slot cursor (0 to start): emits whole segments until count
 * items were emitted (at least one slot per call), then *next = the slot to go on from, 0
 * when the walk is done. A key present for the whole walk (from the call with cursor 0 to
 * the one that answers *next = 0) is emitted at least once, possibly more than once when
 * segments split meanwhile; a key written or deleted during it may or may not be
 * (scan.c argues it). Per segment: 2 RTTs, + 1 per 64 entries of its MainSegment and
 * CurSegment (their KV blocks). Returns 0, DM_ECORRUPT (a block failed to parse), DM_ERETRY
 * (a segment kept merging under it) or DM_E*. dmkv: not in the paper. */
int dm_sephash_scan(dm_ctx_t *ctx, dm_sephash_t *h, uint64_t cursor, unsigned count,
                    dm_sephash_emit_fn emit, void *arg, uint64_t *next);

/* FLUSHALL: a walk (dm_sephash_scan) that appends a tombstone for every live key it finds
 * (2 RTTs each; merges then free the blocks). *deleted (if not NULL): tombstones appended.
 * Not atomic: concurrent readers see keys vanish segment by segment; every key written
 * before the flush began is deleted unless written again during it; a write concurrent
 * with the flush may survive it or not (including one that lands between the walk's read
 * and the tombstone: the tombstone is newer and deletes it). Returns 0 or as
 * dm_sephash_scan / dm_sephash_put (then some keys are left). dmkv: not in the paper. */
int dm_sephash_flush(dm_ctx_t *ctx, dm_sephash_t *h, uint64_t *deleted);

/* SepHash as the point role (sephash/index_ops.c): --point-index sephash. */
extern const dm_point_index_ops_t dm_sephash_point_index;

/* What this handle did (process-local counters). */
typedef struct dm_sephash_stats {
    uint64_t merges;       /* CurSegments merged into their MainSegment */
    uint64_t splits;       /* MainSegments split */
    uint64_t doublings;    /* directory doublings */
    uint64_t split_reads;  /* KV blocks read by splits (the dep bits ran out) */
    uint64_t merge_reads;  /* KV blocks read by merges */
    uint64_t freed_blocks; /* dead versions' KV blocks freed by merges */
    uint64_t retries;      /* attempts restarted: stale directory or segment cache (a merge
                              since), a merge in the way, a lost entry CAS */
    uint64_t takeovers;    /* merge or directory locks taken from a holder presumed dead */
    uint64_t hold_ends;    /* merges given up because their hold ended before a write */
} dm_sephash_stats_t;
void dm_sephash_stats(const dm_sephash_t *h, dm_sephash_stats_t *s);
/* The handle's cached global depth. */
unsigned dm_sephash_global_depth(const dm_sephash_t *h);

#endif
