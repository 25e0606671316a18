/* Lock words held under leases (dmkv/lease_lock.h). */
#include "dmkv/lease_lock.h"

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/fence.h"
#include "dmkv/lease.h"

int dm_lease_lock_try(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                      void *behind, uint32_t behind_len, dm_lease_hold_t *hd, int *took_over)
{
    const dm_lease_read_t r = {addr, behind, behind_len};
    return dm_lease_lock_try_reads(ctx, addr, lease_ms, hold_ms, &r, behind ? 1 : 0, NULL, NULL, hd,
                                   took_over);
}

int dm_lease_lock_try_reads(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                            const dm_lease_read_t *reads, unsigned n, const dm_batch_t *extra,
                            int *extra_fresh, dm_lease_hold_t *hd, int *took_over)
{
    if (n > DM_LEASE_READS_MAX) return DM_EINVAL;
    if (extra_fresh) *extra_fresh = 0;
    uint64_t from = 0;
    *took_over = 0;
    for (int i = 0; i < 2; i++) {
        uint64_t word = (uint64_t)dm_lease_token() << 1 | 1;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, addr, from, word);
        for (unsigned k = 0; k < n; k++)
            dm_batch_read(&b, reads[k].at, reads[k].buf, reads[k].len)->fence = 1;
        int with_extra = extra && b.n + extra->n <= DM_BATCH_MAX;
        int extra_here = with_extra; /* every extra verb on the lock word's memory node */
        for (unsigned k = 0; with_extra && k < extra->n; k++) {
            b.v[b.n] = extra->v[k];
            b.v[b.n].fence = 1; /* they must see what the last holder left */
            b.node[b.n] = extra->node[k];
            extra_here &= b.node[b.n] == b.node[0];
            b.n++;
        }
        uint64_t posted = dm_now_us(); /* the hold starts before the CAS is posted */
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        if (v->result == from) {
            if (extra_fresh) *extra_fresh = extra_here;
            hd->addr = addr;
            hd->word = word;
            hd->until_us = posted + 1000ull * hold_ms;
            dm_lease_forget(addr);
            *took_over = from != 0;
            return 1;
        }
        from = v->result;
        if (!from) continue; /* freed meanwhile: try again from 0 */
        if (!dm_lease_takeover_ready(ctx, addr, from, lease_ms)) return 0;
    }
    return 0;
}

int dm_lease_unlock(dm_ctx_t *ctx, const dm_lease_hold_t *hd)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_cas(&b, hd->addr, hd->word, 0);
    return dm_batch_post_async(ctx, &b);
}
