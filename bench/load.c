/* Bulk loader for benchmarks: N distinct 16-byte keys ("key:%012llu") with 32-byte values,
 * SET over T connections (one thread each), P commands pipelined per round trip. With
 * KEYS_PER_PREFIX > 0 the keys are "p%04llu:%010llu" instead (still 16 bytes below 10,000
 * prefixes): key k is number k % KEYS_PER_PREFIX under prefix k / KEYS_PER_PREFIX. With
 * KEYS_PER_PREFIX "hex" they are "%016llx" of a 64-bit mix of k: numeric-like keys whose
 * first 8 bytes differ (a learned index's case: ROLEX's images, docs/DESIGN.md). With
 * "hex:M" they are prefixed and numeric-like at once: "%04llx%04llx%08llx" of prefix
 * k / M, (n * 40503) mod 2^16 and n = k % M, so up to 65,536 keys of one prefix have
 * distinct 8-byte images (40503 is odd: a bijection of 16-bit n) and SCAN MATCH "%04x*"
 * enumerates one prefix (dmkv-bench-scan ... hex:M; bench/engines.sh). These are loaded in
 * a scattered order (key FROM + i * STRIDE mod (N - FROM) for the i-th), so a pipeline
 * writes across the key space as a hashed load does, not one prefix at a time.
 * FROM > 0 loads keys FROM..N-1 only (a load continued in steps: bench/engines.sh).
 * Usage: dmkv-bench-load PORT N [THREADS=4] [PIPELINE=64] [KEYS_PER_PREFIX=0|M|hex|hex:M]
 *        [FROM=0].
 * Prints keys, seconds, keys/s. */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int port, threads = 4, pipeline = 64;
static unsigned long long nkeys, first, per_prefix;
static int hex_keys;

/* A bijection of 64-bit numbers (splitmix64's finalizer): distinct k, distinct keys. */
static unsigned long long mix(unsigned long long k)
{
    k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
    k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
    return k ^ (k >> 31);
}
static int errors;

/* A stride near span / golden ratio with no factor in common with span: i -> i * stride mod
 * span is then a bijection, and consecutive i land far apart. */
static unsigned long long scatter_stride(unsigned long long span)
{
    unsigned long long s = (unsigned long long)((double)span * 0.6180339887) | 1;
    for (;; s++) {
        unsigned long long a = span, b = s;
        while (b) {
            unsigned long long t = a % b;
            a = b;
            b = t;
        }
        if (a == 1) return s;
    }
}

static void *loader(void *arg)
{
    long t = (long)arg;
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "oom");
        exit(1);
    }
    unsigned long long span = nkeys - first, stride = scatter_stride(span);
    unsigned long long from = first + span * (unsigned long long)t / (unsigned long long)threads;
    unsigned long long to =
        first + span * (unsigned long long)(t + 1) / (unsigned long long)threads;
    char val[33];
    for (unsigned long long i = from; i < to; i += (unsigned long long)pipeline) {
        unsigned long long end =
            i + (unsigned long long)pipeline < to ? i + (unsigned long long)pipeline : to;
        for (unsigned long long j = i; j < end; j++) {
            unsigned long long k = j;
            if (hex_keys && per_prefix) k = first + (j - first) * stride % span;
            snprintf(val, sizeof(val), "value-%026llu", k);
            if (hex_keys && per_prefix)
                redisAppendCommand(c, "SET %04llx%04llx%08llx %s", k / per_prefix,
                                   (k % per_prefix) * 40503 & 0xffff, k % per_prefix, val);
            else if (hex_keys)
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
        fprintf(stderr, "usage: %s PORT N [THREADS] [PIPELINE] [KEYS_PER_PREFIX] [FROM]\n",
                argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    nkeys = strtoull(argv[2], NULL, 10);
    if (argc > 3) threads = atoi(argv[3]);
    if (argc > 4) pipeline = atoi(argv[4]);
    if (argc > 5 && !strncmp(argv[5], "hex", 3)) {
        hex_keys = 1;
        if (argv[5][3] == ':') per_prefix = strtoull(argv[5] + 4, NULL, 10);
    } else if (argc > 5) {
        per_prefix = strtoull(argv[5], NULL, 10);
    }
    if (argc > 6) first = strtoull(argv[6], NULL, 10);
    if (first >= nkeys) {
        fprintf(stderr, "FROM must be below N\n");
        return 2;
    }
    if (hex_keys && per_prefix && (per_prefix > 65536 || nkeys / per_prefix >= 65536)) {
        fprintf(stderr, "hex:M takes M <= 65536 and N / M < 65536\n");
        return 2;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t th[64];
    for (long t = 0; t < threads && t < 64; t++)
        pthread_create(&th[t], NULL, loader, (void *)t);
    for (long t = 0; t < threads && t < 64; t++)
        pthread_join(th[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("keys %llu seconds %.2f rate %.0f errors %d\n", nkeys - first, s,
           (double)(nkeys - first) / s, errors);
    return errors ? 1 : 0;
}
