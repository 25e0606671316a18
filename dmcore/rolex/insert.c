/* ROLEX insert and remove (§3.4, §4.3, §4.5): under the covering primary leaf's lock (which covers
 * its synonym chain), re-read the chain, change one leaf with one WRITE; a full chain gets a new
 * synonym leaf from the leaf region by FAA, written before it is linked. */
#include "dmkv/rolex.h"

#include "dmkv/errors.h"

#include <stdlib.h>
#include <string.h>

#include "rolex_internal.h"

/* The body of leaf l (next, count, checksum, entries) to `at`, in b. */
static void put_body(dm_batch_t *b, dm_gaddr_t at, rx_leaf_t *l)
{
    l->sum = rx_leaf_sum(l);
    dm_batch_write(b, at + RX_LEAF_BODY, &l->next, RX_LEAF_BYTES - RX_LEAF_BODY);
}

static void entry_set(rx_entry_t *e, const void *key, size_t len)
{
    memset(e, 0, sizeof(*e));
    e->len = (uint16_t)len;
    memcpy(e->key, key, len);
}

/* b's writes and, after them in the same batch, the unlock (one node's verbs run in order:
 * ROLEX §3.4 "WRITE + unlock"). With the hold over, nothing is sent (DM_ERETRY) and the
 * caller unlocks alone (a CAS from its own token: harmless if taken over). */
static int write_unlock(dm_ctx_t *ctx, dm_batch_t *b, const rx_hold_t *hd, int *unlocked)
{
    dm_verb_t *u = dm_batch_cas(b, hd->addr, hd->word, 0);
    int rc = dm_batch_exec(ctx, b);
    *unlocked = !rc && u->result == hd->word;
    return rc;
}

/* Under the lock, with the chain read: insert (add) or remove key. Returns as the API. */
static int change(dm_ctx_t *ctx, dm_rolex_t *r, const rx_hold_t *hd, rx_leaf_t *v, dm_gaddr_t *ad,
                  unsigned n, const void *key, size_t len, int add, int *unlocked)
{
    dm_batch_t b;
    dm_batch_init(&b);
    b.send_by_us = hd->until_us; /* no write after the hold: DM_ERETRY, nothing written */
    int pos = -1;
    unsigned k = 0;
    for (; k < n && pos < 0; k++)
        pos = rx_leaf_find(&v[k], key, len);
    if (pos >= 0) {
        if (add) return 1;
        rx_leaf_t *l = &v[--k];
        memmove(&l->e[pos], &l->e[pos + 1], (l->count - (unsigned)pos - 1) * sizeof(l->e[0]));
        memset(&l->e[--l->count], 0, sizeof(l->e[0]));
        put_body(&b, ad[k], l);
        int rc = write_unlock(ctx, &b, hd, unlocked);
        return rc ? rc : 1;
    }
    if (!add) return 0;
    for (k = 0; k < n && v[k].count >= DM_ROLEX_SLOTS; k++)
        ;
    if (k < n) { /* room in leaf k: insert in order */
        rx_leaf_t *l = &v[k];
        int at = -rx_leaf_find(l, key, len) - 1;
        memmove(&l->e[at + 1], &l->e[at], (l->count - (unsigned)at) * sizeof(l->e[0]));
        entry_set(&l->e[at], key, len);
        l->count++;
        put_body(&b, ad[k], l);
        return write_unlock(ctx, &b, hd, unlocked);
    }
    /* A new synonym leaf: FAA on alloc_num (1 RTT), then its WRITE and the link in one
     * batch (one node's verbs run in order: the leaf is whole before it is linked). */
    dm_batch_t fb;
    dm_batch_init(&fb);
    dm_verb_t *faa = dm_batch_faa(&fb, r->root + RX_OFF_ALLOC, 1);
    int rc = dm_batch_exec(ctx, &fb);
    if (rc) return rc;
    if (faa->result >= r->hdr.capacity) return DM_ENOMEM;
    rx_leaf_t nl;
    memset(&nl, 0, sizeof(nl));
    nl.lo = v[0].lo;
    entry_set(&nl.e[0], key, len);
    nl.count = 1;
    nl.sum = rx_leaf_sum(&nl);
    dm_gaddr_t at = rx_leaf_addr(r, faa->result);
    dm_batch_write(&b, at, &nl, RX_LEAF_BYTES);
    v[n - 1].next = at;
    put_body(&b, ad[n - 1], &v[n - 1]);
    return write_unlock(ctx, &b, hd, unlocked);
}

static int update(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len, int add)
{
    if (!len) return DM_EINVAL;
    if (len > DM_ROLEX_KEY_MAX) return add ? DM_ETOOBIG : 0;
    uint64_t j;
    rx_leaf_t l;
    int rc = rx_locate(ctx, r, dm_rolex_image(key, len), &j, &l);
    if (rc) return rc;
    rx_hold_t hd;
    dm_gaddr_t at = rx_leaf_addr(r, j);
    rc = rx_lock(ctx, at, &hd, &l); /* and the leaf as the last holder left it */
    if (rc) return rc;
    if (rx_test_hook && rx_test_hook(RX_SITE_LOCKED)) return DM_EIO; /* "dies" holding it */
    rx_leaf_t *v = NULL;
    dm_gaddr_t *ad = NULL;
    unsigned n = 0;
    if (!rx_leaf_ok(&l)) rc = rx_read_leaf(ctx, at, &l); /* torn: only after a takeover */
    if (!rc) rc = rx_read_chain(ctx, &l, at, &v, &ad, &n);
    int unlocked = 0;
    if (!rc) rc = change(ctx, r, &hd, v, ad, n, key, len, add, &unlocked);
    free(v), free(ad);
    int urc = unlocked ? 0 : rx_unlock(ctx, &hd);
    return rc ? rc : urc;
}

int dm_rolex_insert(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len)
{
    int rc = update(ctx, r, key, len, 1);
    return rc == 1 ? 1 : rc;
}

int dm_rolex_remove(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len)
{
    return update(ctx, r, key, len, 0);
}
