/* libFuzzer target: ROLEX leaf images and SCAN cursors as a gateway meets them, read from
 * the pool or sent by a client (issue 12 items 5 and 6). Leaves: rx_leaf_ok accepts an image
 * (half the inputs get a valid checksum, so the checks behind it are reached) or refuses it;
 * an accepted one is searched for any key, short and long (over 46 bytes: entries holding a
 * prefix, hash and record gaddr), reading only inside the image, and the search agrees with
 * its answer; a long probe matches a long entry only through its record's answer. Cursors: any 8
 * bytes under any secret, root and leaf count decode to a leaf of the region that encodes back to
 * the same cursor, below 2^53, or are refused; a cursor made for any leaf decodes back to that
 * leaf. Built and run by run-fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rolex_range.h"

/* The order over what the leaf holds: never reads past an entry's inline bytes (ASan), and
 * is antisymmetric between any two entries. */
static void check_order(const rx_leaf_t *l)
{
    for (unsigned i = 0; i < l->count; i++)
        for (unsigned j = 0; j < l->count; j++) {
            rx_kview_t a = rx_entry_view(&l->e[i]), b = rx_entry_view(&l->e[j]);
            int x = rx_kview_cmp(&a, &b), y = rx_kview_cmp(&b, &a);
            if (x == RX_CMP_RECORD ? y != RX_CMP_RECORD : x != -y) abort();
        }
}

static void check_leaf(const uint8_t *d, size_t n)
{
    static rx_leaf_t l;
    memset(&l, 0, sizeof(l));
    memcpy(&l, d, n < sizeof(l) ? n : sizeof(l));
    if (n && (d[0] & 1)) l.sum = rx_leaf_sum(&l);
    if (!rx_leaf_ok(&l)) return;
    if (l.count > DM_ROLEX_SLOTS) abort();
    check_order(&l);
    /* A short probe (up to 20 bytes) and a long one (up to 80: the input's tail). */
    for (int pass = 0; pass < 2; pass++) {
        size_t klen = n > (pass ? 80u : 20u) ? (pass ? 80u : 20u) : n;
        const uint8_t *key = d + n - klen;
        rx_probe_t p;
        rx_probe_init(&p, key, klen);
        int i = rx_leaf_find(&l, &p);
        if (i >= 0 && ((unsigned)i >= l.count || rx_entry_cmp(&l.e[i], &p))) abort();
        if (i < 0 && (uint64_t)(-(i + 1)) > l.count) abort();
        (void)rx_leaf_above(&l, &p);
        rx_probe_free(&p);
    }
    /* A probe alike to a long entry up to its record (prefix, hash, length), the record
     * saying "equal": found, at an entry of that record. */
    for (unsigned j = 0; j < l.count; j++) {
        if (!rx_elong(&l.e[j])) continue;
        static uint8_t key[DM_ROLEX_KEY_MAX];
        memset(key, 0, rx_elen(&l.e[j]));
        memcpy(key, l.e[j].key, RX_PREFIX);
        rx_probe_t p;
        rx_probe_init(&p, key, rx_elen(&l.e[j]));
        p.hash = rx_ehash(&l.e[j]);
        if (rx_probe_set(&p, rx_erec(&l.e[j]), 0)) abort();
        int i = rx_leaf_find(&l, &p);
        /* An unsorted image may hide it from the binary search; a hit is that record. */
        if (i >= 0 && rx_erec(&l.e[i]) != rx_erec(&l.e[j])) abort();
        rx_probe_free(&p);
        break;
    }
    for (unsigned j = 0; j < l.count; j++)
        if (rx_einline(&l.e[j]) > DM_ROLEX_INLINE) abort();
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
