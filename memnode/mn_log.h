/* dmkv-memnode's log: Redis-style lines on stderr,
 *   "<pid>:M 22 Nov 2026 21:00:00.123 * Ready to accept connections tcp"
 * Level marks as in Redis: '.' debug, '-' verbose, '*' notice, '#' warning. */
#ifndef MEMNODE_MN_LOG_H
#define MEMNODE_MN_LOG_H

enum { MN_DEBUG = 0, MN_VERBOSE, MN_NOTICE, MN_WARNING };

/* Drop lines below level (default MN_NOTICE). */
void mn_log_set_level(int level);

/* Level for a Redis loglevel name (debug, verbose, notice, warning), or -1 if unknown. */
int mn_log_level(const char *name);

/* Write one line (a newline is added; longer than 1 KiB is truncated). */
void mn_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
