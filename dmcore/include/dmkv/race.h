/* RACE extendible hashing on one-sided verbs (RACE, ACM TOS 2022, §3.2-3.3).
 * Subtables of 64-byte buckets (8-byte header {local depth, suffix} + 7 slots of
 * {fp:8, len:8, ptr:48}), grouped [main A][overflow][main B]; a combined bucket (main +
 * its overflow, 128 contiguous bytes) is read in one READ; every key has two combined
 * buckets in different groups. All mutations are 8-byte slot CASes; KV blocks are out of
 * place (kvblock.h). The directory of 2^GD subtables is cached per worker and used with
 * stale reads checked against bucket headers (RACE §3.4.1). An insert that finds both
 * combined buckets full splits the subtable, doubling the directory when needed, while
 * other operations go on (RACE §3.4.2, resize.c). */
#ifndef DMKV_RACE_H
#define DMKV_RACE_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/index.h" /* RACE is a point index: its types are the role's */
#include "dmkv/kvblock.h"
#include "dmkv/worker.h"

#define DM_RACE_SLOTS 7      /* slots per bucket */
#define DM_RACE_BUCKET 64    /* bytes per bucket */
#define DM_RACE_MAX_DEPTH 16 /* directory area reserved for 2^16 entries */
#define DM_RACE_INIT_DEPTH 2 /* global depth at creation: 4 subtables */
#define DM_RACE_GROUPS 256   /* bucket groups per subtable (768 buckets, 48 KiB) */

/* Bucket groups per subtable used when this process creates a table (default
 * DM_RACE_GROUPS; tests use tiny tables to reach DM_EFULL). Attaching ignores it. */
void dm_race_set_create_groups(uint64_t groups);

/* RACE's table as the point role (race/index_ops.c), listed by kv/engines.c. */
extern const dm_point_index_ops_t dm_race_point_index;

/* Attach this worker to the pool's RACE table, creating it (one-sidedly, CAS on the
 * superblock's race_root) if no gateway has yet. 1-2 RTTs, plus creation. */
int dm_race_attach(dm_ctx_t *ctx, dm_race_t **out);
void dm_race_detach(dm_race_t *r);

/* What a write intends (dm_point_decide_fn): 1 go ahead, 0 leave the key untouched. */
typedef dm_point_decide_fn dm_race_decide_fn;

/* A found item (dm_point_item_t): addr is its slot's address, version the slot word. */
typedef dm_point_item_t dm_race_item_t;

/* Search (Algorithm 4, duplicates resolved by the inserters' rule: smallest bucket number,
 * then slot). 2 RTTs (+1 for blocks over 16 KB). Returns 1 and fills *item (free its
 * block), 0 when absent, or DM_E*. */
int dm_race_search(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_item_t *item);

/* dm_race_search through the validated address cache (race/addr_cache.c; one per process
 * and pool, shared by its workers): for a key this gateway found or updated before, one batch reads
 * the slot word and the block it held (1 RTT) and the answer stands when the word is unchanged and
 * the block holds the key; otherwise (+1 RTT wasted) the full search runs and refills the cache.
 * Only for keys whose presence changes under the CHIME leaf lock (the hybrid protocol), so that no
 * duplicate copy can hold a newer value. A lost connection (DM_EIO) is retried once, on
 * a new connection (reads are safe to redo). Same returns as dm_race_search. */
int dm_race_search_hot(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_item_t *item);
/* Start loading the CPU cache lines of key's address-cache entry (its set's sequence word
 * and its 4 ways, 2 lines): a hint for a key that will be looked up a few microseconds from
 * now (the gateway's next pipelined command). No effect on results. */
void dm_race_addr_cache_prefetch(dm_race_t *r, const void *key, size_t klen);
/* Entries of the address caches created after the call (one per process and pool): rounded
 * up to a multiple of 4 ways times a power of two, 32 bytes each (default 1 M: 32 MiB,
 * touched as it fills). Returns 0, or DM_EINVAL outside 1024..2^30. */
