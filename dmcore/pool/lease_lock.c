/* Lock words held under leases (dmkv/lease_lock.h). */
#include "dmkv/lease_lock.h"

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/fence.h"
#include "dmkv/lease.h"

/* ---- fairness: a queue per thread, turns between threads ----
 *
 * Waiters poll a word: a CAS, a short sleep, a CAS again. Measured on one hot word (a ROLEX
 * pool created empty has one chain, so every insert and delete takes one lock: it_concurrency
 * on the SepHash + ROLEX pairing under ThreadSanitizer, 2026-12-02): SETs at p50 134 ms and
 * p99 17-34 s, some over the tests' 30 s client timeout. Every waiting coroutine polled, each
 * poll with the reads and prefetch behind its CAS (about 1.4 KB, 100 polls per SET), and a
 * word freed went to whichever poll came first, not to the oldest waiter.
 *
 *  - The coroutines of one thread that wait for one word queue in arrival order
 *    (dm_lease_lock_wait): only the oldest polls the memory node, the others wait in the
 *    thread. It leaves the queue once it has the lock (or gives up), so the queue never
 *    depends on how a holder unlocks.
 *  - A thread whose unlock is followed at once by its own next CAS keeps a hot word for
 *    itself: its unlock and its next waiter's CAS leave in one message, before another
 *    thread's poll can see the word free. So a thread that took a word right after freeing
 *    it DM_LEASE_HANDOVERS_MAX times in a row leaves it alone for a window after its next
 *    unlock (4 of its lock round trips + 1 ms, at most 20 ms): its attempts answer "held"
 *    meanwhile, and the other threads' oldest waiters find it free. Sherman's bounded local
 *    handover (SIGMOD'22 §4.3), without its lock table on the memory node.
 * Idle words cost nothing; a thread alone on a hot word loses one window per
 * DM_LEASE_HANDOVERS_MAX holds. */
#define DM_LEASE_HANDOVERS_MAX 8u
#define TURN_SLOTS 16u
#define TURN_WINDOW_MAX_US 20000u

typedef struct turn {
    dm_gaddr_t addr;
    uint64_t used_us;       /* last taken or freed here (a slot without waiters is reused) */
    uint64_t unlock_us;     /* this thread's last unlock of addr (posted), 0: none */
    uint64_t away_until_us; /* no CAS on addr before this */
    unsigned streak;        /* takes right after our own unlock, in a row */
    uint64_t next, serving; /* the queue: tickets given, and the one that may poll */
} turn_t;

static _Thread_local turn_t turns[TURN_SLOTS];
static _Thread_local uint64_t lock_rtt_us = 200; /* a moving average of our lock CASes */
static uint64_t turns_given;                     /* windows left to other threads */

uint64_t dm_lease_turns_given(void)
{
    return __atomic_load_n(&turns_given, __ATOMIC_RELAXED);
}

static uint64_t handover_us(void)
{
    uint64_t w = 4 * lock_rtt_us + 1000;
    return w < TURN_WINDOW_MAX_US ? w : TURN_WINDOW_MAX_US;
}

/* addr's slot; with make, the least recently used slot without waiters becomes addr's
 * (NULL when every slot has waiters). */
static turn_t *turn_of(dm_gaddr_t addr, int make)
{
    turn_t *old = NULL;
    for (unsigned i = 0; i < TURN_SLOTS; i++) {
        turn_t *t = &turns[i];
        if (t->addr == addr) return t;
        if (t->next == t->serving && (!old || t->used_us < old->used_us)) old = t;
    }
    if (!make || !old) return NULL;
    *old = (turn_t){.addr = addr};
    return old;
}

int dm_lease_lock_try(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                      void *behind, uint32_t behind_len, dm_lease_hold_t *hd, int *took_over)
{
    const dm_lease_read_t r = {addr, behind, behind_len};
    return dm_lease_lock_try_reads(ctx, addr, lease_ms, hold_ms, &r, behind ? 1 : 0, NULL, NULL, hd,
                                   took_over);
}

