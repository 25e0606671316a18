/* A worker's log of the blocks it freed, kept in the pool, so that a gateway that finds it
 * dead takes its quarantine over instead of the space staying taken (issue 12,
 * docs/leases.md "A dead gateway's free blocks"). Internal to dmcore/pool: alloc.c stages
 * and honours the horizon, free_log.c writes and adopts.
 *
 * The rule that makes it safe: the owner reuses a listed block only if it was freed before
 * its *reuse horizon*, a time (the owner's monotonic clock, µs) published in its record and
 * raised by CAS at every free-log tick (50 a second, gateway/server/cron.c); a repairer
 * CASes the horizon to FREE_LOG_TAKEN and takes the logged blocks freed at or after the
 * horizon it replaced. Once that CAS wins, every later raise of the owner fails, so the two
 * sets never meet, even for an owner that was only thought dead. A block freed at or after
 * the horizon was never reused since (a reuse needs the horizon past its free time), so no
 * other gateway can hold it either: only the process that unlinked a block has it on a
 * list. */
#ifndef DMKV_POOL_FREE_LOG_H
#define DMKV_POOL_FREE_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/gaddr.h"
#include "dmkv/worker.h"

#define FREE_LOG_BYTES (1u << 20) /* a log block, header included */
#define FREE_LOG_HDR 64u          /* magic, capacity, entries written */
#define FREE_LOG_CAP ((FREE_LOG_BYTES - FREE_LOG_HDR) / 32u)
/* A worker that writes more than half its ring in a quarantine (DM_GRACE_US) moves to a log
 * large enough for twice its rate (free_log_grow), up to this many bytes: a repairer needs
 * the entries of the last DM_GRACE_US, and a ring that laps sooner loses them (a 1 MiB ring
 * held a quarter of a second of 130k frees a second: docs/leases.md "A ring that laps").
 * 64 MiB hold 2 s of a million frees a second. FREE_LOG_BYTES times a power of 4. */
#define FREE_LOG_MAX_BYTES (64u << 20)
/* Entries of a log block of `bytes` bytes (FREE_LOG_BYTES times a power of 4). */
#define FREE_LOG_CAP_OF(bytes) (((bytes)-FREE_LOG_HDR) / 32u)
#define FREE_LOG_MAGIC 0x474c454552464b44ull /* "DKFREELG" */
/* How far ahead of the quarantine the horizon is raised: three times the time since the
 * last raise, between these bounds. An idle worker raises it every 100 ms (300 ms ahead), a
 * busy one every tick (10 ms: 30 ms ahead), so three ticks may be late before a reuse waits
 * (it then carves new space). A repairer takes the frees of the dead worker's last
 * DM_GRACE_US minus this: what a busy worker freed in the last 30 ms before the horizon and
 * had not reused yet is lost with it (300 ms of 190k frees a second was 55-80% of the live
 * data in it_gateway_death's fast death, release build). */
#define FREE_LOG_AHEAD_US 300000u
#define FREE_LOG_AHEAD_MIN_US 30000u
#define FREE_LOG_TAKEN 1u /* a horizon word taken over by a repairer (or closed at a stop) */
/* Large blocks (over FREE_LOG_LARGE_UNITS grains: 16 KB) are reused only once claimed in
 * the log (an entry with FREE_LOG_CLAIM in units, written by a tick whose horizon CAS
 * won), so a repairer takes also the large blocks freed before the horizon that no claim
 * names: a dead gateway's reusable large blocks (docs/leases.md "Claims"). hdr[3] of a log
 * that follows this rule holds FREE_LOG_CLAIMS_MAGIC. */
#define FREE_LOG_LARGE_UNITS 512u
#define FREE_LOG_CLAIM (1ull << 63)
#define FREE_LOG_CLAIMS_MAGIC 0x4d49414c43474c44ull /* "DLGCLAIM" */
/* Small blocks freed more than a *names window* before the horizon are taken by a repairer
 * too, unless an entry names them (docs/leases.md "Names: small blocks reused late"): the
 * owner names every reuse of a logged small block with a claim entry, written by its next
 * tick before that tick's CAS, and reuses one freed more than the window before its highest
 * horizon (won or asked for) only once the name is written (a claim). The window is chosen
 * per raise and published with it in the horizon word (free_log_word): twice the raise's
 * lead, between FREE_LOG_NAME_MIN_US (a busy worker) and FREE_LOG_NAME_US (an idle one), so
 * a block is still fresh when a raise first lets the owner reuse it, and a busy worker's
 * death leaves little unnamed (docs/leases.md "A names window per raise"). The owner judges
 * by the smallest window of the raises that may be its last won one (free_log_window). hdr[3]
 * of a log that follows this rule holds FREE_LOG_WINDOW_MAGIC; one holding
 * FREE_LOG_NAMES_MAGIC has a plain horizon word and a window of FREE_LOG_NAME_US (both follow
 * FREE_LOG_CLAIMS_MAGIC's rule as well). */
