/* ROLEX as the range role, the whole-index operations: a new empty index, FLUSHALL's settle
 * of every chain, reset (dmkv-index-rebuild), the offline walk of its objects
 * (dmkv-pool-reclaim) and INFO's statistics. */
#include "rolex_range.h"

#include <stdlib.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/key_record.h"
#include "dmkv/superblock.h"

#define RR_LEAVES_MIN 16384u /* leaves of a new index on a small node 0: 13 MB */
#define RR_NODE_SHARE 8u     /* a new index takes up to 1/8 of node 0 for its leaves */

static uint64_t create_leaves; /* dm_rolex_set_create_leaves; 0: by node 0's size */

int dm_rolex_set_create_leaves(uint64_t leaves)
{
    if (leaves == 1 || leaves > RR_CURSOR_LEAVES) return DM_EINVAL;
    create_leaves = leaves;
    return 0;
}

/* Leaves a new index reserves: the gateway's --rolex-leaves, else an eighth of node 0's
 * region (a leaf and its two arena entries take 912 bytes: 1 GiB gives 147k leaves, about
 * 1.2-2.3M keys), at least RR_LEAVES_MIN where node 0 has four times that, never more than
 * a cursor can name. ROLEX's leaf regions are reserved whole, as the paper's are. */
static uint64_t leaves_for(dm_ctx_t *ctx)
{
    if (create_leaves) return create_leaves;
    const uint64_t per_leaf = RX_LEAF_BYTES + 2 * (RX_SEG_BYTES + RX_LT_BYTES);
    uint64_t node0 = ctx->w->conns[0]->region_size, leaves = node0 / RR_NODE_SHARE / per_leaf;
    if (leaves < RR_LEAVES_MIN) leaves = RR_LEAVES_MIN;
    if (leaves > node0 / 4 / per_leaf) leaves = node0 / 4 / per_leaf;
    if (leaves < 2) leaves = 2;
    return leaves > RR_CURSOR_LEAVES ? RR_CURSOR_LEAVES : leaves;
}

int rr_build_empty(dm_ctx_t *ctx, dm_gaddr_t *root)
{
    /* A full region fails inserts with DM_EINDEXFULL (it does not grow: docs/DESIGN.md). */
    uint64_t leaves = leaves_for(ctx);
    dm_rolex_cfg_t cfg = {.eps = 1, .fill = 12, .spare = leaves - 1, .node0 = 1};
    return dm_rolex_build(ctx, NULL, NULL, 0, &cfg, root);
}

int64_t rr_settle_all(dm_ctx_t *ctx)
{
    rr_role_t *rr = rr_of(ctx->w);
    if (!rr) return DM_EINVAL;
    int64_t removed = 0;
    for (uint64_t h = 0; h < rr->r->hdr.primaries; h++) {
        /* Stretch by stretch (rolex/domain.c): each under the lock its first leaf's label
         * names, read lock-free first; a label a cut changed meanwhile ends the stretch at
         * once, and that leaf is looked at again. */
        for (dm_gaddr_t at = rx_leaf_addr(rr->r, h); at;) {
            rx_leaf_t l;
            uint64_t head;
            int rc = rx_read_leaf(ctx, at, &l);
            if (!rc && rx_dom_label_bad(rr->r, l.label))
                rc = RX_CORRUPT("leaf at %#llx: label %u", (unsigned long long)at, l.label);
            if (rc) return rc;
            head = rx_dom_head(l.label, h);
            rx_hold_t hd;
            uint64_t af;
            int took;
            rc = rr_take(ctx, rx_leaf_addr(rr->r, head), &hd, NULL, 0, NULL, NULL, &took, &af);
            if (rc) return rc;
            dm_gaddr_t beyond;
            int64_t n = rr_settle_chain(ctx, rr, at, l.label, 1, 1, &hd, &af, &beyond);
            rx_unlock(ctx, &hd);
            if (n < 0) return n;
            removed += n;
            at = beyond;
        }
    }
    return removed;
}

int rr_reset(dm_ctx_t *ctx)
{
    rr_role_t *rr = rr_of(ctx->w);
    if (!rr) return DM_EINVAL;
    /* Offline: a new empty index replaces the recorded one in node 0's rolex_root (CAS from
     * the old root). The old one is left to dmkv-pool-reclaim; a memory node hosting it goes
     * on retraining it until it restarts (mn_retrainer reads rolex_root once). */
    dm_gaddr_t old = rr->r->root, root;
    int rc = rr_build_empty(ctx, &root);
    if (rc) return rc;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *cas = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), old, root);
    rc = dm_batch_exec(ctx, &b);
    if (!rc && cas->result != old) rc = DM_ECONFLICT;
    dm_rolex_t *nr = NULL;
    if (!rc) rc = dm_rolex_open(ctx, root, &nr);
    if (rc) return rc;
    dm_rolex_close(rr->r);
    rr->r = nr;
    rr_note_model(nr);
    return 0;
}

