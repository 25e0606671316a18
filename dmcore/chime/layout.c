/* CHIME byte layouts: leaf geometry, entries, lock words, key records and inner-node
 * encoding (chime_internal.h has the pictures). Pure functions, no I/O. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "chime_internal.h"
#include "dmkv/alloc.h"
#include "dmkv/errors.h"

#define CH_HASH_SEED 0x43484d45ull /* independent of RACE's hash */

void ch_geo_init(ch_geo_t *g, unsigned span, unsigned nbhd)
{
    g->span = span;
    g->nbhd = nbhd;
    g->groups = span / nbhd;
    uint32_t body = g->groups * (nbhd + 1) * CH_OBJ;
    g->lock_off = (body + CH_LINE - 1) / CH_LINE * CH_LINE;
    g->bytes = g->lock_off + CH_LINE;
}

void ch_hash_key(const ch_geo_t *g, const void *key, size_t klen, ch_khash_t *out)
{
    out->h = XXH3_64bits_withSeed(key, klen, CH_HASH_SEED);
    out->home = (unsigned)((out->h >> 16) % g->span);
    out->fp = (uint16_t)out->h;
}

void ch_entry_fill(uint8_t *e, const ch_khash_t *kh, const void *key, size_t klen, dm_gaddr_t rec,
                   unsigned flags)
{
    memset(e + 1, 0, CH_OBJ - 1);
    e[1] = (uint8_t)(flags | CH_F_USED);
    /* e[2..3], the bitmap, belongs to this entry as a home: the caller keeps it. */
    e[4] = (uint8_t)kh->fp;
    e[5] = (uint8_t)(kh->fp >> 8);
    e[6] = (uint8_t)kh->home;
    if (klen <= DM_CHIME_INLINE) {
        e[7] = (uint8_t)klen;
        memcpy(e + 8, key, klen);
    } else {
        e[7] = CH_KLEN_RECORD;
        ch_put_u64(e + 8, rec);
        memcpy(e + 16, key, 16);
    }
}

int ch_key_cmp(const void *a, size_t al, const void *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int r = n ? memcmp(a, b, n) : 0;
    if (r) return r < 0 ? -1 : 1;
    return al < bl ? -1 : al > bl;
}

int ch_entry_cmp_key(const uint8_t *e, const void *key, size_t klen, int *need_record)
{
    *need_record = 0;
    if (e[7] != CH_KLEN_RECORD) /* a garbage length compares on the entry's bytes only */
        return ch_key_cmp(e + 8, e[7] > DM_CHIME_INLINE ? DM_CHIME_INLINE : e[7], key, klen);
    /* A record key is longer than DM_CHIME_INLINE bytes; its first 16 are here. */
    size_t n = klen < 16 ? klen : 16;
    int r = memcmp(e + 16, key, n);
    if (r) return r < 0 ? -1 : 1;
    if (klen <= 16) return 1; /* key is a prefix of the longer entry key */
    *need_record = 1;
    return 2;
}

uint32_t ch_vacancy_of(const ch_geo_t *g, const uint8_t *leaf)
{
    uint32_t v = 0;
    for (unsigned bit = 0; bit < ch_vac_bits(g); bit++) {
        unsigned lo = ch_vac_lo(g, bit), hi = ch_vac_hi(g, bit);
        int full = 1;
        for (unsigned i = lo; i < hi; i++)
            if (!ch_e_used(leaf + ch_entry_off(g, i))) full = 0;
        if (full) v |= 1u << bit;
    }
    return v;
}

uint32_t ch_vacancy_of_known(const ch_geo_t *g, const uint8_t *img, const uint8_t *have,
                             uint32_t vac)
{
    for (unsigned bit = 0; bit < ch_vac_bits(g); bit++) {
        unsigned lo = ch_vac_lo(g, bit), hi = ch_vac_hi(g, bit);
        int known = 1, full = 1;
        for (unsigned i = lo; i < hi; i++) {
            uint32_t off = ch_entry_off(g, i);
            known &= have[off / CH_OBJ];
            if (have[off / CH_OBJ] && !ch_e_used(img + off)) full = 0;
        }
        if (known) vac = full ? vac | (1u << bit) : vac & ~(1u << bit);
    }
    return vac;
}

