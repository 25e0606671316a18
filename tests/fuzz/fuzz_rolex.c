/* libFuzzer target: ROLEX leaf images and SCAN cursors as a gateway meets them, read from
 * the pool or sent by a client (issue 12 items 5 and 6). Leaves: rx_leaf_ok accepts an image
 * (half the inputs get a valid checksum, so the checks behind it are reached) or refuses it;
 * an accepted one is searched for any key reading only inside the image, and the search
 * agrees with its answer. Cursors: any 8 bytes under any secret, root and leaf count decode
 * to a leaf of the region that encodes back to the same cursor, below 2^53, or are refused;
 * a cursor made for any leaf decodes back to that leaf. Built and run by run-fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rolex_range.h"

static void check_leaf(const uint8_t *d, size_t n)
{
    static rx_leaf_t l;
    memset(&l, 0, sizeof(l));
    memcpy(&l, d, n < sizeof(l) ? n : sizeof(l));
    if (n && (d[0] & 1)) l.sum = rx_leaf_sum(&l);
    if (!rx_leaf_ok(&l)) return;
    if (l.count > DM_ROLEX_SLOTS) abort();
    size_t klen = n > 20 ? 20 : n;
    const uint8_t *key = d + n - klen;
    int i = rx_leaf_find(&l, key, klen);
    if (i >= 0 && ((unsigned)i >= l.count || rx_key_cmp(l.e[i].key, rx_elen(&l.e[i]), key, klen)))
        abort();
    if (i < 0 && (uint64_t)(-(i + 1)) > l.count) abort();
    (void)rx_leaf_above(&l, key, klen);
    for (unsigned j = 0; j < l.count; j++)
        if (rx_elen(&l.e[j]) > DM_ROLEX_KEY_MAX) abort();
}

static void check_cursor(const uint8_t *d, size_t n)
{
    if (n < 24) return;
    uint64_t cur, secret, root, leaf;
    memcpy(&cur, d, 8);
    memcpy(&secret, d + 8, 8);
    memcpy(&root, d + 16, 8);
    uint64_t cap = 1 + root % RR_CURSOR_LEAVES;
    if (rr_cursor_leaf(secret, root, cap, cur, &leaf) == 0 &&
        (leaf >= cap || cur >> 53 || rr_cursor_of(secret, root, leaf) != cur))
        abort();
    uint64_t want = cur % cap, again = rr_cursor_of(secret, root, want);
    if (again >> 53 || rr_cursor_leaf(secret, root, cap, again, &leaf) || leaf != want) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    check_leaf(d, n);
    check_cursor(d, n);
    return 0;
}
