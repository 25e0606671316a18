/* Bulk loader for benchmarks: N distinct 16-byte keys ("key:%012llu") with 32-byte values,
 * SET over T connections (one thread each), P commands pipelined per round trip. With
 * KEYS_PER_PREFIX > 0 the keys are "p%04llu:%010llu" instead (still 16 bytes below 10,000
 * prefixes): key k is number k % KEYS_PER_PREFIX under prefix k / KEYS_PER_PREFIX. With
 * KEYS_PER_PREFIX "hex" they are "%016llx" of a 64-bit mix of k: numeric-like keys whose
 * first 8 bytes differ (a learned index's case: ROLEX's images, docs/DESIGN.md).
 * Usage: dmkv-bench-load PORT N [THREADS=4] [PIPELINE=64] [KEYS_PER_PREFIX=0|hex].
 * Prints keys, seconds, keys/s. */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int port, threads = 4, pipeline = 64;
static unsigned long long nkeys, per_prefix;
static int hex_keys;

/* A bijection of 64-bit numbers (splitmix64's finalizer): distinct k, distinct keys. */
static unsigned long long mix(unsigned long long k)
{
    k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
    k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
    return k ^ (k >> 31);
}
static int errors;

static void *loader(void *arg)
{
    long t = (long)arg;
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "oom");
        exit(1);
    }
    unsigned long long from = nkeys * (unsigned long long)t / (unsigned long long)threads;
    unsigned long long to = nkeys * (unsigned long long)(t + 1) / (unsigned long long)threads;
    char val[33];
    for (unsigned long long i = from; i < to; i += (unsigned long long)pipeline) {
        unsigned long long end =
            i + (unsigned long long)pipeline < to ? i + (unsigned long long)pipeline : to;
        for (unsigned long long k = i; k < end; k++) {
            snprintf(val, sizeof(val), "value-%026llu", k);
            if (hex_keys)
                redisAppendCommand(c, "SET %016llx %s", mix(k), val);
            else if (per_prefix)
                redisAppendCommand(c, "SET p%04llu:%010llu %s", k / per_prefix, k % per_prefix,
                                   val);
            else
                redisAppendCommand(c, "SET key:%012llu %s", k, val);
        }
        for (unsigned long long k = i; k < end; k++) {
            redisReply *r;
            if (redisGetReply(c, (void **)&r) != REDIS_OK) {
                fprintf(stderr, "connection lost: %s\n", c->errstr);
                exit(1);
            }
            if (r->type == REDIS_REPLY_ERROR &&
                __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED) < 5)
                fprintf(stderr, "error: %s\n", r->str);
            freeReplyObject(r);
        }
    }
    redisFree(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT N [THREADS] [PIPELINE] [KEYS_PER_PREFIX]\n", argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    nkeys = strtoull(argv[2], NULL, 10);
    if (argc > 3) threads = atoi(argv[3]);
    if (argc > 4) pipeline = atoi(argv[4]);
    if (argc > 5 && !strcmp(argv[5], "hex"))
        hex_keys = 1;
    else if (argc > 5)
        per_prefix = strtoull(argv[5], NULL, 10);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t th[64];
    for (long t = 0; t < threads && t < 64; t++)
        pthread_create(&th[t], NULL, loader, (void *)t);
    for (long t = 0; t < threads && t < 64; t++)
        pthread_join(th[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("keys %llu seconds %.2f rate %.0f errors %d\n", nkeys, s, (double)nkeys / s, errors);
    return errors ? 1 : 0;
}
