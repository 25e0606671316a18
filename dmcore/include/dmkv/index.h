/* The two index roles of the hybrid protocol (issue 14, docs/DESIGN.md "Index engines"):
 * a point index (RACE today: search, set, delete of one key, holding the values) and a
 * range index (CHIME today: ordered scans, range locks with leases, pending entries). The
 * KV layer (kv/) and the gateway reach the engines only through these tables: attaching a
 * worker, the data path of the hybrid protocol (kv/hybrid.c composes one point role and
 * one range role), counting, recounting and flushing keys, SCAN, and statistics for INFO.
 * Each engine's folder fills one table (race/index_ops.c, chime/index_ops.c) and its own
 * header names these types under its own names; kv/engines.c is the one file that lists
 * the engines, and kv.h says which this process runs. This header is an interface only: it has no
 * code of its own, so engines include it without depending on the KV layer that composes them. */
#ifndef DMKV_INDEX_H
#define DMKV_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/batch.h"
#include "dmkv/kvblock.h"
#include "dmkv/worker.h"

/* ---- types both roles' callers see ---- */

/* What a write intends, decided from the key's current value (v NULL: absent). Return 1 to
 * go ahead, 0 to leave the key untouched. */
typedef int (*dm_point_decide_fn)(void *arg, const dm_kv_view_t *v);

/* A key's item as the point index found it: where it is, its version token (the 8 bytes
 * every write of the key changes and a conditional write can be based on: RMW, WATCH;
 * RACE: the slot word) and a private copy of its KV block. */
typedef struct dm_point_item {
    dm_gaddr_t addr;  /* the engine's location of the item (RACE: the slot's address) */
    uint64_t version; /* the version token as read */
    uint8_t *block;   /* malloc'd copy of the block (free()) */
    uint64_t block_len;
    dm_kv_view_t view; /* points into block */
} dm_point_item_t;

#define DM_POINT_CARRY_ENGINE 48 /* 8-byte words of a carry the engine keeps for itself */

/* What a write under the key's range lock carries from the unlocked attempt before it and
 * what it read with the lock (kv/hybrid.c). Zero it before the first attempt. */
typedef struct dm_point_carry {
    dm_gaddr_t block;       /* the value's block, written by an earlier attempt (0: none) */
    uint64_t block_len;     /* its bytes */
    int block_posted;       /* a commit naming it was posted once: never reuse it at once */
    int block_unwritten;    /* block allocated, its WRITE sent with a lock batch that may not
                               have run (a join sends none): write it again */
    int locked;             /* the range lock is held: no one else changes the key's presence */
    uint64_t sure_until_us; /* monotonic µs until which no other insert of the key can overlap
                               (the lease, range lock_sure_until); later, or 0 after a
                               takeover, an insert runs its duplicate check all the same */
    uint64_t commit_by_us;  /* monotonic µs after which an insert's commit must not be posted
                               any more (the lock's hold bound, range lock_hold_until) */
    int prefetched;         /* the engine's part was read in the lock's batch, behind its CAS */
    uint64_t read_us;       /* monotonic µs that batch was posted (the reads' age) */
    uint64_t engine[DM_POINT_CARRY_ENGINE]; /* the engine's own (RACE: buckets read) */
} dm_point_carry_t;

/* Keys of the range index as its scan returns them. */
typedef struct dm_range_key {
    uint8_t *data; /* malloc'd */
    size_t len;
    int pending; /* flagged pending: the caller settles it against the point index */
} dm_range_key_t;

/* A held range lock (opaque: only the range engine that handed it out reads it). */
typedef struct dm_range_lock dm_range_lock_t;

/* Presence of n keys in the point index: present[i] = 1 when it holds keys[i] (live or
 * expired), else 0; their expiries (ms, 0 none) in expire_ms[i] when not NULL. */
typedef int (*dm_point_probe_fn)(dm_ctx_t *ctx, const uint8_t *const *keys, const size_t *lens,
                                 unsigned n, uint8_t *present, uint64_t *expire_ms);

/* Called for every live item of a point index walk (the view dies when it returns). */
typedef void (*dm_point_emit_fn)(void *arg, const dm_kv_view_t *v);

/* Called for every object of the pool an index reaches in an offline walk (objects()):
 * bytes from addr as allocated, where the engine knows it (at least the bytes in use).
 * Return 0 to go on, or DM_E* to stop the walk with that result. */
typedef int (*dm_index_object_fn)(void *arg, dm_gaddr_t addr, uint64_t bytes);

/* One statistic as INFO prints it: "name:value". decimals 0: the counter u; otherwise
 * the ratio d printed with that many decimals. */
typedef struct dm_index_stat {
    const char *name; /* the INFO field, engine prefix included ("race_splits") */
    uint64_t u;
    double d;
    int decimals;
} dm_index_stat_t;

#define DM_INDEX_STATS_MAX 32 /* room a caller of stats() needs */

