/* ROLEX (ACM TOS'23 / FAST'23) on the pool: a learned range index over byte-string keys,
 * the core data structure only (dmcore/rolex/; rolex_internal.h has the pool layout). It
 * holds keys, no values (those live in the point index). As the range role of the hybrid
 * index (dm_rolex_range_index, `--range-index rolex`: rolex/range*.c), it keeps a pending
 * flag per entry and settles it by the point index.
 *
 * Keys map to an order-preserving 8-byte image (dm_rolex_image); piecewise-linear models
 * with error bound eps map an image to a position in the model's leaf table (LT), whose
 * entry names the leaf that covers it; leaves hold full keys, so keys sharing their first
 * 8 bytes stay correct: they sit in one chain of leaves (slower, never wrong).
 *
 * Inserts into a full leaf chain synonym leaves (one more RTT per hop on search and
 * insert); dm_rolex_retrain (ROLEX §3.5, §4.6) lists them in a new LT without moving them
 * and swings the root's model word to it (shadow redirection). Node 0's memory node hosts
 * the retraining of a root recorded with dm_rolex_host_record (memnode/mn_retrainer.c runs
 * dm_rolex_host_step); every operation reads the model word with its predicted leaves and
 * a handle loads a new model by itself (lazy synchronisation, §3.5). The paper's queue of
 * models to retrain (CirQ) is not built: the host's trigger polls the leaves taken. An
 * empty synonym leaf is kept, not reclaimed. */
#ifndef DMKV_ROLEX_H
#define DMKV_ROLEX_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/gaddr.h"
#include "dmkv/index.h"
#include "dmkv/worker.h"

#define DM_ROLEX_KEY_MAX 0x7fffu /* bytes of a key: the entry's 15-bit length */
#define DM_ROLEX_INLINE                                                                            \
    46u                    /* a key up to this long is held whole in its leaf entry;               \
                              a longer one in a key record (rolex_internal.h) */
#define DM_ROLEX_SLOTS 16u /* entries per leaf (the paper's delta) */

typedef struct dm_rolex dm_rolex_t;

/* ROLEX as the range role (dmkv/index.h; engine "rolex", id 2 in the pool's engines record):
 * the index recorded in node 0's rolex_root (a new pool's first gateway builds an empty one
 * on node 0, with dm_rolex_set_create_leaves' room), each worker its own handle;
 * locks are chain heads' leases, pending entries a flag in the entry's length word, SCAN
 * cursors keyed leaf numbers. Keys over DM_ROLEX_INLINE bytes live in key records
 * (dmkv/key_record.h) named by their entries; keys longer than DM_ROLEX_KEY_MAX are refused
 * (DM_ETOOBIG from lock and mark_pending, nothing written). docs/DESIGN.md "ROLEX as the
 * range role". */
extern const dm_range_index_ops_t dm_rolex_range_index;

/* Leaves of room (816 bytes and 16 keys each, plus 96 bytes of model arena) in the leaf
 * region of a range index this process creates; 0 (the default): an eighth of node 0's
 * region, at least 16,384 leaves where node 0 holds four times that. The region does not
 * grow: when its leaves are taken, inserts fail with DM_EINDEXFULL. Returns 0, or
 * DM_EINVAL for 1 or more than a SCAN cursor can name (2^26 - 1). Not thread-safe: call
 * before the workers start (gateway option --rolex-leaves). */
int dm_rolex_set_create_leaves(uint64_t leaves);

/* A key returned by a scan: key points into buf when the key fits it, else to a malloc'd
 * copy (dm_rolex_keys_free; do not copy the struct while key points into buf). */
typedef struct dm_rolex_key {
    uint16_t len;
    char *key;
    char buf[DM_ROLEX_INLINE];
} dm_rolex_key_t;

/* Free what a scan malloc'd for the n keys of out (their long keys). */
void dm_rolex_keys_free(dm_rolex_key_t *out, size_t n);

