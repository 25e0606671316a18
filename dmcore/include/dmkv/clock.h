/* Clock skew between gateways, measured through the pool (issue 10 item 6, docs/clocks.md).
 *
 * Expiry is wall-clock time written by one gateway and judged by another, so their clocks
 * must agree. Each gateway process publishes its wall clock every tick in one word of the
 * superblock's clock board (tag:16 | wall ms:48) and reads the others' words in the same
 * batch. A peer word that changed since our previous read landed after that read was
 * posted and before this one completed. With d = our wall clock at completion minus the
 * peer's published time, w = the time between the two (our monotonic clock) and u = how
 * late the peer says the word landed after it read its clock (its clock_delay word,
 * written with its next word):
 *     our clock - peer clock  in  (d - w - u, d]
 * No round trip to the peer and no clock of the peer's is trusted beyond its own reading.
 * A gateway whose clock is surely more than the bound (default 500 ms) away from a
 * majority of the live peers is skewed: it refuses commands (gateway/server) until its
 * clock agrees again; expiry decisions that others depend on (active expiry deletes, SET NX
 * over an expired key) wait the bound out. */
#ifndef DMKV_CLOCK_H
#define DMKV_CLOCK_H

#include <stdint.h>

#include "dmkv/worker.h"

#define DM_CLOCK_SLOTS 32
#define DM_CLOCK_BOUND_MS_DEFAULT 500u
#define DM_CLOCK_STALE_MS 5000u /* a peer word unchanged this long is a stopped gateway */

/* Skew bound in milliseconds (CONFIG / --max-clock-skew-ms); 0 turns the checks off. */
void dm_clock_set_bound_ms(uint32_t ms);
uint32_t dm_clock_bound_ms(void);

/* One clock-board step: WRITE our word and the delay word of our previous one ‖ READ both
 * boards (the word claimed by CAS on first use: an empty slot or one unchanged for
 * 2 * DM_CLOCK_STALE_MS). 1 RTT on node 0. Call from
 * one thread of the process about every 100 ms. Returns 0 or DM_E* (DM_EFULL: no slot). */
int dm_clock_tick(dm_ctx_t *ctx);

/* A clean stop: clear this process's slot (READ + CAS, 2 RTTs), so peers do not take it
 * for dead. Returns 0 or DM_E*. */
int dm_clock_leave(dm_ctx_t *ctx);

/* Peers found dead since the last call: slots whose word stayed unchanged for
 * 2 * DM_CLOCK_STALE_MS, which this process's dm_clock_tick cleared (by CAS, so one
 * process per dead peer). The caller repairs what a dead gateway leaves behind. */
unsigned dm_clock_take_dead(void);
/* The allocation records (dmkv/alloc.h dm_alloc_register) to take over, up to max into
 * out, each returned once: those of the peers found dead, read from the superblock's
 * alloc_board with the board word the clearing CAS replaced, and the one left in a slot
 * this process claimed after its gateway stopped cleanly. Returns how many. */
unsigned dm_clock_take_dead_records(uint64_t *out, unsigned max);
/* How many such records wait. */
unsigned dm_clock_records_pending(void);

typedef struct dm_clock_status {
    int peers;     /* live peers measured */
    int far_peers; /* of which surely more than the bound away */
    int64_t lo_ms; /* the bounds of (our clock - peer clock) of the farthest peer */
    int64_t hi_ms;
    int skewed;     /* far from a majority of the live peers (at least one) */
    uint64_t steps; /* steps of this machine's wall clock seen (measurements paused) */
} dm_clock_status_t;

/* Current verdict (thread-safe). */
void dm_clock_status(dm_clock_status_t *s);

/* Milliseconds that expiry decisions other gateways depend on wait out (active expiry,
 * SET NX over an expired key): the bound while other gateways share the pool, else 0 (one
 * gateway has one clock, and Redis's exact behaviour holds). */
uint32_t dm_clock_margin_ms(void);

/* 1 when this gateway must not serve (dm_clock_status().skewed with the bound on). Lock-free:
 * checked on every key command. */
int dm_clock_skewed(void);

#endif