/* A counter, and a ratio a / b printed with decimals, as an engine's stats() reports them. */
static inline dm_index_stat_t dm_index_count(const char *name, uint64_t u)
{
    return (dm_index_stat_t){.name = name, .u = u};
}

static inline dm_index_stat_t dm_index_ratio(const char *name, uint64_t a, uint64_t b, int decimals)
{
    return (dm_index_stat_t){
        .name = name, .d = b ? (double)a / (double)b : 0.0, .decimals = decimals};
}

/* What every engine says of itself, first in its role's table. */
typedef struct dm_index_engine {
    const char *name; /* "race", "chime" (--point-index, --range-index, INFO) */
    uint8_t id;       /* its number in the pool's superblock record (engines): never reused */
    uint32_t max_key; /* bytes of the longest key it can hold, 0: any (ROLEX: inline keys) */
} dm_index_engine_t;

/* Between the two walks a recount trusts (dm_point_index_ops_t.recount), in us. */
#define DM_RECOUNT_GAP_US 1000000u

typedef struct dm_point_index_ops {
    dm_index_engine_t engine;
    /* Attach w to the pool's index (creating it on a new pool): 0 or DM_E*. */
    int (*attach)(dm_ctx_t *ctx, dm_worker_t *w);
    void (*detach)(dm_worker_t *w);
    /* Keys in the index (DBSIZE), or DM_E*. */
    int64_t (*count)(dm_ctx_t *ctx);
    /* Remove every key (FLUSHALL's first half): keys removed, or DM_E*. */
    int64_t (*flush)(dm_ctx_t *ctx);
    /* Count the keys again and set the counter (a dead gateway's counter updates that
     * never landed): the drift corrected (found - counter) in *drift. Returns 0,
     * DM_ERETRY (keys kept coming and going: try later) or DM_E*. A key's write and the
     * FAA that counts it land apart, so a walk may see a key whose count change is still
     * on its way: an engine trusts only two walks DM_RECOUNT_GAP_US apart that agree under
     * one counter value (by then a FAA in flight has landed and moved it). */
    int (*recount)(dm_ctx_t *ctx, int64_t *drift);
    /* Process-wide statistics into out[0..DM_INDEX_STATS_MAX): how many. */
    size_t (*stats)(dm_index_stat_t *out);

    /* -- the data path (results: 1 found / written / removed, 0 absent / vetoed, DM_E*) -- */
    /* Find key: *item filled (free item->block) when 1. */
    int (*search)(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_item_t *item);
    /* search through the engine's cache of where keys were (may be a plain search). */
    int (*search_cached)(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_item_t *item);
    /* A hint that key will be looked up soon (may do nothing). */
    void (*cache_prefetch)(dm_worker_t *w, const void *key, size_t klen);
    /* 1 when the engine's cache remembers where key was (a write of it is then likely an
     * update, not an insert), 0 otherwise; local, no verbs. A hint only. */
    int (*cache_knows)(dm_worker_t *w, const void *key, size_t klen);
    /* Insert or update key with block (block_len bytes, serialized): decide() sees the
     * current value and may veto; keep_ttl keeps the current expiry; *old (if not NULL)
     * receives the replaced item. carry (NULL: none) keeps a vetoed attempt's written block
     * and what the range lock's batch read (dm_point_carry_t). */
    int (*set)(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block, uint64_t block_len,
               dm_point_decide_fn decide, void *arg, int keep_ttl, dm_point_item_t *old,
               dm_point_carry_t *carry);
    /* An update that does not read first (a plain SET of a key seen recently): 1 done,
     * 2 not done (run set), DM_EIO / DM_ETIMEDOUT outcome unknown, DM_E*. */
    int (*set_blind)(dm_ctx_t *ctx, const void *key, size_t klen, const uint8_t *block,
                     uint64_t block_len);
    /* Remove key (every copy); decide() may veto as for set. carry as for set. */
    int (*del)(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_decide_fn decide, void *arg,
               dm_point_carry_t *carry);
    /* Free a carry's unused block (and what prefetch kept in it). */
    void (*carry_release)(dm_ctx_t *ctx, dm_point_carry_t *carry);
    /* Bytes to allocate for a KV block of block_len bytes that set() may be given in a
     * carry (the engine's rounding: SepHash's entries size blocks in 64-byte units). */
    uint64_t (*block_bytes)(uint64_t block_len);
    /* Append to b the reads a locked write of key will start from (into carry): b goes out
     * with the range lock's CAS. 0, or DM_EINVAL when b has no room (nothing appended). */
    int (*prefetch)(dm_ctx_t *ctx, dm_batch_t *b, const void *key, size_t klen,
                    dm_point_carry_t *carry);
    dm_point_probe_fn probe;
    /* Bytes the point index spends on one key besides its KV block (MEMORY USAGE). */
    uint64_t (*key_bytes)(void);
    /* Walk the live items from cursor (0: start), about count keys' worth; *next 0 when done. */
    int (*scan)(dm_ctx_t *ctx, uint64_t cursor, size_t count, dm_point_emit_fn emit, void *arg,
                uint64_t *next);
    /* Offline only (no gateway writes the pool: dmkv-pool-reclaim): fn for every object the
     * index reaches, its own structures and every KV block an entry names (dead versions not
     * yet dropped included). 0, fn's error, DM_ECORRUPT for a structure that does not
     * decode, or DM_E*. */
    int (*objects)(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg);
} dm_point_index_ops_t;

