/* Completing splits a dead splitter left half done (chime_internal.h ch_repair_half_split).
 * A leaf split writes both leaves, then inserts the separator into the parent while still
 * holding the leaf's lock (split.c). A splitter killed in between leaves the right leaf
 * reachable only through its left sibling: correct (B-link), but every later operation on
 * that range pays a move right, for good. Whoever sees the move on a fresh descent finishes
 * the split, once it is old enough that a live splitter would have. */
#include <stdlib.h>
#include <string.h>

#include "chime_internal.h"
#include "dmkv/errors.h"
#include "dmkv/worker.h"

#define REPAIR_DELAY_US 5000000ull /* beyond the leaf lock's lease: its splitter is gone */

static uint64_t repair_delay_us(void)
{
    static uint64_t delay;
    uint64_t d = __atomic_load_n(&delay, __ATOMIC_RELAXED);
    if (d) return d;
    const char *env = getenv("DMKV_SEP_REPAIR_MS"); /* tests */
    d = env && atoll(env) > 0 ? (uint64_t)atoll(env) * 1000 : REPAIR_DELAY_US;
    __atomic_store_n(&delay, d, __ATOMIC_RELAXED);
    return d;
}

int ch_repair_half_split(dm_ctx_t *ctx, dm_gaddr_t left, dm_gaddr_t right, const uint8_t *sep,
                         uint32_t seplen)
{
    dm_chime_t *c = ctx->w->chime;
    ch_count(&ch_stats.right_moves, 1);
    unsigned slot = (unsigned)((left * 0x9e3779b97f4a7c15ull) >> 61); /* 8 slots */
    uint64_t now = dm_now_us();
    if (c->halfsplit[slot].left != left || c->halfsplit[slot].right != right) {
        c->halfsplit[slot].left = left;
        c->halfsplit[slot].right = right;
        c->halfsplit[slot].since_us = now;
        return 0;
    }
    if (now - c->halfsplit[slot].since_us < repair_delay_us()) return 0;
    c->halfsplit[slot].left = 0;                 /* seen again, long after: the splitter is gone */
    uint8_t *copy = malloc(seplen ? seplen : 1); /* sep lives in the fence cache */
    if (!copy) return DM_ENOMEM;
    memcpy(copy, sep, seplen);
    int rc = ch_propagate(ctx, 1, left, copy, seplen, right);
    free(copy);
    if (!rc) ch_count(&ch_stats.sep_repairs, 1);
    return rc;
}