uint64_t dm_chime_key_bytes(dm_ctx_t *ctx, size_t klen)
{
    const ch_geo_t *g = &ctx->w->chime->geo;
    uint64_t b = (g->bytes + g->span - 1) / g->span;
    if (klen > DM_CHIME_INLINE) b += (dm_keyrec_bytes(klen) + DM_UNIT - 1) / DM_UNIT * DM_UNIT;
    return b;
}

/* Level 3 of ch_leaf_check for one home: 0, DM_ERETRY or DM_EINVAL. */
static int home_check(const ch_geo_t *g, const uint8_t *img, const uint8_t *have, int home)
{
    /* The home's bitmap must match the keys actually seen in its neighborhood. */
    const uint8_t *he = img + ch_entry_off(g, (unsigned)home);
    uint16_t rebuilt = 0;
    for (unsigned j = 0; j < g->nbhd; j++) {
        unsigned i = ((unsigned)home + j) % g->span;
        const uint8_t *e = img + ch_entry_off(g, i);
        if (!have[ch_entry_off(g, i) / CH_OBJ]) return DM_EINVAL; /* caller bug */
        if (ch_e_used(e) && e[6] == (unsigned)home) rebuilt |= (uint16_t)(1u << j);
    }
    return rebuilt == ch_e_bitmap(he) ? 0 : DM_ERETRY;
}

int ch_leaf_check(const ch_geo_t *g, const uint8_t *img, const uint8_t *have, int home)
{
    int nv = -1;
    unsigned objs = g->groups * (g->nbhd + 1);
    for (unsigned o = 0; o < objs; o++) {
        if (!have[o]) continue;
        int v = (int)ch_nv(img[o * CH_OBJ]);
        if (nv < 0) nv = v;
        if (v != nv) return DM_ERETRY; /* a node write was in flight (level 1) */
    }
    return home < 0 ? 0 : home_check(g, img, have, home);
}

#define CH_TAG_DOMAIN 0x4c454146ull /* "LEAF": apart from the cursor check's use of the secret */

uint64_t ch_leaf_tag(const dm_chime_t *c, dm_gaddr_t leaf)
{
    uint64_t t = XXH3_64bits_withSeed(&leaf, sizeof(leaf), c->secret ^ CH_TAG_DOMAIN);
    return t ? t : 1;
}

void ch_stamp_leaf(const dm_chime_t *c, uint8_t *img, dm_gaddr_t leaf)
{
    uint64_t t = ch_leaf_tag(c, leaf);
    for (unsigned grp = 0; grp < c->geo.groups; grp++)
        memcpy(img + ch_replica_off(&c->geo, grp) + 24, &t, sizeof(t));
}

int ch_leaf_tag_ok(const dm_chime_t *c, const uint8_t *img, dm_gaddr_t leaf)
{
    uint64_t t = ch_leaf_tag(c, leaf);
    for (unsigned grp = 0; grp < c->geo.groups; grp++)
        if (memcmp(img + ch_replica_off(&c->geo, grp) + 24, &t, sizeof(t)) != 0) return 0;
    return 1;
}

#define CURSOR_BITS 53                   /* integers a double holds exactly */
#define OFF_BITS (DM_GADDR_OFF_BITS - 6) /* leaf offset / 64 */

_Static_assert(OFF_BITS + DM_GADDR_NODE_BITS <= CURSOR_BITS - 11, "a cursor keeps an 11-bit check");

static unsigned addr_bits(const dm_chime_t *c)
{
    return OFF_BITS + c->node_bits;
}

static uint64_t mac_of(const dm_chime_t *c, uint64_t a)
{
    unsigned mac_bits = CURSOR_BITS - addr_bits(c);
    return XXH3_64bits_withSeed(&a, sizeof(a), c->secret) & ((1ull << mac_bits) - 1);
}

