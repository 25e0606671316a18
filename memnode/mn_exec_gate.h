/* The handshake that moves dmkv-memnode's tcp executor (mn_request.c, one loop thread) from
 * plain copies to line-locked ones (dmcore/transport/exec.c dm_region_exec) once another thread
 * of the node starts touching the region too: the ROLEX retrainer (mn_retrainer.c). Until then
 * the executor is the region's only CPU user and copies without locks; afterwards both sides
 * take the striped line locks, so neither copy races the other's (ThreadSanitizer sees the
 * locks), at the cost of a lock per 64-byte line on the nodes that host a ROLEX index only.
 *
 * Dekker's handshake with sequentially consistent accesses: the executor announces a batch
 * (busy = 1), then reads `locked`; the other thread sets `locked`, then waits until no batch is
 * announced. Either the executor sees `locked` (and locks), or the other thread sees it busy
 * and waits for that batch's end (the release store of busy = 0 orders its copies before). */
#ifndef MEMNODE_MN_EXEC_GATE_H
#define MEMNODE_MN_EXEC_GATE_H

#include <sched.h>

typedef struct mn_exec_gate {
    int locked; /* 1 once another thread touches the region: line locks from then on */
    int busy;   /* 1 while the executor runs a batch */
} mn_exec_gate_t;

/* The executor, before a batch: returns 1 when it must take line locks. */
static inline int mn_exec_gate_enter(mn_exec_gate_t *g)
{
    __atomic_store_n(&g->busy, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&g->locked, __ATOMIC_SEQ_CST);
}

/* The executor, after the batch. */
static inline void mn_exec_gate_leave(mn_exec_gate_t *g)
{
    __atomic_store_n(&g->busy, 0, __ATOMIC_RELEASE);
}

/* Another thread, before its first access to the region: from its return on, every batch the
 * executor runs takes line locks. */
static inline void mn_exec_gate_lock(mn_exec_gate_t *g)
{
    __atomic_store_n(&g->locked, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&g->busy, __ATOMIC_SEQ_CST))
        sched_yield();
}

#endif
