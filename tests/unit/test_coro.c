/* Coroutines: interleaving, many live at once, stacks reused, resume from callbacks. */
#include <stdint.h>
#include <string.h>

#include "dmkv/coro.h"
#include "harness.h"

static dm_coro_t *waiting[1000];
static int trace[16], ntrace;

static void step(void *arg)
{
    int id = (int)(intptr_t)arg;
    trace[ntrace++] = id;
    waiting[id] = dm_coro_self();
    dm_coro_yield();
    trace[ntrace++] = 10 + id;
}

static void test_interleave(void)
{
    CHECK(dm_coro_self() == NULL);
    dm_coro_t *a = dm_coro_spawn(step, (void *)1);
    dm_coro_t *b = dm_coro_spawn(step, (void *)2);
    CHECK(a && b && a != b && dm_coro_live() == 2);
    dm_coro_resume(b);
    dm_coro_resume(a);
    int want[] = {1, 2, 12, 11};
    CHECK(ntrace == 4 && memcmp(trace, want, sizeof(want)) == 0);
    CHECK(dm_coro_live() == 0);
}

static void quick(void *arg)
{
    (*(int *)arg)++;
}

static void deep(void *arg)
{
    /* Use a good part of the stack: command handlers keep buffers on it. */
    char buf[64 << 10];
    memset(buf, (int)(intptr_t)arg, sizeof(buf));
    waiting[(intptr_t)arg] = dm_coro_self();
    dm_coro_yield();
    for (size_t i = 0; i < sizeof(buf); i++)
        CHECK(buf[i] == (char)(intptr_t)arg);
}

#if defined(__SANITIZE_THREAD__)
#define ROUNDS 10000 /* every spawn is a fresh TSan fiber: ~2 ms each on a CI machine */
#else
#define ROUNDS 100000
#endif

static void test_many(void)
{
    int n = 0;
    CHECK(dm_coro_spawn(quick, &n) == NULL && n == 1); /* finished at once */
    for (int i = 0; i < 1000; i++)
        dm_coro_spawn(deep, (void *)(intptr_t)i);
    CHECK(dm_coro_live() == 1000);
    for (int i = 999; i >= 0; i--)
        dm_coro_resume(waiting[i]);
    CHECK(dm_coro_live() == 0);
    for (int round = 0; round < ROUNDS; round++)
        dm_coro_spawn(quick, &n);
    CHECK(n == ROUNDS + 1);
}

int main(void)
{
    RUN(test_interleave);
    RUN(test_many);
    fprintf(stderr, "test_coro: all passed\n");
    return 0;
}