#define FREE_LOG_NAME_US (FREE_LOG_AHEAD_US + 200000u)
#define FREE_LOG_NAME_MIN_US (2u * FREE_LOG_AHEAD_MIN_US)
#define FREE_LOG_WINDOW_UNIT_US 4000u /* the window's unit in the horizon word */
#define FREE_LOG_HORIZON_BITS 56      /* the horizon's bits in the word (µs: 2,283 years) */
#define FREE_LOG_NAMES_MAGIC 0x53454d414e474c44ull  /* "DLGNAMES" */
#define FREE_LOG_WINDOW_MAGIC 0x574f444e49574c44ull /* "DLWINDOW" */

/* The horizon word of a raise: its horizon (µs) and names window (µs, rounded up to
 * FREE_LOG_WINDOW_UNIT_US, at most 255 units). Never 0 or FREE_LOG_TAKEN for a horizon past
 * FREE_LOG_TAKEN. */
static inline uint64_t free_log_word(uint64_t horizon_us, uint64_t window_us)
{
    uint64_t units = (window_us + FREE_LOG_WINDOW_UNIT_US - 1) / FREE_LOG_WINDOW_UNIT_US;
    return horizon_us | (units > 255 ? 255 : units) << FREE_LOG_HORIZON_BITS;
}
static inline uint64_t free_log_word_horizon(uint64_t word)
{
    return word & ((1ull << FREE_LOG_HORIZON_BITS) - 1);
}
static inline uint64_t free_log_word_window(uint64_t word)
{
    return (word >> FREE_LOG_HORIZON_BITS) * FREE_LOG_WINDOW_UNIT_US;
}
/* Old small blocks of one size claimed together when one of them needs a claim: at least
 * FREE_LOG_CLAIM_AHEAD, more while the batches come often (alloc.c claim_ahead), up to
 * FREE_LOG_CLAIM_AHEAD_BYTES of them. The reuse of a batch's middle block stages the next
 * batch and calls for a tick, so a backlog reused fast waits once, not once per batch; a
 * death loses up to a batch and a half per size. A backlog of old blocks stays old while frees and
 * reuses keep pace (SETs of present keys after a pause), so then every reuse needs a claim: with 64
 * a batch, one connection's SET -P 1000 fell from 280k to 65-80k a second (docs/leases.md "Claims
 * in batches that grow"). */
#define FREE_LOG_CLAIM_AHEAD 64
#define FREE_LOG_CLAIM_AHEAD_BYTES (256u << 10)
/* Old small blocks per size each tick keeps claimed, so a write on a quiet worker does not
 * wait for one; a death loses as many per size. */
#define FREE_LOG_CLAIM_READY 4
/* Staged bytes of large blocks (over FREE_LOG_LARGE_UNITS grains) that call for a tick
 * before the timer's next one: a death loses what was staged, and large values fill a
 * 20 ms tick with hundreds of KB (docs/leases.md "Large frees are written at once"). Small
 * blocks do not count: at 300k frees a second they called for a tick per round trip, and
 * SET -P 16 lost a fifth of its rate. */
#define FREE_LOG_EAGER_BYTES (64u << 10)

/* A worker writes into its log blocks only within FREE_LOG_SEND_BY_US of posting a CAS that
 * found its horizon word its own (a send-by bound, dmkv/batch.h), and after a stall of
 * FREE_LOG_CONFIRM_US it first CASes the word to itself: a repairer's takeover comes after
 * that CAS and frees the log's block, which nobody reuses for DM_GRACE_US (2 s), so a worker
 * stalled past a takeover writes nothing over what the block holds by then (docs/leases.md
 * "A stalled owner's ring writes"). */
#define FREE_LOG_SEND_BY_US 1000000u
#define FREE_LOG_CONFIRM_US 500000u

