/* dmkv-memnode's ROLEX retrainer (ROLEX §3.5, §4.6: retraining runs on the memory node's CPU):
 * the one place a memory node runs index code. A thread started with the node; until node 0's
 * superblock word rolex_root is set in this node's own region it only reads that word (an
 * in-process load, no verbs) every MN_RETRAINER_IDLE_MS. Once set, it adopts the region as a
 * `local` one (dm_local_region_adopt), opens a worker on it and runs dm_rolex_host_step every
 * MN_RETRAINER_POLL_MS: the retrain's reads and writes are ordinary verbs, executed by the CPU
 * (dmcore/transport/exec.c). It never CASes or FAAs a word gateways CAS or FAA (retrain.c,
 * host.c): on rdma an RNIC's atomics are not atomic with the CPU's. Before its first access it
 * moves the tcp executor to line-locked copies (mn_exec_gate.h), so its copies and the
 * executor's never race (leaves and models carry checksums anyway, as against an RNIC's DMA):
 * tests/tsan runs ROLEX pools' integration tests with the thread hosting. */
#ifndef MEMNODE_MN_RETRAINER_H
#define MEMNODE_MN_RETRAINER_H

#include <pthread.h>
#include <stdint.h>

#include "mn_exec_gate.h"

#define MN_RETRAINER_IDLE_MS 100 /* polls of rolex_root while it is 0 */
#define MN_RETRAINER_POLL_MS 10  /* polls of the root's alloc_num once hosting */

typedef struct mn_retrainer {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running, stop;
    uint8_t *base;
    uint64_t size;
    mn_exec_gate_t *gate; /* the tcp executor's, NULL: none (a test's local region) */
    char name[48];        /* the local region's name */
    /* Read with __atomic loads from any thread (tests). */
    uint64_t root;               /* the root hosted, 0 until rolex_root is seen */
    uint64_t retrains, failures; /* retrains done and failed */
    uint64_t total_us, max_us;   /* their durations */
    uint64_t version;            /* the model version the last retrain published */
} mn_retrainer_t;

/* Start the thread over the region [base, base + size) (formatted: a node header at 0),
 * adopted as local region `name` once there is work (< 48 bytes); gate (NULL: none) is locked
 * before that (mn_exec_gate_lock). Returns 0, or -1 with errno when the thread cannot be
 * created. */
int mn_retrainer_start(mn_retrainer_t *t, uint8_t *base, uint64_t size, mn_exec_gate_t *gate,
                       const char *name);

/* Stop and join the thread (a retrain in progress finishes first); idempotent. The region
 * must stay mapped until this returns. */
void mn_retrainer_stop(mn_retrainer_t *t);

#endif
