/* Lease locks (pool/lease_lock.c) on the `local` transport: the waiters of one thread queue
 * in arrival order with one of them polling the memory node, and a thread that keeps
 * handing a word to itself leaves it alone for a window (docs/leases.md "Waiting fairly
 * for a lease lock"). */
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "dmkv/alloc.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
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

int main(void)
{
    RUN(test_queue_in_order);
    RUN(test_turn_after_handovers);
    printf("test_lease_lock: passed\n");
    return 0;
}
