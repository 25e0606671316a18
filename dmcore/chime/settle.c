/* Settling a leaf against the point index (RACE) under its lock: after a lease takeover (the
 * dead locker's pending entries) and for FLUSHALL (every entry). The hybrid protocol keeps
 * CHIME ⊇ RACE, so an entry whose key RACE does not hold can simply go (docs/DESIGN.md "The
 * hybrid index"). RACE's presence check comes from the composer (dm_chime_set_presence). */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "leaf_lock.h"

static uint64_t torn_repairs;

uint64_t ch_torn_repairs(void)
{
    return __atomic_load_n(&torn_repairs, __ATOMIC_RELAXED);
}

int ch_settle_locked(dm_ctx_t *ctx, dm_chime_lock_t *lk, int all)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, lk->leaf, lk->img, g->lock_off);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    memset(lk->have, 1, g->groups * (g->nbhd + 1));
    unsigned idx[CH_MAX_SPAN], sel[CH_MAX_SPAN];
    uint8_t *keys[CH_MAX_SPAN];
    uint32_t lens[CH_MAX_SPAN];
    int n = ch_leaf_keys(ctx, g, lk->img, idx, keys, lens);
    if (n < 0) return n;
    const uint8_t *pk[CH_MAX_SPAN];
    size_t pl[CH_MAX_SPAN];
    unsigned m = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *e = lk->img + ch_entry_off(g, idx[i]);
        if (!all && !(e[1] & CH_F_PENDING)) continue;
        sel[m] = (unsigned)i;
        pk[m] = keys[i];
        pl[m++] = lens[i];
    }
    uint8_t present[CH_MAX_SPAN];
    dm_chime_presence_fn presence = ctx->w->chime->presence;
    rc = !m ? 0 : presence ? presence(ctx, pk, pl, m, present, NULL) : DM_EINVAL;
    int removed = 0, changed = 0;
    for (unsigned j = 0; j < m && !rc; j++) {
        uint8_t *e = lk->img + ch_entry_off(g, idx[sel[j]]);
        if (present[j]) {
            changed |= (e[1] & CH_F_PENDING) != 0;
            e[1] &= (uint8_t)~CH_F_PENDING;
            continue;
        }
        if (e[7] == CH_KLEN_RECORD)
            dm_alloc_free(ctx->w->alloc, ch_u64(e + 8), dm_keyrec_bytes(pl[j]));
        e[1] = 0;
        memset(e + 4, 0, CH_OBJ - 4);
        removed++;
        changed = 1;
    }
    for (int i = 0; i < n; i++)
        free(keys[i]);
    if (rc) return rc;
    /* Under the lock no write is in flight: an inconsistent image is a dead writer's cut
     * chain (leaf.c write_dirty), rewritten here with its bitmaps rebuilt. */
    if (!changed && ch_leaf_consistent(g, lk->img)) return 0;
    if (!changed) __atomic_fetch_add(&torn_repairs, 1, __ATOMIC_RELAXED);
    /* A node write: NV+1 everywhere, so lock-free readers notice. */
    ch_rebuild_bitmaps(g, lk->img);
    ch_set_nv(g, lk->img, (ch_nv(lk->img[0]) + 1) & 15);
    lk->word = (lk->word & 0xffffffffull) | ((uint64_t)ch_vacancy_of(g, lk->img) << 32);
    dm_batch_init(&b);
    /* Never after the hold's end: a stale image would land over a taker's. */
    b.send_by_us = dm_chime_lock_hold_until(lk);
    dm_batch_write(&b, lk->leaf, lk->img, g->lock_off);
    rc = dm_batch_exec(ctx, &b);
    return rc ? rc : removed;
}

int ch_settle_lapsed(int rc, const dm_chime_lock_t *lk)
{
    return rc == DM_ERETRY && ch_hold_expired(lk);
}
