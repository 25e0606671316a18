/* Test-only fault points: stall one operation at a named instant of a protocol, the worst
 * moment for a SIGSTOP, so tests and the linearizability checker can aim at a race
 * window instead of hoping a random stop lands in it (docs/testing-concurrency.md).
 *
 * Configured once per process from DMKV_FAULT_STALL, a comma-separated list of
 * "site:ms:one_in[:times]" (for example "locked:3500:40,inserted:30:4"): at each pass
 * through site, with probability 1/one_in, the calling coroutine sleeps ms milliseconds (the
 * rest of its worker keeps running); with times, only the first times such passes stall
 * (a test that needs one slow pass and then fast retries). Unset in production: a pthread_once and
 * one predictable branch per pass. */
#ifndef DMKV_FAULT_H
#define DMKV_FAULT_H

#include <stdint.h>

typedef enum {
    DM_FAULT_LOCKED,      /* a leaf lock held, before the RACE slot CAS (kv/hybrid.c) */
    DM_FAULT_INSERTED,    /* a new key's slot CAS done, before its duplicate check (race/ops.c) */
    DM_FAULT_TAKEN_BACK,  /* a stranded insert's slot taken back, before the redo (race/ops.c) */
    DM_FAULT_PROPAGATE,   /* a leaf split written, before its separator goes up (chime/split.c) */
    DM_FAULT_POSTED,      /* a fire-and-forget batch held back before it is sent (pool/batch.c) */
    DM_FAULT_UNCOUNTED,   /* any ms: the key counter's FAA dropped, as if never sent (race/ops.c,
                             sephash/count.c) */
    DM_FAULT_WIRE,        /* a message with a send-by bound that passed its check at the turn's
                             end: the whole thread blocks before the socket write or doorbell,
                             so it reaches the node late (a retransmitting network, a stop
                             right after the check; transport/tcp.c, rdma.c) */
    DM_FAULT_COMMIT_MISS, /* any ms: a chained commit CAS sent with a wrong expected word, as
                             if another writer had changed the slot: it fails, the memory
                             node skips the rest of its chain, and it is posted again right
                             (pool/batch.c) */
    DM_FAULT_SPLIT,       /* a leaf split under its lock, its whole leaf read, before it writes
                             anything (chime/split.c): a slow split outlives the lease */
    DM_FAULT_LATE,        /* a message with a send-by bound held back before its check (tcp: at
                             the turn's end; local, rdma: at post): the whole thread blocks, so
                             a hold that ends meanwhile has it refused (DM_ELATE) while the
                             turn's other messages leave (transport/tcp.c, local.c, rdma.c) */
    DM_FAULT_CRON,        /* a gateway thread's cron step (expiry, idle blocks returned) after
                             its start: a slow step (gateway/server/cron.c) */
    DM_FAULT_CLOCK,       /* a clock-board tick between reading the wall clock and posting its
                             word: the word lands late, older than it looks (pool/clock.c) */
    DM_FAULT_NSITES
} dm_fault_site_t;

/* Replace the configuration with spec (same syntax; NULL or "" for none). For tests that
 * aim at one window in-process; not safe while other threads pass fault points. */
void dm_fault_configure(const char *spec);

/* dm_fault_point (worker.h) stalls the calling coroutine at a site. */

/* 1 when site is configured at all: lets a data path skip the work of finding out whether
 * a pass qualifies (transport/tcp.c, rdma.c scan a message for bounded batches). */
int dm_fault_armed(dm_fault_site_t site);

/* For sites where something else than the caller waits (a batch posted later, a slow
 * network): the milliseconds to hold it, 0 on most passes (same draw as dm_fault_point). */
uint32_t dm_fault_delay_ms(dm_fault_site_t site);

/* How many passes through site stalled since the last dm_fault_configure (tests check that
 * the window they aimed at was reached). */
uint32_t dm_fault_fired(dm_fault_site_t site);

#endif
