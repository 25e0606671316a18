/* Coroutines on boost.context's fcontext (make_fcontext/jump_fcontext, ~11 ns a switch).
 * Each command runs as one coroutine on its worker thread; remote calls post verbs and
 * yield until completion, so many commands overlap their round trips (RACE §4.1).
 * A coroutine is owned by the thread that spawned it and only ever resumed there. */
#ifndef DMKV_CORO_H
#define DMKV_CORO_H

#include <stddef.h>

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
 * concurrently with earlier writes of its client connection carries a turn hook; the
 * write path calls dm_coro_wait_turn() just before its first change another client can
 * see (a RACE slot CAS of a present key, a CHIME leaf lock before an insert or delete),
 * and the hook returns once every earlier command of the connection has finished. The
 * hook runs at most once per coroutine; later calls, and calls on a coroutine without a
 * hook (every command run in order), return at once. */
typedef void (*dm_turn_fn)(void *arg);
void dm_coro_set_turn(dm_turn_fn fn, void *arg);
void dm_coro_wait_turn(void);
/* 1 while the running coroutine has a turn hook it has not waited for yet. */
int dm_coro_turn_pending(void);

/* Number of live coroutines on this thread (suspended + running). */
size_t dm_coro_live(void);

#endif
