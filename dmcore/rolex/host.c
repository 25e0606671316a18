/* Hosting ROLEX's retraining on the memory node (§3.5, §4.6: "the memory pool assigns
 * retraining threads"): the record of which root a memory node retrains (node 0's superblock
 * word rolex_root), the trigger, and one step of the host's loop (memnode/mn_retrainer.c runs it
 * on a `local` worker over the node's own region, the one piece of index code a memory node
 * runs; tests run it on any worker).
 *
 * The trigger needs no gateway: the paper's compute nodes append a model to a queue (CirQ) once
 * it used 2^7 SLT slots; here the host polls the root's alloc_num (synonym leaves taken, an
 * in-process read on the memory node) and retrains once it grew by max(64, LT entries / 8)
 * since the leaves the current model's chains were read at (its header's `taken`), at most once
 * per DM_ROLEX_RETRAIN_GAP_US. Whole-index retraining reads every leaf, so the bar grows with
 * the LT: retraining costs about 8 leaf reads per new leaf, and a search through a model that
 * misses 1/8 of the leaves pays a hop on about 1/8 of the keys at most. */
#include "dmkv/rolex.h"

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"

#include <string.h>

#include "rolex_internal.h"

int dm_rolex_retrain_due(uint64_t taken, uint64_t base, uint64_t entries, uint64_t now_us,
                         uint64_t last_us)
{
    if (last_us && now_us - last_us < DM_ROLEX_RETRAIN_GAP_US) return 0;
    uint64_t need = entries / 8 > DM_ROLEX_RETRAIN_MIN ? entries / 8 : DM_ROLEX_RETRAIN_MIN;
    return taken > base && taken - base >= need;
}

int dm_rolex_host_record(dm_ctx_t *ctx, dm_gaddr_t root)
{
    dm_rolex_t *r;
    int rc = dm_rolex_open(ctx, root, &r);
    if (rc) return rc;
    /* Node 0's memory node hosts it: root, leaf region and arena must be in its region. */
    int local =
        !dm_gaddr_node(root) && !dm_gaddr_node(r->hdr.region) && !dm_gaddr_node(r->hdr.arena);
    dm_rolex_close(r);
    if (!local) return DM_EINVAL;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *cas = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(rolex_root)), 0, root);
    rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    return cas->result == 0 || cas->result == root ? 0 : DM_ECONFLICT;
}

void dm_rolex_host_init(dm_rolex_host_t *h, dm_gaddr_t root)
{
    memset(h, 0, sizeof(*h));
    h->root = root;
}

/* The current model's taken and entries, from its header, when the word moved (1 RTT). Only
 * the host writes slots, so the slot the word names is whole. */
static int host_model(dm_ctx_t *ctx, dm_rolex_host_t *h, const rx_root_t *rt)
{
    if (rt->model == h->model) return 0;
    rx_mhdr_t m;
    dm_gaddr_t at = rt->arena + (rt->model & 1) * rx_slot_bytes(rt->capacity);
    int rc = dm_read_span(ctx, at, &m, sizeof(m));
    if (rc) return rc;
    if (m.magic != RX_MODEL_MAGIC || m.version != rt->model >> 1 || m.root != h->root)
        return DM_ECORRUPT;
    h->model = rt->model, h->taken = m.taken, h->entries = m.entries;
    return 0;
}

int dm_rolex_host_step(dm_ctx_t *ctx, dm_rolex_host_t *h)
{
    rx_root_t rt;
    int rc = dm_read_span(ctx, h->root, &rt, sizeof(rt));
    if (rc) return rc;
    if (rt.magic != RX_MAGIC || !rt.arena) return DM_ECORRUPT;
    rc = host_model(ctx, h, &rt);
    if (rc) return rc;
    uint64_t taken = rt.alloc_num < rt.capacity ? rt.alloc_num : rt.capacity, t0 = dm_now_us();
    if (!dm_rolex_retrain_due(taken, h->taken, h->entries, t0, h->last_us)) return 0;
    h->last_us = t0;
    dm_rolex_retrain_stats_t st;
    rc = rx_retrain(ctx, h->root, 1, &st);
    uint64_t us = dm_now_us() - t0;
    h->last_rc = rc;
    if (rc) {
        h->failures++;
        return rc;
    }
    h->retrains++, h->total_us += us, h->last_us_taken = us;
    if (us > h->max_us) h->max_us = us;
    h->last = st;
    return 1;
}
