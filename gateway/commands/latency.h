/* The latency monitor (Redis 7.0's LATENCY LATEST / HISTORY / RESET / DOCTOR / HELP): with
 * latency-monitor-threshold > 0 (milliseconds; 0, the default, turns it off), each command
 * that took at least that long (wall time, memory-node round trips included) adds a sample
 * to its event, "fast-command" or "command" by the command's fast flag: one sample per
 * second (the highest), the last 160 kept, plus the all-time maximum. Per gateway process,
 * thread-safe. HISTOGRAM comes from the command statistics (cmdstats.h); GRAPH is not
 * implemented (an error says so). */
#ifndef GW_COMMANDS_LATENCY_H
#define GW_COMMANDS_LATENCY_H

#include <stdint.h>

#include "commands/commands.h"

/* After gc ran for usec microseconds: add a sample if over the threshold. */
void gw_latency_note(const gw_command_t *gc, uint64_t usec);

/* CONFIG latency-monitor-threshold, milliseconds (>= 0). */
long long gw_latency_threshold(void);
void gw_latency_set_threshold(long long ms);

/* LATENCY LATEST | HISTORY event | RESET [event ...] | DOCTOR | HELP. */
void cmd_latency(gw_conn_t *c, gw_cmd_t *cmd);

#endif
