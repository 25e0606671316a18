/* Hotspot buffer (CHIME §4.3): per worker, a bounded table of {leaf, entry index,
 * fingerprint, access count} updated after every remote entry access, evicting the least
 * frequently used entry of a small set (LFU over 4-way sets: bounded work per access). */
#include "chime_internal.h"

#define WAYS 4u

static unsigned set_of(dm_gaddr_t leaf, unsigned idx)
{
    uint64_t h = ((leaf >> 6) * 0x9e3779b97f4a7c15ull) ^ (idx * 0xff51afd7ed558ccdull);
    return (unsigned)(h >> 40) % (CH_HOT_SLOTS / WAYS) * WAYS;
}

void ch_hot_touch(dm_chime_t *c, dm_gaddr_t leaf, unsigned idx, uint16_t fp)
{
    ch_hot_t *s = &c->hot[set_of(leaf, idx)];
    ch_hot_t *victim = &s[0];
    for (unsigned w = 0; w < WAYS; w++) {
        if (s[w].leaf == leaf && s[w].idx == idx) {
            if (s[w].fp == fp) {
                s[w].count++;
            } else {
                s[w].fp = fp; /* another key sits there now */
                s[w].count = 1;
            }
            return;
        }
        if (s[w].count < victim->count) victim = &s[w];
    }
    *victim = (ch_hot_t){leaf, (uint16_t)idx, fp, 1};
}

int ch_hot_find(dm_chime_t *c, dm_gaddr_t leaf, unsigned home, uint16_t fp)
{
    int best = -1;
    uint32_t best_count = 0;
    for (unsigned j = 0; j < c->geo.nbhd; j++) {
        unsigned idx = (home + j) % c->geo.span;
        ch_hot_t *s = &c->hot[set_of(leaf, idx)];
        for (unsigned w = 0; w < WAYS; w++)
            if (s[w].leaf == leaf && s[w].idx == idx && s[w].fp == fp && s[w].count > best_count) {
                best = (int)idx;
                best_count = s[w].count;
            }
    }
    return best;
}

void ch_hot_forget(dm_chime_t *c, dm_gaddr_t leaf, unsigned idx)
{
    ch_hot_t *s = &c->hot[set_of(leaf, idx)];
    for (unsigned w = 0; w < WAYS; w++)
        if (s[w].leaf == leaf && s[w].idx == idx) s[w] = (ch_hot_t){0};
}