uint64_t ch_cursor_of(const dm_chime_t *c, dm_gaddr_t leaf)
{
    if (!leaf) return 0;
    uint64_t a = ((uint64_t)dm_gaddr_node(leaf) << OFF_BITS) | (dm_gaddr_off(leaf) >> 6);
    return (mac_of(c, a) << addr_bits(c)) | a;
}

int ch_cursor_leaf(const dm_chime_t *c, unsigned n_nodes, uint64_t cur, dm_gaddr_t *leaf)
{
    uint64_t a = cur & ((1ull << addr_bits(c)) - 1);
    /* a = 0 is gaddr 0, node 0's header: no leaf, and ch_cursor_of never makes it (fuzz_chime
     * found a secret whose check let 0x7000000000000 through to it) */
    if (!a || cur >> CURSOR_BITS || mac_of(c, a) != cur >> addr_bits(c)) return DM_EINVAL;
    unsigned node = (unsigned)(a >> OFF_BITS);
    if (node >= n_nodes) return DM_EINVAL;
    *leaf = dm_gaddr_make(node, (a & ((1ull << OFF_BITS) - 1)) << 6);
    return 0;
}

int ch_leaf_consistent(const ch_geo_t *g, const uint8_t *img)
{
    uint8_t all[CH_MAX_SPAN * 2];
    memset(all, 1, sizeof(all));
    if (ch_leaf_check(g, img, all, -1)) return 0;
    for (unsigned h = 0; h < g->span; h++) /* the versions once, not once per home */
        if (home_check(g, img, all, (int)h)) return 0;
    return 1;
}

/* ---- inner nodes ---- */

void ch_inner_free(ch_inner_t *n)
{
    if (!n) return;
    for (unsigned i = 0; i < n->count; i++)
        if (!ch_inner_owns(n, n->sep[i].key)) free(n->sep[i].key);
    if (!ch_inner_owns(n, n->high.key)) free(n->high.key);
    free(n->arena);
    free(n->sep);
    free(n->child);
    free(n);
}

size_t ch_inner_size(const ch_inner_t *n)
{
    size_t s = CH_INNER_HDR + (n->has_high ? n->high.len : 0);
    for (unsigned i = 0; i < n->count; i++)
        s += 10 + n->sep[i].len;
    return s;
}

/* The payload is spread over lines of 63 bytes after each line's version byte. An image is
 * encoded and decoded through a contiguous copy of its payload: field by field across the
 * lines, a full node's decode took ~45,000 instructions (1 in 30 inserts of a load decodes
 * one to add a separator). */
static void payload_gather(const uint8_t *img, uint8_t *pl)
{
    for (unsigned l = 0; l < CH_INNER_BYTES / CH_LINE; l++)
        memcpy(pl + l * (CH_LINE - 1), img + l * CH_LINE + 1, CH_LINE - 1);
}

static void payload_scatter(const uint8_t *pl, uint8_t ver, uint8_t *img)
{
    for (unsigned l = 0; l < CH_INNER_BYTES / CH_LINE; l++) {
        img[l * CH_LINE] = ver;
        memcpy(img + l * CH_LINE + 1, pl + l * (CH_LINE - 1), CH_LINE - 1);
    }
}

/* A thread's payload copy: encoding and decoding never yield, so one per thread does. */
static _Thread_local uint8_t scratch[CH_INNER_PAYLOAD];

int ch_inner_encode(const ch_inner_t *n, uint8_t ver, uint8_t *img)
{
    if (ch_inner_size(n) > CH_INNER_PAYLOAD) return DM_EFULL;
    uint8_t *pl = scratch;
    memset(pl, 0, CH_INNER_HDR);
    uint32_t magic = CH_INNER_MAGIC;
    memcpy(pl, &magic, 4);
    pl[4] = (uint8_t)n->level;
    pl[5] = (uint8_t)n->valid;
    pl[6] = (uint8_t)n->count;
    pl[7] = (uint8_t)(n->count >> 8);
    ch_put_u64(pl + 8, n->sibling);
    ch_put_u64(pl + 16, n->sib_first_child);
    pl[24] = (uint8_t)n->has_high;
    uint32_t hl = n->has_high ? n->high.len : 0;
    memcpy(pl + 28, &hl, 4);
    size_t pos = CH_INNER_HDR;
    if (hl) memcpy(pl + pos, n->high.key, hl);
    pos += hl;
    for (unsigned i = 0; i < n->count; i++) {
        ch_put_u64(pl + pos, n->child[i]);
        pl[pos + 8] = (uint8_t)n->sep[i].len;
        pl[pos + 9] = (uint8_t)(n->sep[i].len >> 8);
        if (n->sep[i].len) memcpy(pl + pos + 10, n->sep[i].key, n->sep[i].len);
        pos += 10 + n->sep[i].len;
    }
    memset(pl + pos, 0, CH_INNER_PAYLOAD - pos);
    payload_scatter(pl, ver, img);
    return 0;
}

