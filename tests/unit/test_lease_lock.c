/* Lease locks (pool/lease_lock.c) on the `local` transport: the waiters of one thread queue
 * in arrival order with one of them polling the memory node, and a thread that keeps
 * handing a word to itself leaves it alone for a window (docs/leases.md "Waiting fairly
 * for a lease lock"); waiters of one thread on many dead holders' words each take theirs
 * over, and the per-thread observations (pool/lease.c) keep every word polled. */
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/lease.h"
#include "dmkv/lease_lock.h"
#include "dmkv/stats.h"
#include "dmkv/worker.h"
#include "harness.h"
#include "worker_util.h"

#define LEASE_MS 3000
#define HOLD_MS 2000
#define POLL_US 200
#define WAITERS 16
#define FIRST_HOLD_MS 50 /* the first holder's hold, while every waiter queues */

static dm_worker_t *w;
static dm_gaddr_t word; /* the lock word, 0 = free */

/* An admin-class context on w and a new lock word (free) for it to take. */
static void new_word(dm_ctx_t *ctx)
{
    dm_ctx_init(ctx, w, DM_CLS_ADMIN);
    CHECK(dm_alloc_block(ctx, 64, &word) == 0);
}

/* One attempt at word: 1 taken (*hd), 0 held. */
static int try_word(dm_ctx_t *ctx, dm_lease_hold_t *hd)
{
    int took_over;
    return dm_lease_lock_try(ctx, word, LEASE_MS, HOLD_MS, NULL, 0, hd, &took_over);
}

typedef struct waiter {
    int id;
    int *order, *n_order, *done;
} waiter_t;

static void waiter_run(void *arg)
{
    waiter_t *me = arg;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_SCAN); /* its verbs are counted apart from the holder's */
    dm_lease_hold_t hd;
    int took_over;
    CHECK(dm_lease_lock_wait(&ctx, word, LEASE_MS, HOLD_MS, NULL, 0, NULL, NULL, &hd, &took_over,
                             POLL_US, NULL) == 0);
    CHECK(!took_over);
    me->order[(*me->n_order)++] = me->id;
    dm_ctx_sleep(&ctx, 1000);
    CHECK(dm_lease_unlock(&ctx, &hd) == 0);
    (*me->done)++;
}

typedef struct holder {
    int *done, *order, *n_order;
    waiter_t *ws;
    uint64_t elapsed_us;
} holder_t;

static void holder_run(void *arg)
{
    holder_t *h = arg;
    dm_ctx_t ctx;
    new_word(&ctx);
    dm_lease_hold_t hd;
    CHECK(try_word(&ctx, &hd) == 1);
    uint64_t t0 = dm_now_us();
    for (int i = 0; i < WAITERS; i++) { /* each runs to its first wait: arrival order = i */
        h->ws[i] = (waiter_t){i, h->order, h->n_order, h->done};
        dm_coro_spawn(waiter_run, &h->ws[i]);
    }
    dm_ctx_sleep(&ctx, FIRST_HOLD_MS * 1000);
    CHECK(dm_lease_unlock(&ctx, &hd) == 0);
    while (*h->done < WAITERS)
        dm_ctx_sleep(&ctx, 1000);
    h->elapsed_us = dm_now_us() - t0;
    (*h->done)++;
}

/* Sixteen coroutines of one thread wait for a word held 50 ms: they get it in the order
 * they asked, and the memory node sees the polls of one of them at a time (each polls at
 * most once per timer tick, about a millisecond). With every waiter polling (before
 * 2026-12-02) the count was about WAITERS times higher. */
