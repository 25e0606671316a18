/* SepHash key count (dmkv: not in the paper). Why merges count and appends do not: an
 * unconditional append reads only a window of its CurSegment, so it does not know whether
 * its key existed (an insert or an update) or whether a tombstone deletes a present key;
 * learning it would cost the append a search. A merge knows exactly: its new MainSegment
 * holds one entry per live key of the segment (tombstones and dead versions dropped), so
 * the table's live keys in MainSegments are the sum of their entry counts, and each merge
 * changes that sum by (its new entries) - (the old MainSegment's), splits included (the
 * two halves' entries). The counter in the table header is that sum, moved by FAA after
 * each commit. A taken-over merge is counted once: only the commit that lands FAAs.
 * Appends since a segment's last merge are not counted (the lag dm_sephash_count states).
 * A merger that dies between its commit CAS and its FAA (posted right after the commit
 * completes, fire and forget) leaves the counter off by its change: a recount from every
 * segment's meta word (its count field) would repair it; not built. */
#include "dmkv/sephash.h"

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "sephash_internal.h"

int64_t dm_sephash_count(dm_ctx_t *ctx, dm_sephash_t *h)
{
    uint64_t n = 0;
    int rc = dm_read_span(ctx, h->root + SH_HDR_COUNT_OFF, &n, 8);
    return rc ? rc : (int64_t)n;
}

/* The live counter beside the merge-based one: moved by the point role's conditional
 * appends, which know whether they inserted or deleted (dm_sephash_commit_t.count). */
dm_verb_t *sh_live_count_with(dm_batch_t *b, dm_sephash_t *h, int64_t d)
{
    if (dm_fault_delay_ms(DM_FAULT_UNCOUNTED)) return NULL; /* tests: a lost FAA */
    dm_verb_t *v = dm_batch_faa(b, h->root + SH_HDR_LIVE_OFF, (uint64_t)d);
    if (v) v->status = DM_EIO; /* until it completes */
    return v;
}

void sh_live_count_post(dm_ctx_t *ctx, dm_sephash_t *h, int64_t d)
{
    dm_batch_t b;
    dm_batch_init(&b);
    if (sh_live_count_with(&b, h, d)) dm_batch_post_async(ctx, &b);
}

int dm_sephash_live_count(dm_ctx_t *ctx, dm_sephash_t *h, int64_t *n)
{
    uint64_t w = 0;
    int rc = dm_read_span(ctx, h->root + SH_HDR_LIVE_OFF, &w, 8);
    *n = (int64_t)w;
    return rc;
}

int dm_sephash_live_count_set(dm_ctx_t *ctx, dm_sephash_t *h, int64_t expect, int64_t n)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *v = dm_batch_cas(&b, h->root + SH_HDR_LIVE_OFF, (uint64_t)expect, (uint64_t)n);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    return v->result == (uint64_t)expect ? 0 : DM_ECONFLICT;
}

dm_gaddr_t dm_sephash_root(const dm_sephash_t *h)
{
    return h->root;
}
