/* Fence mailbox of a memory node (mn_fence.h). */
#include "mn_fence.h"

#include <stddef.h>

#include "dmkv/log.h"
#include "dmkv/superblock.h"

/* Carry out every pending request. */
static void poll_box(mn_fence_t *f)
{
    uint64_t *box = (uint64_t *)(f->base + DM_SB_OFF(fence_box));
    for (unsigned i = 0; i < DM_FENCE_BOX; i++) {
        /* Gateways change these words with one-sided verbs (rdma: the device, meanwhile). */
        uint64_t req = __atomic_load_n(&box[2 * i], __ATOMIC_ACQUIRE);
        if (!req || __atomic_load_n(&box[2 * i + 1], __ATOMIC_ACQUIRE) == req) continue;
        uint16_t holder = (uint16_t)(req & 0xffff);
        unsigned n = holder ? f->cut(f->arg, holder) : 0;
        dm_log(DM_LOG_NOTICE, "Fenced holder %u on request: %u connection(s) cut", holder, n);
        __atomic_store_n(&box[2 * i + 1], req, __ATOMIC_RELEASE); /* after the cut */
    }
}

static void on_timer(uv_timer_t *t)
{
    poll_box(t->data);
}

static void on_check(uv_check_t *c)
{
    poll_box(c->data);
}

int mn_fence_start(mn_fence_t *f, uv_loop_t *loop, uint8_t *base, int device_writes,
                   mn_fence_cut_fn cut, void *arg)
{
    f->base = base;
    f->cut = cut;
    f->arg = arg;
    f->timer_on = 0;
    int rc = uv_check_init(loop, &f->check);
    if (rc) return rc;
    f->check.data = f;
    rc = uv_check_start(&f->check, on_check);
    if (rc || !device_writes) return rc;
    rc = uv_timer_init(loop, &f->timer);
    if (rc) return rc;
    f->timer_on = 1;
    f->timer.data = f;
    return uv_timer_start(&f->timer, on_timer, MN_FENCE_POLL_MS, MN_FENCE_POLL_MS);
}

void mn_fence_stop(mn_fence_t *f)
{
    if (!uv_is_closing((uv_handle_t *)&f->check)) uv_close((uv_handle_t *)&f->check, NULL);
    if (f->timer_on && !uv_is_closing((uv_handle_t *)&f->timer))
        uv_close((uv_handle_t *)&f->timer, NULL);
}
