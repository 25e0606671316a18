/* ROLEX insert and remove (§3.4, §4.3, §4.5): under the covering primary leaf's lock (which covers
 * its synonym chain), re-read the chain, change one leaf with one WRITE, keeping the chain sorted
 * across its leaves; where the leaves around a new key are full, keys move forward into the next
 * leaves, or a new synonym leaf from the leaf region (FAA) takes the upper part of one, written
 * before it is linked. */
#include "dmkv/rolex.h"

#include "dmkv/errors.h"

#include <stdlib.h>
#include <string.h>

#include "rolex_internal.h"

#define RX_SHIFT_MAX 4u /* leaves a key may move through before a full chain splits instead */

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

/* Key into leaf l (not full, key absent) at its place in order. */
static void leaf_insert(rx_leaf_t *l, const void *key, size_t len)
{
    int at = -rx_leaf_find(l, key, len) - 1;
    memmove(&l->e[at + 1], &l->e[at], (l->count - (unsigned)at) * sizeof(l->e[0]));
    entry_set(&l->e[at], key, len);
    l->count++;
}

/* Where key goes in a chain sorted across its leaves: *t is the first non-empty leaf whose
 * last key is above key (n if none). When t's first key is below key too, key goes into t
 * (*p = t); else *p is the last non-empty leaf before t (-1 if none), the leaves between
 * them are empty, and key may go into any of p..t without breaking the order. */
static void place(const rx_leaf_t *v, unsigned n, const void *key, size_t len, int *p, unsigned *t)
{
    *p = -1;
    for (*t = 0; *t < n; ++*t) {
        const rx_leaf_t *l = &v[*t];
        if (!l->count) continue;
        const rx_entry_t *last = &l->e[l->count - 1];
        if (rx_key_cmp(last->key, last->len, key, len) > 0) {
            if (rx_key_cmp(l->e[0].key, l->e[0].len, key, len) < 0) *p = (int)*t;
            return;
        }
        *p = (int)*t;
    }
}

/* A leaf from the leaf region (FAA on alloc_num: ROLEX §3.3, no memory-node CPU): 1 RTT. */
static int take_leaf(dm_ctx_t *ctx, dm_rolex_t *r, dm_gaddr_t *at)
{
    dm_batch_t fb;
    dm_batch_init(&fb);
    dm_verb_t *faa = dm_batch_faa(&fb, r->root + RX_OFF_ALLOC, 1);
    int rc = dm_batch_exec(ctx, &fb);
    if (rc) return rc;
    if (faa->result >= r->hdr.capacity) return DM_ENOMEM;
    *at = rx_leaf_addr(r, faa->result);
    return 0;
}

/* Full leaves around key: leaf t's keys above the split point move to a new synonym leaf
 * linked after it (keys only ever move forward in a chain, so a reader walking it never misses
 * a key present throughout). The new leaf is written whole before t links it, in one batch
 * (one node's verbs run in order). t == n (key above every key): the new leaf holds key
 * alone, after the last leaf. */
static int split(dm_ctx_t *ctx, dm_rolex_t *r, dm_batch_t *b, rx_leaf_t *v, dm_gaddr_t *ad,
                 unsigned n, unsigned t, const void *key, size_t len)
{
    dm_gaddr_t at;
    int rc = take_leaf(ctx, r, &at);
    if (rc) return rc;
    rx_leaf_t nl;
    memset(&nl, 0, sizeof(nl));
    nl.lo = v[0].lo;
    if (t == n) {
        entry_set(&nl.e[0], key, len);
        nl.count = 1;
        t = n - 1;
    } else {
        rx_leaf_t *l = &v[t];
        rx_entry_t all[DM_ROLEX_SLOTS + 1];
        unsigned pos = (unsigned)(-rx_leaf_find(l, key, len) - 1);
        /* At least half stays; a key in the upper half splits right after it, so that keys
         * arriving in ascending order fill its leaf (measured: fewer leaves than halves). */
        unsigned keep = pos + 1 > (DM_ROLEX_SLOTS + 2) / 2 ? pos + 1 : (DM_ROLEX_SLOTS + 2) / 2;
        memcpy(all, l->e, pos * sizeof(all[0]));
        entry_set(&all[pos], key, len);
        memcpy(&all[pos + 1], &l->e[pos], (DM_ROLEX_SLOTS - pos) * sizeof(all[0]));
        nl.count = DM_ROLEX_SLOTS + 1 - keep;
        memcpy(nl.e, &all[keep], nl.count * sizeof(all[0]));
        nl.next = l->next;
        memset(l->e, 0, sizeof(l->e));
        memcpy(l->e, all, keep * sizeof(all[0]));
        l->count = keep;
    }
    nl.sum = rx_leaf_sum(&nl);
    dm_batch_write(b, at, &nl, RX_LEAF_BYTES);
    v[t].next = at;
    put_body(b, ad[t], &v[t]);
    return 0;
}

/* Leaf t full and key in its range, leaves t + 1 .. u - 1 full and leaf u with room: the last
 * key of each of t .. u - 1 moves to the front of the next leaf, and key goes into t (the
 * paper's data movement among synonym leaves). The leaves are written from u back to t in one
 * batch, so a moved key is in the later leaf before it leaves the earlier one: every move is
 * forward, and a reader walking the chain forward never misses a key present throughout. */
static void shift(dm_batch_t *b, rx_leaf_t *v, dm_gaddr_t *ad, unsigned t, unsigned u,
                  const void *key, size_t len)
{
    for (unsigned k = u; k > t; k--) {
        rx_leaf_t *l = &v[k - 1], *nx = &v[k];
        memmove(&nx->e[1], &nx->e[0], nx->count * sizeof(nx->e[0]));
        nx->e[0] = l->e[--l->count];
        nx->count++;
        put_body(b, ad[k], nx);
    }
    leaf_insert(&v[t], key, len);
    put_body(b, ad[t], &v[t]);
}

/* Under the lock, with the chain read: insert (add) or remove key, keeping the chain sorted
 * across its leaves (ROLEX §3.3: "the data of synonym leaves move within each other"). One
 * leaf changes with one WRITE; where the leaves around key are full, keys move forward into the
 * next leaves up to one with room (RX_SHIFT_MAX at most) or, all full, a leaf splits (an FAA,
 * then two WRITEs). Returns as the API. */
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
    int p;
    unsigned t;
    place(v, n, key, len, &p, &t);
    unsigned last = t < n ? t : n - 1;
    for (k = p < 0 ? 0 : (unsigned)p; k <= last && v[k].count >= DM_ROLEX_SLOTS; k++)
        ;
    if (k <= last) { /* room in leaf k: insert in order */
        leaf_insert(&v[k], key, len);
        put_body(&b, ad[k], &v[k]);
        return write_unlock(ctx, &b, hd, unlocked);
    }
    unsigned u = t + 1; /* the first leaf with room after t, within reach */
    while (u < n && u <= t + RX_SHIFT_MAX && v[u].count >= DM_ROLEX_SLOTS)
        u++;
    if (u < n && u <= t + RX_SHIFT_MAX) {
        shift(&b, v, ad, t, u, key, len);
        return write_unlock(ctx, &b, hd, unlocked);
    }
    int rc = split(ctx, r, &b, v, ad, n, t, key, len);
    return rc ? rc : write_unlock(ctx, &b, hd, unlocked);
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
