/* SLOWLOG (Redis 7): commands that ran at least slowlog-log-slower-than microseconds (wall
 * time from the procedure's start to its reply, memory-node round trips included; default
 * 10000, 0 logs every command, negative logs none) are kept newest first, at most
 * slowlog-max-len entries (default 128), each with its arguments (at most 32, each cut to
 * 128 bytes, as Redis cuts them), the client's address and name. AUTH, HELLO and EXEC are
 * not logged (a password must not land in the log; EXEC's commands are logged one by
 * one). Per gateway process, thread-safe. */
#ifndef GW_COMMANDS_SLOWLOG_H
#define GW_COMMANDS_SLOWLOG_H

#include <stdint.h>

#include "commands/commands.h"

/* After gc ran cmd for usec microseconds on c: log it if it was slow enough. */
void gw_slowlog_note(gw_conn_t *c, const gw_command_t *gc, gw_cmd_t *cmd, uint64_t usec);

/* CONFIG slowlog-log-slower-than (microseconds) and slowlog-max-len (entries, >= 0: a
 * smaller length drops the oldest at once). */
long long gw_slowlog_threshold(void);
void gw_slowlog_set_threshold(long long usec);
long long gw_slowlog_max_len(void);
void gw_slowlog_set_max_len(long long n);

/* SLOWLOG GET [count] | LEN | RESET | HELP. */
void cmd_slowlog(gw_conn_t *c, gw_cmd_t *cmd);

#endif
