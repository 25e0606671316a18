/* ROLEX's lazy synchronisation of models by compute nodes (§3.5: "the compute nodes won't
 * synchronize the retrained models until the next reading"): every search, scan and insert or
 * remove reads the root's model word in the batch of its predicted leaves (8 bytes, no round
 * trip more), and a word other than the handle's loads the new model once the operation is
 * done.
 *
 * After, not before: the old model answered the operation correctly (every entry of every
 * model keeps I(e) for ever: retrain.c), a load first would throw the window's leaves away and
 * read them again through the new model (one round trip more), and an insert or remove has let
 * its chain's lock go by then (the 2 RTTs of the load are not spent holding it).
 *
 * The handle is shared by the coroutines of its worker, so a model may still change while an
 * operation is parked on a read: whatever holds LT positions across a read checks that the
 * model is the one they came from (rx_win_t's gen) and drops them otherwise. */
#include "dmkv/rolex.h"

#include "dmkv/batch.h"
#include "dmkv/errors.h"

#include "rolex_internal.h"

static struct {
    uint64_t noticed, loads, load_failures;
} stats;

int rx_sync_model(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t word)
{
    for (unsigned t = 0; t < RX_LOAD_TRIES; t++) {
        if (word == r->model) return 0;
        int rc = rx_load_model(ctx, r, word);
        if (rc != DM_ERETRY) return rc ? rc : 1;
        /* The slot was rewritten after the word was read: the word has moved on. */
        rc = dm_read_span(ctx, r->root + RX_OFF_MODEL, &word, 8);
        if (rc) return rc;
    }
    return DM_ERETRY;
}

void rx_notice(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t word)
{
    if (!word || word == r->model || r->pinned) return;
    __atomic_add_fetch(&stats.noticed, 1, __ATOMIC_RELAXED);
    int rc = rx_sync_model(ctx, r, word);
    /* A failed load leaves r's model, still right: the next operation reads the word again. */
    if (rc == 1) __atomic_add_fetch(&stats.loads, 1, __ATOMIC_RELAXED);
    if (rc < 0) __atomic_add_fetch(&stats.load_failures, 1, __ATOMIC_RELAXED);
}

int dm_rolex_refresh(dm_ctx_t *ctx, dm_rolex_t *r)
{
    uint64_t m;
    int rc = dm_read_span(ctx, r->root + RX_OFF_MODEL, &m, 8);
    return rc ? rc : rx_sync_model(ctx, r, m);
}

void dm_rolex_follow(dm_rolex_t *r, int on)
{
    r->pinned = !on;
}

uint64_t dm_rolex_model_version(const dm_rolex_t *r)
{
    return r->hdr.version;
}

void dm_rolex_stats(dm_rolex_stats_t *out)
{
    out->models_noticed = __atomic_load_n(&stats.noticed, __ATOMIC_RELAXED);
    out->model_loads = __atomic_load_n(&stats.loads, __ATOMIC_RELAXED);
    out->model_load_failures = __atomic_load_n(&stats.load_failures, __ATOMIC_RELAXED);
    out->leaves_taken = __atomic_load_n(&rx_leaves_taken, __ATOMIC_RELAXED);
}
