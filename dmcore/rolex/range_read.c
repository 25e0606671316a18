/* ROLEX as the range role, the lock-free reads: search (ROLEX §3.4's path, with the pending
 * flag), WATCH signatures, SCAN pages with cursors, RANDOMKEY's cursor, MEMORY USAGE.
 *
 * SCAN (ROLEX §4.2, by pages): a cursor names a leaf (cursor.c); a page is whole leaves walked
 * along the chain from it and, past a chain's end, from the head of the next chain (the next
 * head in the LT: heads' lows are immutable and every model lists every head), until it
 * holds about count keys; the next cursor names the leaf after the last one walked. The
 * leaves are read by LT positions, a batch of up to count / 8 + 2 at a time (ahead_t: one
 * round trip a page once a retrain listed the leaves), a synonym no LT entry names alone.
 * Keys only move forward in a chain (insert.c), so a key present for the whole iteration and
 * not yet returned is always in the cursor's leaf or after it: each is returned at least
 * once. Keys are sorted and deduplicated per page (leaves read at different instants can
 * both hold a key a shift moved). Across pages they ascend but for one case: a key that an
 * insert shifted from the page's last leaf into the cursor's leaf between the two pages is
 * returned again, first in the next page (Redis allows repeats; CHIME's cursors, key-based,
 * do not repeat: it_scan_guarantee's strict order check found one on ROLEX, stop 47). */
#include "rolex_range.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/alloc.h"
#include "dmkv/errors.h"
#include "dmkv/key_record.h"

/* Lock-free walk from the covering entry of key's image to the leaf that holds key or, when
 * absent, the leaf an insert would put it in (the first whose last key is above it, or the
 * chain's last): *l, its gaddr *at; returns the entry's position in it, or -1 (absent). */
static int walk_to(dm_ctx_t *ctx, dm_rolex_t *r, const void *key, size_t klen, rx_leaf_t *l,
                   dm_gaddr_t *at)
{
    rx_win_t w;
    int rc = rx_win_read(ctx, r, dm_rolex_image(key, klen), 0, &w);
    if (rc) return rc;
    rx_probe_t pr; /* a long key's match confirmed by its record (+1 RTT) */
    rx_probe_init(&pr, key, klen);
    uint64_t p = w.j;
    *l = w.buf[p - w.a];
    *at = rx_leaf_addr(r, r->lt[p].leaf);
    int fresh = 0;
    for (unsigned hops = 0;; hops++) {
        rc = rx_probe_prepare(ctx, &pr, l, 1);
        if (rc) break;
        int pos = rx_leaf_find(l, &pr);
        if (pos >= 0) {
            rc = pos;
            break;
        }
        if (!l->next || rx_leaf_above(l, &pr)) {
            rc = -1;
            break;
        }
        if (hops >= RX_CHAIN_MAX) {
            rc = RX_CORRUPT("a chain of over %u hops", RX_CHAIN_MAX);
            break;
        }
        /* The next leaf from the window while nothing was read since (search.c). */
        const rx_leaf_t *nx = fresh ? NULL : rx_win_next(r, &w, &p);
        dm_gaddr_t next = l->next;
        if (nx) {
            *l = *nx;
        } else {
            fresh = 1;
            rc = rx_read_leaf(ctx, next, l);
            if (rc) break;
        }
        *at = next;
    }
    free(w.buf);
    rx_probe_free(&pr);
    rx_notice(ctx, r, w.model);
    return rc;
}

int rr_search(dm_ctx_t *ctx, const void *key, size_t klen, int *pending)
{
    rr_role_t *rr = rr_of(ctx->w);
    if (pending) *pending = 0;
    if (!rr) return DM_EINVAL;
    if (klen > DM_ROLEX_KEY_MAX) return 0; /* never stored */
    rx_leaf_t l;
    dm_gaddr_t at;
    int pos = walk_to(ctx, rr->r, key, klen, &l, &at);
    if (pos < -1) return pos;
    if (pos >= 0 && pending) *pending = (l.e[pos].len & RX_PENDING) != 0;
    return pos >= 0;
}

/* The leaf key is in or would go to, and its version (every write of it changes the
 * version: rx_put_body): creating key writes that leaf (its entry, a shift or a split of
 * it), so a create and a delete between two reads always change the signature. */
