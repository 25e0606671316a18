/* MONITOR: every command any client of this gateway runs, streamed to the connections that
 * asked for it, in Redis's line format ("+<unix s>.<us> [0 <ip:port>] \"set\" \"k\" ...").
 * Commands are fed after they ran (so EXEC's queued commands come before "exec"), never
 * admin ones (CONFIG, MONITOR, SLOWLOG, ...), AUTH and HELLO's AUTH arguments redacted.
 * Lines reach a monitor on another thread through that thread's uv_async; they are added
 * to its output only while it runs no command (else at the next wake or cron tick). Only
 * this gateway's clients are seen: each gateway of a pool has its own MONITOR. */
#ifndef GW_SERVER_MONITOR_H
#define GW_SERVER_MONITOR_H

#include <stdbool.h>

#include "commands/commands.h"
#include "net/conn.h"
#include "server/thread.h"

/* Make c a monitor (MONITOR). Thread-safe. */
void gw_monitor_add(gw_conn_t *c);
/* c stops being a monitor (RESET, close). No-op when it is none. Thread-safe. */
void gw_monitor_remove(gw_conn_t *c);
/* Feed a command that from ran (gc its table entry) to every monitor. Cheap when there is
 * none (one atomic load). */
void gw_monitor_feed(gw_conn_t *from, const gw_command_t *gc, const gw_cmd_t *cmd);
/* Move the lines waiting for th's monitors into their output and flush it (th's loop:
 * its uv_async callback and cron tick). */
void gw_monitor_deliver(gw_thread_t *th);

#endif
