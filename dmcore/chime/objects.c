/* The objects a CHIME tree reaches, for offline walks (dmkv-pool-reclaim, index.h objects):
 * every inner node and leaf (descending from the superblock's root word and following
 * sibling pointers, so a node a split linked but whose parent was never updated counts),
 * every long key's record and every leaf's fence record. */
#include <stdlib.h>
#include <string.h>

#include "chime_internal.h"
#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/chime.h"
#include "dmkv/errors.h"
#include "dmkv/log.h"
#include "dmkv/superblock.h"

#define LEAF_BATCH 32 /* leaves read per round trip */

typedef struct addrs {
    dm_gaddr_t *v;
    size_t n, cap;
} addrs_t;

static int addrs_add(addrs_t *s, dm_gaddr_t a)
{
    if (s->n == s->cap) {
        size_t c = s->cap ? 2 * s->cap : 256;
        dm_gaddr_t *v = realloc(s->v, c * sizeof(*v));
        if (!v) return DM_ENOMEM;
        s->v = v, s->cap = c;
    }
    s->v[s->n++] = a;
    return 0;
}

/* Open-addressing set of nonzero addresses (what the walk has queued). */
typedef struct aset {
    dm_gaddr_t *slot;
    size_t cap, n;
} aset_t;

static size_t aset_pos(const aset_t *s, dm_gaddr_t a)
{
    size_t i = (size_t)((a * 0x9E3779B97F4A7C15ull) >> 20) & (s->cap - 1);
    while (s->slot[i] && s->slot[i] != a)
        i = (i + 1) & (s->cap - 1);
    return i;
}

/* Insert a; returns 1 when new, 0 when present, DM_ENOMEM. */
static int aset_insert(aset_t *s, dm_gaddr_t a)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        aset_t g = {calloc(cap, sizeof(dm_gaddr_t)), cap, 0};
        if (!g.slot) return DM_ENOMEM;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i]) g.slot[aset_pos(&g, s->slot[i])] = s->slot[i], g.n++;
        free(s->slot);
        *s = g;
    }
    size_t i = aset_pos(s, a);
    if (s->slot[i]) return 0;
    s->slot[i] = a;
    s->n++;
    return 1;
}

typedef struct walk {
    ch_geo_t geo;
    aset_t seen;    /* inner nodes, leaves and records queued */
    addrs_t inner;  /* inner nodes to read */
    addrs_t leaves; /* leaves to read */
    addrs_t recs;   /* key and fence records to size */
    dm_index_object_fn fn;
    void *arg;
} walk_t;

static int queue_node(walk_t *cw, addrs_t *q, dm_gaddr_t a)
{
    if (!a) return 0;
    int rc = aset_insert(&cw->seen, a);
    return rc == 1 ? addrs_add(q, a) : rc;
}

/* One inner node: emit it, queue its children (leaves below level 1) and its sibling. */
static int walk_inner(dm_ctx_t *ctx, walk_t *cw, dm_gaddr_t a)
{
    uint8_t *img = malloc(CH_INNER_BYTES);
    if (!img) return DM_ENOMEM;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, a, img, CH_INNER_BYTES);
    int rc = dm_batch_exec(ctx, &b);
    ch_inner_t *n = rc ? NULL : ch_inner_decode(a, img);
    free(img);
    if (rc) return rc;
    if (!n) {
        dm_log(DM_LOG_WARNING, "CHIME inner node at %#llx does not decode", (unsigned long long)a);
        return DM_ECORRUPT;
    }
    rc = cw->fn(cw->arg, a, CH_INNER_BYTES + CH_LINE);
    addrs_t *below = n->level == 1 ? &cw->leaves : &cw->inner;
    for (unsigned i = 0; i < n->count && !rc; i++)
        rc = queue_node(cw, below, n->child[i]);
    if (!rc) rc = queue_node(cw, &cw->inner, n->sibling);
    ch_inner_free(n);
    return rc;
}

