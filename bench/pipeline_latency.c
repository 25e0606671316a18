/* Time to the first and to the last reply of one long pipeline (issue 11): a server that
 * runs a pipeline's commands one at a time and answers at its end shows both times equal;
 * one that streams answers the first long before the last.
 *   dmkv-bench-pipeline PORT [COMMANDS] [set|get]
 * Prints: commands, ms to first reply, ms to last reply, requests/s. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [COMMANDS] [set|get]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), n = argc > 2 ? atoi(argv[2]) : 10000;
    int get = argc > 3 && !strcmp(argv[3], "get");
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "out of memory");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (get)
            redisAppendCommand(c, "GET pl:%d", i % 1000);
        else
            redisAppendCommand(c, "SET pl:%d v%d", i % 1000, i);
    }
    double t0 = now_ms(), first = 0;
    for (int i = 0; i < n; i++) {
        redisReply *r;
        if (redisGetReply(c, (void **)&r) != REDIS_OK) {
            fprintf(stderr, "reply %d: %s\n", i, c->errstr);
            return 1;
        }
        if (i == 0) first = now_ms() - t0;
        freeReplyObject(r);
    }
    double last = now_ms() - t0;
    printf("%d %.2f %.2f %.0f\n", n, first, last, last > 0 ? n / (last / 1e3) : 0);
    redisFree(c);
    return 0;
}
