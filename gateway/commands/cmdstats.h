/* Per-command and per-error counters for INFO commandstats and errorstats, in Redis 7's
 * fields: calls, usec (wall time from the procedure's start to its reply, microseconds,
 * round trips to memory nodes included), usec_per_call, rejected_calls (refused before
 * running: arity, NOAUTH, clock skew), failed_calls (ran and answered an error); errors
 * counted by their first word ("ERR", "NOAUTH", "OOM", ...). Process-wide, thread-safe;
 * CONFIG RESETSTAT clears them. */
#ifndef GW_COMMANDS_CMDSTATS_H
#define GW_COMMANDS_CMDSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "commands/commands.h"
#include "util/buf.h"

/* gc ran for usec microseconds; failed when its reply was an error. */
void gw_cmdstats_call(const gw_command_t *gc, uint64_t usec, bool failed);
/* gc (NULL: an unknown command) was refused before running. */
void gw_cmdstats_rejected(const gw_command_t *gc);
/* An error reply was sent: reply points at its text after '-' (len bytes, up to CRLF or
 * further). At most 128 distinct first words are kept, as Redis does. */
void gw_cmdstats_error(const char *reply, size_t len);
/* Append "cmdstat_<name>:calls=..." lines (commands called or rejected at least once). */
void gw_cmdstats_info_commands(gw_buf_t *b);
/* Append "errorstat_<WORD>:count=N" lines. */
void gw_cmdstats_info_errors(gw_buf_t *b);
/* Zero everything (CONFIG RESETSTAT). */
void gw_cmdstats_reset(void);

#endif
