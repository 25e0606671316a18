/* ROLEX range query (§4.2, SCAN): the window's leaves and the LT positions after it in one batch,
 * then the chains they start, walked forward all at once, one batch per hop, then more positions
 * a batch at a time if needed. A chain holds exactly the keys of its head's image range, so
 * sorting each chain's keys and concatenating in LT order is sorted. */
#include "dmkv/rolex.h"

#include "dmkv/errors.h"

#include <stdlib.h>
#include <string.h>

#include "rolex_internal.h"

/* A key of a chain: its entry's view (full bytes once its record is read: own). */
typedef struct skey {
    rx_kview_t v;
    const rx_entry_t *e; /* in the walk's leaves */
    uint8_t *own;
} skey_t;

/* The order, a tie of long keys alike but for their records taken as equal: a total
 * preorder coarser than the order (counting distinct keys with it never counts too many). */
static int cmp_loose(const void *a, const void *b)
{
    int c = rx_kview_cmp(&((const skey_t *)a)->v, &((const skey_t *)b)->v);
    return c == RX_CMP_RECORD ? 0 : c;
}

/* Chain v's keys, those >= from (all when from is NULL; a tie with from kept when keep_tie),
 * into a malloc'd *e. Returns how many, or -1 out of memory. */
static long chain_collect(const rx_leaf_t *v, unsigned n, const rx_kview_t *from, int keep_tie,
                          skey_t **e)
{
    *e = malloc(((size_t)n * DM_ROLEX_SLOTS + 1) * sizeof(**e));
    if (!*e) return -1;
    size_t m = 0;
    for (unsigned k = 0; k < n; k++)
        for (unsigned i = 0; i < v[k].count; i++) {
            rx_kview_t x = rx_entry_view(&v[k].e[i]);
            int c = from ? rx_kview_cmp(&x, from) : 1;
            if (c == RX_CMP_RECORD ? keep_tie : c >= 0) (*e)[m++] = (skey_t){x, &v[k].e[i], NULL};
        }
    return (long)m;
}

/* Distinct keys >= from in chain v, never too many (ties left unread: taken as one key, and
 * below from). -1 out of memory. */
static long chain_count(const rx_leaf_t *v, unsigned n, const rx_kview_t *from)
{
    skey_t *e;
    long m = chain_collect(v, n, from, 0, &e);
    if (m > 1) qsort(e, (size_t)m, sizeof(*e), cmp_loose);
    long d = m > 0;
    for (long i = 1; i < m; i++)
        d += cmp_loose(&e[i - 1], &e[i]) != 0;
    free(e);
    return m < 0 ? -1 : d;
}

static int cmp_exact(const void *a, const void *b)
{
    return rx_kview_cmp(&((const skey_t *)a)->v, &((const skey_t *)b)->v);
}

static void skeys_free(skey_t *e, long n)
{
    for (long i = 0; i < n; i++)
        free(e[i].own);
    free(e);
}

/* Chain v's keys >= from (all when from is NULL), sorted and each once, into a malloc'd *e
 * (skeys_free): leaves read at different instants can repeat a key (removed from one leaf
 * and inserted into a later one meanwhile). Long keys' records are read (a batch of up to
 * DM_BATCH_MAX a round trip). Returns how many, or DM_E*. */
static long chain_keys(dm_ctx_t *ctx, const rx_leaf_t *v, unsigned n, const rx_kview_t *from,
                       skey_t **e)
{
    long m = chain_collect(v, n, from, 1, e);
    if (m < 0) return DM_ENOMEM;
    const rx_entry_t **ents = malloc(((size_t)m + 1) * sizeof(*ents));
    uint8_t **full = malloc(((size_t)m + 1) * sizeof(*full));
    long rc = ents && full ? 0 : DM_ENOMEM;
    unsigned nl = 0;
    for (long i = 0; !rc && i < m; i++)
        if ((*e)[i].v.len > DM_ROLEX_INLINE) ents[nl++] = (*e)[i].e;
    if (!rc && nl) rc = rx_entries_read(ctx, ents, nl, full);
    for (long i = 0, j = 0; !rc && i < m; i++)
        if ((*e)[i].v.len > DM_ROLEX_INLINE) (*e)[i].own = full[j], (*e)[i].v.full = full[j++];
    free(ents), free(full);
    size_t d = 0;
    for (long i = 0; !rc && i < m; i++) /* ties with from are known now */
        if (!from || rx_kview_cmp(&(*e)[i].v, from) >= 0)
            (*e)[d++] = (*e)[i];
        else
            free((*e)[i].own);
    if (rc) { /* no record was handed to an entry */
        skeys_free(*e, 0);
        *e = NULL;
        return rc;
    }
    m = (long)d;
    qsort(*e, (size_t)m, sizeof(**e), cmp_exact);
    d = 0;
    for (long i = 0; i < m; i++)
        if (!d || cmp_exact(&(*e)[d - 1], &(*e)[i]))
            (*e)[d++] = (*e)[i];
        else
            free((*e)[i].own);
    return (long)d;
}