int rr_watch_sig(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *sig)
{
    rr_role_t *rr = rr_of(ctx->w);
    if (!rr) return DM_EINVAL;
    if (klen > DM_ROLEX_KEY_MAX) { /* never stored: never changes */
        *sig = 1;
        return 0;
    }
    rx_leaf_t l;
    dm_gaddr_t at;
    int pos = walk_to(ctx, rr->r, key, klen, &l, &at);
    if (pos < -1) return pos;
    uint64_t v[2] = {at, l.reserved};
    *sig = XXH3_64bits(v, sizeof(v));
    return 0;
}

uint64_t rr_key_bytes(dm_ctx_t *ctx, size_t klen)
{
    (void)ctx;
    /* An entry (48 bytes, any key length) and its share of a leaf: leaves are 3/4 full on
     * average (a build fills them to 12 of 16, splits leave at least half); a long key's
     * record besides. */
    uint64_t b = RX_LEAF_BYTES * 4 / (DM_ROLEX_SLOTS * 3);
    return klen > DM_ROLEX_INLINE ? b + dm_alloc_block_bytes(dm_keyrec_bytes(klen)) : b;
}

static uint64_t rng_next(void)
{
    static _Thread_local uint64_t s;
    if (!s) s = dm_now_us() * 0x9E3779B97F4A7C15ull | 1;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
}

int rr_random_cursor(dm_ctx_t *ctx, uint64_t *cursor)
{
    rr_role_t *rr = rr_of(ctx->w);
    if (!rr) return DM_EINVAL;
    /* A leaf the cached LT lists (no read): heads and promoted synonyms. */
    const dm_rolex_t *r = rr->r;
    *cursor = rr_cursor_of(rr->secret, r->root, r->lt[rng_next() % r->hdr.entries].leaf);
    return 0;
}

/* The head of the chain after the one of low image lo (LT order), or UINT64_MAX. */
static uint64_t next_head(const dm_rolex_t *r, uint64_t lo)
{
    uint64_t a = 0, b = r->hdr.entries; /* the first position with low > lo */
    while (a < b) {
        uint64_t m = a + (b - a) / 2;
        if (r->lt[m].lo <= lo)
            a = m + 1;
        else
            b = m;
    }
    for (; a < r->hdr.entries; a++)
        if (r->lt[a].leaf == r->lt[a].head) return r->lt[a].leaf;
    return UINT64_MAX;
}

/* 1 when key is past every key that starts with prefix (plen > 0). Only the first
 * RX_PREFIX bytes tell: within a 30-byte group the order is not memcmp's. */
static int past_prefix(const rx_entry_t *e, const void *prefix, size_t plen)
{
    size_t n = rx_einline(e) < plen ? rx_einline(e) : plen;
    n = n < RX_PREFIX ? n : RX_PREFIX;
    int c = memcmp(e->key, prefix, n);
    return c > 0; /* shorter and equal: below the prefixed keys, not past them */
}

static int cmp_key(const void *a, const void *b)
{
    const dm_range_key_t *x = a, *y = b;
    int c = memcmp(x->data, y->data, x->len < y->len ? x->len : y->len);
    return c ? c : x->len < y->len ? -1 : x->len > y->len;
}

/* The page's long entries, whose keys come from their records once the page's leaves are
 * read (all in one batch per DM_BATCH_MAX: +1 RTT a page, not one a leaf). */
typedef struct longs {
    rx_entry_t *e;
    size_t *slot; /* its key's index in *keys */
    size_t n, cap;
} longs_t;

/* Append leaf l's keys >= from (from NULL: all; from is short: no record decides) to
 * *keys; a long key's data stays NULL, its entry noted in *lg. */
