/* ROLEX lock domains: which lock word guards which leaves (2026-12-02).
 *
 * An index created empty is one chain, and the chain head's lock guarded every leaf of it, so
 * every insert and delete of the pool waited for one lease (DESIGN.md "One chain, one lock").
 * ROLEX gives each LT entry a lock covering its leaf and synonyms; here a leaf's *label*
 * (its header's [28]) says which lock word guards it: 0, the chain head's (every leaf of a
 * built or old index); T + 1, leaf T's. The chains stay as they are: labels only partition
 * their leaves among lock words, and lock-free readers, scans and the retrainer never look
 * at them (a model's LT still names each entry's chain head).
 *
 * Writers (insert.c update, range.c lock_key). A writer locks the head its handle last saw
 * for its start leaf (rx_dom_guess: the chain head when it never saw one), reads the start
 * leaf under the lock and, when its label names another lock, unlocks and locks that one.
 * It then reads forward from the start leaf only over leaves of the same label (a *stretch*;
 * rx_run_more stops before a leaf of another label). When the key's place (its successor's
 * leaf, or the chain's end) lies past the stretch, the writer unlocks and starts again at
 * the first leaf past it, under that leaf's lock. So a writer changes only leaves of the
 * label it holds, read under that lock: two writers holding different locks never write the
 * same leaf. Shifts stay in the stretch (a full stretch splits instead), and a split's new
 * leaf takes its predecessor's label. Each switch moves forward in the chain, so an
 * operation switches a bounded number of times (RX_DOM_TRIES).
 *
 * Why a label read under a lock stays true while the lock is held: a leaf's label changes
 * only in a cut, written by a holder of the lock that guards the leaf.
 *
 * Cuts. A writer of the range role whose start leaf T is an LT entry of its model (a
 * promoted synonym, not a head) and in the domain it holds relabels, at its unlock, T and
 * the leaves after it up to the next LT entry's leaf (its synonyms) to T + 1, each with one
 * 24-byte WRITE of [16, 40) (next, count, label, checksum: the body is unchanged, and so is
 * the leaf's version, which WATCH reads), in the unlock's batch before the lock word's CAS.
 * Every leaf written was read under the lock it leaves, and each is written once: the first
 * WRITE to land hands it to T's lock word (free until then: no leaf named it), after which
 * the cutter does not touch it again. A cutter that dies halfway leaves some of the stretch
 * relabeled and some not: any labeling is a valid partition (writers only ever act on one
 * stretch), so nothing needs repair. Domains need not be contiguous: the leaves after the
 * stretch keep their label, and a writer that walks into them takes their lock.
 *
 * What it costs: the first write under each promoted entry pays the cut's few WRITEs (they
 * ride with its unlock; a stretch longer than the writer's run is read first, at most
 * RX_CUT_READS leaves); a writer whose handle has not seen the label yet
 * pays one lock more (it locks the old head, reads the label, switches). A takeover settles
 * the leaves of the lock's label only, walking its chain from the lock's leaf (range.c). */
#include <stdlib.h>
#include <string.h>

#include "dmkv/batch.h"
#include "dmkv/env.h"
#include "dmkv/errors.h"
#include "rolex_internal.h"

#define RX_CUT_READS 4u  /* leaves a cut reads past the writer's run, at most */
#define RX_CUT_LEAVES 8u /* leaves a cut relabels, at most */

uint64_t rx_dom_cuts, rx_dom_switches, rx_dom_passes; /* relaxed atomics: INFO */

static int parse_cuts(const char *e)
{
    return !(e && strcmp(e, "0") == 0);
}

int rx_dom_cutting(void)
{
    static int on = -1;
    return dm_env_cached(&on, "DMKV_ROLEX_CUTS", parse_cuts);
}

uint64_t rx_dom_guess(const dm_rolex_t *r, uint64_t leaf, uint64_t primary)
{
    uint32_t label = leaf < r->ndom ? r->dom[leaf] : 0;
    return rx_dom_head(label, primary);
}

static void note(dm_rolex_t *r, dm_gaddr_t at, uint32_t label)
{
    uint64_t leaf;
    if (rx_leaf_no(r, at, &leaf)) return;
    if (leaf >= r->ndom) {
        if (!label) return; /* unknown reads as 0: the chain head's */
        uint64_t n = r->ndom ? r->ndom : 1024;
        while (n <= leaf)
            n *= 2;
        if (n > r->hdr.capacity) n = r->hdr.capacity;
        uint32_t *d = realloc(r->dom, n * sizeof(*d));
        if (!d) return; /* not remembered: one switch more next time */
        memset(d + r->ndom, 0, (n - r->ndom) * sizeof(*d));
        r->dom = d, r->ndom = n;
    }
    r->dom[leaf] = label;
}

