/* Per-command and per-error counters for INFO commandstats, errorstats and latencystats
 * and LATENCY HISTOGRAM, in Redis 7's fields: calls, usec (wall time from the procedure's
 * start to its reply, microseconds, round trips to memory nodes included), usec_per_call,
 * rejected_calls (refused before running: arity, NOAUTH, clock skew), failed_calls (ran
 * and answered an error), a latency histogram in power-of-two buckets from 1024 ns (as
 * Redis iterates its hdr_histogram); errors counted by their first word ("ERR", "NOAUTH",
 * "OOM", ...). Subcommands of a container (CLIENT, CONFIG, ...) are counted apart, named
 * "client|id" as in Redis 7. Process-wide, thread-safe; CONFIG RESETSTAT clears them. */
#ifndef GW_COMMANDS_CMDSTATS_H
#define GW_COMMANDS_CMDSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "commands/commands.h"
#include "util/buf.h"

/* gc (subcommand sub, -1: none or unknown; gw_command_sub) ran for usec microseconds;
 * failed when its reply was an error. */
void gw_cmdstats_call(const gw_command_t *gc, int sub, uint64_t usec, bool failed);
/* gc (NULL: an unknown command) was refused before running. */
void gw_cmdstats_rejected(const gw_command_t *gc);
/* An error reply was sent: reply points at its text after '-' (len bytes, up to CRLF or
 * further). At most 128 distinct first words are kept, as Redis does. */
void gw_cmdstats_error(const char *reply, size_t len);
/* Append "cmdstat_<name>:calls=..." lines (commands called or rejected at least once). */
void gw_cmdstats_info_commands(gw_buf_t *b);
/* Append "latency_percentiles_usec_<name>:p50=..,p99=..,p99.9=.." lines (each value the
 * bound of the bucket the percentile falls in, microseconds). */
void gw_cmdstats_info_latency(gw_buf_t *b);
/* Reply LATENCY HISTOGRAM [name ...] (names from cmd->argv[from]): a map of the named
 * commands (a container: its subcommands; "cmd|sub": that one; unknown names skipped),
 * or of every command with calls when none is named, each to {calls, histogram_usec:
 * {bucket bound µs => cumulative calls}}. */
void gw_cmdstats_reply_histogram(gw_conn_t *c, gw_cmd_t *cmd, int from);
/* Append "errorstat_<WORD>:count=N" lines. */
void gw_cmdstats_info_errors(gw_buf_t *b);
/* Zero everything (CONFIG RESETSTAT). */
void gw_cmdstats_reset(void);

#endif
