/* Hosting ROLEX's retraining on the memory node (§3.5, §4.6: "the memory pool assigns
 * retraining threads"): the record of which root a memory node retrains (node 0's superblock
 * word rolex_root), the trigger, and one step of the host's loop (memnode/mn_retrainer.c runs it
 * on a `local` worker over the node's own region, the one piece of index code a memory node
 * runs; tests run it on any worker).
 *
 * Two triggers. The paper's compute nodes append a model to a queue (CirQ) once it used 2^7
 * SLT slots: one chain grew long. Here the host polls the root's alloc_num (synonym leaves
 * taken, an in-process read on the memory node) and retrains once it grew by max(64, LT
 * entries / 8) since the leaves the current model's chains were read at (its header's
 * `taken`), at most once per DM_ROLEX_RETRAIN_GAP_US. Whole-index retraining reads every leaf,
 * so the bar grows with the LT: retraining costs about 8 leaf reads per new leaf, and a search
 * through a model that misses 1/8 of the leaves pays a hop on about 1/8 of the keys at most
 * when the new leaves are spread. They are not when keys arrive past the model's last entry
 * or into one narrow range: all of them go to one chain, every insert walks it leaf by leaf,
 * and at 90,000 LT entries the bar let that chain reach thousands of leaves (bench/engines.sh,
 * 10M keys: 28 inserts/s, 920 round trips each). So writers ask too, as the paper's do: a
 * walk of RX_ASK_WALK leaves or more under a lock adds 1 to the model header's asks word
 * (an FAA posted without waiting, once per handle and model) when the leaves it read hold
 * more than one 8-byte image, and the host retrains a model that was asked for as soon as
 * any leaf was taken since it: an asked retrain starts 4 times the last one's duration after
 * that one's start or later, a quarter of the host's time at most (retraining reads every
 * leaf: 3 s at 700,000).
 * An ask that lands late, on the slot's next model, costs one retrain early at most. A run
 * of one image (key:__rand_int__) asks nothing: no model splits it. */
#include "dmkv/rolex.h"

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"

#include <string.h>

#include "rolex_internal.h"

uint64_t rx_retrain_asks;

int dm_rolex_retrain_due(uint64_t taken, uint64_t base, uint64_t entries, uint64_t asks,
                         uint64_t now_us, uint64_t last_us)
{
    if (last_us && now_us - last_us < DM_ROLEX_RETRAIN_GAP_US) return 0;
    uint64_t need = entries / 8 > DM_ROLEX_RETRAIN_MIN ? entries / 8 : DM_ROLEX_RETRAIN_MIN;
    return taken > base && (asks || taken - base >= need);
}

void rx_ask_retrain(dm_ctx_t *ctx, dm_rolex_t *r, const rx_leaf_t *v, uint64_t n)
{
    if (n < RX_ASK_WALK || r->pinned || r->asked == r->model) return;
    uint64_t i = 0, j = n; /* the first and one past the last non-empty leaf */
    while (i < n && !v[i].count)
        i++;
    while (j > i && !v[j - 1].count)
        j--;
    if (j <= i || rx_eimage(&v[i].e[0]) == rx_eimage(&v[j - 1].e[v[j - 1].count - 1]))
        return; /* one image: a retrain would not shorten the walk */
    r->asked = r->model;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_faa(&b, rx_model_addr(r, r->model) + offsetof(rx_mhdr_t, asks), 1);
    if (!dm_batch_post_async(ctx, &b)) /* lost: the bar on leaves taken still holds */
        __atomic_fetch_add(&rx_retrain_asks, 1, __ATOMIC_RELAXED);
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
static dm_gaddr_t model_at(const rx_root_t *rt)
{
    return rt->arena + (rt->model & 1) * rx_slot_bytes(rt->capacity);
}

static int host_model(dm_ctx_t *ctx, dm_rolex_host_t *h, const rx_root_t *rt)
{
    if (rt->model == h->model) return 0;
    rx_mhdr_t m;
    int rc = dm_read_span(ctx, model_at(rt), &m, sizeof(m));
    if (rc) return rc;
    if (m.magic != RX_MODEL_MAGIC || m.version != rt->model >> 1 || m.root != h->root)
        return RX_CORRUPT("host: model word %#llx names a slot of magic %#llx, version %llu, "
                          "root %#llx",
                          (unsigned long long)rt->model, (unsigned long long)m.magic,
                          (unsigned long long)m.version, (unsigned long long)m.root);
    h->model = rt->model, h->taken = m.taken, h->entries = m.entries;
    return 0;
}

int dm_rolex_host_step(dm_ctx_t *ctx, dm_rolex_host_t *h)
{
    rx_root_t rt;
    int rc = dm_read_span(ctx, h->root, &rt, sizeof(rt));
    if (rc) return rc;
    if (rt.magic != RX_MAGIC || !rt.arena)
        return RX_CORRUPT("host: root %#llx: magic %#llx, arena %#llx", (unsigned long long)h->root,
                          (unsigned long long)rt.magic, (unsigned long long)rt.arena);
    rc = host_model(ctx, h, &rt);
    if (rc) return rc;
    uint64_t asks = 0; /* the writers' asks of the current model (rx_ask_retrain) */
    rc = dm_read_span(ctx, model_at(&rt) + offsetof(rx_mhdr_t, asks), &asks, 8);
    if (rc) return rc;
    uint64_t taken = rt.alloc_num < rt.capacity ? rt.alloc_num : rt.capacity, t0 = dm_now_us();
    if (h->last_us && t0 - h->last_us < 4 * h->last_us_taken) asks = 0; /* duty cycle */
    if (!dm_rolex_retrain_due(taken, h->taken, h->entries, asks, t0, h->last_us)) return 0;
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
    if (asks && !dm_rolex_retrain_due(taken, h->taken, h->entries, 0, t0, 0))
        h->asked++; /* the bar on leaves taken alone would have waited */
    if (us > h->max_us) h->max_us = us;
    h->last = st;
    return 1;
}