ch_inner_t *ch_inner_decode(dm_gaddr_t addr, const uint8_t *img)
{
    for (unsigned l = 1; l < CH_INNER_BYTES / CH_LINE; l++)
        if (img[l * CH_LINE] != img[0]) return NULL; /* torn: a node write was in flight */
    const uint8_t *pl = scratch;
    payload_gather(img, scratch);
    uint32_t magic, hl;
    memcpy(&magic, pl, 4);
    memcpy(&hl, pl + 28, 4);
    unsigned count = (unsigned)(pl[6] | (pl[7] << 8));
    if (magic != CH_INNER_MAGIC || hl > DM_CHIME_SEP_MAX || count == 0 ||
        CH_INNER_HDR + hl > CH_INNER_PAYLOAD)
        return NULL;
    /* Every length is checked before anything is built: one bad entry refuses the node. */
    size_t pos = CH_INNER_HDR + hl, used = hl;
    for (unsigned i = 0; i < count; i++) {
        if (pos + 10 > CH_INNER_PAYLOAD) return NULL;
        uint32_t sl = (uint32_t)(pl[pos + 8] | (pl[pos + 9] << 8));
        if (sl > DM_CHIME_SEP_MAX || pos + 10 + sl > CH_INNER_PAYLOAD) return NULL;
        pos += 10 + sl;
        used += sl;
    }
    ch_inner_t *n = calloc(1, sizeof(*n));
    if (!n) return NULL;
    n->addr = addr;
    n->level = pl[4];
    n->valid = pl[5];
    n->sibling = ch_u64(pl + 8);
    n->sib_first_child = ch_u64(pl + 16);
    n->has_high = pl[24];
    n->sep = calloc(count, sizeof(*n->sep));
    n->child = calloc(count, sizeof(*n->child));
    /* Every key's bytes in one allocation (the arena): a node decodes with five mallocs, not
     * one per separator (a full level-1 node has hundreds; decoding was 10% of a load's CPU).
     * + 1: an empty key at the end is inside. */
    n->arena = malloc(used + 1);
    if (!n->sep || !n->child || !n->arena) {
        ch_inner_free(n); /* count 0: nothing in sep[] to free */
        return NULL;
    }
    n->arena_len = used + 1;
    n->count = count;
    n->bytes = sizeof(*n) + count * (sizeof(ch_sep_t) + 8) + used;
    n->high.key = n->arena;
    n->high.len = hl;
    memcpy(n->arena, pl + CH_INNER_HDR, hl);
    uint8_t *k = n->arena + hl;
    pos = CH_INNER_HDR + hl;
    for (unsigned i = 0; i < count; i++) {
        uint32_t sl = (uint32_t)(pl[pos + 8] | (pl[pos + 9] << 8));
        n->child[i] = ch_u64(pl + pos);
        n->sep[i].key = k;
        n->sep[i].len = sl;
        memcpy(k, pl + pos + 10, sl);
        k += sl;
        pos += 10 + sl;
    }
    return n;
}

unsigned ch_inner_route(const ch_inner_t *n, const void *key, size_t klen)
{
    unsigned lo = 0, hi = n->count; /* invariant: sep[lo] <= key (sep[0] is the low fence) */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (ch_key_cmp(n->sep[mid].key, n->sep[mid].len, key, klen) <= 0)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}