int dm_race_addr_cache_set_entries(uint64_t entries);
/* Entries of the address caches created from now on (CONFIG GET addr-cache-entries). */
uint64_t dm_race_addr_cache_entries(void);
/* Process-wide counters of the address cache: answers from it (dm_race_search_hot and the
 * updates through it), entries dropped (their word was gone), one-round-trip SETs
 * (dm_race_update_blind), entries passed over because a split moved the key's subtable. */
void dm_race_addr_cache_stats(uint64_t *hits, uint64_t *dropped, uint64_t *blind_sets,
                              uint64_t *moved);

/* Upsert: write block (already serialized, block_len bytes) for key, insert or update.
 * decide() sees the current value (or NULL) and may veto (NX/XX). If keep_ttl, the
 * block's expiry is replaced by the current value's. If old is non-NULL and the key
 * existed, *old receives the replaced item (caller frees old->block).
 * RTTs: update 3, insert 4 (Algorithm 1 plus the duplicate check, RACE §3.3), more
 * while a split is in the way. Returns 1 when written, 0 when vetoed, or DM_E* (DM_EFULL
 * at the maximum depth, DM_ENOMEM when the pool is full: nothing changed). The slot CAS
 * of an update is the write's commit (dm_batch_commit: it waits for the commit turn,
 * dmkv/coro.h); an insert's caller takes the whole turn before its leaf lock. */
int dm_race_set(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block, uint64_t block_len,
                dm_race_decide_fn decide, void *arg, int keep_ttl, dm_race_item_t *old);

/* What a write under the key's CHIME leaf lock (the hybrid protocol, dmcore/kv/hybrid.c)
 * carries from the unlocked attempt before it and what it read with the lock
 * (dm_point_carry_t; RACE keeps the prefetched buckets in its engine words). Zero it. */
typedef dm_point_carry_t dm_race_carry_t;

/* Append READs of key's two combined buckets (2 verbs, 256 bytes, all to the subtable's
 * memory node) to b, into carry. The caller sets carry->prefetched once b executed with
 * the reads ordered behind its lock CAS (same node, fenced): the next dm_race_set_carry or
 * dm_race_delete_carry then starts from them instead of reading (one RTT fewer). Returns
 * 0, or DM_EINVAL when b has no room (nothing appended). */
int dm_race_prefetch(dm_ctx_t *ctx, dm_batch_t *b, const void *key, size_t klen,
                     dm_race_carry_t *carry);

/* dm_race_set with a carry (NULL: plain dm_race_set). The block written by an attempt that
 * decide() vetoed stays written in carry->block for the next attempt; release it with
 * dm_race_carry_release. Under the leaf lock (carry->locked, within sure_until_us) an insert's
 * slot CAS goes with READs of its bucket header and split lease and the key counter FAA,
 * and the duplicate re-read is skipped (docs/throughput.md "A new key in 3 round trips"). */
int dm_race_set_carry(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block,
                      uint64_t block_len, dm_race_decide_fn decide, void *arg, int keep_ttl,
                      dm_race_item_t *old, dm_race_carry_t *carry);
/* An update that does not depend on the old value (a plain SET) of a key whose cached slot
 * word was seen within DM_OP_TIMEOUT_US: WRITE the new KV block (block_len bytes) and CAS
 * the slot from the cached word, in one message: 1 RTT instead of 2 (the validated
 * address cache's update, without its read). Safe for the reason every RACE CAS after a
 * read is (dm_ctx_check): the word's block cannot be freed and reused in that slot within
 * DM_GRACE_US of when the word was seen there, so a CAS that succeeds replaced our key's
 * value. Returns 1 done; 2 not done (no fresh entry, slot and block on different nodes, or
 * the slot changed: run the full path); DM_EIO / DM_ETIMEDOUT with the outcome unknown;
 * other DM_E* errors. Its CAS is the write's commit (dm_batch_commit): the batch layer
 * waits for the commit turn (dmkv/coro.h), never past the word's age bound. */
int dm_race_update_blind(dm_ctx_t *ctx, const void *key, size_t klen, const uint8_t *block,
                         uint64_t block_len);
/* Free carry's unused block (quarantined when a CAS named it). */
void dm_race_carry_release(dm_ctx_t *ctx, dm_race_carry_t *carry);

