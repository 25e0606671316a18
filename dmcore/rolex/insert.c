/* ROLEX insert and remove (§3.4, §4.3, §4.5): under the lock of the covering entry's chain head
 * (which covers its whole chain), re-read the chain from the entry's leaf as far as the key's
 * successor, change one leaf with one WRITE, keeping the chain sorted across its leaves; where
 * that leaf is full, keys move forward into the next leaves, or a new synonym leaf from the leaf
 * region (FAA) takes the upper part of one, written before it is linked.
 *
 * A key goes into the leaf of its successor (the first leaf whose last key is above it), or
 * into the chain's last leaf when it has none, never into an earlier leaf with room: so a
 * key's leaf is never before its successor's, and a leaf that had no key of image >= b
 * before some leaf S never gets one (keys only move forward). That keeps I(e) of every LT
 * entry of every model, those of a retrain in progress included (retrain.c), without a
 * writer knowing the entries. */
#include "dmkv/rolex.h"

#include "dmkv/alloc.h"
#include "dmkv/errors.h"
#include "dmkv/key_record.h"

#include <stdlib.h>
#include <string.h>

#include "rolex_internal.h"

#define RX_SHIFT_MAX 4u /* leaves a key may move through before a full chain splits instead */

void rx_put_body(dm_batch_t *b, dm_gaddr_t at, rx_leaf_t *l)
{
    l->reserved++; /* the leaf's version: every write changes it (watch_sig) */
    l->sum = rx_leaf_sum(l);
    dm_batch_write(b, at + RX_LEAF_BODY, &l->next, RX_LEAF_BYTES - RX_LEAF_BODY);
}

uint64_t rx_recs_written, rx_recs_freed, rx_leaves_taken;

int rx_rec_write(dm_ctx_t *ctx, const void *key, size_t len, dm_gaddr_t *rec)
{
    *rec = 0;
    int rc = dm_keyrec_write(ctx, key, len, rec);
    if (*rec) __atomic_fetch_add(&rx_recs_written, 1, __ATOMIC_RELAXED); /* allocated */
    return rc;
}

int rx_rec_stage(dm_ctx_t *ctx, const dm_rolex_t *r, dm_batch_t *b, const void *key, size_t len,
                 dm_gaddr_t *rec, uint8_t **buf)
{
    uint32_t bytes;
    *rec = 0;
    *buf = dm_keyrec_build(key, len, &bytes);
    if (!*buf) return DM_ENOMEM;
    int rc = dm_alloc_block(ctx, bytes, rec);
    if (rc) {
        *rec = 0;
        return rc;
    }
    __atomic_fetch_add(&rx_recs_written, 1, __ATOMIC_RELAXED);
    /* The leaf region is one block, on one memory node: a record on that node goes ahead of
     * the leaf WRITEs in their batch (one node's verbs run in posting order), no RTT. */
    if (dm_gaddr_node(*rec) == dm_gaddr_node(r->hdr.region)) {
        dm_batch_write(b, *rec, *buf, bytes);
        return 0;
    }
    dm_batch_t own; /* elsewhere: written and waited for first (1 RTT) */
    dm_batch_init(&own);
    dm_batch_write(&own, *rec, *buf, bytes);
    return dm_batch_exec(ctx, &own);
}

void rx_rec_free(dm_ctx_t *ctx, const rx_entry_t *e)
{
    if (!rx_elong(e)) return;
    dm_alloc_free(ctx->w->alloc, rx_erec(e), dm_keyrec_bytes(rx_elen(e)));
    __atomic_fetch_add(&rx_recs_freed, 1, __ATOMIC_RELAXED);
}

void rx_rec_give_back(dm_ctx_t *ctx, dm_gaddr_t rec, size_t len)
{
    dm_alloc_free(ctx->w->alloc, rec, dm_keyrec_bytes(len));
    __atomic_fetch_add(&rx_recs_freed, 1, __ATOMIC_RELAXED);
}

int rx_run_names(const rx_run_t *c, const rx_entry_t *e)
{
    for (unsigned k = 0; rx_elong(e) && k < c->n; k++)
        for (unsigned i = 0; i < c->v[k].count; i++)
            if (rx_elong(&c->v[k].e[i]) && rx_erec(&c->v[k].e[i]) == rx_erec(e)) return 1;
    return 0;
}

