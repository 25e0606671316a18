/* maxmemory-clients (Redis 7's client eviction) for one gateway: the memory its clients hold
 * (commands queued and the one being read, replies not yet handed to the kernel or still
 * in flight, MONITOR lines waiting) is kept under a limit by closing the clients holding
 * the most, never one with CLIENT NO-EVICT on. 0 (the default, as in Redis) = no limit;
 * bytes only (Redis's percentage is of maxmemory, which in dmkv is the pool's, not this
 * process's). A client that alone holds more than the limit is closed when it reads; the
 * sum is checked by every thread's cron tick (10 Hz): each thread publishes its clients'
 * bytes and its biggest evictable client, and the thread whose client is the biggest of
 * all closes it, one per tick, once it has seen the total over on two ticks in a row
 * (the others' sums are up to a tick old). Evictions are logged and counted
 * in INFO stats evicted_clients. */
#ifndef GW_SERVER_CLIENT_EVICT_H
#define GW_SERVER_CLIENT_EVICT_H

#include <stdbool.h>
#include <stdint.h>

#include "net/conn.h"
#include "server/thread.h"

/* The limit in bytes (0 = none). Thread-safe. */
uint64_t gw_evict_limit(void);
void gw_evict_set_limit(uint64_t bytes);

/* Bytes c holds now (its own thread; MONITOR lines counted under th->lock only). */
uint64_t gw_client_mem(const gw_conn_t *c);

/* c (its own thread, after a read) alone over the limit: closed. Returns true then. */
bool gw_evict_if_over(gw_conn_t *c);

/* th's cron tick: publish its clients' bytes; close its biggest client when the total is
 * over the limit and that client is the biggest of all threads. */
void gw_evict_tick(gw_thread_t *th);

#endif
