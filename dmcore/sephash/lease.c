/* Leases on SepHash's lock words (the merge lock beside each CurSegMeta, the directory
 * lock in the table header), by docs/leases.md's rules (dmkv: not in the paper, which
 * assumes no client dies holding a lock). */
#include "dmkv/lease.h"

#include "dmkv/batch.h"
#include "dmkv/fence.h"
#include "sephash_internal.h"

uint32_t sh_lease_ms = 3000;
uint32_t sh_hold_ms = 2000;
int (*sh_test_hook)(dm_sephash_t *h, int site);

int sh_die(dm_sephash_t *h, int site)
{
    if (sh_test_hook && sh_test_hook(h, site)) h->died = 1;
    return h->died;
}

/* The CAS from 0, then, when the word read back is one this thread has seen unchanged for
 * the lease and its holder is fenced, the CAS from that word (the takeover). */
int sh_lease_try(dm_ctx_t *ctx, dm_gaddr_t addr, sh_hold_t *hd, int *took_over)
{
    uint64_t from = 0;
    *took_over = 0;
    for (int i = 0; i < 2; i++) {
        uint64_t word = (uint64_t)dm_lease_token() << 1 | 1;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, addr, from, word);
        uint64_t posted = dm_now_us(); /* the hold starts before the CAS is posted */
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        if (v->result == from) {
            hd->addr = addr;
            hd->word = word;
            hd->until = posted + 1000ull * sh_hold_ms;
            dm_lease_forget(addr);
            *took_over = from != 0;
            return 1;
        }
        from = v->result;
        if (!from) continue; /* freed meanwhile: try again from 0 */
        if (!dm_lease_takeover_ready(ctx, addr, from, sh_lease_ms)) return 0;
    }
    return 0;
}

int sh_lease_release(dm_ctx_t *ctx, const sh_hold_t *hd)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_cas(&b, hd->addr, hd->word, 0);
    return dm_batch_post_async(ctx, &b);
}