/* One logged free: 32 bytes in the pool. check ties it to its ring position, so a torn or
 * stale entry (an older lap, bytes of the block's previous use) is skipped. */
typedef struct free_log_entry {
    uint64_t addr, units, freed_us, check; /* units | FREE_LOG_CLAIM: a claim (freed_us: when) */
} free_log_entry_t;

typedef struct free_log {
    dm_gaddr_t blk;     /* the log block, 0 before it exists */
    uint64_t blk_bytes; /* its size (FREE_LOG_BYTES at first; FREE_LOG_CAP_OF: entries) */
    dm_gaddr_t old_blk; /* the block before the last growth, freed after two raises */
    uint64_t old_bytes;
    unsigned old_raises; /* horizon raises since the growth */
    dm_gaddr_t grow_blk; /* the block of a growth begun: named free in this log, not yet ours */
    uint64_t grow_bytes;
    uint64_t grow_ticket; /* the tick that writes its name (free_log_grow_begin) */
    uint64_t mark_us, mark_count, prev_count; /* count at the last two marks, DM_GRACE_US / 2
                                                 apart: the entries of the last quarantine */
    uint64_t grow_after_us; /* no growth before (a growth failed: the pool is full) */
    uint64_t count;         /* entries written in all (the next one's ring position) */
    uint64_t horizon;       /* reuse only blocks freed before this; UINT64_MAX when not logging */
    uint64_t window_us;     /* the names window published with it (free_log_word) */
    uint64_t flushed_us;    /* the newest free time handed to a write, done or not */
    int state;              /* FREE_LOG_OFF, _ON, _FENCED */
    int busy;               /* a tick is on the wire (ticks of one worker do not overlap) */
    uint64_t started;       /* ticks begun (the last one's number) */
    uint64_t done;          /* the number of the last tick whose writes and CAS succeeded */
    uint64_t raised_us;     /* when the horizon was last raised */
    uint64_t confirmed_us;  /* when our last CAS that found the horizon word ours was posted */
    uint64_t unsure;        /* the horizon a raise whose outcome is unknown asked for, 0 none */
    uint64_t unsure_window_us;  /* and its names window */
    uint64_t raising;           /* the horizon the tick on the wire asks for, 0 none */
    uint64_t raising_window_us; /* and its names window */
    free_log_entry_t *staged;   /* entries not written yet, the tick on the wire's first */
    size_t n, cap;
    uint64_t staged_bytes;   /* bytes of the large blocks staged behind the tick on the wire */
    free_log_entry_t *spare; /* the copy a tick writes (kept: a tick's entries are ~170 KB at
                                300k frees a second, and malloc maps and unmaps buffers that
                                big) */
    size_t spare_cap;
} free_log_t;

enum { FREE_LOG_OFF = 0, FREE_LOG_ON = 1, FREE_LOG_FENCED = -1 };

/* l off and empty (no horizon yet): nothing is logged until the log is opened. */
void free_log_init(free_log_t *l);
/* Stop logging for good (fenced, closed, or the worker goes) and free the staged entries. */
void free_log_release(free_log_t *l);

/* Bytes of this process's open log blocks (INFO: allocated, never in an index). */
uint64_t free_log_open_bytes(void);

/* A block freed at freed_us (units of DM_GRAIN bytes) waits for the next flush; staging is
 * a store into a local array, nothing on the data path. Returns -1 (not staged: the log is
 * not on, or full for this tick), 0 (staged) or 1 (staged, and the staged large blocks
 * reached FREE_LOG_EAGER_BYTES: the caller asks for an early tick). */
int free_log_stage(free_log_t *l, dm_gaddr_t addr, uint64_t units, uint64_t freed_us);
/* Stage a claim of the listed block at addr (units grains) before its owner reuses it or
 * gives it away. Returns the number of the tick that carries it (the claim holds once
 * l->done reaches it, and never if the log stops first), or 0 when not staged. */
uint64_t free_log_stage_claim(free_log_t *l, dm_gaddr_t addr, uint64_t units);
/* The highest horizon this worker may have published: the last raise won, the one on the
 * wire, or one whose outcome is unknown (µs; UINT64_MAX when not logging). A small block
 * freed more than free_log_window before it is reused only once claimed. */