/* b's writes and, after them in the same batch, the unlock (one node's verbs run in order:
 * ROLEX §3.4 "WRITE + unlock"). With the hold over, nothing is sent (DM_ERETRY) and the
 * caller unlocks alone (a CAS from its own token: harmless if taken over). */
static int write_unlock(dm_ctx_t *ctx, dm_batch_t *b, const rx_hold_t *hd, int *unlocked)
{
    dm_verb_t *u = dm_batch_cas(b, hd->addr, hd->word, 0);
    dm_lease_unlocking(hd);
    int rc = dm_batch_exec(ctx, b);
    *unlocked = !rc && u->result == hd->word;
    return rc;
}

/* The probe's key into leaf l (not full, key absent) at its place in order. */
static void leaf_insert(rx_leaf_t *l, rx_probe_t *p, uint16_t flags, dm_gaddr_t rec)
{
    int at = -rx_leaf_find(l, p) - 1;
    memmove(&l->e[at + 1], &l->e[at], (l->count - (unsigned)at) * sizeof(l->e[0]));
    rx_entry_set(&l->e[at], p->key, p->len, flags, rec);
    l->count++;
}

/* Room for n leaves in the run. */
static int run_reserve(rx_run_t *c, unsigned n)
{
    if (n <= c->cap) return 0;
    unsigned cap = c->cap ? 2 * c->cap : 8;
    while (cap < n)
        cap *= 2;
    rx_leaf_t *nv = realloc(c->v, cap * sizeof(*nv));
    if (nv) c->v = nv;
    dm_gaddr_t *na = realloc(c->ad, cap * sizeof(*na));
    if (na) c->ad = na;
    if (!nv || !na) return DM_ENOMEM;
    c->cap = cap;
    return 0;
}

int rx_run_append(rx_run_t *dst, const rx_run_t *src)
{
    int rc = run_reserve(dst, dst->n + src->n);
    if (rc) return rc;
    memcpy(dst->v + dst->n, src->v, src->n * sizeof(*src->v));
    memcpy(dst->ad + dst->n, src->ad, src->n * sizeof(*src->ad));
    dst->n += src->n;
    return 0;
}

int rx_run_more(dm_ctx_t *ctx, rx_run_t *c)
{
    if (c->n >= RX_CHAIN_MAX) return RX_CORRUPT("a run of over %u leaves", RX_CHAIN_MAX);
    int rc = run_reserve(c, c->n + 1);
    if (rc) return rc;
    c->ad[c->n] = c->v[c->n - 1].next;
    rc = rx_read_leaf(ctx, c->ad[c->n], &c->v[c->n]);
    if (!rc && c->v[c->n].label != c->label) { /* another lock's leaf: the run ends before */
        c->beyond = c->ad[c->n], c->beyond_lab = c->v[c->n].label;
        return 0;
    }
    if (!rc && c->pr) rc = rx_probe_prepare(ctx, c->pr, &c->v[c->n], 1);
    if (!rc) c->n++;
    return rc;
}

int rx_run_complete(const rx_run_t *c)
{
    return !c->v[c->n - 1].next || c->beyond;
}

unsigned rx_run_place(const rx_run_t *c)
{
    unsigned t = 0;
    while (t < c->n && !rx_leaf_above(&c->v[t], c->pr))
        t++;
    return t;
}

int rx_run_read(dm_ctx_t *ctx, rx_run_t *c)
{
    int rc = rx_probe_prepare(ctx, c->pr, c->v, c->n);
    while (!rc && !rx_run_complete(c) && rx_run_place(c) == c->n)
        rc = rx_run_more(ctx, c);
    return rc;
}

int rx_run_find(const rx_run_t *c, unsigned *k)
{
    for (unsigned i = 0; i < c->n; i++) {
        int pos = rx_leaf_find(&c->v[i], c->pr);
        if (pos >= 0) {
            *k = i;
            return pos;
        }
    }
    return -1;
}