static int take_keys(const rx_leaf_t *l, const rx_kview_t *from, dm_range_key_t **keys, size_t *n,
                     size_t *cap, longs_t *lg)
{
    for (unsigned i = 0; i < l->count; i++) {
        const rx_entry_t *e = &l->e[i];
        rx_kview_t v = rx_entry_view(e);
        if (from && rx_kview_cmp(&v, from) < 0) continue;
        if (*n == *cap) {
            size_t c = *cap ? 2 * *cap : 64;
            dm_range_key_t *nk = realloc(*keys, c * sizeof(*nk));
            if (!nk) return DM_ENOMEM;
            *keys = nk, *cap = c;
        }
        if (rx_elong(e) && lg->n == lg->cap) {
            size_t c = lg->cap ? 2 * lg->cap : 16;
            rx_entry_t *ne = realloc(lg->e, c * sizeof(*ne));
            if (ne) lg->e = ne;
            size_t *ns = realloc(lg->slot, c * sizeof(*ns));
            if (ns) lg->slot = ns;
            if (!ne || !ns) return DM_ENOMEM;
            lg->cap = c;
        }
        dm_range_key_t *k = &(*keys)[*n];
        k->len = rx_elen(e);
        k->data = NULL;
        if (rx_elong(e)) {
            lg->e[lg->n] = *e, lg->slot[lg->n++] = *n;
        } else {
            k->data = malloc(k->len ? k->len : 1);
            if (!k->data) return DM_ENOMEM;
            memcpy(k->data, e->key, k->len);
        }
        k->pending = (e->len & RX_PENDING) != 0;
        ++*n;
    }
    return 0;
}

/* The long keys of the page from their records. */
static int read_longs(dm_ctx_t *ctx, dm_range_key_t *keys, longs_t *lg)
{
    const rx_entry_t **ep = malloc((lg->n + 1) * sizeof(*ep));
    uint8_t **full = malloc((lg->n + 1) * sizeof(*full));
    int rc = ep && full ? 0 : DM_ENOMEM;
    for (size_t i = 0; !rc && i < lg->n; i++)
        ep[i] = &lg->e[i];
    if (!rc) rc = rx_entries_read(ctx, ep, (unsigned)lg->n, full);
    for (size_t i = 0; !rc && i < lg->n; i++)
        keys[lg->slot[i]].data = full[i];
    free(ep), free(full);
    return rc;
}

/* Sort keys[from..n) and drop repeats (a repeat keeps pending if either copy had it). */
static void sort_page(dm_range_key_t *keys, size_t from, size_t *n)
{
    if (*n - from < 2) return;
    qsort(keys + from, *n - from, sizeof(*keys), cmp_key);
    size_t d = from;
    for (size_t i = from; i < *n; i++) {
        if (d > from && !cmp_key(&keys[d - 1], &keys[i])) {
            keys[d - 1].pending |= keys[i].pending;
            free(keys[i].data);
            continue;
        }
        keys[d++] = keys[i];
    }
    *n = d;
}

/* Leaves of a SCAN page read ahead in one batch, at most. */
#define RR_AHEAD_MAX 32u

/* The leaves a SCAN page walks: LT positions read a batch at a time (1 RTT for up to k
 * leaves, ascending: chain order in time, as a window's), a leaf that no LT entry names read
 * alone. A walk takes a buffered leaf only while nothing was read after the buffer: a leaf
 * read later than one after it in the chain could miss a key that moved forward in between,
 * so a leaf read alone drops the buffer. */
typedef struct ahead {
    rx_leaf_t *buf; /* LT positions pos .. pos + n - 1; k leaves of room */
    uint64_t pos;
    uint64_t gen;     /* r->model whose positions they are (rx_win_t's gen) */
    unsigned n, i, k; /* i: the buffered leaf the walk is at */
} ahead_t;

/* Make leaf number nl the walk's leaf *l: the next buffered position's when it is that leaf,
 * else a batch from nl's LT position, else nl alone. 0 or DM_E*. */
static int ahead_next(dm_ctx_t *ctx, const dm_rolex_t *r, ahead_t *a, uint64_t nl, rx_leaf_t *l)
{
    if (a->n && a->gen == r->model && a->i + 1 < a->n && r->lt[a->pos + a->i + 1].leaf == nl) {
        *l = a->buf[++a->i];
        return 0;
    }
    a->n = 0;
    int64_t p = rx_leaf_pos(r, nl);
    if (p < 0) return rx_read_leaf(ctx, rx_leaf_addr(r, nl), l);
    uint64_t e = (uint64_t)p + a->k - 1, last = r->hdr.entries - 1;
    e = e > last ? last : e;
    a->gen = r->model; /* a model loaded during the read: the next call drops the buffer */
    int rc = rx_read_positions(ctx, r, (uint64_t)p, e, a->buf, NULL);
    if (rc) return rc;
    a->pos = (uint64_t)p, a->n = (unsigned)(e - (uint64_t)p + 1), a->i = 0;
    *l = a->buf[0];
    return 0;
}

