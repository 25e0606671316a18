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
    /* Return once every earlier command has finished (on == NULL), or finished or posted
     * its commit at a position still intact on on's connection. */
    void (*wait)(void *arg, const struct dm_chain_pos *on);
    /* This command's chained commit was posted at `at`; NULL: it failed or was skipped (no
     * longer a position later commits may follow). */
    void (*posted)(void *arg, const struct dm_chain_pos *at);
    void *arg;
    uint8_t chain_tag; /* nonzero: the chain tag of this client connection's commits */
} dm_turn_hook_t;
/* Set (hook stays the caller's until cleared with NULL) or clear the running coroutine's
 * hook. */
void dm_coro_set_turn(const dm_turn_hook_t *hook);
void dm_coro_wait_turn(void);
/* 1 while the running coroutine has a turn hook and has not waited for its whole turn. */
int dm_coro_turn_pending(void);
/* The batch layer, before posting a commit CAS at `on` (its epoch not yet chosen): waits
 * as above and returns the chain tag to post it with, or 0 (no hook: post unchained). */
uint8_t dm_coro_wait_commit(const struct dm_chain_pos *on);
/* The batch layer: the commit was posted at `at` (NULL: it failed or was skipped). */
void dm_coro_commit_posted(const struct dm_chain_pos *at);

/* Number of live coroutines on this thread (suspended + running). */
size_t dm_coro_live(void);

#endif
