/* The key-value API the gateway calls: GET/SET/DEL/SCAN over the pool's hybrid index:
 * RACE (race.h) for values, CHIME (chime.h) for order, kept consistent by kv/hybrid.h.
 * Every call must run on a coroutine of ctx->w's thread (or on that thread outside any
 * coroutine, where it drives the loop itself). Keys and values are binary-safe. */
#ifndef DMKV_KV_H
#define DMKV_KV_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/index.h"
#include "dmkv/kvblock.h" /* DM_KV_MAX_KEY, DM_KV_MAX_VALUE, dm_kv_view_t */
#include "dmkv/worker.h"

/* A worker (worker.h) with the key-value layer attached: the pool's point index (RACE),
 * range index (CHIME), attached to or created in the pool, and the worker's key queues.
 * The indexes are named only in kv/engines.c (issue 14's seam). Blocks while connecting.
 * Returns NULL with a message in err; dm_worker_destroy detaches them. */
dm_worker_t *dm_kv_worker_create(uv_loop_t *loop, const char *const *uris, unsigned n, char *err,
                                 size_t errlen);

/* The engines this process runs (kv/engines.c): RACE + CHIME unless chosen otherwise. */
const dm_point_index_ops_t *dm_kv_point_index(void);
const dm_range_index_ops_t *dm_kv_range_index(void);

/* Choose the engines by name (NULL: keep the current one) before the first worker is
 * created: they are used for a pool this process creates, and a pool created with other
 * engines is refused (dm_kv_worker_create). Returns 0, or -1 with err naming the unknown
 * engine and the ones this build has. */
int dm_kv_choose_engines(const char *point, const char *range, char *err, size_t errlen);

/* For offline tools (dmkv-pool-reclaim, dmkv-index-rebuild): attach a worker to the pool
 * named by uris (dm_kv_worker_create, on a loop of its own, with the engines the pool
 * records instead of this process's choice), run fn(ctx, arg) on it with
 * the DM_CLS_ADMIN class, then detach. Returns fn's result, or -1 with the reason printed
 * on stderr when the worker could not attach. */
int dm_kv_run_offline(const char *const *uris, unsigned n, int (*fn)(dm_ctx_t *ctx, void *arg),
                      void *arg);

/* A value read from the pool; data is malloc'd (free with dm_value_free). */
typedef struct dm_value {
    uint8_t *data;
    size_t len;         /* bytes */
    uint64_t expire_ms; /* absolute wall-clock ms, 0 = no expiry */
    void *owner;        /* the KV block data points into (dm_kv_get), or NULL: data is its
                           own allocation */
} dm_value_t;

/* Free what v holds (its owner, else its data); v is left empty. */
void dm_value_free(dm_value_t *v);

/* GET. Returns 1 and fills out when found (expired keys are absent; out->data points into
 * the KV block read, which out->owner holds: free with dm_value_free), 0 when absent, or a
 * negative DM_E*. */
int dm_kv_get(dm_ctx_t *ctx, const void *key, size_t klen, dm_value_t *out);

/* SET flags. */
#define DM_SET_NX 0x1      /* only if absent */
#define DM_SET_XX 0x2      /* only if present */
#define DM_SET_KEEPTTL 0x4 /* keep the existing expiry */
#define DM_SET_GET 0x8     /* return the old value in *old */

/* SET key value with optional expiry (absolute wall-clock ms, 0 = none) and flags.
 * Returns 1 when written, 0 when NX/XX said no, or a negative DM_E* (DM_ENOMEM: pool
 * full; DM_EFULL: no free slot for a new key; nothing is changed on error).
 * With DM_SET_GET, *old receives the previous value (old->data NULL when absent). */
int dm_kv_set(dm_ctx_t *ctx, const void *key, size_t klen, const void *val, size_t vlen,
              uint64_t expire_ms, unsigned flags, dm_value_t *old);

/* DEL. Returns 1 when the key existed and was removed, 0 when absent, or DM_E*. */
int dm_kv_del(dm_ctx_t *ctx, const void *key, size_t klen);

/* A hint from the caller that key will be read or written on w's thread a few microseconds
 * from now (the next command of a pipeline): starts loading the CPU cache lines the
 * operation will touch first (the address-cache entry, race.h). No effect on results. */
void dm_kv_prefetch(dm_worker_t *w, const void *key, size_t klen);

