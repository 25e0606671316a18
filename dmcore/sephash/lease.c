/* Leases on SepHash's lock words (the merge lock beside each CurSegMeta, the directory
 * lock in the table header), by docs/leases.md's rules (dmkv: not in the paper, which
 * assumes no client dies holding a lock). */
#include "dmkv/lease_lock.h"
#include "sephash_internal.h"

uint32_t sh_lease_ms = 3000;
uint32_t sh_hold_ms = 2000;
int (*sh_test_hook)(dm_sephash_t *h, int site);

int sh_die(dm_sephash_t *h, int site)
{
    if (sh_test_hook && sh_test_hook(h, site)) h->died = 1;
    return h->died;
}

int sh_lease_try(dm_ctx_t *ctx, dm_gaddr_t addr, sh_hold_t *hd, int *took_over)
{
    return dm_lease_lock_try(ctx, addr, sh_lease_ms, sh_hold_ms, NULL, 0, hd, took_over);
}

int sh_lease_release(dm_ctx_t *ctx, const sh_hold_t *hd)
{
    return dm_lease_unlock(ctx, hd);
}