int rr_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, const void *prefix, size_t plen,
            dm_range_key_t **keys, size_t *n, size_t *cap, uint64_t *next)
{
    rr_role_t *rr = rr_of(ctx->w);
    *next = 0;
    if (!rr) return DM_EINVAL;
    dm_rolex_t *r = rr->r;
    rx_leaf_t l;
    uint64_t leaf, word = 0;
    size_t first = *n, want = count ? count : 10;
    ahead_t a = {.k = want / 8 + 2 < RR_AHEAD_MAX ? (unsigned)(want / 8 + 2) : RR_AHEAD_MAX};
    a.buf = malloc(a.k * sizeof(*a.buf)); /* coroutine stacks are small */
    if (!a.buf) return DM_ENOMEM;
    /* Keys >= the prefix's first RX_PREFIX bytes: a longer prefix's keys are in that 30-byte
     * group, but not all above the prefix in the order (long keys go by hash in it); the
     * gateway matches every key against the pattern anyway. */
    rx_kview_t fv = rx_key_view(prefix, plen < RX_PREFIX ? plen : RX_PREFIX);
    const rx_kview_t *from = NULL;
    int rc;
    if (!cursor) { /* the leaf covering the prefix and the positions after it (1 RTT) */
        from = plen ? &fv : NULL;
        rx_win_t w;
        rc = rx_win_read(ctx, r, plen ? dm_rolex_image(prefix, plen) : 0, a.k - 1, &w);
        if (rc) {
            free(a.buf);
            return rc;
        }
        leaf = r->lt[w.j].leaf;
        a.pos = w.j, a.i = 0, a.gen = w.gen;
        a.n = (unsigned)(w.e - w.j + 1 < a.k ? w.e - w.j + 1 : a.k);
        memcpy(a.buf, &w.buf[w.j - w.a], a.n * sizeof(*a.buf));
        l = a.buf[0];
        word = w.model;
        free(w.buf);
    } else {
        rc = rr_cursor_leaf(rr->secret, r->root, r->hdr.capacity, cursor, &leaf);
        if (!rc) rc = ahead_next(ctx, r, &a, leaf, &l);
        if (rc == DM_ECORRUPT) rc = DM_EINVAL; /* not a leaf ever written */
        if (rc) {
            free(a.buf);
            return rc;
        }
    }
    longs_t lg = {NULL, NULL, 0, 0};
    for (unsigned leaves = 1;; leaves++) {
        rr_count(&rr_stats.scan_leaves, 1);
        rc = take_keys(&l, from, keys, n, cap, &lg);
        if (rc) break;
        int past = plen && l.count && past_prefix(&l.e[l.count - 1], prefix, plen);
        uint64_t nl = UINT64_MAX; /* the next leaf to read */
        if (l.next)
            rc = rx_leaf_no(r, l.next, &nl);
        else
            nl = next_head(r, l.lo);
        if (rc) break;
        if (past || nl == UINT64_MAX) break; /* *next 0: the walk is done */
        /* Empty leaves (FLUSHALL leaves them linked) bound a page too. */
        if (*n - first >= want || leaves >= 16 + want / 4) {
            *next = rr_cursor_of(rr->secret, r->root, nl);
            break;
        }
        rc = ahead_next(ctx, r, &a, nl, &l);
        if (rc) break;
    }
    free(a.buf);
    if (!rc && lg.n) rc = read_longs(ctx, *keys, &lg);
    free(lg.e), free(lg.slot);
    if (rc) { /* no half page: a long key's data may be missing */
        for (size_t i = first; i < *n; i++)
            free((*keys)[i].data);
        *n = first;
    }
    if (!rc) sort_page(*keys, first, n);
    if (word) rx_notice(ctx, r, word); /* after: the page walked this model's LT */
    return rc;
}
