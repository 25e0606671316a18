/* YCSB-style workload driver on hiredis (YCSB's own Redis binding cannot drive dmkv: it
 * stores hashes). Runs one core workload over keys that dmkv-bench-load wrote
 * ("key:%012llu", 32-byte values), on C connections (one thread each), P commands
 * pipelined per round trip, OPS operations in all (bounded).
 *
 *   A 50% GET, 50% SET (update)        B 95% GET, 5% SET
 *   C 100% GET                         D 95% GET of recent keys, 5% SET of new keys
 *   F 50% GET, 50% read-modify-write (GETSET: one command, so the RMW is atomic)
 *
 * Key choice: uniform, or zipf (theta 0.99, YCSB's ZipfianGenerator after Gray et al.,
 * scrambled like ScrambledZipfianGenerator by hashing the rank so hot keys are spread
 * over the keyspace). D with zipf reads "latest": rank 0 is the newest insert.
 * Latency of a command: from sending its pipeline batch to reading its reply.
 *
 * Usage: dmkv-bench-ycsb PORT WORKLOAD DIST RECORDS OPS [CONNS=16] [PIPELINE=16]
 * Prints one line: "ops N seconds S rate R p50_us X p99_us Y errors E". */
#include <hiredis/hiredis.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define THETA 0.99

typedef struct {
    uint64_t n;
    double zetan, alpha, eta, half_pow_theta;
} zipf_t;

static int port, conns = 16, pipeline = 16;
static char workload;
static int zipfian;
static uint64_t records, total_ops;
static uint64_t inserted; /* D: keys [0, inserted) exist; atomically advanced */
static zipf_t zipf;
static int errors;

typedef struct {
    long id;
    uint64_t ops;
    uint32_t *lat_us;
    uint64_t nlat;
} worker_t;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* YCSB ZipfianGenerator constants for n items (zeta(n) summed once, O(n)). */
static void zipf_init(zipf_t *z, uint64_t n)
{
    double zeta2 = 1.0 + pow(0.5, THETA);
    z->n = n;
    z->zetan = 0;
    for (uint64_t i = 1; i <= n; i++)
        z->zetan += 1.0 / pow((double)i, THETA);
    z->alpha = 1.0 / (1.0 - THETA);
    z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - THETA)) / (1.0 - zeta2 / z->zetan);
    z->half_pow_theta = 1.0 + pow(0.5, THETA);
}

/* A zipf rank in [0, n): rank 0 the most popular. */
static uint64_t zipf_rank(const zipf_t *z, struct drand48_data *r)
{
    double u;
    drand48_r(r, &u);
    double uz = u * z->zetan;
    if (uz < 1.0) return 0;
    if (uz < z->half_pow_theta) return 1;
    uint64_t k = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
    return k < z->n ? k : z->n - 1;
}

static uint64_t uniform(uint64_t n, struct drand48_data *r)
{
    double u;
    drand48_r(r, &u);
    uint64_t k = (uint64_t)(u * (double)n);
    return k < n ? k : n - 1;
}

/* The key an operation reads or updates. */
static uint64_t pick_key(struct drand48_data *r)
{
    if (workload == 'd') {
        uint64_t have = __atomic_load_n(&inserted, __ATOMIC_RELAXED);
        if (!zipfian) return uniform(have, r);
        uint64_t back = zipf_rank(&zipf, r);
        return back < have ? have - 1 - back : uniform(have, r);
    }
    if (!zipfian) return uniform(records, r);
    uint64_t rank = zipf_rank(&zipf, r);
    return XXH64(&rank, sizeof(rank), 0) % records;
}