uint64_t free_log_top(const free_log_t *l);
/* The smallest names window of those raises (µs): a repairer that replaced any of them
 * leaves the small blocks freed within its window before its horizon, and takes the older
 * ones no entry names. */
uint64_t free_log_window(const free_log_t *l);
/* Whether the staged bytes call for an early tick (FREE_LOG_EAGER_BYTES) and none runs. */
int free_log_due(const free_log_t *l);

/* Whether the ring laps within a quarantine at the present rate (more than half of it
 * written since the mark before last, one to two half quarantines ago): the size to grow
 * to (the smallest FREE_LOG_BYTES times a power of 4 that holds twice that, at most
 * FREE_LOG_MAX_BYTES), or 0 (no growth, or none allowed now). */
uint64_t free_log_wants_room(const free_log_t *l);
/* A growth in two steps, so that a death at any point leaves every log block with a
 * repairer (docs/leases.md "A growth that dies halfway"):
 * 1. free_log_grow_begin takes the new block G (`bytes`, from free_log_wants_room) and
 *    stages an entry naming G as freed now in the present log: once a tick has written it,
 *    a repairer that takes this log takes G too. Call free_log_tick right after. 1-3 RTTs
 *    (the take). Returns 0 or DM_E* (no growth begun; not tried again for a second).
 * 2. Once free_log_grow_ready, free_log_grow writes keep[0..n) (every listed block a
 *    repairer would take: freed at or after the horizon, or large and unclaimed) and an
 *    entry naming the present block as freed now (keep has room for n + 1) as G's first
 *    entries, then CASes the record's free-log word to G. A repairer that takes G then
 *    takes the old block too; the worker itself frees it after two more horizon raises (a
 *    repairer that read the record before the switch then can no longer win its CAS). Its
 *    writes carry a send-by bound (FREE_LOG_SEND_BY_US), so a worker stalled since its last
 *    raise writes nothing into G, which a repairer may hold by then. Call with no tick running
 *    (l->busy clear). 1 RTT per MiB of entries plus 2. Returns 0 or DM_E* (nothing
 *    switched; G goes back on the worker's lists, or stays taken when the CAS's outcome is
 *    unknown; not tried again for a second; DM_EINVAL: keep[] would not fit, or is NULL). */
int free_log_grow_begin(dm_ctx_t *ctx, free_log_t *l, uint64_t bytes);
int free_log_grow_ready(const free_log_t *l);
int free_log_grow(dm_ctx_t *ctx, free_log_t *l, int idx, free_log_entry_t *keep, size_t n);

/* The free-log tick of worker entry idx: creates the log (once: a 1 MiB block, 3 RTTs), else
 * writes what was staged and raises the horizon, 1 RTT. Returns 0, 1 when a repairer took
 * the log over (the caller drops its listed blocks freed in [*drop_lo, *drop_hi]: the
 * repairer may hold them; the log is off from then on) or DM_E* (the staged entries are
 * written again next time). */
int free_log_tick(dm_ctx_t *ctx, free_log_t *l, int idx, uint64_t *drop_lo, uint64_t *drop_hi);

/* At a clean stop: close the log (horizon CAS to FREE_LOG_TAKEN), so that whoever takes the
 * handoff does not take the log as well. Returns 0 (closed, or never opened: *drop_lo >
 * *drop_hi), 1 (taken over: drop [*drop_lo, *drop_hi] as above) or DM_E* (drop them too:
 * the CAS may have landed). 1 RTT. */
int free_log_close(dm_ctx_t *ctx, free_log_t *l, int idx, uint64_t *drop_lo, uint64_t *drop_hi);

/* Repairer side: the log block blk of a dead worker whose horizon word we CASed from `word`
 * to FREE_LOG_TAKEN. Every believable entry freed at or after the word's horizon is queued
 * on ctx's worker's lists (quarantined from now), and, in a log with claims, every large
 * block freed before it that no later entry names (no claim: the owner never reused it
 * or gave it away), and in a log with names every small one freed more than the word's
 * names window before it that no later entry names; then blk itself. *bytes grows by what
 * was taken, *early_bytes (also in *bytes) by what was freed before the horizon. 1 RTT per
 * 64 KB of log. Returns 0, DM_ECORRUPT (not a log), DM_ENOMEM or DM_E*. */
int free_log_take(dm_ctx_t *ctx, dm_gaddr_t blk, uint64_t word, uint64_t *bytes,
                  uint64_t *early_bytes);

#endif
