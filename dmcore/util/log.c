/* Redis-style logging to stderr. */
#include "dmkv/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int min_level = DM_LOG_NOTICE;

void dm_log_set_level(int level)
{
    min_level = level;
}

int dm_log_level_from_name(const char *name)
{
    static const char *names[] = {"debug", "verbose", "notice", "warning"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(name, names[i]) == 0) return i;
    return -1;
}

void dm_log(int level, const char *fmt, ...)
{
    if (level < min_level) return;
    static const char marks[] = ".-*#";
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    time_t sec = tv.tv_sec;
    localtime_r(&sec, &tm);
    char when[64];
    size_t off = strftime(when, sizeof(when), "%d %b %Y %H:%M:%S.", &tm);
    snprintf(when + off, sizeof(when) - off, "%03d", (int)(tv.tv_usec / 1000));
    fprintf(stderr, "%d:M %s %c %s\n", (int)getpid(), when, marks[level & 3], msg);
    fflush(stderr);
}