/* Appends one operation of the workload to c's pipeline. */
static void append_op(redisContext *c, struct drand48_data *r)
{
    double u;
    drand48_r(r, &u);
    char val[33];
    long v;
    lrand48_r(r, &v);
    snprintf(val, sizeof(val), "value-%026ld", v);
    double write_share = workload == 'a' || workload == 'f' ? 0.5 : workload == 'c' ? 0.0 : 0.05;
    if (u >= write_share) {
        redisAppendCommand(c, "GET key:%012llu", (unsigned long long)pick_key(r));
    } else if (workload == 'd') {
        uint64_t k = __atomic_fetch_add(&inserted, 1, __ATOMIC_RELAXED);
        redisAppendCommand(c, "SET key:%012llu %s", (unsigned long long)k, val);
    } else if (workload == 'f') {
        redisAppendCommand(c, "GETSET key:%012llu %s", (unsigned long long)pick_key(r), val);
    } else {
        redisAppendCommand(c, "SET key:%012llu %s", (unsigned long long)pick_key(r), val);
    }
}

static void *run(void *arg)
{
    worker_t *w = arg;
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "oom");
        exit(1);
    }
    struct drand48_data r;
    srand48_r(w->id * 7919 + 17, &r);
    w->lat_us = malloc(sizeof(uint32_t) * (w->ops ? w->ops : 1));
    for (uint64_t done = 0; done < w->ops;) {
        uint64_t batch = w->ops - done < (uint64_t)pipeline ? w->ops - done : (uint64_t)pipeline;
        for (uint64_t i = 0; i < batch; i++)
            append_op(c, &r);
        double t0 = now_s();
        for (uint64_t i = 0; i < batch; i++) {
            redisReply *rep;
            if (redisGetReply(c, (void **)&rep) != REDIS_OK) {
                fprintf(stderr, "connection lost: %s\n", c->errstr);
                exit(1);
            }
            w->lat_us[w->nlat++] = (uint32_t)((now_s() - t0) * 1e6);
            if (rep->type == REDIS_REPLY_ERROR &&
                __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED) < 5)
                fprintf(stderr, "error: %s\n", rep->str);
            freeReplyObject(rep);
        }
        done += batch;
    }
    redisFree(c);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s PORT a|b|c|d|f uniform|zipf RECORDS OPS [CONNS] [PIPELINE]\n",
                argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    workload = argv[2][0];
    zipfian = strcmp(argv[3], "zipf") == 0;
    records = strtoull(argv[4], NULL, 10);
    total_ops = strtoull(argv[5], NULL, 10);
    if (argc > 6) conns = atoi(argv[6]);
    if (argc > 7) pipeline = atoi(argv[7]);
    if (!strchr("abcdf", workload) || argv[2][1] || records == 0 || conns < 1 || conns > 256 ||
        pipeline < 1 || (!zipfian && strcmp(argv[3], "uniform") != 0)) {
        fprintf(stderr, "%s: bad arguments\n", argv[0]);
        return 2;
    }
    inserted = records;
    zipf_init(&zipf, records);
    worker_t *w = calloc((size_t)conns, sizeof(*w));
    pthread_t *th = calloc((size_t)conns, sizeof(*th));
    double t0 = now_s();
    for (long t = 0; t < conns; t++) {
        w[t].id = t;
        w[t].ops = total_ops * (uint64_t)(t + 1) / (uint64_t)conns -
                   total_ops * (uint64_t)t / (uint64_t)conns;
        pthread_create(&th[t], NULL, run, &w[t]);
    }
    for (long t = 0; t < conns; t++)
        pthread_join(th[t], NULL);
    double secs = now_s() - t0;
    uint32_t *all = malloc(sizeof(uint32_t) * (total_ops ? total_ops : 1));
    uint64_t n = 0;
    for (long t = 0; t < conns; t++) {
        memcpy(all + n, w[t].lat_us, sizeof(uint32_t) * w[t].nlat);
        n += w[t].nlat;
        free(w[t].lat_us);
    }
    qsort(all, n, sizeof(uint32_t), cmp_u32);
    printf("ops %llu seconds %.2f rate %.0f p50_us %u p99_us %u errors %d\n", (unsigned long long)n,
           secs, (double)n / secs, n ? all[n / 2] : 0, n ? all[n * 99 / 100] : 0, errors);
    free(all);
    free(w);
    free(th);
    return errors ? 1 : 0;
}