static void test_queue_in_order(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    w = bare_worker(&loop, "local:leaselock");
    int order[WAITERS], n_order = 0, done = 0;
    waiter_t ws[WAITERS];
    holder_t h = {&done, order, &n_order, ws, 0};
    dm_cls_stats_t before, after;
    dm_stats_get(DM_CLS_SCAN, &before);
    dm_coro_spawn(holder_run, &h);
    while (done < WAITERS + 1)
        uv_run(&loop, UV_RUN_ONCE);
    dm_stats_get(DM_CLS_SCAN, &after);
    uint64_t polls = after.verbs - before.verbs - WAITERS; /* less each waiter's unlock */
    uint64_t ms = h.elapsed_us / 1000;
    fprintf(stderr, "  %d waiters over %llu ms: %llu lock CASes\n", WAITERS, (unsigned long long)ms,
            (unsigned long long)polls);
    CHECK(n_order == WAITERS);
    for (int i = 0; i < WAITERS; i++)
        CHECKF(order[i] == i, "position %d: waiter %d", i, order[i]);
    CHECKF(polls <= 4 * ms + 2 * WAITERS, "%llu polls in %llu ms", (unsigned long long)polls,
           (unsigned long long)ms);
    worker_done(w, &loop);
}

typedef struct cycles {
    int done;
} cycles_t;

/* Nine takes of one word, each right after this thread's own unlock: after the eighth
 * handover the ninth unlock leaves the word to other threads for a window, in which this
 * thread's attempt answers "held" with no verb sent; after it the word is taken again. */
static void cycles_run(void *arg)
{
    cycles_t *c = arg;
    dm_ctx_t ctx;
    dm_gaddr_t skip;
    /* Not test_queue_in_order's word: a new pool gives the same first address, and this
     * thread's turn slot for it still counts that test's handovers (1 run in 2 failed at
     * "after take 0" or "take 1"). */
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    CHECK(dm_alloc_block(&ctx, 4096, &skip) == 0);
    new_word(&ctx);
    dm_lease_hold_t hd;
    uint64_t given = dm_lease_turns_given();
    for (int i = 0; i < 9; i++) {
        CHECKF(try_word(&ctx, &hd) == 1, "take %d", i);
        CHECK(dm_lease_unlock(&ctx, &hd) == 0);
        CHECKF(dm_lease_turns_given() == given + (i == 8), "after take %d", i);
    }
    dm_cls_stats_t s0, s1;
    dm_stats_get(DM_CLS_ADMIN, &s0);
    CHECK(try_word(&ctx, &hd) == 0);
    dm_stats_get(DM_CLS_ADMIN, &s1);
    CHECK(s1.verbs == s0.verbs);
    dm_ctx_sleep(&ctx, 25 * 1000); /* past the longest window (20 ms) */
    CHECK(try_word(&ctx, &hd) == 1);
    CHECK(dm_lease_unlock(&ctx, &hd) == 0);
    c->done = 1;
}

static void test_turn_after_handovers(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    w = bare_worker(&loop, "local:leaselock2");
    cycles_t c = {0};
    dm_coro_spawn(cycles_run, &c);
    while (!c.done)
        uv_run(&loop, UV_RUN_ONCE);
    worker_done(w, &loop);
}

/* ---- waiters on words whose observations collided ---- */
#define DEAD_WORDS 8
#define DEAD_LEASE_MS 50
#define DEAD_GIVE_UP_MS 3000 /* 60 leases */

/* The observation table's slot of a word before 2026-12-04 (direct-mapped, 1,024 slots). */
static unsigned old_obs_slot(dm_gaddr_t a)
{
    return (unsigned)((a >> 3) * 0x9e3779b97f4a7c15ull >> 54);
}

typedef struct dead_waiter {
    dm_gaddr_t addr;
    int rc, took_over, done;
    uint64_t us;
} dead_waiter_t;

/* dm_lease_lock_wait's loop (1 ms polls), bounded so that the test ends. */
static void dead_waiter_run(void *arg)
{
    dead_waiter_t *me = arg;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    uint64_t t0 = dm_now_us();
    dm_lease_hold_t hd;
    while (dm_now_us() - t0 < DEAD_GIVE_UP_MS * 1000ull) {
        me->rc = dm_lease_lock_try(&ctx, me->addr, DEAD_LEASE_MS, DEAD_LEASE_MS / 2, NULL, 0, &hd,
                                   &me->took_over);
        if (me->rc) break;
        dm_ctx_sleep(&ctx, 1000);
    }
    me->us = dm_now_us() - t0;
    if (me->rc == 1) CHECK(dm_lease_unlock(&ctx, &hd) == 0);
    me->done = 1;
}

typedef struct dead_setup {
    dead_waiter_t *ws;
    int done;
} dead_setup_t;

