/* ROLEX bulk build and handles (§3.2, §4.1 training; §3.3 leaves and models): lays out primary
 * leaves and their synonym chains in one leaf region, reserves the model arena (two slots),
 * writes a model (segments and the identity leaf table) into slot 0 and the root that names
 * it; reads them back into a handle, checking each model against its checksum. */
#include "dmkv/rolex.h"

#include "dmkv/alloc.h"
#include "dmkv/errors.h"
#include "dmkv/key_record.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "rolex_internal.h"

static void fill_leaf(rx_leaf_t *l, uint64_t lo, const char *const *keys, const size_t *lens,
                      const dm_gaddr_t *recs, size_t from, size_t to)
{
    memset(l, 0, sizeof(*l));
    l->lo = lo;
    for (size_t i = from; i < to; i++)
        rx_entry_set(&l->e[i - from], keys[i], lens[i], 0, recs ? recs[i] : 0);
    l->count = to - from;
}

/* The key records of the long keys (recs[i], 0 for short ones), written before any leaf
 * that names them (1 RTT each). On error none is left. */
static int write_records(dm_ctx_t *ctx, const char *const *keys, const size_t *lens, size_t n,
                         dm_gaddr_t **recs)
{
    *recs = NULL;
    size_t i = 0;
    while (i < n && lens[i] <= DM_ROLEX_INLINE)
        i++;
    if (i == n) return 0;
    *recs = calloc(n, sizeof(**recs));
    int rc = *recs ? 0 : DM_ENOMEM;
    for (; !rc && i < n; i++)
        if (lens[i] > DM_ROLEX_INLINE) rc = rx_rec_write(ctx, keys[i], lens[i], &(*recs)[i]);
    for (size_t j = 0; rc && *recs && j < n; j++)
        if ((*recs)[j]) rx_rec_give_back(ctx, (*recs)[j], lens[j]);
    if (rc) {
        free(*recs);
        *recs = NULL;
    }
    return rc;
}

/* A block for the index; with node0, on node 0 (the memory node that hosts retraining:
 * dm_rolex_host_record): the allocator takes nodes round robin, so within a turn or two of
 * them. Blocks taken elsewhere were never published: they go back once done (not before,
 * or the allocator would hand the same one out again). */
static int alloc_on(dm_ctx_t *ctx, uint64_t bytes, int node0, dm_gaddr_t *out)
{
    if (!node0) return dm_alloc_block(ctx, bytes, out);
    dm_gaddr_t other[2 * DM_GADDR_MAX_NODES + 2];
    unsigned n = 0, tries = 2 * ctx->w->n_nodes + 2;
    int rc = DM_ENOMEM;
    while (n < tries) {
        rc = dm_alloc_block(ctx, bytes, out);
        if (rc || !dm_gaddr_node(*out)) break;
        other[n++] = *out;
        rc = DM_ENOMEM;
    }
    for (unsigned i = 0; i < n; i++)
        dm_alloc_unused(ctx->w->alloc, other[i], bytes);
    return rc;
}