/* A chain walked forward from an LT position: its leaves so far, in order. */
typedef struct walk {
    rx_leaf_t *v;
    unsigned n, cap;
    uint64_t pos; /* the position of v[n - 1] while nothing was read since the window */
    int fresh;    /* a leaf was read after the window: no more leaves from it */
    int done;
    const rx_kview_t *from; /* keys >= from count (NULL: all) */
} walk_t;

/* Distinct keys >= from the walk holds so far, never too many (-1 out of memory). */
static long walk_keys(const walk_t *k)
{
    return chain_count(k->v, k->n, k->from);
}

/* Done: the chain's end, or max distinct keys >= from in the walks up to this one (chains
 * hold disjoint keys; the earlier walks only grow). Stopping there is safe: a key present
 * throughout and not seen was, at each leaf's read, in a later leaf, so above every key read
 * in it (chains are sorted at every instant): above the max keys taken. */
static int walk_done(walk_t *k, long before, size_t max)
{
    if (!k->v[k->n - 1].next || before >= (long)max) return 1;
    size_t raw = 0;
    for (unsigned i = 0; i < k->n; i++)
        raw += k->v[i].count;
    return before + (long)raw >= (long)max && before + walk_keys(k) >= (long)max;
}

static rx_leaf_t *walk_slot(walk_t *k)
{
    if (k->n == k->cap) {
        rx_leaf_t *nv = realloc(k->v, 2 * k->cap * sizeof(*nv));
        if (!nv) return NULL;
        k->v = nv, k->cap *= 2;
    }
    return &k->v[k->n];
}

/* Walk ks[0..m) forward: from the window while each has read nothing since it (the window's
 * later positions were read later: chain order in time), else one batch per hop for all. */
static int walk_all(dm_ctx_t *ctx, const dm_rolex_t *r, const rx_win_t *w, walk_t *ks, unsigned m,
                    size_t max)
{
    for (unsigned hop = 0;; hop++) {
        dm_batch_t b;
        dm_batch_init(&b);
        unsigned who[DM_BATCH_MAX];
        long before = 0; /* distinct keys of the walks before ks[i] */
        for (unsigned i = 0; i < m; before += walk_keys(&ks[i]), i++) {
            walk_t *k = &ks[i];
            while (!k->done && !(k->done = walk_done(k, before, max)) && !k->fresh) {
                rx_leaf_t *s = walk_slot(k);
                if (!s) return DM_ENOMEM;
                const rx_leaf_t *nx = rx_win_next(r, w, &k->pos);
                if (!nx) break;
                *s = *nx;
                k->n++;
            }
            if (k->done) continue;
            rx_leaf_t *s = walk_slot(k);
            if (!s) return DM_ENOMEM;
            k->fresh = 1;
            who[b.n] = i;
            dm_batch_read(&b, k->v[k->n - 1].next, s, RX_LEAF_BYTES);
        }
        if (!b.n) return 0;
        if (hop >= RX_CHAIN_MAX) return RX_CORRUPT("a chain of over %u hops", RX_CHAIN_MAX);
        int rc = dm_batch_exec(ctx, &b);
        for (unsigned v = 0; !rc && v < b.n; v++) {
            walk_t *k = &ks[who[v]];
            if (!rx_leaf_ok(&k->v[k->n])) /* torn: re-read this one */
                rc = rx_read_leaf(ctx, k->v[k->n - 1].next, &k->v[k->n]);
            k->n++;
        }
        if (rc) return rc;
    }
}

/* The chains starting in w at positions p0 (the first, from `from`) and at every head after
 * it up to w->e, walked and appended to out. *next: the first head after w->e. DM_ERETRY when
 * r's model is no longer w's (another coroutine of the worker loaded one: rx_win_t). */
