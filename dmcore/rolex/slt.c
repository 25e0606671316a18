/* ROLEX: the synonym leaves a handle learned from its own walks (the paper's SLT, ROLEX §3.3,
 * kept by each handle in RAM instead of in the pool).
 *
 * Between two retrains a chain grows synonym leaves that no LT entry names, and an insert
 * or delete walks them one round trip a leaf from its covering entry's leaf up to the key's
 * successor: a load of ascending keys walked up to the last retrain's trigger (an eighth of
 * the LT) every time. A walk under the chain's lock reads its leaves in chain order, each
 * after the one before, exactly as the retrainer does, so the retrainer's rule gives each
 * non-empty leaf S it read a low b = max(image of S's first key, 1 + every image read before
 * S in the walk) for which I(S) holds from the moment S was read (retrain.c argues it; the
 * walk starts at an entry e of low L, and I(e) puts every key of image >= L at e's leaf or
 * after it, so the images read before e's leaf need not be known once b > L). The next
 * lock of a key of image >= b starts at S instead of e's leaf: the same round trip, fewer
 * hops.
 *
 * Keys sharing their first 8 bytes (key:__rand_int__) are one run of leaves no image bound
 * can enter, so each leaf is also learned with its first key f as a key bound: every key >= f
 * is in S or after it (the chain is sorted at the instant S was read, and no key >= f goes
 * into a leaf before S afterwards), and a run of empty leaves carries the bound it started
 * with to its end. A lookup takes the greatest entry that admits the key in the order (low,
 * image bound before key bounds, key). Measured (test_rolex_range test_shared_image, 3,000
 * shuffled key:%012d inserts): 4.47 round trips each against 61.3 with image bounds only.
 *
 * Entries stay right for ever (chains are never cut, leaves never reused), through new
 * models too; RX_SLT_MAX bounds them (a full table starts again empty). */
#include <stdlib.h>
#include <string.h>

#include "dmkv/rolex.h"
#include "rolex_internal.h"

#define RX_SLT_MAX 4096u

uint64_t rx_slt_skips;

/* e vs the key k (view kv, image x) in the entries' order: by low, then an image bound before
 * the key bounds of its low, then by key. <= 0: e's bound admits k. */
static int ent_cmp(const rx_slt_t *e, uint64_t x, const rx_kview_t *kv)
{
    if (e->lo != x) return e->lo < x ? -1 : 1;
    if (!e->klen) return -1;
    rx_kview_t ev = rx_key_view(e->key, e->klen);
    int c = rx_kview_cmp(&ev, kv);
    return c == RX_CMP_RECORD ? 1 : c; /* never: a key bound is short */
}

/* e vs f in the entries' order (0: the same bound). */
static int ent_order(const rx_slt_t *e, const rx_slt_t *f)
{
    if (e->lo != f->lo) return e->lo < f->lo ? -1 : 1;
    if (!e->klen || !f->klen) return (int)!!e->klen - (int)!!f->klen;
    return rx_key_cmp(e->key, e->klen, f->key, f->klen);
}

/* The position of the last entry <= (x, kv), or -1. */
static int64_t slt_floor(const dm_rolex_t *r, uint64_t x, const rx_kview_t *kv)
{
    uint64_t a = 0, b = r->nslt; /* the first entry above */
    while (a < b) {
        uint64_t m = a + (b - a) / 2;
        if (ent_cmp(&r->slt[m], x, kv) <= 0)
            a = m + 1;
        else
            b = m;
    }
    return (int64_t)a - 1;
}

int rx_slt_find(const dm_rolex_t *r, const rx_probe_t *key, uint64_t x, const rx_lt_t *e,
                rx_lt_t *out, rx_slt_t *bound)
{
    if (!r->nslt) return 0;
    rx_kview_t kv = {key->key, key->len, key->hash, key->key}; /* hashed once, by the probe */
    int64_t p = slt_floor(r, x, &kv);
    if (p < 0) return 0;
    const rx_slt_t *s = &r->slt[p];
    /* Closer than e: above e's low, or a key bound inside a run of e's image. */
    if (s->head != e->head || s->lo < e->lo || (s->lo == e->lo && !s->klen)) return 0;
    /* The walk from s learns under an image bound of its own: a key bound f gives image(f) + 1
     * (every key of a higher image is above f), UINT64_MAX when none is left. */
    uint64_t lo = !s->klen ? s->lo : s->lo == UINT64_MAX ? UINT64_MAX : s->lo + 1;
    *out = (rx_lt_t){lo, s->leaf, s->head};
    *bound = *s;
    return 1;
}

static void slt_add(dm_rolex_t *r, const rx_slt_t *s)
{
    if (r->nslt == RX_SLT_MAX) r->nslt = 0; /* relearned as walks pass again */
    if (!r->slt && !(r->slt = malloc(RX_SLT_MAX * sizeof(*r->slt)))) return;
    uint64_t a = 0, b = r->nslt; /* the first entry not below s */
    while (a < b) {
        uint64_t m = a + (b - a) / 2;
        if (ent_order(&r->slt[m], s) < 0)
            a = m + 1;
        else
            b = m;
    }
    if (a < r->nslt && !ent_order(&r->slt[a], s)) { /* the same bound: the later leaf */
        r->slt[a] = *s;
        return;
    }
    memmove(&r->slt[a + 1], &r->slt[a], (r->nslt - a) * sizeof(*s));
    r->slt[a] = *s;
    r->nslt++;
}

