/* ROLEX retraining with shadow redirection (§3.5, §4.6), data-movement-free: read every chain in
 * place, list its head and the synonym leaves that can start a range of their own in a new leaf
 * table (LT) in key order, train segments over the entries' low images, write the new model into
 * the model arena slot the current one is not in and swing the root's model word with one CAS.
 * No leaf is written, moved, copied or unlinked, so readers and writers go on meanwhile, and a
 * pinned handle keeps its old model for as long as it likes.
 *
 * Why a promoted leaf S of low b keeps I(S) (every key of its chain of image >= b is in S or
 * after it) from the moment it was read, with no lock:
 *  - b is above every key image read in the chain before S, each leaf read at its own instant,
 *    in chain order (rx_read_chains: one hop after another).
 *  - A leaf before S gets a key of image >= b only (insert.c) as the leaf of that key's
 *    successor, which is >= b and already there, by a forward move from a leaf before it, or by
 *    a split of a leaf before it. So the first leaf before S to get one after it was read would
 *    need another to have had one first: none ever does. Leaves made after the read (splits)
 *    take keys from the leaf before them: the same holds for them.
 * So the paper's lock of the model while the synonym leaves made meanwhile join the new SLT is
 * not needed: those leaves are linked after a leaf the new LT reaches, and a walk from any
 * entry passes through them. Keys that share an 8-byte image never start an entry in the middle
 * of their run (b is above the images read before S), so a search for them starts at or before
 * the first leaf holding them and walks through all of them.
 *
 * An old model stays right for ever: its entries keep I(e) by the same argument, and the chains
 * it walks are never cut. A new model is used by the handles opened after the swing, and by
 * every other handle from its next operation on (sync.c).
 *
 * Where a new model goes: the root's arena of two slots, each as large as the largest model
 * (every leaf an LT entry: 48 bytes a leaf, against 816 for the leaf itself), written in the
 * slot the model word does not name, then the word swung to it. No allocation: dm_alloc takes
 * chunks by FAA on node 0's alloc_ptr, which gateways FAA too, and a memory node's CPU atomics
 * are not atomic with an RNIC's on the same word. Nor is anything freed: a handle caches its
 * model whole and never reads its slot again, and one that loads a slot while it is rewritten
 * (two retrains after the word it read) finds another version or a failed checksum and reads
 * the word again (rx_sync_model). The model word carries the version, so a word naming the
 * slot of two versions ago is still seen as new.
 *
 * One retrainer at a time per index: the slots assume it. Once node 0's rolex_root names the
 * root, that is the memory node (memnode/mn_retrainer.c, through host.c), and
 * dm_rolex_retrain refuses it; before, the caller sees to it. The word is swung by CAS (from
 * the model this one was built against) by that one writer: on the memory node a CPU atomic,
 * which is safe because gateways only ever read the word. */
#include "dmkv/rolex.h"

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"

#include <stdlib.h>
#include <string.h>

#include "rolex_internal.h"

typedef struct lt_vec {
    rx_lt_t *e;
    uint64_t n, cap;
} lt_vec_t;

static int push(lt_vec_t *t, uint64_t lo, uint64_t leaf, uint64_t head)
{
    if (t->n == t->cap) {
        uint64_t cap = t->cap ? 2 * t->cap : 256;
        rx_lt_t *ne = realloc(t->e, cap * sizeof(*ne));
        if (!ne) return DM_ENOMEM;
        t->e = ne, t->cap = cap;
    }
    t->e[t->n++] = (rx_lt_t){lo, (uint32_t)leaf, (uint32_t)head};
    return 0;
}

/* The entries of head h's chain v[0..n) (read in chain order): the head with its low, then each
 * non-empty synonym S with b = max(image of S's first key, 1 + every image read before S), when
 * b stays inside the head's range [lo, hi) (hi 0: none) above the last entry's low. Of a run of
 * empty leaves (emptied by DEL: never reclaimed), the last, with b = 1 + the larger of every
 * image read before it and the last entry's low, when b also stays below the next leaf's first
 * image: I(S) holds by the same argument (S's own keys play no part in it), and a key whose
 * place lies past the run starts there instead of walking the run, one lock domain a leaf
 * (docs/DESIGN.md "Empty leaves in domains of their own"). */
static int list_chain(const dm_rolex_t *r, lt_vec_t *t, uint64_t h, uint64_t lo, uint64_t hi,
                      const rx_leaf_t *v, unsigned n)
{
    int rc = push(t, lo, h, h), seen = 0;
    uint64_t top = 0, last = lo; /* top: the largest image read so far (seen) */
    for (unsigned s = 0; !rc && s < n; s++) {
        const rx_leaf_t *l = &v[s];
        if (!l->count) {
            if (!s || !seen || top == UINT64_MAX || (s + 1 < n && !v[s + 1].count)) continue;
            uint64_t m = top > last ? top : last, b = m + 1;
            const rx_leaf_t *nx = s + 1 < n ? &v[s + 1] : NULL;
            if (m == UINT64_MAX || (hi && b >= hi) || (nx && b >= rx_eimage(&nx->e[0]))) continue;
            uint64_t leaf;
            if (rx_leaf_no(r, v[s - 1].next, &leaf))
                return RX_CORRUPT("chain of head %llu: leaf %u's next", (unsigned long long)h,
                                  s - 1);
            rc = push(t, b, leaf, h);
            last = b;
            continue;
        }
        uint64_t f = rx_eimage(&l->e[0]);
        uint64_t b = seen && top >= f ? top + 1 : f;
        if (s && (!seen || top != UINT64_MAX) && b > last && (!hi || b < hi)) {
            uint64_t leaf;
            if (rx_leaf_no(r, v[s - 1].next, &leaf))
                return RX_CORRUPT("chain of head %llu: leaf %u's next", (unsigned long long)h,
                                  s - 1);
            rc = push(t, b, leaf, h);
            last = b;
        }
        uint64_t li = rx_eimage(&l->e[l->count - 1]);
        top = seen && top > li ? top : li;
        seen = 1;
    }
    return rc;
}