typedef struct dm_rolex_cfg {
    unsigned eps;   /* error bound of the models, in leaves (>= 1; 0: 1) */
    unsigned fill;  /* keys per primary leaf at build (1..DM_ROLEX_SLOTS; 0: 12) */
    uint64_t spare; /* synonym leaves the leaf region has room for (0: primaries + 64) */
    int node0;      /* 1: root, leaf region and arena on node 0, where its memory node can
                       host the retraining (dm_rolex_host_record); 0: any node */
} dm_rolex_cfg_t;

/* The order-preserving image of a key: its first 8 bytes big-endian, zero-padded. For
 * keys a < b (the index's order, rolex_internal.h: memcmp order over the first 30 bytes,
 * shorter prefix first) image(a) <= image(b). */
uint64_t dm_rolex_image(const void *key, size_t len);

/* Bulk build from n keys sorted ascending in the index's order (dm_rolex_key_cmp) without
 * duplicates (keys[i], lens[i] bytes, each 1..DM_ROLEX_KEY_MAX; n may be 0; each key over
 * DM_ROLEX_INLINE bytes gets its key record first, 1 RTT each): trains the models (greedy PLA,
 * ROLEX §3.2, §4.1), lays out the primary leaves filled to cfg->fill, keys sharing an image in one
 * leaf and its synonym chain, and writes the model region. cfg NULL: defaults. A few RTTs per 64 KB
 * written. *root: the index's root (model region). Returns 0, DM_EINVAL (unsorted, empty or long
 * keys), DM_ETOOBIG (longer than DM_ROLEX_KEY_MAX), DM_ENOMEM or a verb error. */
int dm_rolex_build(dm_ctx_t *ctx, const char *const *keys, const size_t *lens, size_t n,
                   const dm_rolex_cfg_t *cfg, dm_gaddr_t *root);

/* A worker's handle: reads the root and its current model once (3 RTTs) and caches the
 * segments and the LT (16 bytes per entry), as every compute node does (ROLEX §3.3).
 * Returns 0, DM_ECORRUPT (not a ROLEX root), DM_ERETRY (the model's slot kept being
 * rewritten while read) or DM_E*. One handle per worker; not thread-safe. A handle's model
 * stays usable after any number of retrains (leaves never move); it only gets slower, until
 * its next operation reads the new model word and loads that model (2 RTTs, after the
 * operation: dmcore/rolex/sync.c). */
int dm_rolex_open(dm_ctx_t *ctx, dm_gaddr_t root, dm_rolex_t **out);
void dm_rolex_close(dm_rolex_t *r);

/* on 0 pins r to the model it has: its operations read no model word and load no new
 * model (dm_rolex_refresh still does); 1 (the default) follows the root's model. For tests
 * and measurements that compare models. */
void dm_rolex_follow(dm_rolex_t *r, int on);
/* The version of r's model: 1 for a build's, +1 per retrain. */
uint64_t dm_rolex_model_version(const dm_rolex_t *r);

/* Process-wide counts of the lazy synchronisation (ROLEX §3.5): operations that read a
 * model word other than their handle's, the new models loaded after them, and loads that
 * failed (the handle kept its model, still right). Relaxed atomics; thread-safe. */
typedef struct dm_rolex_stats {
    uint64_t models_noticed, model_loads, model_load_failures;
    uint64_t leaves_taken; /* the most leaves of a region this process saw taken (alloc_num
                              after its FAAs for synonym leaves, capped at the capacity) */
} dm_rolex_stats_t;
void dm_rolex_stats(dm_rolex_stats_t *out);

/* 1 when key (len bytes) is present, 0 when not, or DM_E*. Reads the predicted leaves in
 * one batch (1 RTT), plus one RTT per synonym leaf walked past them in the covering
 * entry's chain (ROLEX §3.4, §4.2), plus one for a long key (over DM_ROLEX_INLINE bytes)
 * alike to an entry up to its record (itself, present: the record confirms it). */