void rx_run_free(rx_run_t *c)
{
    free(c->v), free(c->ad);
    c->v = NULL, c->ad = NULL, c->n = c->cap = 0;
}

/* A leaf from the leaf region (FAA on alloc_num: ROLEX §3.3, no memory-node CPU): 1 RTT. */
static int take_leaf(dm_ctx_t *ctx, dm_rolex_t *r, dm_gaddr_t *at)
{
    dm_batch_t fb;
    dm_batch_init(&fb);
    dm_verb_t *faa = dm_batch_faa(&fb, r->root + RX_OFF_ALLOC, 1);
    int rc = dm_batch_exec(ctx, &fb);
    if (rc) return rc;
    rx_max(&rx_leaves_taken, faa->result < r->hdr.capacity ? faa->result + 1 : r->hdr.capacity);
    if (faa->result >= r->hdr.capacity) return DM_EINDEXFULL; /* the region does not grow */
    *at = rx_leaf_addr(r, faa->result);
    return 0;
}

/* Full leaves around key: leaf t's keys above the split point move to a new synonym leaf
 * linked after it (keys only ever move forward in a chain, so a reader walking it never misses
 * a key present throughout). The new leaf is written whole before t links it, in one batch
 * (one node's verbs run in order). t == n (key above every key): the new leaf holds key
 * alone, after the last leaf. The new leaf joins the run after its predecessor (the batch
 * points into the run: it must not move until b is posted). */
static int split(dm_ctx_t *ctx, dm_rolex_t *r, dm_batch_t *b, rx_run_t *c, unsigned t,
                 uint16_t flags, dm_gaddr_t rec)
{
    unsigned n = c->n;
    int rc = run_reserve(c, n + 1);
    if (rc) return rc;
    dm_gaddr_t at;
    rc = take_leaf(ctx, r, &at);
    if (rc) return rc;
    rx_leaf_t nl, *v = c->v;
    memset(&nl, 0, sizeof(nl));
    nl.lo = v[0].lo;
    nl.label = c->label; /* its predecessor's lock guards it */
    if (t == n) {
        rx_entry_set(&nl.e[0], c->pr->key, c->pr->len, flags, rec);
        nl.count = 1;
        t = n - 1;
    } else {
        rx_leaf_t *l = &v[t];
        rx_entry_t all[DM_ROLEX_SLOTS + 1];
        unsigned pos = (unsigned)(-rx_leaf_find(l, c->pr) - 1);
        /* At least half stays; a key in the upper half splits right after it, so that keys
         * arriving in ascending order fill its leaf (measured: fewer leaves than halves). */
        unsigned keep = pos + 1 > (DM_ROLEX_SLOTS + 2) / 2 ? pos + 1 : (DM_ROLEX_SLOTS + 2) / 2;
        memcpy(all, l->e, pos * sizeof(all[0]));
        rx_entry_set(&all[pos], c->pr->key, c->pr->len, flags, rec);
        memcpy(&all[pos + 1], &l->e[pos], (DM_ROLEX_SLOTS - pos) * sizeof(all[0]));
        nl.count = DM_ROLEX_SLOTS + 1 - keep;
        memcpy(nl.e, &all[keep], nl.count * sizeof(all[0]));
        nl.next = l->next;
        memset(l->e, 0, sizeof(l->e));
        memcpy(l->e, all, keep * sizeof(all[0]));
        l->count = keep;
    }
    nl.sum = rx_leaf_sum(&nl);
    memmove(&v[t + 2], &v[t + 1], (n - t - 1) * sizeof(v[0]));
    memmove(&c->ad[t + 2], &c->ad[t + 1], (n - t - 1) * sizeof(c->ad[0]));
    v[t + 1] = nl, c->ad[t + 1] = at, c->n++;
    dm_batch_write(b, at, &v[t + 1], RX_LEAF_BYTES);
    v[t].next = at;
    rx_put_body(b, c->ad[t], &v[t]);
    return 0;
}

/* Leaf t full and key in its range, leaves t + 1 .. u - 1 full and leaf u with room: the last
 * key of each of t .. u - 1 moves to the front of the next leaf, and key goes into t (the
 * paper's data movement among synonym leaves). The leaves are written from u back to t in one
 * batch, so a moved key is in the later leaf before it leaves the earlier one: every move is
 * forward, and a reader walking the chain forward never misses a key present throughout. */