/* 1 when w's point index caches where key was (its address cache): a SET of it is then
 * most likely an update, whose commit rarely fails; 0 otherwise. Local, a few hundred ns
 * after dm_kv_prefetch. A hint for how deep a pipeline may run (gateway/net/conn.c). */
int dm_kv_cache_knows(dm_worker_t *w, const void *key, size_t klen);

/* EXISTS for one key: 1, 0 or DM_E*. */
int dm_kv_exists(dm_ctx_t *ctx, const void *key, size_t klen);

/* Number of keys in the pool (exact counter kept with FAA). Returns >= 0 or DM_E*. */
int64_t dm_kv_dbsize(dm_ctx_t *ctx);

/* Remove every key. Returns 0 or DM_E*. Concurrent writers may leave keys they wrote
 * during the flush (as with any concurrent FLUSHALL). */
int dm_kv_flushall(dm_ctx_t *ctx);

/* One key returned by SCAN (malloc'd bytes). */
typedef struct dm_key {
    uint8_t *data;
    size_t len;
} dm_key_t;

typedef struct dm_keylist {
    dm_key_t *keys;
    size_t n, cap;
} dm_keylist_t;

/* Free l's keys and array; l is left empty and reusable. */
void dm_keylist_free(dm_keylist_t *l);
/* Append a copy of key k (len bytes) to l. Returns 0 or DM_ENOMEM (l unchanged). */
int dm_keylist_push(dm_keylist_t *l, const uint8_t *k, size_t len);

/* SCAN page from cursor (0 = start, else a cursor returned by any gateway), in CHIME key
 * order (docs/DESIGN.md "SCAN cursor"): appends about count keys (a hint: whole leaves are
 * returned) in lexicographic order (memcmp, a prefix sorts first) and sets *next (0 = done).
 * prefix[0..plen): only keys starting with it are wanted (MATCH's literal prefix, plen 0 =
 * all); cursor 0 seeks to the first leaf that can hold them, the walk ends after the last,
 * and only keys with the prefix are returned (the caller still applies MATCH's glob).
 * Expired keys are never returned. A key present for the whole iteration is returned; a
 * key absent for all of it never is. Returns 0, DM_EINVAL for an invalid (forged or
 * stale) cursor, or DM_E*. */
int dm_kv_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix, size_t plen,
               dm_keylist_t *out, uint64_t *next);

/* Pool bytes a key of klen bytes with a value of vlen bytes takes (MEMORY USAGE): its KV
 * block as allocated (dm_alloc_kv_block_bytes), its RACE slot's share of a bucket (64 / 7
 * bytes, rounded up) and its CHIME entry (dm_chime_key_bytes). No round trip. */
uint64_t dm_kv_footprint(dm_ctx_t *ctx, size_t klen, size_t vlen);

/* RANDOMKEY: a live key picked uniformly from a page of up to 32 keys that starts at a
 * leaf picked by a random descent of CHIME (wrapping around at the end). out->data
 * malloc'd. Returns 1, 0 when the pool has no key, or
 * DM_E*. */
int dm_kv_random_key(dm_ctx_t *ctx, dm_key_t *out);

/* One step of the active-expiry sweep over the key order: reads about count keys from
 * cursor (0 = a random leaf), removes those expired now from both indexes (through
 * dm_kv_del_expired: a key rewritten meanwhile is left alone), sets *next (0 when the walk
 * reached the last leaf). Every gateway thread sweeps from its own random starting points,
 * so the work is spread and any gateway's expired keys are found. Returns the number of
 * keys removed or DM_E*. */
int64_t dm_kv_expire_sweep(dm_ctx_t *ctx, uint64_t cursor, size_t count, uint64_t *next);

/* ---- Read-modify-write, WATCH support, active expiry (issue 6) ---- */

/* What a read-modify-write callback wants done with the key. */
#define DM_RMW_KEEP 0   /* leave the key as it is (reported as success) */
#define DM_RMW_WRITE 1  /* store *out (out->data malloc'd by the callback or NULL if len 0) */
#define DM_RMW_DELETE 2 /* remove the key */
#define DM_RMW_ABORT 3  /* stop without writing (the callback recorded why in its arg) */