int dm_lease_lock_try_reads(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                            const dm_lease_read_t *reads, unsigned n, const dm_batch_t *extra,
                            int *extra_fresh, dm_lease_hold_t *hd, int *took_over)
{
    if (n > DM_LEASE_READS_MAX) return DM_EINVAL;
    if (extra_fresh) *extra_fresh = 0;
    uint64_t from = 0;
    *took_over = 0;
    turn_t *t = turn_of(addr, 0);
    if (t && dm_now_us() < t->away_until_us) return 0; /* another thread's turn */
    for (int i = 0; i < 2; i++) {
        uint64_t word = (uint64_t)dm_lease_token() << 1 | 1;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, addr, from, word);
        for (unsigned k = 0; k < n; k++)
            dm_batch_read(&b, reads[k].at, reads[k].buf, reads[k].len)->fence = 1;
        int with_extra = extra && b.n + extra->n <= DM_BATCH_MAX;
        int extra_here = with_extra; /* every extra verb on the lock word's memory node */
        for (unsigned k = 0; with_extra && k < extra->n; k++) {
            b.v[b.n] = extra->v[k];
            b.v[b.n].fence = 1; /* they must see what the last holder left */
            b.node[b.n] = extra->node[k];
            extra_here &= b.node[b.n] == b.node[0];
            b.n++;
        }
        uint64_t posted = dm_now_us(); /* the hold starts before the CAS is posted */
        uint64_t af = dm_async_failures();
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        uint64_t done = dm_now_us();
        lock_rtt_us = (7 * lock_rtt_us + (done - posted)) / 8;
        if (v->result == from) {
            if ((t = turn_of(addr, 1)) != NULL) {
                int handover = !from && t->unlock_us && posted - t->unlock_us < handover_us();
                t->streak = handover ? t->streak + 1 : 0;
                t->used_us = done;
            }
            if (extra_fresh) *extra_fresh = extra_here;
            hd->addr = addr;
            hd->word = word;
            hd->until_us = posted + 1000ull * hold_ms;
            hd->async_failures = af;
            dm_lease_forget(addr);
            *took_over = from != 0;
            return 1;
        }
        from = v->result;
        if (!from) continue; /* freed meanwhile: try again from 0 */
        if (!dm_lease_takeover_ready(ctx, addr, from, lease_ms)) return 0;
    }
    return 0;
}

int dm_lease_lock_wait(dm_ctx_t *ctx, dm_gaddr_t addr, uint32_t lease_ms, uint32_t hold_ms,
                       const dm_lease_read_t *reads, unsigned n, const dm_batch_t *extra,
                       int *extra_fresh, dm_lease_hold_t *hd, int *took_over, uint32_t poll_us,
                       uint64_t *waits)
{
    turn_t *t = turn_of(addr, 1);
    uint64_t ticket = t ? t->next++ : 0; /* no slot free: poll outside the queue */
    for (;;) {
        int rc = 0;
        if (!t || t->serving == ticket) {
            rc = dm_lease_lock_try_reads(ctx, addr, lease_ms, hold_ms, reads, n, extra, extra_fresh,
                                         hd, took_over);
            if (rc && t) t->serving++; /* taken, or given up: the next waiter polls */
            if (rc) return rc < 0 ? rc : 0;
        }
        if (waits) (*waits)++;
        dm_ctx_sleep(ctx, poll_us);
    }
}

void dm_lease_unlocking(const dm_lease_hold_t *hd)
{
    turn_t *t = turn_of(hd->addr, 1);
    if (!t) return;
    t->unlock_us = t->used_us = dm_now_us();
    if (t->streak >= DM_LEASE_HANDOVERS_MAX) {
        t->streak = 0;
        t->away_until_us = t->unlock_us + handover_us();
        __atomic_fetch_add(&turns_given, 1, __ATOMIC_RELAXED);
    }
}

int dm_lease_unlock(dm_ctx_t *ctx, const dm_lease_hold_t *hd)
{
    dm_lease_unlocking(hd);
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_cas(&b, hd->addr, hd->word, 0);
    return dm_batch_post_async(ctx, &b);
}
