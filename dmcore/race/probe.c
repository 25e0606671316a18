/* Batched presence checks for many keys (SCAN settling CHIME entries, leaf settles): the
 * combined buckets of up to 32 keys in one batch, the candidate blocks in one more. Keys
 * whose buckets are mid-split or whose blocks fail their checksum fall back to
 * dm_race_search, so every answer is as good as a single search's. */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "race_internal.h"

#define PROBE_KEYS 32 /* 2 READs each: one full batch */

static int slow_probe(dm_ctx_t *ctx, const uint8_t *key, size_t klen, uint8_t *present,
                      uint64_t *expire)
{
    dm_race_item_t it;
    int rc = dm_race_search(ctx, key, klen, &it);
    if (rc < 0) return rc;
    *present = (uint8_t)rc;
    if (expire) *expire = rc ? it.view.expire_ms : 0;
    if (rc) free(it.block);
    return 0;
}

/* Read the candidate blocks (words[i] belongs to key owner[i]) in batches of
 * DM_BATCH_MAX and record per key: 1 found, 0 not, -1 undecided (torn or freed block). */
static int match_blocks(dm_ctx_t *ctx, const uint64_t *words, const unsigned *owner, unsigned nw,
                        const uint8_t *const *keys, const size_t *lens, int *found,
                        uint64_t *expire_ms)
{
    for (unsigned w0 = 0; w0 < nw; w0 += DM_BATCH_MAX) {
        unsigned cnt = nw - w0 < DM_BATCH_MAX ? nw - w0 : DM_BATCH_MAX;
        uint8_t *bufs[DM_BATCH_MAX];
        uint64_t bl[DM_BATCH_MAX];
        int rc = race_read_blocks(ctx, words + w0, cnt, bufs, bl);
        for (unsigned i = 0; i < cnt && !rc; i++) {
            unsigned k = owner[w0 + i];
            if (!bufs[i] || found[k] == 1 ||
                !dm_kvblock_key_equals(bufs[i], bl[i], keys[k], lens[k]))
                continue;
            dm_kv_view_t v;
            if (dm_kvblock_parse(bufs[i], bl[i], &v) != 0) {
                found[k] = -1;
                continue;
            }
            if (expire_ms) expire_ms[k] = v.expire_ms;
            found[k] = 1;
        }
        for (unsigned i = 0; i < cnt; i++)
            free(bufs[i]);
        if (rc) return rc;
    }
    return 0;
}

int dm_race_probe(dm_ctx_t *ctx, const uint8_t *const *keys, const size_t *lens, unsigned n,
                  uint8_t *present, uint64_t *expire_ms)
{
    dm_race_t *r = ctx->w->race;
    for (unsigned k0 = 0; k0 < n; k0 += PROBE_KEYS) {
        unsigned cnt = n - k0 < PROBE_KEYS ? n - k0 : PROBE_KEYS;
        race_loc_t loc[PROBE_KEYS];
        race_cbs_t *cbs = malloc(cnt * sizeof(*cbs));
        if (!cbs) return DM_ENOMEM;
        dm_batch_t b;
        dm_batch_init(&b);
        for (unsigned i = 0; i < cnt; i++) {
            race_locate(r, keys[k0 + i], lens[k0 + i], &loc[i]);
            race_read_cbs(&b, &loc[i], &cbs[i]);
        }
        ctx->start_us = dm_now_us();
        int rc = dm_batch_exec(ctx, &b);
        race_slotref_t refs[4 * DM_RACE_SLOTS];
        uint64_t *words = malloc(cnt * 4 * DM_RACE_SLOTS * sizeof(*words));
        unsigned *owner = malloc(cnt * 4 * DM_RACE_SLOTS * sizeof(*owner));
        int found[PROBE_KEYS];
        unsigned nw = 0;
        if (!words || !owner) rc = rc ? rc : DM_ENOMEM;
        for (unsigned i = 0; i < cnt && !rc; i++) {
            int moving = 0;
            found[i] = -1; /* stale directory or mid-split: a full search decides */
            if (race_check_headers(&loc[i], &cbs[i], &moving) != 0 || moving) continue;
            unsigned nc = race_fp_slots(&loc[i], &cbs[i], loc[i].fp, refs, 4 * DM_RACE_SLOTS);
            found[i] = 0;
            for (unsigned c = 0; c < nc; c++) {
                words[nw] = refs[c].word;
                owner[nw++] = i;
            }
        }
        if (expire_ms)
            for (unsigned i = 0; i < cnt; i++)
                expire_ms[k0 + i] = 0;
        if (!rc)
            rc = match_blocks(ctx, words, owner, nw, keys + k0, lens + k0, found,
                              expire_ms ? expire_ms + k0 : NULL);
        /* Blocks read after the grace period may have been reused: decide again. */
        int late = !rc && dm_ctx_check(ctx);
        for (unsigned i = 0; i < cnt && !rc; i++) {
            unsigned k = k0 + i;
            if (found[i] < 0 || late)
                rc = slow_probe(ctx, keys[k], lens[k], &present[k],
                                expire_ms ? &expire_ms[k] : NULL);
            else
                present[k] = (uint8_t)found[i];
        }
        free(words);
        free(owner);
        free(cbs);
        if (rc) return rc;
    }
    return 0;
}
