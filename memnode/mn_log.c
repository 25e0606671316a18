/* Redis-style logging for dmkv-memnode (see mn_log.h). */
#include "mn_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int min_level = MN_NOTICE;

void mn_log_set_level(int level)
{
    min_level = level;
}

int mn_log_level(const char *name)
{
    static const char *const names[] = {"debug", "verbose", "notice", "warning"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(name, names[i]) == 0) return i;
    return -1;
}

void mn_log(int level, const char *fmt, ...)
{
    if (level < min_level) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    time_t sec = tv.tv_sec;
    struct tm tm;
    localtime_r(&sec, &tm);
    char when[64];
    strftime(when, sizeof(when), "%d %b %Y %H:%M:%S", &tm);
    fprintf(stderr, "%d:M %s.%03d %c %s\n", (int)getpid(), when, (int)(tv.tv_usec / 1000),
            ".-*#"[level & 3], msg);
    fflush(stderr);
}