int dm_rolex_build(dm_ctx_t *ctx, const char *const *keys, const size_t *lens, size_t n,
                   const dm_rolex_cfg_t *cfg, dm_gaddr_t *root)
{
    unsigned eps = cfg && cfg->eps ? cfg->eps : 1;
    unsigned fill = cfg && cfg->fill ? cfg->fill : 12;
    if (eps > RX_EPS_MAX || fill > DM_ROLEX_SLOTS) return DM_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!lens[i]) return DM_EINVAL;
        if (lens[i] > DM_ROLEX_KEY_MAX) return DM_ETOOBIG;
        if (i && dm_rolex_key_cmp(keys[i - 1], lens[i - 1], keys[i], lens[i]) >= 0)
            return DM_EINVAL;
    }
    /* Primary j holds keys [start[j], start[j + 1]): a new one starts once fill keys are in
     * and the image changes, so equal images share a chain. */
    size_t *start = malloc((n + 2) * sizeof(*start));
    if (!start) return DM_ENOMEM;
    uint64_t L = 0, S = 0;
    start[L++] = 0;
    for (size_t i = 1; i < n; i++)
        if (i - start[L - 1] >= fill &&
            dm_rolex_image(keys[i], lens[i]) != dm_rolex_image(keys[i - 1], lens[i - 1]))
            start[L++] = i;
    start[L] = n;
    for (uint64_t j = 0; j < L; j++) {
        size_t k = start[j + 1] - start[j];
        S += k > DM_ROLEX_SLOTS ? (k - 1) / DM_ROLEX_SLOTS : 0;
    }
    uint64_t cap = L + S + (cfg && cfg->spare ? cfg->spare : L + 64);
    uint64_t *lo = malloc(L * sizeof(*lo));
    rx_seg_t *segs = malloc(L * sizeof(*segs));
    rx_leaf_t *leaves = calloc(L + S, sizeof(*leaves));
    rx_lt_t *lt = NULL;
    dm_gaddr_t *recs = NULL;
    int rc = DM_ENOMEM;
    if (cap >> 32) goto out; /* leaf numbers are u32 in the LT */
    if (!lo || !segs || !leaves) goto out;
    rc = write_records(ctx, keys, lens, n, &recs);
    if (rc) goto out;
    dm_gaddr_t region, rt;
    int node0 = cfg && cfg->node0;
    rc = alloc_on(ctx, cap * RX_LEAF_BYTES, node0, &region);
    if (rc) goto out;
    uint64_t syn = L; /* next synonym leaf */
    for (uint64_t j = 0; j < L; j++) {
        lo[j] = j ? dm_rolex_image(keys[start[j]], lens[start[j]]) : 0;
        size_t s = start[j], e = start[j + 1];
        rx_leaf_t *l = &leaves[j];
        for (;;) {
            size_t to = e - s > DM_ROLEX_SLOTS ? s + DM_ROLEX_SLOTS : e;
            fill_leaf(l, lo[j], keys, lens, recs, s, to);
            s = to;
            if (s == e) break;
            l->next = region + syn * RX_LEAF_BYTES;
            l->sum = rx_leaf_sum(l);
            l = &leaves[syn++];
        }
        l->sum = rx_leaf_sum(l);
    }
    lt = malloc(L * sizeof(*lt));
    rc = DM_ENOMEM;
    if (!lt) goto out;
    for (uint64_t j = 0; j < L; j++) /* the identity LT: leaf j at position j, its own head */
        lt[j] = (rx_lt_t){lo[j], (uint32_t)j, (uint32_t)j};
    uint64_t ns = rx_train(lo, L, eps, segs);
    dm_rolex_t r = {.hdr = {.entries = L, .segments = ns, .eps = eps}, .segs = segs, .lt = lt};
    rc = rx_check_model(&r);
    if (!rc) rc = dm_write_span(ctx, region, leaves, (L + S) * RX_LEAF_BYTES);
    if (!rc) rc = alloc_on(ctx, RX_ROOT_BYTES, node0, &rt);
    if (!rc) rc = alloc_on(ctx, 2 * rx_slot_bytes(cap), node0, &r.hdr.arena);
    r.root = rt, r.hdr.capacity = cap;
    if (!rc) rc = rx_write_model(ctx, &r, 1, 0, L + S, segs, ns, lt, L);
    rx_root_t h = {RX_MAGIC, 1ull << 1 | 0, L, r.hdr.arena, eps, region, L + S, cap};
    if (!rc) rc = dm_write_span(ctx, rt, &h, sizeof(h));
    if (!rc) *root = rt;
out:
    /* Records of a build that failed stay allocated (a leaf may have been written). */
    free(start), free(lo), free(segs), free(leaves), free(lt), free(recs);
    return rc;
}

void rx_discard(dm_ctx_t *ctx, dm_gaddr_t root)
{
    dm_rolex_t *r;
    if (dm_rolex_open(ctx, root, &r)) return; /* left to dmkv-pool-reclaim */
    dm_alloc_unused(ctx->w->alloc, r->hdr.region, r->hdr.capacity * RX_LEAF_BYTES);
    dm_alloc_unused(ctx->w->alloc, r->hdr.arena, 2 * rx_slot_bytes(r->hdr.capacity));
    dm_alloc_unused(ctx->w->alloc, root, RX_ROOT_BYTES);
    dm_rolex_close(r);
}

uint64_t rx_slot_bytes(uint64_t capacity)
{
    return dm_alloc_block_bytes(RX_MODEL_HDR + (RX_SEG_BYTES + RX_LT_BYTES) * capacity);
}

dm_gaddr_t rx_model_addr(const dm_rolex_t *r, uint64_t word)
{
    return r->hdr.arena + (word & 1) * rx_slot_bytes(r->hdr.capacity);
}

uint64_t rx_model_sum(const rx_mhdr_t *h, const void *body, uint64_t len)
{
    return XXH3_64bits_withSeed(body, len, XXH3_64bits(&h->version, 40)) | 1;
}

int rx_write_model(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t version, unsigned slot,
                   uint64_t taken, const rx_seg_t *segs, uint64_t ns, const rx_lt_t *lt, uint64_t n)
{
    uint64_t sb = RX_SEG_BYTES * ns, bytes = RX_MODEL_HDR + sb + RX_LT_BYTES * n;
    if (ns > n || n > r->hdr.capacity) return DM_EINVAL; /* the slot holds no more */
    uint8_t *buf = calloc(1, bytes);
    if (!buf) return DM_ENOMEM;
    rx_mhdr_t h = {RX_MODEL_MAGIC, version, n, ns, r->root, taken, 0, 0};
    memcpy(buf + RX_MODEL_HDR, segs, sb);
    memcpy(buf + RX_MODEL_HDR + sb, lt, RX_LT_BYTES * n);
    h.sum = rx_model_sum(&h, buf + RX_MODEL_HDR, bytes - RX_MODEL_HDR);
    memcpy(buf, &h, sizeof(h));
    int rc = dm_write_span(ctx, rx_model_addr(r, slot), buf, bytes);
    free(buf);
    return rc;
}