static void add_image(dm_rolex_t *r, uint64_t lo, uint64_t leaf, uint64_t head)
{
    rx_slt_t s = {.lo = lo, .leaf = (uint32_t)leaf, .head = (uint32_t)head};
    slt_add(r, &s);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A walk read the leaves run[0..n) of head's chain empty, in chain order, each after the one
 * before: entries of the chain that start at any of them but the last start at the last
 * instead. Their bound holds there: no key at or above it went into the empty leaves between
 * (prop's argument in rx_slt_learn). Without this a handle that learned the leaves while they
 * held keys kept starting inside the run after DELs emptied it, and walked the rest of it,
 * one round trip a leaf, for every key of another entry (docs/DESIGN.md "Empty leaves"). */
static void slt_skip_run(dm_rolex_t *r, uint32_t head, uint64_t *run, unsigned n)
{
    if (n < 2) return;
    uint32_t to = (uint32_t)run[n - 1];
    qsort(run, n - 1, sizeof(*run), cmp_u64);
    for (uint64_t i = 0; i < r->nslt; i++) {
        rx_slt_t *e = &r->slt[i];
        uint64_t leaf = e->leaf;
        if (e->head == head && bsearch(&leaf, run, n - 1, sizeof(*run), cmp_u64)) {
            e->leaf = to;
            __atomic_fetch_add(&rx_slt_skips, 1, __ATOMIC_RELAXED);
        }
    }
}

void rx_slt_learn(dm_rolex_t *r, const rx_lt_t *start, const rx_slt_t *bound, const rx_leaf_t *v,
                  const dm_gaddr_t *ad, unsigned n)
{
    /* The leaf numbers of the empty run being read (slt_skip_run), when known; allocated at
     * the walk's first empty leaf. */
    uint64_t *run = NULL;
    unsigned nrun = 0;
    /* A key bound that holds at the walk's leaf s while every leaf from its own was empty
     * when read: no key >= it went into those (inserts skip empty leaves, shifts and splits
     * move keys below it), so it holds at the next leaf too. */
    rx_slt_t prop = {0};
    if (bound && bound->klen) prop = *bound;
    /* top: the largest image read so far (seen); last: the low of the last entry, start first
     * (an entry of a low >= it keeps I(S): the keys of images >= start->lo are at v[0] or
     * after it, and those read before S are below b) */
    uint64_t top = 0, last = start->lo;
    int seen = 0;
    for (unsigned s = 0; s < n; s++) {
        const rx_leaf_t *l = &v[s];
        uint64_t b, leaf = 0;
        int known = rx_leaf_no(r, ad[s], &leaf) == 0, ok = s && known;
        if (!l->count && r->nslt && !run) run = malloc(n * sizeof(*run));
        if (!l->count && run) {
            if (known)
                run[nrun++] = leaf;
            else
                nrun = 0; /* not a leaf of the region: no run through it */
        }
        if (l->count && run) slt_skip_run(r, (uint32_t)start->head, run, nrun), nrun = 0;
        if (!l->count) {
            /* An empty leaf (removes and FLUSHALL leave them linked) starts the keys above
             * every image read before it (start's low when none was): no insert puts a key
             * into it (it has no last key above one) but as the chain's last leaf, so a later
             * walk over a run of them starts at the last (an equal bound replaces the earlier
             * entry). */
            b = seen ? top + 1 : start->lo;
            if (ok && (!seen || top != UINT64_MAX) && b >= last)
                add_image(r, b, leaf, start->head), last = b;
            if (ok && prop.klen) prop.leaf = (uint32_t)leaf, slt_add(r, &prop);
            continue;
        }
        if (ok && prop.klen) prop.leaf = (uint32_t)leaf, slt_add(r, &prop);
        prop.klen = 0;
        const rx_entry_t *f = &l->e[0], *e = &l->e[l->count - 1];
        uint64_t fi = rx_eimage(f);
        uint64_t li = rx_eimage(e);
        b = seen && top >= fi ? top + 1 : fi;
        if (ok && (!seen || top != UINT64_MAX) && b >= last && b <= li) {
            add_image(r, b, leaf, start->head);
            last = b;
        }
        /* A key bound: every key >= S's first key f is in S or after it (the chain is sorted
         * at the instant S was read, and no key >= f goes into a leaf before S afterwards:
         * an insert goes to its successor's leaf, shifts and splits move keys below f), so
         * a lock of a key >= f may start at S even inside a run of keys sharing an image,
         * where no image bound can. Short keys only (a long one's order needs its record). */
        if (ok && rx_elen(f) <= DM_ROLEX_INLINE && rx_elen(f)) {
            rx_slt_t k = {.lo = fi,
                          .leaf = (uint32_t)leaf,
                          .head = (uint32_t)start->head,
                          .klen = (uint16_t)rx_elen(f)};
            memcpy(k.key, f->key, k.klen);
            slt_add(r, &k);
        }
        top = seen && top > li ? top : li;
        seen = 1;
    }
    if (run) slt_skip_run(r, (uint32_t)start->head, run, nrun);
    free(run);
}