int dm_rolex_search(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* Insert key under the lock of the covering entry's chain head (a lease, dmkv/lease.h): 0
 * inserted, 1 already present, DM_ETOOBIG, DM_EINDEXFULL (the leaf region has no synonym leaf
 * left), DM_ERETRY (the hold ran out before the write: nothing was written) or DM_E*. RTTs:
 * 3 + one per synonym hop up to the key's successor (predicted leaves; lock CAS with the
 * leaf re-read; hops; the leaf WRITE), +1 when the entry is a promoted synonym leaf (read
 * after the lock), +1 for a new synonym leaf (its FAA); the unlock rides with the WRITE.
 * A long key's key record rides ahead of the WRITE when on the leaves' memory node, else
 * +1 (written first); +1 when present (its record read). ROLEX §3.4, §4.3; key records as
 * CHIME §3.4's (rolex_internal.h). */
int dm_rolex_insert(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* Remove key under the covering chain's lock: 1 removed, 0 absent, or as insert (3 RTTs +
 * hops, +1 for a present long key: its record read, then freed with quarantine). The entry
 * is removed from its leaf; an emptied synonym leaf stays linked (the paper's reclaiming
 * queue is not built). ROLEX §4.5. */
int dm_rolex_remove(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* The index's key order (rolex_internal.h, "Order"): <0, 0, >0 as a is below, equal to or
 * above b. memcmp order (shorter prefix first) among keys of up to 46 bytes and wherever
 * the first 30 bytes differ; within a 30-byte group keys of up to 46 bytes come first, then
 * longer ones by XXH3 hash, length and bytes. Pure. */
int dm_rolex_key_cmp(const void *a, size_t alen, const void *b, size_t blen);

/* Up to max keys >= from (len bytes; len 0: from the first key), ascending in the index's
 * order (dm_rolex_key_cmp), into out (free with dm_rolex_keys_free); *got = how many. Long
 * keys cost their records' reads (one batch of up to 64 per chain walked). Reads the predicted
 * leaves and about max / 8 following LT positions in one batch, walks the chains they start one
 * batch per hop for all (1 RTT + the longest walk's hops past the batch, a walk stopping once it
 * holds max keys), then more positions a batch at a time if needed. Each key present for the whole
 * scan is returned exactly once; keys inserted or removed meanwhile may or may not be. Returns 0 or
 * DM_E*. ROLEX §4.2 (SCAN). */
int dm_rolex_scan(dm_ctx_t *ctx, dm_rolex_t *r, const void *from, size_t len, size_t max,
                  dm_rolex_key_t *out, size_t *got);

/* Leaves of the index (for tests and INFO): primaries, and synonym leaves allocated. */
int dm_rolex_leaf_counts(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t *primaries, uint64_t *synonyms);

/* A retrain's outcome: the new model's version, the leaves read (every chain's), LT entries
 * of the model it replaced and of the new one, and its segments. */
typedef struct dm_rolex_retrain_stats {
    uint64_t version, leaves, entries_before, entries, segments;
} dm_rolex_retrain_stats_t;

/* Retrain the index at root in place (ROLEX §3.5, §4.6; dmcore/rolex/retrain.c): reads every
 * chain (heads DM_BATCH_MAX at a time, then one batch per hop), lists each head and each
 * non-empty synonym leaf that can start a range of its own in a new LT in key order, trains
 * segments over the entries' low images (rx_train), writes the new model into the root's
 * model arena slot the current one is not in and swings the root's model word to it with one
 * CAS (shadow redirection). Moves no data, allocates nothing, takes no lock: inserts and
 * removes go on meanwhile, and handles load the new model after their next operation. One
 * retrainer at a time per index (the caller's duty; the arena's two slots assume it). st may
 * be NULL. Returns 0, DM_EINVAL (node 0's rolex_root names root: only its memory node
 * retrains it, dm_rolex_host_step), DM_ERETRY (the word moved meanwhile: a second
 * retrainer), DM_ENOMEM or DM_E*. */
int dm_rolex_retrain(dm_ctx_t *ctx, dm_gaddr_t root, dm_rolex_retrain_stats_t *st);

/* Read the root's model word (1 RTT) and, when it moved, load the new model into r (2 RTTs
 * more, +1 per retry when its slot was being rewritten): the lazy synchronisation of ROLEX
 * §3.5 on demand (operations do it by themselves). Returns 1 reloaded, 0 unchanged, or
 * DM_E* (r keeps its model). Not while another operation uses r. */
int dm_rolex_refresh(dm_ctx_t *ctx, dm_rolex_t *r);

/* ---- retraining hosted by the memory node (ROLEX §3.5, §4.6; dmcore/rolex/host.c) ---- */

#define DM_ROLEX_RETRAIN_MIN 64        /* synonym leaves taken before a retrain, at least */
#define DM_ROLEX_RETRAIN_GAP_US 50000u /* between the starts of two hosted retrains */

/* The host's trigger: 1 when taken (the root's alloc_num, clamped to its capacity) exceeds
 * base (the alloc_num the current model's chains were read at) by max(DM_ROLEX_RETRAIN_MIN,
 * entries / 8) leaves (entries: the current LT's length), or by any leaf when asks (the
 * writers' asks of the current model: a walk of 32 leaves or more) is not 0, and the last
 * retrain started at least DM_ROLEX_RETRAIN_GAP_US before now_us (last_us 0: none yet;
 * monotonic us), else 0. The asks stand in for the paper's CirQ (compute nodes queue a
 * model whose SLT used 2^7 slots); host.c says why both. */
int dm_rolex_retrain_due(uint64_t taken, uint64_t base, uint64_t entries, uint64_t asks,
                         uint64_t now_us, uint64_t last_us);

/* Record root as the index node 0's memory node retrains (one CAS from 0 on node 0's
 * superblock word rolex_root; by the index's builder, before anyone retrains it). The root,
 * its leaf region and its model arena must be in node 0's region (the host's local worker
 * reaches only its own region). 3 RTTs (open) + 1. Returns 0 (recorded, or already this
 * root), DM_EINVAL (not on node 0), DM_ECONFLICT (another root is recorded: one per pool),
 * DM_ECORRUPT or DM_E*. */
int dm_rolex_host_record(dm_ctx_t *ctx, dm_gaddr_t root);

/* The host's state for one root: the model last seen and its trigger base, and what the
 * retrains cost. */
typedef struct dm_rolex_host {
    dm_gaddr_t root;
    uint64_t model;          /* the model word last seen */
    uint64_t taken, entries; /* that model's trigger base and LT length */
    uint64_t last_us;        /* monotonic start of the last retrain tried, 0 none */
    uint64_t retrains, failures;
    uint64_t asked; /* retrains the writers' asks brought forward (the bar would wait) */
    uint64_t total_us, max_us, last_us_taken; /* durations of the retrains done, us */
    dm_rolex_retrain_stats_t last;            /* the last retrain's outcome */
    int last_rc;                              /* the last retrain's return code */
} dm_rolex_host_t;
void dm_rolex_host_init(dm_rolex_host_t *h, dm_gaddr_t root);

/* One poll of the host (ROLEX §4.6's loop body): reads the root and the current model's asks
 * word (2 RTTs, in-process on the memory node's local worker) and, when the model word
 * moved, the model's header (1 more);
 * retrains when dm_rolex_retrain_due says so (the retrain's own RTTs). Only the index's one
 * host calls it: it retrains a recorded root. Returns 1 retrained, 0 not due, or DM_E* (a
 * retrain that failed is counted, and tried again after DM_ROLEX_RETRAIN_GAP_US). */
int dm_rolex_host_step(dm_ctx_t *ctx, dm_rolex_host_t *h);

#endif
