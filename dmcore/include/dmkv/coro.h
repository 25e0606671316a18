/* Coroutines on boost.context's fcontext (make_fcontext/jump_fcontext, ~11 ns a switch).
 * Each command runs as one coroutine on its worker thread; remote calls post verbs and
 * yield until completion, so many commands overlap their round trips (RACE §4.1).
 * A coroutine is owned by the thread that spawned it and only ever resumed there. */
#ifndef DMKV_CORO_H
#define DMKV_CORO_H

#include <stddef.h>
#include <stdint.h>

typedef struct dm_coro dm_coro_t;
typedef void (*dm_coro_fn)(void *arg);

/* Start fn(arg) on a fresh coroutine (stack from a per-thread pool, 256 KiB) and run it
 * until it first yields or returns. The coroutine frees itself when fn returns; the
 * returned pointer is valid only while it is suspended. Returns NULL when fn already
 * finished (or on allocation failure, after running nothing: check errno == ENOMEM). */
dm_coro_t *dm_coro_spawn(dm_coro_fn fn, void *arg);

/* Suspend the current coroutine and return to whoever resumed (or spawned) it.
 * Must be called on a coroutine. */
void dm_coro_yield(void);

/* dm_coro_yield, with what it waits for (a static string, e.g. "a batch's replies") for
 * dm_coro_watch to report while it is suspended. */
void dm_coro_yield_on(const char *what);

/* Switch into a suspended coroutine; returns when it yields again or finishes.
 * Must not be called from inside a coroutine (resumes happen from the event loop). */
void dm_coro_resume(dm_coro_t *co);

/* The coroutine running on this thread, or NULL on the thread's main context. */
dm_coro_t *dm_coro_self(void);

/* A pointer private to the running coroutine (NULL when unset or outside a coroutine). */
void dm_coro_set_local(void *p);
void *dm_coro_get_local(void);

/* Ordered commit points (issue 11; gateway/net/conn.c has the argument). A write that runs
 * concurrently with earlier writes of its client connection carries a turn hook; its first
 * change another client can see waits for its turn:
 *  - dm_coro_wait_turn() (a CHIME leaf lock before an insert or delete, any commit on a
 *    connection without chains) returns once every earlier command of the connection has
 *    finished; the turn is then held until the command ends;
 *  - a commit CAS (a RACE slot CAS of a present key, pool/batch.c dm_batch_commit) to a
 *    connection with DM_CAP_CHAIN waits (dm_coro_wait_commit) only until every earlier
 *    command has finished or has posted its own commit CAS on the same chain, still intact:
 *    the memory node then runs the commits in order and skips the later ones once one
 *    fails, so none lands before an earlier one of its connection.
 * Calls on a coroutine without a hook (every command run in order) return at once. */
struct dm_chain_pos; /* dmkv/batch.h */
typedef struct dm_turn_hook {
    /* Return 0 once every earlier command has finished (on == NULL), or finished or posted
     * its commit at a position still intact on on's connection. While the coroutine holds
     * an early lock (below) it may give up instead: DM_EYIELD once wounded, or once it
     * waited longer than the hook's bound (a holder out of dm_coro_early_contend's reach). */
    int (*wait)(void *arg, const struct dm_chain_pos *on);
    /* This command's chained commit was posted at `at`; NULL: it failed or was skipped (no
     * longer a position later commits may follow). */
    void (*posted)(void *arg, const struct dm_chain_pos *at);
    /* The coroutine was wounded: if parked in wait, resume it (it returns DM_EYIELD). */
    void (*wound)(void *arg);
    /* 1 while later commands of the same connection are in flight (NULL: never). */
    int (*behind)(void *arg);
    void *arg;
    uint8_t chain_tag; /* nonzero: the chain tag of this client connection's commits */
} dm_turn_hook_t;
/* Set (hook stays the caller's until cleared with NULL) or clear the running coroutine's
 * hook. Setting one numbers the command (its age for dm_coro_early_contend). */
void dm_coro_set_turn(const dm_turn_hook_t *hook);
/* Returns 0 with the whole turn held, or DM_EYIELD (only while an early lock is held). */
int dm_coro_wait_turn(void);
/* 1 while the running coroutine has a turn hook and has not waited for its whole turn. */
int dm_coro_turn_pending(void);
/* The running coroutine's chain tag (its turn hook's), 0 without a hook: its commits are
 * posted chained only when nonzero. */
int dm_coro_chain_tag(void);
/* The batch layer, before posting a commit CAS at `on` (its epoch not yet chosen): waits
 * as above and returns the chain tag to post it with, 0 (no hook: post unchained), or
 * DM_EYIELD (not posted; only while an early lock is held). */
int dm_coro_wait_commit(const struct dm_chain_pos *on);
/* The batch layer: the commit was posted at `at` (NULL: it failed or was skipped). */
void dm_coro_commit_posted(const struct dm_chain_pos *at);