/* Every chain, DM_BATCH_MAX heads at a time (their leaves in one batch, then one batch per hop
 * for all of them), listed into t. hlo[h]: head h's low. */
static int list_all(dm_ctx_t *ctx, const dm_rolex_t *r, const uint64_t *hlo, lt_vec_t *t,
                    uint64_t *leaves)
{
    uint64_t L = r->hdr.primaries;
    rx_leaf_t *heads = malloc(DM_BATCH_MAX * sizeof(*heads));
    int rc = heads ? 0 : DM_ENOMEM;
    for (uint64_t h0 = 0; !rc && h0 < L; h0 += DM_BATCH_MAX) {
        unsigned k = (unsigned)(L - h0 < DM_BATCH_MAX ? L - h0 : DM_BATCH_MAX), n[DM_BATCH_MAX];
        rx_leaf_t *ch[DM_BATCH_MAX];
        rc = rx_read_leaves(ctx, r, h0, h0 + k - 1, heads);
        if (!rc) rc = rx_read_chains(ctx, heads, k, ch, n);
        if (rc) break;
        for (unsigned i = 0; i < k; i++) {
            uint64_t h = h0 + i;
            if (!rc) rc = list_chain(r, t, h, hlo[h], h + 1 < L ? hlo[h + 1] : 0, ch[i], n[i]);
            *leaves += n[i];
            free(ch[i]);
        }
    }
    free(heads);
    return rc;
}

int rx_retrain(dm_ctx_t *ctx, dm_gaddr_t root, int hosted, dm_rolex_retrain_stats_t *st)
{
    /* Node 0's host record and the leaves taken so far (before any chain is read: the new
     * model's trigger base, host.c). */
    uint64_t host = 0, taken = 0;
    dm_batch_t hb;
    dm_batch_init(&hb);
    dm_batch_read(&hb, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), &host, 8);
    dm_batch_read(&hb, root + RX_OFF_ALLOC, &taken, 8);
    int rc = dm_batch_exec(ctx, &hb);
    if (rc) return rc;
    if (!hosted && host == root) return DM_EINVAL; /* the memory node's to retrain */
    dm_rolex_t *r;
    rc = dm_rolex_open(ctx, root, &r);
    if (rc) return rc;
    dm_rolex_follow(r, 0);
    if (taken > r->hdr.capacity) taken = r->hdr.capacity; /* FAAs past the end count too */
    uint64_t L = r->hdr.primaries, leaves = 0, *hlo = calloc(L, sizeof(*hlo)), *lows = NULL;
    lt_vec_t t = {0};
    rx_seg_t *segs = NULL;
    rc = hlo ? 0 : DM_ENOMEM;
    for (uint64_t p = 0; !rc && p < r->hdr.entries; p++) /* the heads' lows: immutable */
        if (r->lt[p].leaf == r->lt[p].head) hlo[r->lt[p].head] = r->lt[p].lo;
    if (!rc) rc = list_all(ctx, r, hlo, &t, &leaves);
    if (!rc) {
        lows = malloc(t.n * sizeof(*lows));
        segs = malloc(t.n * sizeof(*segs));
        rc = lows && segs ? 0 : DM_ENOMEM;
    }
    for (uint64_t p = 0; !rc && p < t.n; p++)
        lows[p] = t.e[p].lo;
    uint64_t ns = rc ? 0 : rx_train(lows, t.n, (unsigned)r->hdr.eps, segs);
    dm_rolex_t nr = *r;
    nr.hdr.entries = t.n, nr.hdr.segments = ns, nr.segs = segs, nr.lt = t.e, nr.pos_of = NULL;
    nr.slt = NULL, nr.nslt = 0;
    if (!rc) rc = rx_check_model(&nr);
    unsigned slot = (unsigned)(~r->model & 1); /* the slot the current model is not in */
    uint64_t word = (r->hdr.version + 1) << 1 | slot;
    if (!rc) rc = rx_write_model(ctx, r, r->hdr.version + 1, slot, taken, segs, ns, t.e, t.n);
    if (!rc) { /* shadow redirection: one CAS, from the model this one was built against */
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *cas = dm_batch_cas(&b, root + RX_OFF_MODEL, r->model, word);
        rc = dm_batch_exec(ctx, &b);
        if (!rc && cas->result != r->model) rc = DM_ERETRY; /* another retrainer: misuse */
    }
    if (!rc && st)
        *st = (dm_rolex_retrain_stats_t){r->hdr.version + 1, leaves, r->hdr.entries, t.n, ns};
    free(hlo), free(lows), free(segs), free(t.e);
    dm_rolex_close(r);
    return rc;
}

int dm_rolex_retrain(dm_ctx_t *ctx, dm_gaddr_t root, dm_rolex_retrain_stats_t *st)
{
    return rx_retrain(ctx, root, 0, st);
}
