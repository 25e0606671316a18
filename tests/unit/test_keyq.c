/* Per-key write queues (dmcore/kv/keyq.c) tell keys apart by their bytes, not by their
 * 64-bit hash: two keys whose hashes collide must not wait for (or be absorbed into) each
 * other. Run without coroutines, so a wrongly queued entry would wait forever: the alarm
 * turns that into a failure. */
#include <signal.h>
#include <unistd.h>

#include "../dmcore/kv/keyq.h"
#include "harness.h"
#include "worker_util.h"

static void test_colliding_keys(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    dm_worker_t *w = worker_on(&loop, "local:keyq");
    /* Two plain SETs of different keys forced onto one hash. */
    dm_keyq_entry_t a = {.hash = 42, .key = "alpha", .klen = 5, .blind = 1};
    dm_keyq_entry_t b = {.hash = 42, .key = "beta", .klen = 4, .blind = 1};
    CHECK(dm_keyq_enter(w, &a) == 1);
    alarm(5); /* queued behind a: never woken, the test dies here */
    CHECK(dm_keyq_enter(w, &b) == 1);
    alarm(0);
    dm_keyq_leave(w, &b, 1);
    dm_keyq_leave(w, &a, 1);
    CHECK(!a.absorbed && !b.absorbed);
    /* The same key is still one queue: a second entry of "alpha" after a left runs too. */
    dm_keyq_entry_t a2 = {.hash = 42, .key = "alpha", .klen = 5, .blind = 1};
    CHECK(dm_keyq_enter(w, &a2) == 1);
    dm_keyq_leave(w, &a2, 1);
    dm_worker_destroy(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

int main(void)
{
    RUN(test_colliding_keys);
    return 0;
}