/* Remember the labels of the run's leaves (and of the leaf beyond it). */
static void note_run(dm_rolex_t *r, const rx_run_t *c)
{
    for (unsigned i = 0; i < c->n; i++)
        note(r, c->ad[i], c->v[i].label);
    if (c->beyond) note(r, c->beyond, c->beyond_lab);
}

/* 1 with *start, *head set when the run must go elsewhere (rx_dom_read), 0, or DM_E*. */
static int elsewhere(const dm_rolex_t *r, const rx_run_t *c, uint64_t primary, uint64_t *start,
                     uint64_t *head)
{
    uint32_t label = c->v[0].label;
    if (rx_dom_label_bad(r, label))
        return RX_CORRUPT("leaf at %#llx: label %u", (unsigned long long)c->ad[0], label);
    if (rx_dom_head(label, primary) != *head) { /* locked by a label read before a cut */
        *head = rx_dom_head(label, primary);
        __atomic_fetch_add(&rx_dom_switches, 1, __ATOMIC_RELAXED);
        return 1;
    }
    unsigned k;
    if (!c->beyond || rx_run_find(c, &k) >= 0 || rx_run_place(c) < c->n) return 0;
    /* Every leaf of the stretch ends below the key: its place is at the leaf beyond or
     * after it, in another lock's leaves. */
    if (rx_dom_label_bad(r, c->beyond_lab))
        return RX_CORRUPT("leaf at %#llx: label %u", (unsigned long long)c->beyond, c->beyond_lab);
    int rc = rx_leaf_no(r, c->beyond, start);
    if (rc) return rc;
    *head = rx_dom_head(c->beyond_lab, primary);
    __atomic_fetch_add(&rx_dom_passes, 1, __ATOMIC_RELAXED);
    return 1;
}

int rx_dom_read(dm_ctx_t *ctx, dm_rolex_t *r, rx_run_t *c, uint64_t primary, uint64_t *start,
                uint64_t *head)
{
    c->label = c->v[0].label;
    int rc = elsewhere(r, c, primary, start, head);
    if (!rc) rc = rx_run_read(ctx, c); /* a long key's record too, if an entry ties */
    if (!rc) rc = elsewhere(r, c, primary, start, head);
    if (rc >= 0) note_run(r, c);
    return rc;
}

int rx_dom_cut_read(dm_ctx_t *ctx, dm_rolex_t *r, rx_run_t *c, uint64_t held)
{
    uint64_t t;
    if (rx_leaf_no(r, c->ad[0], &t) || t < r->hdr.primaries || t == held) return 0;
    if (c->v[0].label != rx_dom_label_of(r, held)) return 0;
    int64_t p = rx_leaf_pos(r, t);
    if (p < 0) return 0; /* not an entry of this model: its synonym bounds are unknown */
    /* The stretch ends before the next entry's leaf of the chain, or where the run ends. */
    uint64_t stop = UINT64_MAX;
    if ((uint64_t)p + 1 < r->hdr.entries && r->lt[p + 1].head == r->lt[p].head)
        stop = r->lt[p + 1].leaf;
    for (unsigned i = 0, reads = 0;; i++) {
        uint64_t leaf;
        if (i == c->n) {
            if (rx_run_complete(c)) return (int)i;
            if (reads++ == RX_CUT_READS) return 0;
            int rc = rx_run_more(ctx, c);
            if (rc) return rc;
            if (i == c->n) return (int)i; /* the next leaf is another lock's */
        }
        if (i && (rx_leaf_no(r, c->ad[i], &leaf) || leaf == stop)) return (int)i;
        if (i == RX_CUT_LEAVES) return 0;
    }
}

void rx_dom_cut_write(dm_rolex_t *r, dm_batch_t *b, rx_run_t *c, unsigned leaves)
{
    uint64_t t;
    if (!leaves || rx_leaf_no(r, c->ad[0], &t)) return;
    for (unsigned i = leaves; i-- > 0;) {
        rx_leaf_t *l = &c->v[i];
        l->label = (uint32_t)(t + 1);
        l->sum = rx_leaf_sum(l);
        /* A leaf b writes already carries the label (b points into the run): a second
         * WRITE of it could land after T's next holder changed it. */
        int written = 0;
        for (unsigned j = 0; j < b->n && !written; j++)
            written = b->v[j].op == DM_OP_WRITE &&
                      (b->v[j].buf == (void *)&l->next || b->v[j].buf == (void *)l);
        if (!written) dm_batch_write(b, c->ad[i] + RX_LEAF_BODY, &l->next, 24); /* next..sum */
        note(r, c->ad[i], l->label);
    }
    __atomic_fetch_add(&rx_dom_cuts, 1, __ATOMIC_RELAXED);
}
