/* Coroutines: interleaving, many live at once, stacks reused, resume from callbacks; the
 * turn hook's early locks (who wounds whom, what a wounded holder's turn wait returns). */
#include <stdint.h>
#include <string.h>

#include "dmkv/coro.h"
#include "dmkv/errors.h"
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

/* A fake turn: wait() parks until `granted` or the waiter was wounded while holding an
 * early lock (what gateway/net/conn.c's hook does, without its timer). */
typedef struct fake_cmd {
    dm_turn_hook_t hook;
    dm_coro_t *co;
    int granted, parked, woken, result;
    uint64_t lock; /* the leaf it locks (0: none) */
    int locked;
} fake_cmd_t;

static int fake_wait(void *arg, const struct dm_chain_pos *on)
{
    (void)on;
    fake_cmd_t *f = arg;
    while (!f->granted) {
        if (dm_coro_early_wounded()) return DM_EYIELD;
        f->parked = 1;
        dm_coro_yield();
        f->parked = 0;
    }
    return 0;
}

static void fake_posted(void *arg, const struct dm_chain_pos *at)
{
    (void)arg, (void)at;
}

static void fake_wound(void *arg)
{
    fake_cmd_t *f = arg;
    f->woken += f->parked;
}

/* The running coroutine becomes command f (numbered: its age). */
static fake_cmd_t *fake_begin(void *arg)
{
    fake_cmd_t *f = arg;
    f->hook =
        (dm_turn_hook_t){.wait = fake_wait, .posted = fake_posted, .wound = fake_wound, .arg = f};
    dm_coro_set_turn(&f->hook);
    f->co = dm_coro_self();
    return f;
}

/* A SET's shape: lock its leaf (early when its turn is pending), wait for the turn holding
 * it, release. */
static void fake_set(void *arg)
{
    fake_cmd_t *f = fake_begin(arg);
    dm_coro_early_hold(f->lock);
    f->locked = 1;
    dm_coro_yield(); /* the lock's round trip */
    f->result = dm_coro_wait_turn();
    dm_coro_early_release();
    f->locked = 0;
    dm_coro_set_turn(NULL);
}

/* A command without a turn hook (it comes first) that finds a leaf busy wounds that
 * leaf's early holder and no other; a wounded holder's turn wait returns DM_EYIELD, an
 * unwounded one's waits for its turn. */
static void test_early_locks(void)
{
    fake_cmd_t a = {.lock = 7}, b = {.lock = 9};
    dm_coro_spawn(fake_set, &a);
    dm_coro_spawn(fake_set, &b);
    dm_coro_resume(a.co);
    dm_coro_resume(b.co);
    CHECK(a.parked && b.parked && dm_coro_early_taken(7) && dm_coro_early_taken(9));
    uint64_t holds0, wounds0, holds, wounds;
    dm_coro_early_stats(&holds0, &wounds0);
    CHECK(holds0 >= 2);
    dm_coro_early_contend(7);
    dm_coro_early_stats(&holds, &wounds);
    CHECK(wounds == wounds0 + 1 && a.woken == 1 && b.woken == 0);
    dm_coro_resume(a.co);
    CHECK(a.result == DM_EYIELD && !a.locked && !dm_coro_early_taken(7));
    b.granted = 1;
    dm_coro_resume(b.co);
    CHECK(b.result == 0 && !b.locked && dm_coro_live() == 0 && !dm_coro_early_taken(9));
}

/* Between two early holders: the older one's contention wounds the younger, not the
 * reverse. */
static fake_cmd_t *contender_target;
static void fake_contend(void *arg)
{
    fake_begin(arg);
    dm_coro_yield();
    dm_coro_early_contend(contender_target->lock);
    dm_coro_set_turn(NULL);
}

static void test_early_ages(void)
{
    fake_cmd_t old = {0}, holder = {.lock = 5}, young = {0};
    dm_coro_spawn(fake_contend, &old);
    dm_coro_spawn(fake_set, &holder);
    dm_coro_spawn(fake_contend, &young);
    contender_target = &holder;
    dm_coro_resume(holder.co); /* holds 5 early, parks in its turn wait */
    CHECK(holder.parked && dm_coro_early_taken(5));
    dm_coro_resume(young.co); /* younger than the holder: waits, wounds nothing */
    CHECK(holder.woken == 0);
    dm_coro_resume(old.co); /* older: wounds it */
    CHECK(holder.woken == 1);
    dm_coro_resume(holder.co);
    CHECK(holder.result == DM_EYIELD && dm_coro_live() == 0);
}

