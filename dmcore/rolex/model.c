/* ROLEX's learned models (§3.2, §4.1): key images, greedy piecewise-linear training with an error
 * bound, prediction and the window of LT positions a lookup reads. */
#include "dmkv/rolex.h"

#include <math.h>

#include "dmkv/errors.h"

#include "rolex_internal.h"

uint64_t dm_rolex_image(const void *key, size_t len)
{
    const uint8_t *k = key;
    uint64_t x = 0;
    for (size_t i = 0; i < 8; i++)
        x = x << 8 | (i < len ? k[i] : 0);
    return x;
}

/* Shrinking cone (FITing-tree's greedy PLA, as ROLEX's O(N) variant of OptimalPLR): each
 * segment starts at a point and keeps the slopes that fit every later point within the
 * bound; trained with eps - 0.5 so that rounding in rx_predict stays within eps. */
uint64_t rx_train(const uint64_t *x, uint64_t n, unsigned eps, rx_seg_t *segs)
{
    double e = (double)eps - 0.5;
    uint64_t ns = 0, i = 0;
    while (i < n) {
        uint64_t s = i;
        double lo = -INFINITY, hi = INFINITY;
        for (i = s + 1; i < n; i++) {
            double dx = (double)(x[i] - x[s]), dy = (double)(i - s);
            double l = (dy - e) / dx, h = (dy + e) / dx;
            double nlo = l > lo ? l : lo, nhi = h < hi ? h : hi;
            if (nlo > nhi) break;
            lo = nlo, hi = nhi;
        }
        double slope = i == s + 1 ? 0 : (lo + hi) / 2;
        if (slope < 0) slope = 0; /* 0 is in the cone then (hi > 0 always): keeps f monotone */
        segs[ns++] = (rx_seg_t){x[s], s, i - 1, slope};
    }
    return ns;
}

double rx_predict(const rx_seg_t *segs, uint64_t nsegs, uint64_t x)
{
    uint64_t a = 0, b = nsegs; /* the last segment with first_img <= x */
    while (b - a > 1) {
        uint64_t m = a + (b - a) / 2;
        if (segs[m].first_img <= x)
            a = m;
        else
            b = m;
    }
    const rx_seg_t *s = &segs[a];
    if (x < s->first_img) return (double)s->first_pos;
    double f = (double)s->first_pos + s->slope * (double)(x - s->first_img);
    if (f > (double)s->last_pos) f = (double)s->last_pos;
    return f;
}

/* The covering position j of x has lo(j) <= x < lo(j + 1): x's segment is lo(j)'s, f is
 * monotone and clamped there, so f(lo(j)) <= f(x) <= max(f(lo(j + 1)), j), hence
 * f(x) - eps - 1 <= j <= f(x) + eps. */
static int64_t rx_floor(double v) /* no libm in dmcore */
{
    int64_t i = (int64_t)v;
    return (double)i > v ? i - 1 : i;
}

void rx_window(const dm_rolex_t *r, uint64_t x, uint64_t *a, uint64_t *b)
{
    double f = rx_predict(r->segs, r->hdr.segments, x);
    int64_t lo = -rx_floor(-(f - (double)r->hdr.eps - 1)), hi = rx_floor(f + (double)r->hdr.eps);
    int64_t last = (int64_t)r->hdr.entries - 1;
    *a = (uint64_t)(lo < 0 ? 0 : lo > last ? last : lo);
    *b = (uint64_t)(hi < 0 ? 0 : hi > last ? last : hi);
}

int rx_check_model(const dm_rolex_t *r)
{
    for (uint64_t j = 0; j < r->hdr.entries; j++) { /* with the reader's arithmetic */
        uint64_t a, b;
        rx_window(r, r->lt[j].lo, &a, &b);
        if (j < a || j > b || (j && r->lt[j - 1].lo >= r->lt[j].lo))
            return RX_CORRUPT("model check: LT entry %llu of %llu (low %#llx, window %llu..%llu, "
                              "previous low %#llx)",
                              (unsigned long long)j, (unsigned long long)r->hdr.entries,
                              (unsigned long long)r->lt[j].lo, (unsigned long long)a,
                              (unsigned long long)b, (unsigned long long)(j ? r->lt[j - 1].lo : 0));
    }
    return 0;
}
