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

#include "sephash_internal.h"

int64_t dm_sephash_count(dm_ctx_t *ctx, dm_sephash_t *h)
{
    uint64_t n = 0;
    int rc = sh_read(ctx, h->root + SH_HDR_COUNT_OFF, &n, 8);
    return rc ? rc : (int64_t)n;
}
