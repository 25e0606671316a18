/* Leases on ROLEX's leaf locks, by docs/leases.md's rules (dmkv: the paper assumes no
 * client dies holding a lock): a lock word carries a fresh token; a waiter takes a held
 * word over only after it saw that exact word unchanged for rx_lease_ms and fenced its
 * holder (dm_lease_takeover_ready); the holder sends no write after rx_hold_ms. A waiter
 * waits as long as the lock is held (no dm_ctx_check: ROLEX frees no block an old
 * operation could still point to). */
#include "dmkv/rolex.h"

#include "dmkv/lease_lock.h"
#include "rolex_internal.h"

uint32_t rx_lease_ms = 3000;
uint32_t rx_hold_ms = 2000;
int (*rx_test_hook)(int site);

#define RX_LOCK_WAIT_US 200 /* between tries on a held lock */

int rx_lock(dm_ctx_t *ctx, dm_gaddr_t addr, rx_hold_t *hd, rx_leaf_t *leaf)
{
    int took_over;
    /* The leaf read behind the CAS: the holder's view, as the last holder left it. */
    const dm_lease_read_t rd = {addr, leaf, RX_LEAF_BYTES};
    return dm_lease_lock_wait(ctx, addr, rx_lease_ms, rx_hold_ms, &rd, leaf ? 1 : 0, NULL, NULL, hd,
                              &took_over, RX_LOCK_WAIT_US, NULL);
}

int rx_unlock(dm_ctx_t *ctx, const rx_hold_t *hd)
{
    return dm_lease_unlock(ctx, hd);
}