/* Delete every copy of key (Algorithm 2). decide() may veto as for set; the returned view
 * lets callers tell an expired key. Returns 1 when removed, 0 when absent, or DM_E*. */
int dm_race_delete(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_decide_fn decide,
                   void *arg);
/* dm_race_delete starting from carry's prefetched buckets (carry NULL: dm_race_delete). */
int dm_race_delete_carry(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_decide_fn decide,
                         void *arg, dm_race_carry_t *carry);

/* Walk the buckets from cursor (0 = start). Calls emit(arg, view) for every live item of
 * about count keys' worth of buckets, sets *next (0 when the walk is complete).
 * A cursor past the end finishes the walk (Redis accepts any cursor). Returns 0 or DM_E*. */
/* Offline: fn for the table, every subtable the directory names (a dead doubling's half
 * included) and every block a slot points to (bytes as allocated). 0, fn's error or DM_E*.
 * The point index's objects() (index.h); race/objects.c. */
int dm_race_objects(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg);

typedef dm_point_emit_fn dm_race_emit_fn;
/* One page of a walk of every key in RACE: the subtable the cursor (a directory suffix,
 * bit-reversed, so pages stay valid across splits) names, each live slot's key and block
 * passed to emit. *next: the cursor of the next page, 0 after the last. count is ignored
 * (a page is one subtable). A few RTTs per page (its buckets, then its blocks), more
 * after a split. Returns 0, emit's error or DM_E* (DM_ERETRY: the directory kept
 * changing). race/scan.c */
int dm_race_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, dm_race_emit_fn emit, void *arg,
                 uint64_t *next);

/* Presence of n keys: present[i] = 1 when RACE holds keys[i] (live or expired; its expiry
 * in expire_ms[i] when expire_ms is non-NULL), 0 when absent. 2 RTTs per 32 keys plus one
 * search for each key whose buckets are mid-split. Returns 0 or DM_E*. dmcore/race/probe.c */
int dm_race_probe(dm_ctx_t *ctx, const uint8_t *const *keys, const size_t *lens, unsigned n,
                  uint8_t *present, uint64_t *expire_ms);

/* Empty every slot (FLUSHALL). Returns the number of items removed or DM_E*. */
int64_t dm_race_flush(dm_ctx_t *ctx);

/* Number of keys (superblock counter, kept with FAA). */
int64_t dm_race_count(dm_ctx_t *ctx);

/* Repair the key counter (DBSIZE) from the table: walk every bucket counting live slots,
 * with the counter word and the directory read before and after, then again 1 s later.
 * Trusted only when both walks found the same count, the counter word (its sequence:
 * superblock.h) and the directory never changed and no split was under way (no frozen
 * slot, no MOVING header); then the counter is CASed to the count. The second walk is for
 * a slot CAS whose FAA, sent in the same batch, lands apart from it (two memory nodes, two
 * QPs, a FLUSHALL that counts at its end): it assumes a batch's verbs land within that
 * second of each other. Up to 3 tries, 200 ms apart. The drift corrected (keys found -
 * counter) goes to *drift. Each try reads the whole table twice. For a dead gateway's
 * leftovers: a counter FAA it never sent (issue 12). Expired keys not yet removed count,
 * as in DBSIZE. Returns 0, DM_ERETRY (the table kept changing) or DM_E*. */
int dm_race_recount(dm_ctx_t *ctx, int64_t *drift);

/* Process-wide split counters: finished splits, splits in progress, directory doublings
 * done by this process (INFO). */
void dm_race_split_stats(uint64_t *done, uint64_t *running, uint64_t *doublings);
/* Inserts of this process that landed behind a split and were taken back (RACE §3.4.2),
 * and of those, how many took back another gateway's newer value of the key instead. */
void dm_race_stranded_stats(uint64_t *taken_back, uint64_t *adopted);

/* Current global depth of the cached directory (tests, INFO). */
unsigned dm_race_global_depth(const dm_race_t *r);

/* Load factor: used slots / all slots, from a full bucket walk (tests, benchmarks). */
int dm_race_load(dm_ctx_t *ctx, uint64_t *used, uint64_t *total);

#endif
