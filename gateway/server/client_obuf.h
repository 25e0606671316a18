/* client-output-buffer-limit (Redis's, per client class) for one gateway: a client whose
 * replies not yet taken by its socket (built, queued behind earlier commands of its
 * pipeline, or handed to libuv and not yet written) reach the class's hard limit is
 * closed at once; one that stays at or over the soft limit for more than soft-seconds is
 * closed too. 0 disables a limit. Classes as Redis names them: normal, replica (also
 * "slave"), pubsub; every dmkv client, MONITOR included, is of class normal (dmkv has no
 * replication or pub/sub), and the other two are kept for CONFIG GET/SET round trips.
 * Defaults are Redis's (config/obuf_limits.h: the values' syntax).
 * Besides it, output over 64 MiB pauses the client's command loop (net/conn.h
 * GW_OUT_HIGH), so a slow reader is bounded even with no limit. Closings are logged and
 * counted in INFO stats client_output_buffer_limit_disconnections. */
#ifndef GW_SERVER_CLIENT_OBUF_H
#define GW_SERVER_CLIENT_OBUF_H

#include <stdbool.h>
#include <stdint.h>

#include "config/obuf_limits.h"
#include "net/conn.h"
#include "server/thread.h"

/* The limits in force (thread-safe; a reader racing a set may see a mix of old and new). */
void gw_obuf_get(gw_obuf_limit_t lim[GW_OBUF_CLASSES]);
void gw_obuf_set(const gw_obuf_limit_t lim[GW_OBUF_CLASSES]);

/* Bytes of c's replies not yet written to its socket (its own thread). */
uint64_t gw_obuf_bytes(const gw_conn_t *c);

/* Check c (its own thread) against its class's limits at now_ms (monotonic): over the hard
 * limit, or over the soft one for longer than soft-seconds, closes c and returns true.
 * Called after replies are handed to the socket (returns at once when there is no limit). */
bool gw_obuf_check(gw_conn_t *c, uint64_t now_ms);

/* th's cron tick: each of its clients' bytes published in its omem for CLIENT LIST (other
 * threads), then checked against the limits (soft limits need time to pass). */
void gw_obuf_tick(gw_thread_t *th);

#endif