typedef struct dm_range_index_ops {
    dm_index_engine_t engine;
    int (*attach)(dm_ctx_t *ctx, dm_worker_t *w);
    /* Give w's range index the point index's presence check, with which it settles
     * pending entries (right after attach; the composer's, kv/engines.c). */
    void (*set_presence)(dm_worker_t *w, dm_point_probe_fn probe);
    void (*detach)(dm_worker_t *w);
    /* Settle every pending entry and drop entries the point index no longer has
     * (FLUSHALL's second half: the range index stays a superset of the point index).
     * Returns the entries removed or DM_E*. */
    int64_t (*settle_all)(dm_ctx_t *ctx);
    size_t (*stats)(dm_index_stat_t *out);

    /* -- the data path -- */
    /* Lock the range that covers key, with a lease (waits while another holds it, takes an
     * expired lease over and settles the range's pending entries first); existing: key is
     * expected to have an entry (DEL). extra (NULL: none): READs sent in every lock batch,
     * behind the lock; *fresh (if not NULL) = 1 when they executed after the lock was
     * taken. Returns 1 when key has an entry, 0 when not, or DM_E*; *out to unlock. */
    int (*lock)(dm_ctx_t *ctx, const void *key, size_t klen, int existing, const dm_batch_t *extra,
                int *fresh, dm_range_lock_t **out);
    /* lock for an insert, which may share the lock with this worker's other inserts
     * (mark_pending may then answer DM_EYIELD: unlock with -1, come back after the turn). */
    int (*lock_insert)(dm_ctx_t *ctx, const void *key, size_t klen, const dm_batch_t *extra,
                       int *fresh, dm_range_lock_t **out);
    /* Flag the locked key's entry pending, inserting it first when it has none. */
    int (*mark_pending)(dm_ctx_t *ctx, dm_range_lock_t *lk);
    /* Settle the key's entry (1 keep, 0 remove, -1 leave pending) and unlock; frees lk.
     * When ctx->ride_failed says a ride with the lock's writes failed, or the lock is no
     * longer valid, nothing is written: the lock word goes back, the entry stays pending. */
    int (*unlock)(dm_ctx_t *ctx, dm_range_lock_t *lk, int present);
    /* The lease's bounds, in monotonic µs: presence may change while lock_valid; a change
     * completed past the lease is in doubt (reconcile); sure_until: no other insert of the
     * key can overlap before it (0 after a takeover); hold_until: no write after it; posted:
     * when the lock CAS was posted. lock_valid is 0 too once a write of the hold posted
     * without waiting failed (dm_async_failures). */
    int (*lock_valid)(const dm_range_lock_t *lk);
    int (*lock_in_doubt)(const dm_range_lock_t *lk);
    uint64_t (*lock_sure_until)(const dm_range_lock_t *lk);
    uint64_t (*lock_hold_until)(const dm_range_lock_t *lk);
    uint64_t (*lock_posted_us)(const dm_range_lock_t *lk);
    /* What the lock holds, as a number a worker's waiters can wait on (CHIME: the leaf). */
    uint64_t (*lock_range)(const dm_range_lock_t *lk);
    /* Lock-free lookup: 1 entry present (*pending set when flagged), 0 absent, DM_E*. */
    int (*search)(dm_ctx_t *ctx, const void *key, size_t klen, int *pending);
    /* Keys from cursor (0: the first covering prefix), sorted, appended to *keys (*n, *cap,
     * realloc'd) until about count; *next 0 when the walk is done. DM_EINVAL: bad cursor. */
    int (*scan)(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix, size_t plen,
                dm_range_key_t **keys, size_t *n, size_t *cap, uint64_t *next);
    /* A cursor at a random place (RANDOMKEY, the expiry sweep). */
    int (*random_cursor)(dm_ctx_t *ctx, uint64_t *cursor);
    /* A signature of where an absent key would be: it changes when the key is created
     * and deleted again (WATCH of an absent key). */
    int (*watch_sig)(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *sig);
    /* Bytes the range index spends on a key of klen bytes (MEMORY USAGE). */
    uint64_t (*key_bytes)(dm_ctx_t *ctx, size_t klen);
    /* Replace the index by an empty one (offline: dmkv-index-rebuild). */
    int (*reset)(dm_ctx_t *ctx);
    /* Offline only, as the point index's objects(): every node and record it reaches. */
    int (*objects)(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg);
} dm_range_index_ops_t;

#endif
