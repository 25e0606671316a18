/* Fencing a lease holder (dmkv/fence.h). */
#include "dmkv/fence.h"

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/lease.h"
#include "dmkv/log.h"
#include "dmkv/superblock.h"
#include "dmkv/transport.h"

static uint64_t fences;

uint64_t dm_fence_count(void)
{
    return __atomic_load_n(&fences, __ATOMIC_RELAXED);
}

static dm_gaddr_t box_word(unsigned node, unsigned entry, unsigned word)
{
    return dm_gaddr_make(node, DM_SB_OFF(fence_box) + (2 * entry + word) * sizeof(uint64_t));
}

int dm_lease_takeover_ready(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t word, uint32_t lease_ms)
{
    if (dm_lease_observed_us(addr, word) <= (uint64_t)lease_ms * 1000) return 0;
    /* One fence per word per thread; while it runs, the others wait. */
    static _Thread_local struct {
        dm_gaddr_t addr;
        uint64_t word, at_us;
        int done;
    } last;
    uint64_t now = dm_now_us();
    if (last.addr == addr && last.word == word && last.at_us &&
        now - last.at_us < (uint64_t)DM_FENCE_WAIT_MS * 3000)
        return last.done;
    last.addr = addr;
    last.word = word;
    last.at_us = now;
    last.done = 0;
    int rc = dm_fence_holder(ctx, dm_gaddr_node(addr), dm_lease_holder(word));
    if (last.addr == addr && last.word == word) {
        last.done = rc == 0;
        if (rc) last.at_us = 0;
    }
    return rc == 0;
}

int dm_fence_holder(dm_ctx_t *ctx, unsigned node, uint16_t holder)
{
    dm_conn_t *conn = node < ctx->w->n_nodes ? ctx->w->conns[node] : NULL;
    if (!holder || holder == dm_holder_id() || !conn || !(conn->caps & DM_CAP_FENCE)) return 0;
    /* A nonce per request, so that an ack left from an earlier request never passes. */
    uint64_t req = (dm_now_us() << 16 | holder) & ~(0xffffull << 48);
    req |= (uint64_t)(dm_holder_id() & 0xff) << 48 | 1ull << 63;
    unsigned entry = holder % DM_FENCE_BOX;
    uint64_t t0 = dm_now_us();
    for (;;) { /* claim a free entry */
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, box_word(node, entry, 0), 0, req);
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        if (v->result == 0) break;
        entry = (entry + 1) % DM_FENCE_BOX;
        if (dm_now_us() - t0 > (uint64_t)DM_FENCE_WAIT_MS * 1000) return DM_ETIMEDOUT;
        if (entry == holder % DM_FENCE_BOX) dm_ctx_sleep(ctx, 1000); /* all busy */
    }
    int rc = DM_ETIMEDOUT;
    for (;;) {
        uint64_t ack = 0;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, box_word(node, entry, 1), &ack, sizeof(ack));
        int erc = dm_batch_exec(ctx, &b);
        if (erc) {
            rc = erc;
            break;
        }
        if (ack == req) {
            rc = 0;
            break;
        }
        if (dm_now_us() - t0 > (uint64_t)DM_FENCE_WAIT_MS * 1000) break;
        dm_ctx_sleep(ctx, 1000);
    }
    dm_batch_t b; /* free the entry (from our request only) */
    dm_batch_init(&b);
    dm_batch_cas(&b, box_word(node, entry, 0), req, 0);
    dm_batch_post_async(ctx, &b);
    if (rc == 0) {
        __atomic_fetch_add(&fences, 1, __ATOMIC_RELAXED);
        dm_log(DM_LOG_VERBOSE, "memory node %u cut the connections of lease holder %u", node,
               (unsigned)holder);
    } else {
        dm_log(DM_LOG_WARNING,
               "memory node %u did not fence lease holder %u (%s): takeover deferred", node,
               (unsigned)holder, dm_strerror(rc));
    }
    return rc;
}
