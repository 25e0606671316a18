/* End-of-turn hook for doorbell batching (docs/throughput.md): a transport arms it when it
 * queues the first batch of a loop turn, and fn runs once, after the turn's I/O callbacks
 * (uv_check) or, for batches queued from timers and idle callbacks, before the loop next
 * polls (uv_prepare), to send everything queued as one message. */
#ifndef DMKV_FLUSH_HOOK_H
#define DMKV_FLUSH_HOOK_H

#include <uv.h>

typedef struct dm_flush_hook dm_flush_hook_t;
typedef void (*dm_flush_fn)(dm_flush_hook_t *h);

struct dm_flush_hook {
    uv_check_t check;
    uv_prepare_t prepare;
    dm_flush_fn fn;
};

/* Initialise both handles on loop; their data field is set to data (for the owner's close
 * callback). Not armed. */
void dm_flush_hook_init(uv_loop_t *loop, dm_flush_hook_t *h, dm_flush_fn fn, void *data);
/* Run fn at the end of this turn (idempotent). fn runs disarmed; it may arm again. */
void dm_flush_hook_arm(dm_flush_hook_t *h);
/* Close both handles: cb runs twice, once per handle (count them as two handles). */
void dm_flush_hook_close(dm_flush_hook_t *h, uv_close_cb cb);

#endif
