/* Redis-style log lines on stderr:
 *   "<pid>:M 22 Nov 2026 21:00:00.123 * Ready to accept connections tcp"
 * Level characters as in Redis: '.' debug, '-' verbose, '*' notice, '#' warning. */
#ifndef DMKV_LOG_H
#define DMKV_LOG_H

enum { DM_LOG_DEBUG = 0, DM_LOG_VERBOSE, DM_LOG_NOTICE, DM_LOG_WARNING };

/* Lines below this level are dropped (default DM_LOG_NOTICE). */
void dm_log_set_level(int level);
/* Parse a Redis loglevel name (debug, verbose, notice, warning); returns -1 if unknown. */
int dm_log_level_from_name(const char *name);
/* Write one line (thread-safe: one fprintf per line); a trailing newline is added. */
void dm_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