int rx_load_model(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t word)
{
    rx_mhdr_t h;
    int rc = dm_read_span(ctx, rx_model_addr(r, word), &h, sizeof(h));
    if (rc) return rc;
    /* Another version, or a header torn by its rewrite: the word moved on since it was read. */
    if (h.magic != RX_MODEL_MAGIC || h.version != word >> 1) return DM_ERETRY;
    if (h.root != r->root || !h.entries || !h.segments || h.segments > h.entries ||
        h.entries < r->hdr.primaries || h.entries > r->hdr.capacity)
        return DM_ERETRY; /* torn as well: the sum decides once it fits the slot */
    uint64_t sb = RX_SEG_BYTES * h.segments, lb = RX_LT_BYTES * h.entries;
    uint8_t *buf = malloc(sb + lb);
    rx_seg_t *segs = malloc(sb);
    rx_lt_t *lt = malloc(lb);
    rc = buf && segs && lt ? dm_read_span(ctx, rx_model_addr(r, word) + RX_MODEL_HDR, buf, sb + lb)
                           : DM_ENOMEM;
    if (!rc && rx_model_sum(&h, buf, sb + lb) != h.sum) rc = DM_ERETRY; /* being rewritten */
    if (!rc) {
        memcpy(segs, buf, sb);
        memcpy(lt, buf + sb, lb);
        for (uint64_t j = 0; j < h.entries && !rc; j++)
            if (lt[j].leaf >= r->hdr.capacity || lt[j].head >= r->hdr.primaries)
                rc = RX_CORRUPT("model version %llu: LT entry %llu names leaf %u, head %u",
                                (unsigned long long)h.version, (unsigned long long)j, lt[j].leaf,
                                lt[j].head);
    }
    free(buf);
    if (rc) {
        free(segs), free(lt);
        return rc;
    }
    free(r->segs), free(r->lt);
    r->segs = segs, r->lt = lt, r->model = word;
    r->hdr.entries = h.entries, r->hdr.segments = h.segments, r->hdr.version = h.version;
    r->hdr.taken = h.taken;
    rx_pos_build(r); /* out of memory: scans read leaf by leaf */
    return 0;
}

int dm_rolex_open(dm_ctx_t *ctx, dm_gaddr_t root, dm_rolex_t **out)
{
    dm_rolex_t *r = calloc(1, sizeof(*r));
    if (!r) return DM_ENOMEM;
    r->root = root;
    rx_root_t h;
    int rc = dm_read_span(ctx, root, &h, sizeof(h));
    if (!rc && (h.magic != RX_MAGIC || !h.primaries || h.primaries > h.capacity ||
                h.eps > RX_EPS_MAX || !(h.model >> 1) || !h.arena))
        rc = RX_CORRUPT("open: root %#llx: magic %#llx, primaries %llu, capacity %llu, eps "
                        "%llu, model word %#llx, arena %#llx",
                        (unsigned long long)root, (unsigned long long)h.magic,
                        (unsigned long long)h.primaries, (unsigned long long)h.capacity,
                        (unsigned long long)h.eps, (unsigned long long)h.model,
                        (unsigned long long)h.arena);
    if (!rc) {
        r->hdr = (rx_view_t){.primaries = h.primaries,
                             .eps = h.eps,
                             .region = h.region,
                             .capacity = h.capacity,
                             .arena = h.arena};
        rc = rx_sync_model(ctx, r, h.model);
        rc = rc == 1 ? 0
             : rc    ? rc
                     : RX_CORRUPT("open: root %#llx: no model loaded", (unsigned long long)root);
    }
    if (rc) {
        dm_rolex_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

void dm_rolex_close(dm_rolex_t *r)
{
    if (!r) return;
    free(r->segs);
    free(r->lt);
    free(r->pos_of);
    free(r->slt);
    free(r->dom);
    free(r);
}

int dm_rolex_leaf_counts(dm_ctx_t *ctx, dm_rolex_t *r, uint64_t *primaries, uint64_t *synonyms)
{
    uint64_t used;
    int rc = dm_read_span(ctx, r->root + RX_OFF_ALLOC, &used, 8);
    if (rc) return rc;
    *primaries = r->hdr.primaries;
    *synonyms = (used < r->hdr.capacity ? used : r->hdr.capacity) - r->hdr.primaries;
    return 0;
}
