/* ROLEX (ACM TOS'23 / FAST'23) on the pool: a learned range index over byte-string keys,
 * the core data structure only (dmcore/rolex/; rolex_internal.h has the pool layout). It
 * holds keys, no values (those live in the point index). Not wired as an engine yet.
 *
 * Keys map to an order-preserving 8-byte image (dm_rolex_image); piecewise-linear models
 * with error bound eps map an image to a position in the model's leaf table (LT), whose
 * entry names the leaf that covers it; leaves hold full keys, so keys sharing their first
 * 8 bytes stay correct: they sit in one chain of leaves (slower, never wrong).
 *
 * Inserts into a full leaf chain synonym leaves (one more RTT per hop on search and
 * insert); dm_rolex_retrain (ROLEX §3.5, §4.6) lists them in a new LT without moving them
 * and swings the root's model pointer to it (shadow redirection). Hosting it on the memory
 * node, its queue of models to retrain (CirQ) and gateways noticing a new model by
 * themselves are not built: dm_rolex_refresh does it on demand. An empty synonym leaf is
 * kept, not reclaimed. */
#ifndef DMKV_ROLEX_H
#define DMKV_ROLEX_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/gaddr.h"
#include "dmkv/worker.h"

#define DM_ROLEX_KEY_MAX 46u /* bytes of a key, stored inline in a leaf entry */
#define DM_ROLEX_SLOTS 16u   /* entries per leaf (the paper's delta) */

typedef struct dm_rolex dm_rolex_t;

/* A key returned by a scan. */
typedef struct dm_rolex_key {
    uint16_t len;
    char key[DM_ROLEX_KEY_MAX];
} dm_rolex_key_t;

typedef struct dm_rolex_cfg {
    unsigned eps;   /* error bound of the models, in leaves (>= 1; 0: 1) */
    unsigned fill;  /* keys per primary leaf at build (1..DM_ROLEX_SLOTS; 0: 12) */
    uint64_t spare; /* synonym leaves the leaf region has room for (0: primaries + 64) */
} dm_rolex_cfg_t;

/* The order-preserving image of a key: its first 8 bytes big-endian, zero-padded. For
 * keys a < b (memcmp order, shorter prefix first) image(a) <= image(b). */
uint64_t dm_rolex_image(const void *key, size_t len);

/* Bulk build from n keys sorted ascending without duplicates (keys[i], lens[i] bytes, each
 * 1..DM_ROLEX_KEY_MAX; n may be 0): trains the models (greedy PLA, ROLEX §3.2, §4.1), lays out
 * the primary leaves filled to cfg->fill, keys sharing an image in one leaf and its synonym
 * chain, and writes the model region. cfg NULL: defaults. A few RTTs per 64 KB written.
 * *root: the index's root (model region). Returns 0, DM_EINVAL (unsorted, empty or long
 * keys), DM_ETOOBIG (longer than DM_ROLEX_KEY_MAX), DM_ENOMEM or a verb error. */
int dm_rolex_build(dm_ctx_t *ctx, const char *const *keys, const size_t *lens, size_t n,
                   const dm_rolex_cfg_t *cfg, dm_gaddr_t *root);

/* A worker's handle: reads the root and its current model once (3 RTTs) and caches the
 * segments and the LT (16 bytes per entry), as every compute node does (ROLEX §3.3).
 * Returns 0, DM_ECORRUPT (not a ROLEX root) or DM_E*. One handle per worker; not
 * thread-safe. A handle's model stays usable after any number of retrains (leaves never
 * move); it only gets slower. */
int dm_rolex_open(dm_ctx_t *ctx, dm_gaddr_t root, dm_rolex_t **out);
void dm_rolex_close(dm_rolex_t *r);

/* 1 when key (len bytes) is present, 0 when not, or DM_E*. Reads the predicted leaves in
 * one batch (1 RTT), plus one RTT per synonym leaf walked past them in the covering
 * entry's chain (ROLEX §3.4, §4.2). */
int dm_rolex_search(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* Insert key under the lock of the covering entry's chain head (a lease, dmkv/lease.h): 0
 * inserted, 1 already present, DM_ETOOBIG, DM_ENOMEM (the leaf region has no synonym leaf
 * left), DM_ERETRY (the hold ran out before the write: nothing was written) or DM_E*. RTTs:
 * 3 + one per synonym hop up to the key's successor (predicted leaves; lock CAS with the
 * leaf re-read; hops; the leaf WRITE), +1 when the entry is a promoted synonym leaf (read
 * after the lock), +1 for a new synonym leaf (its FAA); the unlock rides with the WRITE.
 * ROLEX §3.4, §4.3. */
int dm_rolex_insert(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* Remove key under the covering chain's lock: 1 removed, 0 absent, or as insert (3 RTTs
 * + hops). The entry is removed from its leaf; an emptied synonym leaf stays linked (the
 * paper's reclaiming queue is not built). ROLEX §4.5. */
int dm_rolex_remove(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* Up to max keys >= from (len bytes; len 0: from the first key), ascending, into out;
 * *got = how many. Reads the predicted leaves and about max / 8 following LT positions in
 * one batch, walks the chains they start one batch per hop for all (1 RTT + the longest
 * walk's hops past the batch, a walk stopping once it holds max keys), then more
 * positions a batch at a time if needed. Each key present for the
 * whole scan is returned exactly once; keys inserted or removed meanwhile may or may not
 * be. Returns 0 or DM_E*. ROLEX §4.2 (SCAN). */
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
 * segments over the entries' low images (rx_train), writes the new model into new space and
 * swings the root's model pointer to it with one CAS (shadow redirection). Moves no data and
 * takes no lock: inserts and removes go on meanwhile, and handles keep their model until
 * dm_rolex_refresh. Runs on any dm_ctx_t (a memory node's local worker, later). st may be
 * NULL. Returns 0, DM_ERETRY (another retrain swung the pointer first: this one's model is
 * dropped), DM_ENOMEM or DM_E*. */
int dm_rolex_retrain(dm_ctx_t *ctx, dm_gaddr_t root, dm_rolex_retrain_stats_t *st);

/* Read the root's model pointer (1 RTT) and, when it moved, load the new model into r (2
 * RTTs more): the lazy synchronisation of ROLEX §3.5 on demand. Returns 1 reloaded, 0
 * unchanged, or DM_E* (r keeps its model). Not while another operation uses r. */
int dm_rolex_refresh(dm_ctx_t *ctx, dm_rolex_t *r);

#endif