/* The key records the live chains name (long entries), each once, into *recs (malloc'd):
 * the leaves taken so far read in spans of 64, the chains followed from the heads in
 * memory. An unreadable leaf is DM_ECORRUPT: a reclaim must not free what it cannot see. */
static int chain_records(dm_ctx_t *ctx, const dm_rolex_t *r, dm_gaddr_t **recs, size_t *nrec)
{
    uint64_t used;
    int rc = dm_read_span(ctx, r->root + RX_OFF_ALLOC, &used, 8);
    if (rc) return rc;
    used = used < r->hdr.capacity ? used : r->hdr.capacity;
    rx_leaf_t *v = malloc((used ? used : 1) * sizeof(*v));
    size_t cap = 0;
    *recs = NULL, *nrec = 0;
    if (!v) return DM_ENOMEM;
    for (uint64_t i = 0; !rc && i < used; i += 64) {
        uint64_t k = used - i < 64 ? used - i : 64;
        rc = dm_read_span(ctx, rx_leaf_addr(r, i), &v[i], k * RX_LEAF_BYTES);
    }
    for (uint64_t h = 0; !rc && h < r->hdr.primaries; h++) {
        uint64_t i = h;
        for (unsigned hops = 0; !rc; hops++) {
            if (hops >= RX_CHAIN_MAX || i >= used || !rx_leaf_ok(&v[i])) {
                rc = RX_CORRUPT("records: chain of head %llu: leaf %llu (%llu taken)%s",
                                (unsigned long long)h, (unsigned long long)i,
                                (unsigned long long)used,
                                i < used && !rx_leaf_ok(&v[i]) ? " torn" : "");
                break;
            }
            for (unsigned e = 0; !rc && e < v[i].count; e++) {
                if (!rx_elong(&v[i].e[e])) continue;
                if (*nrec == cap) {
                    cap = cap ? 2 * cap : 64;
                    dm_gaddr_t *n = realloc(*recs, cap * sizeof(*n));
                    if (!n) rc = DM_ENOMEM;
                    if (n) *recs = n;
                }
                if (!rc) (*recs)[(*nrec)++] = rx_erec(&v[i].e[e]);
            }
            dm_gaddr_t nx = v[i].next;
            if (!nx) break;
            uint64_t off = nx - r->hdr.region;
            if (nx < r->hdr.region || off % RX_LEAF_BYTES)
                rc = RX_CORRUPT("records: leaf %llu's next %#llx", (unsigned long long)i,
                                (unsigned long long)nx);
            i = off / RX_LEAF_BYTES;
        }
    }
    free(v);
    if (rc) {
        free(*recs);
        *recs = NULL, *nrec = 0;
    }
    return rc;
}

static int cmp_gaddr(const void *a, const void *b)
{
    dm_gaddr_t x = *(const dm_gaddr_t *)a, y = *(const dm_gaddr_t *)b;
    return x < y ? -1 : x > y;
}

int rr_objects(dm_ctx_t *ctx, dm_index_object_fn fn, void *arg)
{
    dm_gaddr_t root = 0;
    int rc = dm_read_span(ctx, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), &root, 8);
    if (rc || !root) return rc;
    dm_rolex_t *r;
    rc = dm_rolex_open(ctx, root, &r);
    if (rc) return rc;
    /* Three blocks: leaves never leave their region, models never leave their arena. */
    rc = fn(arg, root, dm_alloc_block_bytes(RX_ROOT_BYTES));
    if (!rc) rc = fn(arg, r->hdr.region, dm_alloc_block_bytes(r->hdr.capacity * RX_LEAF_BYTES));
    if (!rc) rc = fn(arg, r->hdr.arena, dm_alloc_block_bytes(2 * rx_slot_bytes(r->hdr.capacity)));
    /* And the key records of long keys, sized from their headers (as CHIME's): one that
     * cannot be read as a record counts one unit, so no damage frees memory around it. */
    dm_gaddr_t *recs = NULL;
    size_t n = 0, d = 0;
    if (!rc) rc = chain_records(ctx, r, &recs, &n);
    if (n) qsort(recs, n, sizeof(*recs), cmp_gaddr);
    for (size_t i = 0; i < n; i++) /* a shift's copy names one record twice */
        if (!d || recs[d - 1] != recs[i]) recs[d++] = recs[i];
    for (size_t i = 0; !rc && i < d; i += DM_BATCH_MAX) {
        size_t k = d - i < DM_BATCH_MAX ? d - i : DM_BATCH_MAX;
        uint32_t hdr[DM_BATCH_MAX][DM_KEYREC_HDR / 4];
        dm_batch_t b;
        dm_batch_init(&b);
        for (size_t j = 0; j < k; j++)
            dm_batch_read(&b, recs[i + j], hdr[j], DM_KEYREC_HDR);
        rc = dm_batch_exec(ctx, &b);
        for (size_t j = 0; j < k && !rc; j++) {
            uint64_t len = DM_UNIT;
            if (hdr[j][0] == DM_KEYREC_MAGIC && hdr[j][1] <= DM_ROLEX_KEY_MAX)
                len = dm_keyrec_bytes(hdr[j][1]);
            rc = fn(arg, recs[i + j], len);
        }
    }
    free(recs);
    dm_rolex_close(r);
    return rc;
}