/* One leaf image: queue its sibling, its fence record and its long keys' records. */
static int scan_leaf(walk_t *cw, const uint8_t *img)
{
    const ch_geo_t *g = &cw->geo;
    int rc = 0;
    for (unsigned grp = 0; grp < g->groups && !rc; grp++) {
        const uint8_t *rep = img + ch_replica_off(g, grp);
        rc = queue_node(cw, &cw->leaves, ch_u64(rep + 8));
        if (!rc) rc = queue_node(cw, &cw->recs, ch_u64(rep + 16)); /* replicas share it */
    }
    for (unsigned i = 0; i < g->span && !rc; i++) {
        const uint8_t *e = img + ch_entry_off(g, i);
        if (ch_e_used(e) && e[7] == CH_KLEN_RECORD) rc = queue_node(cw, &cw->recs, ch_u64(e + 8));
    }
    return rc;
}

/* Read the queued leaves from position *done on, LEAF_BATCH per round trip. */
static int walk_leaves(dm_ctx_t *ctx, walk_t *cw, size_t *done)
{
    uint32_t lb = cw->geo.bytes;
    uint8_t *img = malloc((size_t)LEAF_BATCH * lb);
    if (!img) return DM_ENOMEM;
    int rc = 0;
    while (*done < cw->leaves.n && !rc) {
        size_t n = cw->leaves.n - *done < LEAF_BATCH ? cw->leaves.n - *done : LEAF_BATCH;
        dm_batch_t b;
        dm_batch_init(&b);
        for (size_t k = 0; k < n; k++)
            dm_batch_read(&b, cw->leaves.v[*done + k], img + k * lb, lb);
        rc = dm_batch_exec(ctx, &b);
        for (size_t k = 0; k < n && !rc; k++) {
            rc = cw->fn(cw->arg, cw->leaves.v[*done + k], lb);
            if (!rc) rc = scan_leaf(cw, img + k * lb);
        }
        *done += n;
    }
    free(img);
    return rc;
}

/* Key records (long keys, fences): size each from its header. An unreadable record counts
 * one unit, so a damaged record never frees the memory around it. */
static int emit_records(dm_ctx_t *ctx, walk_t *cw)
{
    const addrs_t *recs = &cw->recs;
    for (size_t i = 0; i < recs->n; i += DM_BATCH_MAX) {
        size_t n = recs->n - i < DM_BATCH_MAX ? recs->n - i : DM_BATCH_MAX;
        uint32_t hdr[DM_BATCH_MAX][DM_KEYREC_HDR / 4];
        dm_batch_t b;
        dm_batch_init(&b);
        for (size_t k = 0; k < n; k++)
            dm_batch_read(&b, recs->v[i + k], hdr[k], DM_KEYREC_HDR);
        int rc = dm_batch_exec(ctx, &b);
        for (size_t k = 0; k < n && !rc; k++) {
            uint64_t len = DM_UNIT;
            if (hdr[k][0] == DM_KEYREC_MAGIC && hdr[k][1] <= DM_KV_MAX_KEY)
                len = dm_keyrec_bytes(hdr[k][1]);
            rc = cw->fn(cw->arg, recs->v[i + k], len);
        }
        if (rc) return rc;
    }
    return 0;
}

int dm_chime_objects(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg)
{
    uint64_t root = 0, geo = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(chime_root)), &root, 8);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(chime_geo)), &geo, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc || !root) return rc;
    walk_t cw;
    memset(&cw, 0, sizeof(cw));
    cw.fn = fn, cw.arg = arg;
    ch_geo_init(&cw.geo, geo & 0xffff, (geo >> 16) & 0xffff);
    if (cw.geo.nbhd < 2 || cw.geo.span % cw.geo.nbhd || cw.geo.span > CH_MAX_SPAN) {
        dm_log(DM_LOG_WARNING, "bad CHIME geometry word %#llx", (unsigned long long)geo);
        return DM_ECORRUPT;
    }
    rc = queue_node(&cw, ch_root_level(root) ? &cw.inner : &cw.leaves, ch_root_addr(root));
    for (size_t i = 0; i < cw.inner.n && !rc; i++)
        rc = walk_inner(ctx, &cw, cw.inner.v[i]);
    size_t done = 0;
    if (!rc) rc = walk_leaves(ctx, &cw, &done);
    if (!rc) rc = emit_records(ctx, &cw);
    if (!rc)
        dm_log(DM_LOG_NOTICE, "chime: %zu inner nodes, %zu leaves, %zu records", cw.inner.n,
               cw.leaves.n, cw.recs.n);
    free(cw.seen.slot);
    free(cw.inner.v);
    free(cw.leaves.v);
    free(cw.recs.v);
    return rc;
}