/* Many holders and waiters at once, more locks than the registry has buckets: each lookup,
 * wound, signal, move and release finds exactly its own lock's coroutines. */
enum { MANY_LOCKS = 300 };
static fake_cmd_t holders[2 * MANY_LOCKS], waiters[MANY_LOCKS];

static uint64_t many_lock(int i)
{
    return (uint64_t)(i % MANY_LOCKS + 1) << 12; /* leaf-like addresses */
}

static void fake_waiter(void *arg)
{
    fake_cmd_t *f = fake_begin(arg);
    f->result = dm_coro_wait_turn_or(f->lock);
    dm_coro_set_turn(NULL);
}

static int woken_total(const fake_cmd_t *f, int n)
{
    int w = 0;
    for (int i = 0; i < n; i++)
        w += f[i].woken;
    return w;
}

static void test_early_many(void)
{
    for (int i = 0; i < 2 * MANY_LOCKS; i++) {
        holders[i] = (fake_cmd_t){.lock = many_lock(i)};
        dm_coro_spawn(fake_set, &holders[i]); /* holds its lock: the round trip */
    }
    for (int i = 0; i < 2 * MANY_LOCKS; i++)
        dm_coro_resume(holders[i].co); /* parks */
    for (int i = 0; i < MANY_LOCKS; i++)
        CHECK(dm_coro_early_taken(many_lock(i)));
    CHECK(!dm_coro_early_taken(many_lock(MANY_LOCKS - 1) + (1 << 12)));

    dm_coro_early_contend(many_lock(16)); /* both holders of lock 17, nobody else */
    CHECK(holders[16].woken == 1 && holders[16 + MANY_LOCKS].woken == 1);
    CHECK(woken_total(holders, 2 * MANY_LOCKS) == 2);
    dm_coro_resume(holders[16].co);
    CHECK(holders[16].result == DM_EYIELD && dm_coro_early_taken(many_lock(16)));
    dm_coro_resume(holders[16 + MANY_LOCKS].co);
    CHECK(!dm_coro_early_taken(many_lock(16)));

    uint64_t moved = many_lock(MANY_LOCKS - 1) + (5 << 12); /* a split moved lock 2's hold */
    dm_coro_early_move(holders[1].co, moved);
    CHECK(dm_coro_early_taken(moved) && dm_coro_early_taken(many_lock(1)));
    dm_coro_resume(holders[1 + MANY_LOCKS].co); /* not granted: parks again */
    holders[1 + MANY_LOCKS].granted = 1;
    dm_coro_resume(holders[1 + MANY_LOCKS].co);
    CHECK(!dm_coro_early_taken(many_lock(1)) && dm_coro_early_taken(moved));

    for (int i = 0; i < MANY_LOCKS; i++) {
        waiters[i] = (fake_cmd_t){.lock = many_lock(i) + 64};
        dm_coro_spawn(fake_waiter, &waiters[i]); /* parks in its turn wait */
    }
    dm_coro_signal(many_lock(40) + 64);
    CHECK(waiters[40].woken == 1 && woken_total(waiters, MANY_LOCKS) == 1);
    dm_coro_resume(waiters[40].co);
    CHECK(waiters[40].result == DM_EYIELD);
    for (int i = 0; i < MANY_LOCKS; i++) {
        if (i == 40) continue;
        waiters[i].granted = 1;
        dm_coro_resume(waiters[i].co);
        CHECK(waiters[i].result == 0);
    }
    for (int i = 0; i < 2 * MANY_LOCKS; i++) {
        if (i % MANY_LOCKS == 16 || i == 1 + MANY_LOCKS) continue;
        holders[i].granted = 1;
        dm_coro_resume(holders[i].co);
        CHECK(holders[i].result == 0 && !holders[i].locked);
    }
    CHECK(dm_coro_live() == 0 && !dm_coro_early_taken(moved));
    for (int i = 0; i < MANY_LOCKS; i++)
        CHECK(!dm_coro_early_taken(many_lock(i)));
}

/* A coroutine parks twice under a name and a label, then ends. */
static void parked(void *arg)
{
    dm_coro_set_name(arg);
    dm_coro_yield_on("a test's resume");
    dm_coro_yield_on("a second resume");
}

/* dm_coro_watch: who is reported (parked past the bound since a look saw it resumed), with
 * what name and label, once per stillness with once = 1. */