size_t rr_stats_get(dm_index_stat_t *out)
{
    dm_rolex_stats_t s;
    dm_rolex_stats(&s);
    rr_counters_t c;
    c.model_version = __atomic_load_n(&rr_stats.model_version, __ATOMIC_RELAXED);
    c.lt_entries = __atomic_load_n(&rr_stats.lt_entries, __ATOMIC_RELAXED);
    c.leaves_seen = __atomic_load_n(&rr_stats.leaves_seen, __ATOMIC_RELAXED);
    c.leaf_capacity = __atomic_load_n(&rr_stats.leaf_capacity, __ATOMIC_RELAXED);
    c.lock_waits = __atomic_load_n(&rr_stats.lock_waits, __ATOMIC_RELAXED);
    c.takeovers = __atomic_load_n(&rr_stats.takeovers, __ATOMIC_RELAXED);
    c.settled = __atomic_load_n(&rr_stats.settled, __ATOMIC_RELAXED);
    c.removed = __atomic_load_n(&rr_stats.removed, __ATOMIC_RELAXED);
    c.scan_leaves = __atomic_load_n(&rr_stats.scan_leaves, __ATOMIC_RELAXED);
    c.too_long = __atomic_load_n(&rr_stats.too_long, __ATOMIC_RELAXED);
    size_t n = 0;
    out[n++] = dm_index_count("rolex_model_version", c.model_version);
    out[n++] = dm_index_count("rolex_lt_entries", c.lt_entries);
    out[n++] = dm_index_count("rolex_leaves_seen", c.leaves_seen);
    out[n++] = dm_index_count("rolex_leaf_capacity", c.leaf_capacity);
    out[n++] = dm_index_count("rolex_leaves_taken", s.leaves_taken);
    out[n++] = dm_index_count("rolex_models_noticed", s.models_noticed);
    out[n++] = dm_index_count("rolex_model_loads", s.model_loads);
    out[n++] = dm_index_count("rolex_model_load_failures", s.model_load_failures);
    out[n++] = dm_index_count("rolex_lock_waits", c.lock_waits);
    out[n++] = dm_index_count("rolex_lease_takeovers", c.takeovers);
    out[n++] = dm_index_count("rolex_entries_settled", c.settled);
    out[n++] = dm_index_count("rolex_entries_removed", c.removed);
    out[n++] = dm_index_count("rolex_scan_leaves", c.scan_leaves);
    out[n++] = dm_index_count("rolex_keys_too_long", c.too_long);
    out[n++] = dm_index_count("rolex_key_records_written",
                              __atomic_load_n(&rx_recs_written, __ATOMIC_RELAXED));
    out[n++] = dm_index_count("rolex_key_records_freed",
                              __atomic_load_n(&rx_recs_freed, __ATOMIC_RELAXED));
    out[n++] =
        dm_index_count("rolex_retrain_asks", __atomic_load_n(&rx_retrain_asks, __ATOMIC_RELAXED));
    out[n++] = dm_index_count("rolex_domain_cuts", __atomic_load_n(&rx_dom_cuts, __ATOMIC_RELAXED));
    out[n++] = dm_index_count("rolex_domain_switches",
                              __atomic_load_n(&rx_dom_switches, __ATOMIC_RELAXED));
    out[n++] =
        dm_index_count("rolex_domain_passes", __atomic_load_n(&rx_dom_passes, __ATOMIC_RELAXED));
    out[n++] =
        dm_index_count("rolex_slt_run_skips", __atomic_load_n(&rx_slt_skips, __ATOMIC_RELAXED));
    return n;
}