/* cur is the key's live value (NULL when absent or expired); cur->data points into a
 * private copy that is valid only during the call (do not free it). Fill *out (value and
 * absolute expiry in wall-clock ms, 0 = none) for DM_RMW_WRITE. May be called several
 * times (once per retry): only the last call's decision takes effect. */
typedef int (*dm_kv_rmw_fn)(void *arg, const dm_value_t *cur, dm_value_t *out);

/* Lock-free read-modify-write of one key: read the current item, let fn compute the new
 * value, then write it with a slot CAS that goes ahead only if the item (value bytes and
 * expiry, or absence) is still what was read; otherwise re-read and call fn again. So
 * concurrent RMWs from any number of gateways never lose an update. Creating an absent key
 * goes through the CHIME leaf lock (kv/hybrid.h), so two gateways creating it at once
 * serialize: the second sees the first's value and computes again.
 * Returns the DM_RMW_* action that took effect, or a negative DM_E* (DM_ERETRY after too
 * many conflicting writers). */
int dm_kv_rmw(dm_ctx_t *ctx, const void *key, size_t klen, dm_kv_rmw_fn fn, void *arg);

/* Record in the superblock (once per worker, 1 RTT the first time) that the pool holds keys
 * with an expiry, before the first such key is written: SCAN then checks every key's expiry
 * in RACE; without it only pending entries are checked. Returns 0 or DM_E*. */
int dm_kv_mark_volatile(dm_ctx_t *ctx);

/* Write guards (WATCH ... EXEC). While a guard set is active on a coroutine, that
 * coroutine's writes of a guarded key go ahead only if the key's version token is still
 * g.version (0 = absent or expired), checked inside the write's own commit (RACE: the slot
 * CAS), so no write by any gateway can slip in between. A mismatch does nothing, sets the set's
 * tripped flag and makes the write return DM_ECONFLICT. A guard covers a key's first write; writes
 * counts every write done under the set. */
typedef struct dm_kv_guard {
    const uint8_t *key;
    size_t klen;
    uint64_t version;  /* from dm_kv_version at WATCH time */
    uint64_t write_id; /* the block's write id then (0 when absent) */
    int done;          /* written once under the guard */
} dm_kv_guard_t;

typedef struct dm_kv_guard_set {
    dm_kv_guard_t *g;
    size_t n;
    int tripped;
    uint64_t writes;
    void *owner; /* the coroutine (set by begin) */
    struct dm_kv_guard_set *next;
} dm_kv_guard_set_t;

/* Activate s (g, n filled by the caller) for the calling coroutine until dm_kv_guard_end. */
void dm_kv_guard_begin(dm_kv_guard_set_t *s);
void dm_kv_guard_end(dm_kv_guard_set_t *s);

/* The key's current version token (dm_point_item_t.version; RACE: the slot word, i.e.
 * fingerprint, length, block address) and its block's write id when the key is live, 0 and
 * 0 when absent or expired. WATCH compares both: RACE's slot word alone recurs once a freed
 * block (quarantined 2 s) is reused for the same key with the same length; the write id
 * never does. Returns 0 or DM_E*. */
int dm_kv_version(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *version,
                  uint64_t *write_id);

/* For WATCH of an absent key: a token that changes when the key is created and deleted
 * again (dm_chime_watch_sig: its leaf neighborhood's versions; a neighbor key's change may
 * change it too). Returns 0 or DM_E*. */
int dm_kv_absent_sig(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *sig);

/* Remove key only if it is expired now (active expiry). Returns 1 when an expired item was
 * removed, 0 when the key is absent or live (left untouched), or DM_E*. */
int dm_kv_del_expired(dm_ctx_t *ctx, const void *key, size_t klen);

/* Repairs of the hybrid invariant (CHIME ⊇ RACE) this process made since it started: a DEL
 * that found its key in RACE without a CHIME entry, or a reconcile after a presence change
 * completed past its leaf lease (dmcore/kv/hybrid.c). INFO hybrid_repairs. */
uint64_t dm_kv_repairs(void);
/* SETs of new keys that locked their leaf before their turn and gave the lock back to wait
 * for the turn (dmkv/coro.h "Early locks"), since start. */
uint64_t dm_kv_early_yields(void);
/* Writes that took the range lock first, without an unlocked attempt, because the
 * worker's writes before them all found their keys absent (kv/hybrid.c), since start. */
uint64_t dm_kv_lock_first(void);

#endif
