/* ROLEX (ACM TOS'23 / FAST'23) on the pool: a learned range index over byte-string keys,
 * the core data structure only (dmcore/rolex/; rolex_internal.h has the pool layout). It
 * holds keys, no values (those live in the point index). Not wired as an engine yet.
 *
 * Keys map to an order-preserving 8-byte image (dm_rolex_image); piecewise-linear models
 * with error bound eps (leaves) map an image to the primary leaf that covers it; leaves
 * hold full keys, so keys sharing their first 8 bytes stay correct: they sit in one leaf
 * and its synonym chain (slower, never wrong).
 *
 * Retraining (ROLEX §3.5, §4.6: the memory node's CPU rebuilds a model's leaf table from its
 * synonym leaves and swaps it in by shadow redirection) is out of scope for this step: the
 * models and primary leaves are those of the bulk build, and inserts into a full leaf keep
 * chaining synonym leaves (one more RTT per hop on search and insert). An empty synonym
 * leaf is kept, not reclaimed. */
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

/* A worker's handle: reads the model region once (1-2 RTTs) and caches the models, as
 * every compute node does (ROLEX §3.3). Returns 0, DM_ECORRUPT (not a ROLEX root) or
 * DM_E*. One handle per worker; not thread-safe. */
int dm_rolex_open(dm_ctx_t *ctx, dm_gaddr_t root, dm_rolex_t **out);
void dm_rolex_close(dm_rolex_t *r);

/* 1 when key (len bytes) is present, 0 when not, or DM_E*. Reads the predicted leaves in
 * one batch (1 RTT), plus one RTT per synonym leaf in the covering leaf's chain (ROLEX
 * §3.4, §4.2). */
int dm_rolex_search(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* Insert key under the covering leaf's lock (a lease, dmkv/lease.h): 0 inserted, 1 already
 * present, DM_ETOOBIG, DM_ENOMEM (the leaf region has no synonym leaf left), DM_ERETRY (the
 * hold ran out before the write: nothing was written) or DM_E*. RTTs: 3 + one per synonym
 * hop (predicted leaves; lock CAS with the leaf re-read; hops; the leaf WRITE), +1 for a
 * new synonym leaf (its FAA); the unlock rides with the WRITE. ROLEX §3.4, §4.3. */
int dm_rolex_insert(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* Remove key under the covering leaf's lock: 1 removed, 0 absent, or as insert (3 RTTs
 * + hops). The entry is removed from its leaf; an emptied synonym leaf stays linked (the
 * paper's reclaiming queue is not built). ROLEX §4.5. */
int dm_rolex_remove(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len);

/* Up to max keys >= from (len bytes; len 0: from the first key), ascending, into out;
 * *got = how many. Reads the predicted leaves and about max / 8 following ones in one
 * batch, their synonym chains one batch per hop (1 RTT + the longest chain's hops), then
 * more primary leaves a batch at a time if needed. Each key present for the
 * whole scan is returned exactly once; keys inserted or removed meanwhile may or may not
 * be. Returns 0 or DM_E*. ROLEX §4.2 (SCAN). */
int dm_rolex_scan(dm_ctx_t *ctx, dm_rolex_t *r, const void *from, size_t len, size_t max,
                  dm_rolex_key_t *out, size_t *got);

/* Leaves of the index (for tests and INFO): primaries, and synonym leaves allocated. */
int dm_rolex_leaf_counts(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t *primaries, uint64_t *synonyms);

#endif
