/* End-of-turn hook (flush_hook.h). */
#include "dmkv/flush_hook.h"

#include <stddef.h>

static void fire(dm_flush_hook_t *h)
{
    uv_check_stop(&h->check);
    uv_prepare_stop(&h->prepare);
    h->fn(h);
}

static void on_check(uv_check_t *c)
{
    fire((dm_flush_hook_t *)((char *)c - offsetof(dm_flush_hook_t, check)));
}

static void on_prepare(uv_prepare_t *p)
{
    fire((dm_flush_hook_t *)((char *)p - offsetof(dm_flush_hook_t, prepare)));
}

void dm_flush_hook_init(uv_loop_t *loop, dm_flush_hook_t *h, dm_flush_fn fn, void *data)
{
    uv_check_init(loop, &h->check);
    uv_prepare_init(loop, &h->prepare);
    h->check.data = h->prepare.data = data;
    h->fn = fn;
}

void dm_flush_hook_arm(dm_flush_hook_t *h)
{
    if (uv_is_active((uv_handle_t *)&h->check)) return;
    uv_check_start(&h->check, on_check);
    uv_prepare_start(&h->prepare, on_prepare);
}

void dm_flush_hook_close(dm_flush_hook_t *h, uv_close_cb cb)
{
    uv_close((uv_handle_t *)&h->check, cb);
    uv_close((uv_handle_t *)&h->prepare, cb);
}