/* DEAD_WORDS lock words that shared one slot of the old table, each held by a holder that
 * never comes back (another thread's holder id). */
static void dead_setup_run(void *arg)
{
    dead_setup_t *d = arg;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    dm_gaddr_t blk;
    CHECK(dm_alloc_block(&ctx, 4u << 20, &blk) == 0);
    int n = 0;
    for (dm_gaddr_t a = blk; n < DEAD_WORDS && a < blk + (4u << 20); a += 8)
        if (old_obs_slot(a) == old_obs_slot(blk)) d->ws[n++] = (dead_waiter_t){.addr = a};
    CHECKF(n == DEAD_WORDS, "%d words of one old slot in 4 MiB", n);
    uint16_t other = (uint16_t)(dm_holder_id() % 1000 + 1);
    uint64_t held = ((uint64_t)other << DM_LEASE_RANDOM_BITS | 12345u) << 1 | 1;
    dm_batch_t b;
    dm_batch_init(&b);
    for (int i = 0; i < DEAD_WORDS; i++)
        dm_batch_write(&b, d->ws[i].addr, &held, 8);
    CHECK(dm_batch_exec(&ctx, &b) == 0);
    d->done = 1;
}

/* Eight coroutines of one thread wait for eight words held by a dead holder, words that the
 * observation table kept in one slot before 2026-12-04: each evicted the others' observation
 * at every poll, none saw its word unchanged for a lease, and none took over (found by
 * reading, after the lock-first hangs of docs/testing-concurrency.md; CHIME's leaf lock gave
 * up after 200,000 polls, SepHash's and ROLEX's lease locks never). Each takes its word over
 * after about a lease. */
static void test_colliding_waiters(void)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    w = bare_worker(&loop, "local:leasecollide");
    dead_waiter_t ws[DEAD_WORDS];
    dead_setup_t d = {ws, 0};
    dm_coro_spawn(dead_setup_run, &d);
    while (!d.done)
        uv_run(&loop, UV_RUN_ONCE);
    for (int i = 0; i < DEAD_WORDS; i++)
        dm_coro_spawn(dead_waiter_run, &ws[i]);
    for (int all = 0; !all;) {
        uv_run(&loop, UV_RUN_ONCE);
        all = 1;
        for (int i = 0; i < DEAD_WORDS; i++)
            all &= ws[i].done;
    }
    uint64_t most = 0;
    for (int i = 0; i < DEAD_WORDS; i++) {
        CHECKF(ws[i].rc == 1 && ws[i].took_over,
               "waiter %d never took its word over in %d ms (lease %d ms)", i, DEAD_GIVE_UP_MS,
               DEAD_LEASE_MS);
        most = ws[i].us > most ? ws[i].us : most;
    }
    fprintf(stderr, "  %d waiters on words of one old slot: all took over within %llu ms\n",
            DEAD_WORDS, (unsigned long long)(most / 1000));
    worker_done(w, &loop);
}

/* The observation table grows: 5,000 words observed, then each again 2 ms later, every
 * observation kept (the earlier table held 1,024, one per slot). */
static void test_observations_kept(void)
{
    enum { WORDS = 5000 };
    dm_gaddr_t base = dm_gaddr_make(0, 1u << 20);
    for (int i = 0; i < WORDS; i++)
        CHECK(dm_lease_observed_us(base + 8 * (dm_gaddr_t)i, 3) == 0);
    uint64_t t0 = dm_now_us();
    while (dm_now_us() - t0 < 2000) {
    }
    for (int i = 0; i < WORDS; i++)
        CHECKF(dm_lease_observed_us(base + 8 * (dm_gaddr_t)i, 3) >= 2000, "word %d forgotten", i);
    CHECK(dm_lease_observed_us(base, 4) == 0); /* another word value: observed anew */
    dm_lease_forget(base + 8);
    CHECK(dm_lease_observed_us(base + 8, 3) == 0);
}

int main(void)
{
    RUN(test_queue_in_order);
    RUN(test_turn_after_handovers);
    RUN(test_colliding_waiters);
    RUN(test_observations_kept);
    printf("test_lease_lock: passed\n");
    return 0;
}