/* Early locks (docs/throughput.md "Inserts lock before their turn"). A SET of an absent key
 * in a pipeline locks its CHIME leaf before its turn and waits for the turn (at its slot
 * CAS) holding the lock. An earlier command that needs the same lock would then wait for a
 * later one that waits for it: a cycle. So such a hold can be broken. The holder registers
 * the lock's address (res); a command of this thread that finds res locked calls
 * dm_coro_early_contend, which wounds the holder when the caller comes first (holds its
 * whole turn, runs without a hook, or started earlier); a wounded holder's turn waits
 * return DM_EYIELD, and it unlocks, waits for its whole turn and locks again. Waits between
 * commands then always point from a later command to an earlier one or to one that holds
 * its whole turn, so no cycle forms on a thread; holders on other threads or gateways are
 * broken by the hook's time bound. Calls outside a coroutine do nothing. */
/* The running coroutine locked res (early when before its turn; every holder registers, so
 * that dm_coro_early_taken sees a lock this thread holds in any way). */
void dm_coro_early_hold(uint64_t res);
void dm_coro_early_release(void); /* also clears the wound */
/* co's registered lock moved to res (a split under a shared hold, chime/share.c, moves other
 * coroutines' holds); nothing when co holds none. */
void dm_coro_early_move(dm_coro_t *co, uint64_t res);
/* Holds an early lock or waits in dm_coro_wait_turn_or: its turn wait may give way. */
int dm_coro_early_held(void);
int dm_coro_early_wounded(void); /* ... and was wounded or signalled: give way now */
/* 1 when another coroutine of this thread holds res (early or not): a lock before the turn
 * would only find it busy. */
int dm_coro_early_taken(uint64_t res);
void dm_coro_early_contend(uint64_t res);
/* Waits for the whole turn like dm_coro_wait_turn (holding nothing), or until another
 * coroutine of this thread calls dm_coro_signal(res), whichever comes first: 0 with the turn
 * held, DM_EYIELD when signalled (or after the hook's bound; the turn is not held). Shared
 * leaf holds (chime/share.c) wait so for a leaf another command of the thread holds. */
int dm_coro_wait_turn_or(uint64_t res);
void dm_coro_signal(uint64_t res);
/* 1 while later commands of the running coroutine's connection are in flight (the hook's
 * behind; 0 without one): a leaf lock may then be worth sharing. */
int dm_coro_more_behind(void);
/* Holds registered and wounds dealt by this process (INFO). */
void dm_coro_early_stats(uint64_t *holds, uint64_t *wounds);

/* Number of live coroutines on this thread (suspended + running). */
size_t dm_coro_live(void);

/* Name the running coroutine (a static string: a command's name, a background task's) for
 * dm_coro_watch. */
void dm_coro_set_name(const char *name);

/* Bounded work (a command: every wait in it has a deadline) begins on the running
 * coroutine at now_ms (monotonic milliseconds), or ends. Nests: an EXEC's commands count
 * from the EXEC. Outside a coroutine: nothing. */
void dm_coro_begin_bounded(uint64_t now_ms);
void dm_coro_end_bounded(void);

/* A watchdog's view of a coroutine (dm_coro_watch): parked (still_ms > 0 or running_ms ==
 * 0), or in bounded work that runs long while it is resumed (running_ms > 0). */
typedef struct dm_coro_still {
    const char *name;     /* dm_coro_set_name's, or "(unnamed)" */
    const char *waits_on; /* dm_coro_yield_on's label, or "(unlabelled)" */
    uint64_t still_ms;    /* parked: suspended without a resume for this long, milliseconds */
    uint64_t running_ms;  /* running long: since its bounded work began, milliseconds */
    uint64_t resumes;     /* running long: times the coroutine was resumed in all */
} dm_coro_still_t;

/* Look at this thread's suspended coroutines (call from its loop, not from a coroutine):
 * fills out[0..max) with
 * - those not resumed for still_ms or more since an earlier call saw them resumed (a
 *   coroutine's first look starts its clock at now_ms, a monotonic time in milliseconds);
 *   with once, each is reported once per stillness. Commands are bounded (DM_OP_TIMEOUT_US
 *   per operation, 10 s for a memory node's reply): one parked for tens of seconds waits
 *   for a wake-up that will not come, and its name and label say where
 *   (docs/testing-concurrency.md);
 * - those resumed since the previous look whose bounded work has run for run_ms or more,
 *   once per piece of work (UINT64_MAX: none): a command that polls a lock or retries every
 *   millisecond without end is never still, and this names it.
 * Returns how many there are (may exceed max); *nrunning (may be NULL) gets how many of
 * them run long. */
size_t dm_coro_watch(uint64_t now_ms, uint64_t still_ms, uint64_t run_ms, int once,
                     dm_coro_still_t *out, size_t max, size_t *nrunning);

#endif
