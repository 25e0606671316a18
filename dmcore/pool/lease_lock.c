/* Lock words held under leases (dmkv/lease_lock.h). */
#include "dmkv/lease_lock.h"

#include "dmkv/batch.h"
#include "dmkv/fence.h"
#include "dmkv/lease.h"

int dm_lease_lock_try(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                      void *behind, uint32_t behind_len, dm_lease_hold_t *hd, int *took_over)
{
    uint64_t from = 0;
    *took_over = 0;
    for (int i = 0; i < 2; i++) {
        uint64_t word = (uint64_t)dm_lease_token() << 1 | 1;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, addr, from, word);
        if (behind) dm_batch_read(&b, addr, behind, behind_len)->fence = 1;
        uint64_t posted = dm_now_us(); /* the hold starts before the CAS is posted */
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        if (v->result == from) {
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