static int take_window(dm_ctx_t *ctx, const dm_rolex_t *r, const rx_win_t *w, uint64_t p0,
                       const rx_kview_t *from, size_t max, dm_rolex_key_t *out, size_t *got,
                       uint64_t *next)
{
    walk_t ks[DM_BATCH_MAX];
    unsigned m = 0;
    int rc = w->gen == r->model ? 0 : DM_ERETRY;
    for (uint64_t p = p0; !rc && p <= w->e; p++) {
        if (p != p0 && r->lt[p].leaf != r->lt[p].head) continue;
        walk_t *k = &ks[m++];
        *k = (walk_t){malloc(4 * sizeof(rx_leaf_t)), 1, 4, p, 0, 0, p == p0 ? from : NULL};
        if (!k->v)
            rc = DM_ENOMEM;
        else
            k->v[0] = w->buf[p - w->a];
    }
    if (!rc) rc = walk_all(ctx, r, w, ks, m, max - *got);
    for (unsigned i = 0; i < m; i++) {
        skey_t *e = NULL;
        long d = rc || !ks[i].v ? 0 : chain_keys(ctx, ks[i].v, ks[i].n, ks[i].from, &e);
        if (d < 0) rc = (int)d, d = 0;
        for (long q = 0; !rc && q < d && *got < max; q++) {
            dm_rolex_key_t *o = &out[*got];
            o->len = (uint16_t)e[q].v.len;
            if (e[q].own) { /* handed over */
                o->key = (char *)e[q].own;
                e[q].own = NULL;
            } else {
                o->key = o->buf;
                memcpy(o->buf, e[q].v.p, e[q].v.len);
            }
            ++*got;
        }
        if (e) skeys_free(e, d);
        free(ks[i].v);
    }
    if (!rc && w->gen != r->model) rc = DM_ERETRY; /* *next would be another model's */
    uint64_t p = w->e + 1;
    while (!rc && p < r->hdr.entries && r->lt[p].leaf != r->lt[p].head)
        p++;
    *next = p;
    return rc;
}

/* One try of dm_rolex_scan: DM_ERETRY when another coroutine of the worker loaded a new
 * model during it (its positions are the old model's); *word: the model word it read. */
static int scan_once(dm_ctx_t *ctx, dm_rolex_t *r, const void *from, size_t len, size_t max,
                     dm_rolex_key_t *out, size_t *got, uint64_t *word)
{
    /* The predicted leaves and the ones after them in the first batch (ROLEX §4.2: it "reads N
     * subsequent data" in the READ phase): about max / 8 leaves (leaves are 1/2 to full). */
    rx_win_t w;
    uint64_t next, x = len ? dm_rolex_image(from, len) : 0;
    rx_kview_t fv = rx_key_view(from, len);
    int rc = rx_win_read(ctx, r, x, max / (DM_ROLEX_SLOTS / 2) + 1, &w);
    if (rc) return rc;
    rc = take_window(ctx, r, &w, w.j, len ? &fv : NULL, max, out, got, &next);
    free(w.buf);
    *word = w.model; /* noticed once the scan is done: it walks this model's LT */
    while (!rc && *got < max && next < r->hdr.entries) { /* next is a head */
        uint64_t k = (max - *got) / (DM_ROLEX_SLOTS / 2) + 1, left = r->hdr.entries - next;
        k = k > DM_BATCH_MAX ? DM_BATCH_MAX : k;
        w.a = w.b = w.j = next;
        w.e = next + (k > left ? left : k) - 1;
        w.gen = r->model;
        w.buf = malloc((w.e - w.a + 1) * sizeof(*w.buf));
        rc = w.buf ? 0 : DM_ENOMEM;
        if (!rc) rc = rx_read_positions(ctx, r, w.a, w.e, w.buf, NULL);
        if (!rc) rc = take_window(ctx, r, &w, next, NULL, max, out, got, &next);
        free(w.buf);
    }
    if (rc) { /* nothing half-returned */
        dm_rolex_keys_free(out, *got);
        *got = 0;
    }
    return rc;
}

int dm_rolex_scan(dm_ctx_t *ctx, dm_rolex_t *r, const void *from, size_t len, size_t max,
                  dm_rolex_key_t *out, size_t *got)
{
    *got = 0;
    if (!max) return 0;
    int rc = DM_ERETRY;
    uint64_t word = 0;
    for (unsigned t = 0; rc == DM_ERETRY && t < RX_LOAD_TRIES; t++)
        rc = scan_once(ctx, r, from, len, max, out, got, &word);
    rx_notice(ctx, r, word);
    return rc;
}

void dm_rolex_keys_free(dm_rolex_key_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (out[i].key != out[i].buf) {
            free(out[i].key);
            out[i].key = out[i].buf;
        }
}