static void shift(dm_batch_t *b, rx_leaf_t *v, dm_gaddr_t *ad, unsigned t, unsigned u,
                  rx_probe_t *p, uint16_t flags, dm_gaddr_t rec)
{
    for (unsigned k = u; k > t; k--) {
        rx_leaf_t *l = &v[k - 1], *nx = &v[k];
        memmove(&nx->e[1], &nx->e[0], nx->count * sizeof(nx->e[0]));
        nx->e[0] = l->e[--l->count];
        memset(&l->e[l->count], 0, sizeof(l->e[0]));
        nx->count++;
        rx_put_body(b, ad[k], nx);
    }
    leaf_insert(&v[t], p, flags, rec);
    rx_put_body(b, ad[t], &v[t]);
}

int rx_run_add(dm_ctx_t *ctx, dm_rolex_t *r, dm_batch_t *b, rx_run_t *c, uint16_t flags,
               dm_gaddr_t rec)
{
    /* Room for a split's leaf first: b points into the run, which must not move after. */
    int rc = run_reserve(c, c->n + RX_SHIFT_MAX + 2);
    /* The new entry is the key itself: later finds in the run match it without a read. */
    if (!rc && c->pr->len > DM_ROLEX_INLINE) rc = rx_probe_set(c->pr, rec, 0);
    if (rc) return rc;
    unsigned n = c->n, t = rx_run_place(c), at = t < n ? t : n - 1;
    if (c->v[at].count < DM_ROLEX_SLOTS) { /* room in its leaf: insert in order */
        leaf_insert(&c->v[at], c->pr, flags, rec);
        rx_put_body(b, c->ad[at], &c->v[at]);
        return 0;
    }
    unsigned u = t + 1; /* the first leaf with room after t, within reach */
    for (; t < n && u <= t + RX_SHIFT_MAX; u++) {
        if (u == c->n && !rx_run_complete(c)) {
            rc = rx_run_more(ctx, c);
            if (rc) return rc;
        }
        if (u == c->n || c->v[u].count < DM_ROLEX_SLOTS) break;
    }
    if (t < n && u < c->n && u <= t + RX_SHIFT_MAX) {
        shift(b, c->v, c->ad, t, u, c->pr, flags, rec);
        return 0;
    }
    return split(ctx, r, b, c, t < n ? t : c->n, flags, rec);
}

void rx_run_drop(dm_batch_t *b, rx_run_t *c, unsigned k, unsigned pos)
{
    rx_leaf_t *l = &c->v[k];
    memmove(&l->e[pos], &l->e[pos + 1], (l->count - pos - 1) * sizeof(l->e[0]));
    memset(&l->e[--l->count], 0, sizeof(l->e[0]));
    rx_put_body(b, c->ad[k], l);
}

/* Under the lock, with the run read up to key's successor (or to the chain's end): insert
 * (add) or remove key, keeping the chain sorted across its leaves (ROLEX §3.3: "the data of
 * synonym leaves move within each other"). One leaf changes with one WRITE; where key's leaf
 * is full, keys move forward into the next leaves up to one with room (RX_SHIFT_MAX at most,
 * read now if need be) or, all full, the leaf splits (an FAA, then two WRITEs). Returns as the
 * API. */
