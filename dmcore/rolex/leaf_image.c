/* ROLEX leaf images (§3.3), pure: the checksum, the checks every reader runs on an image
 * read from the pool (where a torn write or a corrupt region may put any bytes), the key
 * order (rolex_internal.h "Order") and the ordered search of its entries. No verbs:
 * tests/fuzz/fuzz_rolex.c runs these on any bytes. */
#include "dmkv/rolex.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/errors.h"
#include "rolex_internal.h"

uint64_t (*rx_hash_hook)(const void *key, size_t len);

/* The checksum covers what a locked writer rewrites, except itself: the paper's leaf
 * checksum, so that a reader never takes a half-written leaf (a WRITE is not atomic). */
uint64_t rx_leaf_sum(const rx_leaf_t *l)
{
    uint64_t h = XXH3_64bits_withSeed(&l->reserved, RX_LEAF_BYTES - 40,
                                      XXH3_64bits(&l->next, 16)); /* [40, 816), then [16, 32) */
    return h | 1; /* never 0: a zeroed leaf is torn */
}

int rx_leaf_ok(const rx_leaf_t *l)
{
    if (l->sum != rx_leaf_sum(l) || l->count > DM_ROLEX_SLOTS) return 0;
    /* Every reader copies rx_einline bytes (<= 46 by the mask); a long entry must name a
     * record (64-byte aligned, as dm_alloc_block gives): it is read by that gaddr. */
    for (unsigned i = 0; i < l->count; i++)
        if (rx_elong(&l->e[i]) && (!rx_erec(&l->e[i]) || rx_erec(&l->e[i]) % 64)) return 0;
    return 1;
}

int rx_key_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? (c < 0 ? -1 : 1) : alen < blen ? -1 : alen > blen;
}

uint64_t rx_key_hash(const void *key, size_t len)
{
    return rx_hash_hook ? rx_hash_hook(key, len) : XXH3_64bits(key, len);
}

int rx_kview_cmp(const rx_kview_t *a, const rx_kview_t *b)
{
    size_t pa = a->len < RX_PREFIX ? a->len : RX_PREFIX,
           pb = b->len < RX_PREFIX ? b->len : RX_PREFIX;
    int c = memcmp(a->p, b->p, pa < pb ? pa : pb);
    if (c) return c < 0 ? -1 : 1;
    if (pa != pb) return pa < pb ? -1 : 1; /* shorter first, as memcmp order */
    int la = a->len > DM_ROLEX_INLINE, lb = b->len > DM_ROLEX_INLINE;
    if (la != lb) return la ? 1 : -1; /* a 30-byte group: its short keys first */
    if (!la) return rx_key_cmp(a->p + pa, a->len - pa, b->p + pb, b->len - pb);
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    if (!a->full || !b->full) return RX_CMP_RECORD;
    c = memcmp(a->full, b->full, a->len);
    return c ? (c < 0 ? -1 : 1) : 0;
}

rx_kview_t rx_entry_view(const rx_entry_t *e)
{
    rx_kview_t v = {(const uint8_t *)e->key, rx_elen(e), 0, NULL};
    if (rx_elong(e))
        v.hash = rx_ehash(e);
    else
        v.full = v.p;
    return v;
}

rx_kview_t rx_key_view(const void *key, size_t len)
{
    rx_kview_t v = {key, len, len > DM_ROLEX_INLINE ? rx_key_hash(key, len) : 0, key};
    return v;
}

int dm_rolex_key_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
    rx_kview_t x = rx_key_view(a, alen), y = rx_key_view(b, blen);
    return rx_kview_cmp(&x, &y);
}

void rx_entry_set(rx_entry_t *e, const void *key, size_t len, uint16_t flags, dm_gaddr_t rec)
{
    memset(e, 0, sizeof(*e));
    e->len = (uint16_t)(len | flags);
    if (len <= DM_ROLEX_INLINE) {
        memcpy(e->key, key, len);
        return;
    }
    uint64_t h = rx_key_hash(key, len);
    memcpy(e->key, key, RX_PREFIX);
    memcpy(e->key + RX_OFF_HASH, &h, 8);
    memcpy(e->key + RX_OFF_REC, &rec, 8);
}

void rx_probe_init(rx_probe_t *p, const void *key, size_t len)
{
    memset(p, 0, sizeof(*p));
    p->key = key, p->len = len;
    p->hash = len > DM_ROLEX_INLINE ? rx_key_hash(key, len) : 0;
}

void rx_probe_free(rx_probe_t *p)
{
    free(p->rec), free(p->cmp);
    p->rec = NULL, p->cmp = NULL, p->n = p->cap = 0;
}

int rx_probe_set(rx_probe_t *p, dm_gaddr_t rec, int c)
{
    for (unsigned i = 0; i < p->n; i++)
        if (p->rec[i] == rec) {
            p->cmp[i] = (int8_t)c;
            return 0;
        }
    if (p->n == p->cap) {
        unsigned cap = p->cap ? 2 * p->cap : 4;
        dm_gaddr_t *nr = realloc(p->rec, cap * sizeof(*nr));
        if (nr) p->rec = nr;
        int8_t *nc = realloc(p->cmp, cap);
        if (nc) p->cmp = nc;
        if (!nr || !nc) return DM_ENOMEM;
        p->cap = cap;
    }
    p->rec[p->n] = rec, p->cmp[p->n++] = (int8_t)c;
    return 0;
}

/* e vs p's key without p's answers: -1, 0, 1 or RX_CMP_RECORD. */
static int entry_cmp_raw(const rx_entry_t *e, const rx_probe_t *p)
{
    rx_kview_t a = rx_entry_view(e), b = {p->key, p->len, p->hash, p->key};
    return rx_kview_cmp(&a, &b);
}

int rx_entry_cmp(const rx_entry_t *e, rx_probe_t *p)
{
    int c = entry_cmp_raw(e, p);
    if (c != RX_CMP_RECORD) return c;
    dm_gaddr_t rec = rx_erec(e);
    for (unsigned i = 0; i < p->n; i++)
        if (p->rec[i] == rec) return p->cmp[i];
    p->miss++;
    return 1; /* never a match the record did not confirm */
}

int rx_probe_needs(const rx_probe_t *p, const rx_entry_t *e)
{
    if (p->len <= DM_ROLEX_INLINE || entry_cmp_raw(e, p) != RX_CMP_RECORD) return 0;
    for (unsigned i = 0; i < p->n; i++)
        if (p->rec[i] == rx_erec(e)) return 0;
    return 1;
}

int rx_leaf_find(const rx_leaf_t *l, rx_probe_t *p)
{
    unsigned a = 0, b = (unsigned)l->count;
    while (a < b) {
        unsigned m = (a + b) / 2;
        int c = rx_entry_cmp(&l->e[m], p);
        if (c == 0) return (int)m;
        if (c < 0)
            a = m + 1;
        else
            b = m;
    }
    return -(int)a - 1;
}

int rx_leaf_above(const rx_leaf_t *l, rx_probe_t *p)
{
    return l->count && rx_entry_cmp(&l->e[l->count - 1], p) > 0;
}