static void test_watch(void)
{
    dm_coro_still_t s[4];
    dm_coro_t *a = dm_coro_spawn(parked, "task a");
    dm_coro_t *b = dm_coro_spawn(parked, "task b");
    CHECK(a && b);
    /* The first look starts the clocks. */
    CHECK(dm_coro_watch(1000, 100, UINT64_MAX, 1, s, 4, NULL) == 0);
    dm_coro_resume(b); /* b moves: its clock starts again */
    CHECK(dm_coro_watch(1050, 100, UINT64_MAX, 1, s, 4, NULL) == 0);
    size_t n = dm_coro_watch(1120, 100, UINT64_MAX, 1, s, 4, NULL);
    CHECK(n == 1 && strcmp(s[0].name, "task a") == 0);
    CHECK(strcmp(s[0].waits_on, "a test's resume") == 0 && s[0].still_ms == 120);
    /* a reported once, b parked 90 ms */
    CHECK(dm_coro_watch(1140, 100, UINT64_MAX, 1, s, 4, NULL) == 0);
    n = dm_coro_watch(1160, 100, UINT64_MAX, 0, s, 1, NULL);        /* every time without once */
    CHECK(n == 2 && strcmp(s[0].waits_on, "a second resume") == 0); /* b first (newest) */
    dm_coro_resume(a);
    CHECK(dm_coro_watch(1300, 100, UINT64_MAX, 1, s, 4, NULL) == 0); /* a moved, b was reported */
    n = dm_coro_watch(1400, 100, UINT64_MAX, 1, s, 4, NULL);
    CHECK(n == 1 && strcmp(s[0].name, "task a") == 0 &&
          strcmp(s[0].waits_on, "a second resume") == 0);
    dm_coro_resume(a);
    dm_coro_resume(b);
    CHECK(dm_coro_live() == 0 && dm_coro_watch(5000, 0, UINT64_MAX, 0, s, 4, NULL) == 0);
}

/* A command that polls: bounded work from t = 1000 ms, yields until told to stop; an EXEC
 * inside it (nested bounded work) does not restart its clock. */
static int spin_stop;
static void spinning(void *arg)
{
    dm_coro_set_name(arg);
    dm_coro_begin_bounded(1000);
    dm_coro_begin_bounded(1500); /* nested: the outer start counts */
    while (!spin_stop)
        dm_coro_yield_on("a lease word to change");
    dm_coro_end_bounded();
    dm_coro_end_bounded();
    dm_coro_yield_on("after its command"); /* no bounded work: never reported */
}

/* dm_coro_watch's second kind: a coroutine resumed since the previous look, in bounded work
 * past run_ms, is reported once, with its running time, resumes and label; a parked one is
 * reported as parked instead, and nothing outside bounded work runs long. */
static void test_watch_long(void)
{
    dm_coro_still_t s[4];
    size_t running;
    spin_stop = 0;
    dm_coro_t *spin = dm_coro_spawn(spinning, "get");
    dm_coro_t *park = dm_coro_spawn(parked, "task p");
    CHECK(spin && park);
    dm_coro_resume(spin);
    CHECK(dm_coro_watch(1050, 1000, 100, 1, s, 4, &running) == 0); /* too young */
    dm_coro_resume(spin);
    size_t n = dm_coro_watch(1120, 1000, 100, 1, s, 4, &running);
    CHECK(n == 1 && running == 1 && strcmp(s[0].name, "get") == 0 && s[0].running_ms == 120);
    CHECK(strcmp(s[0].waits_on, "a lease word to change") == 0 && s[0].resumes == 2);
    dm_coro_resume(spin);
    CHECK(dm_coro_watch(1300, 1000, 100, 1, s, 4, &running) == 0); /* once per piece of work */
    n = dm_coro_watch(1300, 100, 100, 1, s, 4, &running);          /* p parked since 1050 */
    CHECK(n == 1 && running == 0 && strcmp(s[0].name, "task p") == 0 && s[0].still_ms == 250);
    n = dm_coro_watch(1450, 100, 100, 1, s, 4, &running); /* spin parked since 1300 */
    CHECK(n == 1 && running == 0 && strcmp(s[0].name, "get") == 0 && s[0].running_ms == 0);
    spin_stop = 1;
    dm_coro_resume(spin); /* its work ends */
    dm_coro_resume(spin);
    CHECK(dm_coro_watch(9000, 100000, 100, 1, s, 4, &running) == 0 && running == 0);
    dm_coro_resume(park);
    dm_coro_resume(park);
    CHECK(dm_coro_live() == 0);
}

int main(void)
{
    RUN(test_interleave);
    RUN(test_many);
    RUN(test_early_locks);
    RUN(test_early_ages);
    RUN(test_early_many);
    RUN(test_watch);
    RUN(test_watch_long);
    fprintf(stderr, "test_coro: all passed\n");
    return 0;
}
