/* libFuzzer target: CHIME node images as a gateway reads them from the pool, where a torn
 * write, a corrupt region or a forged SCAN cursor may put any bytes (issue 12). Inner nodes:
 * ch_inner_decode accepts an image or returns NULL, and what it accepts routes any key to a
 * child and encodes back to an image that decodes to the same node. Leaves: the checks a
 * lock-free reader runs (ch_leaf_consistent: the metadata and every home's hop bitmap, the
 * vacancy bitmap) read only inside the image. Key records: ch_record_check bounds its
 * length. SCAN cursors: the first 8 bytes as a cursor decode (ch_cursor_leaf) to a leaf of
 * a listed node that encodes back to the same cursor, or are refused; the leaf tag check
 * reads only inside the image. Built and run by run-fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chime_internal.h"

static void check_inner(const uint8_t *d, size_t n)
{
    static uint8_t img[CH_INNER_BYTES], again[CH_INNER_BYTES];
    memset(img, 0, sizeof(img));
    memcpy(img, d, n < sizeof(img) ? n : sizeof(img));
    if (n && (d[0] & 1)) /* half the inputs untorn: every line's version byte equal */
        for (unsigned l = 1; l < CH_INNER_BYTES / CH_LINE; l++)
            img[l * CH_LINE] = img[0];
    ch_inner_t *x = ch_inner_decode(64, img);
    if (!x) return;
    if (x->count == 0) abort();
    size_t klen = n > 16 ? 16 : n;
    unsigned r = ch_inner_route(x, d + n - klen, klen);
    if (r >= x->count) abort();
    if (ch_inner_size(x) <= CH_INNER_PAYLOAD && ch_inner_encode(x, img[0], again) == 0) {
        ch_inner_t *y = ch_inner_decode(64, again);
        if (!y || y->count != x->count || y->has_high != x->has_high || y->sibling != x->sibling ||
            y->level != x->level)
            abort();
        for (unsigned i = 0; i < x->count; i++)
            if (y->child[i] != x->child[i] || y->sep[i].len != x->sep[i].len ||
                memcmp(y->sep[i].key, x->sep[i].key, x->sep[i].len) != 0)
                abort();
        ch_inner_free(y);
    }
    ch_inner_free(x);
}

static void check_leaf(const uint8_t *d, size_t n)
{
    static ch_geo_t g;
    if (!g.span) ch_geo_init(&g, DM_CHIME_SPAN, DM_CHIME_NBHD);
    uint8_t *img = calloc(1, g.bytes); /* heap: ASan sees a read past the image */
    if (!img) return;
    memcpy(img, d, n < g.bytes ? n : g.bytes);
    (void)ch_leaf_consistent(&g, img);
    (void)ch_vacancy_of(&g, img);
    free(img);
}

static void check_cursor(const uint8_t *d, size_t n)
{
    if (n < 18) return;
    dm_chime_t *c = calloc(1, sizeof(*c)); /* only the fields the codec and tags read */
    if (!c) return;
    ch_geo_init(&c->geo, DM_CHIME_SPAN, DM_CHIME_NBHD);
    uint64_t cur;
    memcpy(&cur, d, 8);
    memcpy(&c->secret, d + 8, 8);
    unsigned n_nodes = 1u + d[16] % 255u;
    while ((1u << c->node_bits) < n_nodes)
        c->node_bits++;
    dm_gaddr_t leaf = 0;
    if (d[17] & 1)
        cur = ch_cursor_of(c, dm_gaddr_make(d[16] % n_nodes, (cur & ((1ull << 40) - 1)) << 6));
    if (ch_cursor_leaf(c, n_nodes, cur, &leaf) == 0) {
        if (dm_gaddr_node(leaf) >= n_nodes || ch_cursor_of(c, leaf) != cur) abort();
        uint8_t *img = calloc(1, c->geo.bytes);
        if (img) {
            memcpy(img, d, n < c->geo.bytes ? n : c->geo.bytes);
            (void)ch_leaf_tag_ok(c, img, leaf);
            ch_stamp_leaf(c, img, leaf);
            if (!ch_leaf_tag_ok(c, img, leaf)) abort();
            free(img);
        }
    }
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    check_cursor(d, n);
    check_inner(d, n);
    check_leaf(d, n);
    uint8_t *rec = malloc(n ? n : 1); /* exact size: a read past the record is caught */
    if (rec) {
        memcpy(rec, d, n);
        (void)ch_record_check(rec, (uint32_t)n);
        free(rec);
    }
    return 0;
}