static int change(dm_ctx_t *ctx, dm_rolex_t *r, const rx_hold_t *hd, rx_run_t *c, int add,
                  int *unlocked)
{
    dm_batch_t b;
    dm_batch_init(&b);
    b.send_by_us = hd->until_us; /* no write after the hold: DM_ERETRY, nothing written */
    unsigned k = 0;
    int pos = rx_run_find(c, &k); /* in its successor's leaf or before */
    if (pos >= 0) {
        if (add) return 1;
        rx_entry_t gone = c->v[k].e[pos];
        rx_run_drop(&b, c, k, (unsigned)pos);
        int rc = write_unlock(ctx, &b, hd, unlocked);
        /* No leaf names it now (a copy a cut shift left would: then it stays); quarantined
         * for the readers that may still hold the entry. */
        if (!rc && !rx_run_names(c, &gone)) rx_rec_free(ctx, &gone);
        return rc ? rc : 1;
    }
    if (!add) return 0;
    /* A long key's record lands before the leaf WRITE that names it (rx_rec_stage: first in
     * b on the leaves' node, else its own batch before). */
    dm_gaddr_t rec = 0;
    uint8_t *rbuf = NULL;
    size_t len = c->pr->len;
    int rc = len > DM_ROLEX_INLINE ? rx_rec_stage(ctx, r, &b, c->pr->key, len, &rec, &rbuf) : 0;
    if (!rc) rc = rx_run_add(ctx, r, &b, c, 0, rec);
    int sent = 0;
    if (!rc) sent = 1, rc = write_unlock(ctx, &b, hd, unlocked);
    free(rbuf);
    /* Given up with nothing sent (an error before the WRITE, or the hold over): the record
     * goes back; after any other error the WRITE may have landed, and it stays. */
    if (rec && rc && (!sent || rc == DM_ERETRY)) rx_rec_give_back(ctx, rec, len);
    return rc;
}

/* Lock the chain of the entry covering key's image and read its run up to key's successor:
 * the head's lock CAS with the head read behind it when the entry is a head, else the
 * entry's leaf read after the lock (1 more RTT: dm_lease_lock_try reads behind the lock word
 * only). */
static int update(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t len, int add)
{
    if (!len) return DM_EINVAL;
    if (len > DM_ROLEX_KEY_MAX) return add ? DM_ETOOBIG : 0;
    rx_win_t w;
    int rc = rx_win_read(ctx, r, dm_rolex_image(key, len), 0, &w);
    if (rc) return rc;
    const rx_lt_t e = r->lt[w.j];
    uint64_t word = w.model; /* a new model is loaded after the unlock (sync.c) */
    free(w.buf);
    rx_probe_t pr; /* a long key's records are read once, by rx_run_read and its hops */
    rx_probe_init(&pr, key, len);
    rx_run_t c = {.v = malloc(8 * sizeof(rx_leaf_t)),
                  .ad = malloc(8 * sizeof(dm_gaddr_t)),
                  .n = 1,
                  .cap = 8,
                  .pr = &pr};
    if (!c.v || !c.ad) {
        free(c.v), free(c.ad);
        return DM_ENOMEM;
    }
    /* The start leaf's lock (domain.c): the one this handle saw last, then whatever the
     * leaf's label and the key's place say. */
    uint64_t start = e.leaf, head = rx_dom_guess(r, e.leaf, e.head);
    rx_hold_t hd;
    for (unsigned tries = 0;; tries++) {
        if (tries == RX_DOM_TRIES) {
            free(c.v), free(c.ad);
            rx_probe_free(&pr);
            return RX_CORRUPT("a cycle of labels");
        }
        c.n = 1, c.beyond = 0, c.beyond_lab = 0;
        c.ad[0] = rx_leaf_addr(r, start);
        rc = rx_lock(ctx, rx_leaf_addr(r, head), &hd, head == start ? &c.v[0] : NULL);
        if (rc || (rx_test_hook && rx_test_hook(RX_SITE_LOCKED))) { /* the hook: "dies" */
            free(c.v), free(c.ad);
            rx_probe_free(&pr);
            return rc ? rc : DM_EIO;
        }
        /* Torn only after a takeover (or not read yet: not the lock's leaf). */
        if (head != start || !rx_leaf_ok(&c.v[0])) rc = rx_read_leaf(ctx, c.ad[0], &c.v[0]);
        if (!rc) rc = rx_dom_read(ctx, r, &c, e.head, &start, &head);
        if (rc <= 0) break;
        rc = 0;
        rx_unlock(ctx, &hd);
    }
    int unlocked = 0;
    if (!rc) rc = change(ctx, r, &hd, &c, add, &unlocked);
    free(c.v), free(c.ad);
    rx_probe_free(&pr);
    int urc = unlocked ? 0 : rx_unlock(ctx, &hd);
    rx_notice(ctx, r, word);
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
