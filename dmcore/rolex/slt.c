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
 * hops. Entries stay right for ever (chains are never cut, leaves never reused); a new model
 * clears them (it lists what the retrainer found), and RX_SLT_MAX bounds them. */
#include <stdlib.h>
#include <string.h>

#include "dmkv/rolex.h"
#include "rolex_internal.h"

#define RX_SLT_MAX 4096u

/* The position of the last learned entry of low <= x, or -1. */
static int64_t slt_floor(const dm_rolex_t *r, uint64_t x)
{
    uint64_t a = 0, b = r->nslt; /* the first entry of low > x */
    while (a < b) {
        uint64_t m = a + (b - a) / 2;
        if (r->slt[m].lo <= x)
            a = m + 1;
        else
            b = m;
    }
    return (int64_t)a - 1;
}

int rx_slt_find(const dm_rolex_t *r, uint64_t x, const rx_lt_t *e, rx_lt_t *out)
{
    int64_t p = slt_floor(r, x);
    if (p < 0 || r->slt[p].lo <= e->lo || r->slt[p].head != e->head) return 0;
    *out = r->slt[p];
    return 1;
}

static void slt_add(dm_rolex_t *r, rx_lt_t s)
{
    if (r->nslt == RX_SLT_MAX) r->nslt = 0; /* relearned as walks pass again */
    if (!r->slt && !(r->slt = malloc(RX_SLT_MAX * sizeof(*r->slt)))) return;
    int64_t p = slt_floor(r, s.lo);
    if (p >= 0 && r->slt[p].lo == s.lo) {
        r->slt[p] = s;
        return;
    }
    memmove(&r->slt[p + 1] + 1, &r->slt[p + 1], (r->nslt - (uint64_t)(p + 1)) * sizeof(s));
    r->slt[p + 1] = s;
    r->nslt++;
}

void rx_slt_learn(dm_rolex_t *r, const rx_lt_t *start, const rx_leaf_t *v, const dm_gaddr_t *ad,
                  unsigned n)
{
    /* top: the largest image read so far (seen); last: the low of the last entry, start first
     * (an entry of a low >= it keeps I(S): the keys of images >= start->lo are at v[0] or
     * after it, and those read before S are below b) */
    uint64_t top = 0, last = start->lo;
    int seen = 0;
    for (unsigned s = 0; s < n; s++) {
        const rx_leaf_t *l = &v[s];
        uint64_t off = ad[s] - r->hdr.region, b;
        int ok = ad[s] >= r->hdr.region && off % RX_LEAF_BYTES == 0 &&
                 off / RX_LEAF_BYTES < r->hdr.capacity;
        if (!l->count) {
            /* An empty leaf (removes and FLUSHALL leave them linked) starts the keys above
             * every image read before it (start's low when none was): no insert puts a key
             * into it (it has no last key above one) but as the chain's last leaf, so a later
             * walk over a run of them starts at the last (an equal low replaces the earlier
             * entry). */
            b = seen ? top + 1 : start->lo;
            if (s && (!seen || top != UINT64_MAX) && b >= last && ok)
                slt_add(r, (rx_lt_t){b, (uint32_t)(off / RX_LEAF_BYTES), start->head}), last = b;
            continue;
        }
        uint64_t f = dm_rolex_image(l->e[0].key, rx_elen(&l->e[0]));
        const rx_entry_t *e = &l->e[l->count - 1];
        uint64_t li = dm_rolex_image(e->key, rx_elen(e));
        b = seen && top >= f ? top + 1 : f;
        if (s && (!seen || top != UINT64_MAX) && b >= last && b <= li && ok) {
            slt_add(r, (rx_lt_t){b, (uint32_t)(off / RX_LEAF_BYTES), start->head});
            last = b;
        }
        top = seen && top > li ? top : li;
        seen = 1;
    }
}

void rx_slt_clear(dm_rolex_t *r)
{
    r->nslt = 0;
}
