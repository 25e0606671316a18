/* Leases on ROLEX's leaf locks, by docs/leases.md's rules (dmkv: the paper assumes no
 * client dies holding a lock): a lock word carries a fresh token; a waiter takes a held
 * word over only after it saw that exact word unchanged for rx_lease_ms and fenced its
 * holder (dm_lease_takeover_ready); the holder sends no write after rx_hold_ms. A waiter
 * waits as long as the lock is held (no dm_ctx_check: ROLEX frees no block an old
 * operation could still point to). */
#include "dmkv/rolex.h"

#include "dmkv/lease.h"

#include "dmkv/errors.h"
#include "dmkv/fence.h"
#include "rolex_internal.h"

uint32_t rx_lease_ms = 3000;
uint32_t rx_hold_ms = 2000;
int (*rx_test_hook)(int site);

#define RX_LOCK_WAIT_US 200 /* between tries on a held lock */

int rx_lock(dm_ctx_t *ctx, dm_gaddr_t addr, rx_hold_t *hd, rx_leaf_t *leaf)
{
    uint64_t from = 0;
    for (;;) {
        uint64_t word = (uint64_t)dm_lease_token() << 1 | 1;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, addr, from, word);
        if (leaf) /* runs after the CAS (one node's verbs run in order): the holder's view */
            dm_batch_read(&b, addr, leaf, RX_LEAF_BYTES)->fence = 1; /* rdma: after the CAS */
        uint64_t posted = dm_now_us(); /* the hold starts before the CAS is posted */
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        if (v->result == from) {
            hd->addr = addr;
            hd->word = word;
            hd->until = posted + 1000ull * rx_hold_ms;
            dm_lease_forget(addr);
            return 0;
        }
        from = v->result;
        if (from && dm_lease_takeover_ready(ctx, addr, from, rx_lease_ms)) continue;
        if (from) dm_ctx_sleep(ctx, RX_LOCK_WAIT_US);
        from = 0; /* try the free word first; a held one is read back by the CAS */
    }
}

int rx_unlock(dm_ctx_t *ctx, const rx_hold_t *hd)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_cas(&b, hd->addr, hd->word, 0);
    return dm_batch_post_async(ctx, &b);
}
