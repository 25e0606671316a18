/* INFO commandstats, errorstats and latencystats, LATENCY HISTOGRAM (cmdstats.h). */
#include "commands/cmdstats.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/errors.h"
#include "resp/reply.h"

/* Latency histogram buckets: bucket k counts calls under 1024 << k ns (bucket 0: under
 * 1 µs), Redis's log iteration of its hdr_histogram (base 1024 ns, factor 2). */
#define NBUCKETS 40

typedef struct cmd_counters {
    uint64_t calls, usec, rejected, failed;
    uint64_t hist[NBUCKETS];
} cmd_counters_t;

/* Slot 0 of a command: the command itself (for a container: calls that named no known
 * subcommand); slot 1 + i: its subcommand i (gw_command_sub). */
#define SLOTS (GW_MAX_SUBS + 1)

static cmd_counters_t *per_cmd; /* ncmds * SLOTS, indexed like gw_command_table() */
static const gw_command_t *table;
static size_t ncmds;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
    table = gw_command_table(&ncmds);
    per_cmd = calloc(ncmds ? ncmds * SLOTS : 1, sizeof(*per_cmd));
}

static cmd_counters_t *counters_of(const gw_command_t *gc, int sub)
{
    pthread_once(&once, init);
    if (!per_cmd || gc < table || gc >= table + ncmds || sub < -1 || sub >= GW_MAX_SUBS)
        return NULL;
    return &per_cmd[(size_t)(gc - table) * SLOTS + (size_t)(sub + 1)];
}

/* Bucket of a call of usec µs: the k with 1024 << (k-1) <= ns < 1024 << k (0 below 1 µs). */
static unsigned bucket_of(uint64_t usec)
{
    uint64_t units = usec * 1000 / 1024;
    unsigned k = units ? 64u - (unsigned)__builtin_clzll(units) : 0;
    return k < NBUCKETS ? k : NBUCKETS - 1;
}

/* Bucket k's upper bound in ns: Redis prints it divided by 1000 (µs). */
static uint64_t bucket_ns(unsigned k)
{
    return (1024ULL << k) - 1;
}

void gw_cmdstats_call(const gw_command_t *gc, int sub, uint64_t usec, bool failed)
{
    cmd_counters_t *k = counters_of(gc, sub);
    if (!k) return;
    __atomic_fetch_add(&k->calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&k->usec, usec, __ATOMIC_RELAXED);
    __atomic_fetch_add(&k->hist[bucket_of(usec)], 1, __ATOMIC_RELAXED);
    if (failed) __atomic_fetch_add(&k->failed, 1, __ATOMIC_RELAXED);
}

void gw_cmdstats_rejected(const gw_command_t *gc)
{
    cmd_counters_t *k = gc ? counters_of(gc, -1) : NULL;
    if (k) __atomic_fetch_add(&k->rejected, 1, __ATOMIC_RELAXED);
}

static int nsubs(const gw_command_t *gc)
{
    int n = 0;
    while (n < GW_MAX_SUBS && gw_command_sub_name(gc, n))
        n++;
    return n;
}

#define MAX_ERRORS 128 /* distinct first words, as Redis's errors rax is capped */
#define ERR_NAME 32

static struct {
    char name[ERR_NAME];
    uint64_t count;
} errors[MAX_ERRORS];
static size_t nerrors;
static pthread_mutex_t errors_lock = PTHREAD_MUTEX_INITIALIZER;

void gw_cmdstats_error(const char *reply, size_t len)
{
    size_t n = 0;
    while (n < len && n < ERR_NAME - 1 && reply[n] != ' ' && reply[n] != '\r' && reply[n] != '\n')
        n++;
    if (n == 0) return;
    pthread_mutex_lock(&errors_lock);
    size_t i = 0;
    while (i < nerrors && !(strlen(errors[i].name) == n && !memcmp(errors[i].name, reply, n)))
        i++;
    if (i == nerrors && nerrors < MAX_ERRORS) {
        memcpy(errors[i].name, reply, n);
        errors[i].name[n] = 0;
        nerrors++;
    }
    if (i < nerrors) errors[i].count++;
    pthread_mutex_unlock(&errors_lock);
}

/* A consistent-enough copy of k (each counter read once). */
static void take(const cmd_counters_t *k, cmd_counters_t *s)
{
    s->calls = __atomic_load_n(&k->calls, __ATOMIC_RELAXED);
    s->usec = __atomic_load_n(&k->usec, __ATOMIC_RELAXED);
    s->rejected = __atomic_load_n(&k->rejected, __ATOMIC_RELAXED);
    s->failed = __atomic_load_n(&k->failed, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < NBUCKETS; i++)
        s->hist[i] = __atomic_load_n(&k->hist[i], __ATOMIC_RELAXED);
}

/* Calls fn for every slot (command or subcommand) with calls or rejections. */
static void each_used(void (*fn)(void *arg, const char *name, const cmd_counters_t *s), void *arg)
{
    pthread_once(&once, init);
    for (size_t i = 0; per_cmd && i < ncmds; i++) {
        for (int sub = -1; sub < nsubs(&table[i]); sub++) {
            cmd_counters_t s;
            take(counters_of(&table[i], sub), &s);
            if (!s.calls && !s.rejected) continue;
            char name[80];
            gw_command_fullname(&table[i], sub, name, sizeof(name));
            fn(arg, name, &s);
        }
    }
}

static void info_line(void *arg, const char *name, const cmd_counters_t *s)
{
    gw_buf_printf(arg,
                  "cmdstat_%s:calls=%llu,usec=%llu,usec_per_call=%.2f,rejected_calls=%llu,"
                  "failed_calls=%llu\r\n",
                  name, (unsigned long long)s->calls, (unsigned long long)s->usec,
                  s->calls ? (double)s->usec / (double)s->calls : 0.0,
                  (unsigned long long)s->rejected, (unsigned long long)s->failed);
}

void gw_cmdstats_info_commands(gw_buf_t *b)
{
    each_used(info_line, b);
}

/* The smallest bucket bound (µs) under which at least p percent of the calls fell. */
static double percentile(const cmd_counters_t *s, double p)
{
    uint64_t want = (uint64_t)((double)s->calls * p / 100.0 + 0.999999), seen = 0;
    if (want == 0) want = 1;
    for (unsigned k = 0; k < NBUCKETS; k++) {
        seen += s->hist[k];
        if (seen >= want) return (double)bucket_ns(k) / 1000.0;
    }
    return (double)bucket_ns(NBUCKETS - 1) / 1000.0;
}

static void latency_line(void *arg, const char *name, const cmd_counters_t *s)
{
    if (!s->calls) return;
    gw_buf_printf(arg, "latency_percentiles_usec_%s:p50=%.3f,p99=%.3f,p99.9=%.3f\r\n", name,
                  percentile(s, 50), percentile(s, 99), percentile(s, 99.9));
}

void gw_cmdstats_info_latency(gw_buf_t *b)
{
    each_used(latency_line, b);
}

/* One "name" => {calls, histogram_usec} pair of LATENCY HISTOGRAM (fillCommandCDF). */
static void reply_cdf(gw_conn_t *c, const char *name, const cmd_counters_t *s)
{
    gw_buf_t *b = gw_conn_out(c);
    reply_bulk_cstr(b, name);
    gw_reply_map(c, 2);
    reply_bulk_cstr(b, "calls");
    reply_int(b, (long long)s->calls);
    reply_bulk_cstr(b, "histogram_usec");
    unsigned n = 0;
    for (unsigned k = 0; k < NBUCKETS; k++)
        n += s->hist[k] != 0;
    gw_reply_map(c, n);
    uint64_t cum = 0;
    for (unsigned k = 0; k < NBUCKETS; k++) {
        if (!s->hist[k]) continue;
        cum += s->hist[k];
        reply_int(b, (long long)(bucket_ns(k) / 1000));
        reply_int(b, (long long)cum);
    }
}

/* Mark the slots LATENCY HISTOGRAM names: "cmd" (a container: also each subcommand) or
 * "cmd|sub"; unknown names are skipped, as Redis does. */
static void mark_named(gw_cmd_t *cmd, int from, uint8_t *marks)
{
    for (int i = from; i < cmd->argc; i++) {
        const char *bar = memchr(cmd->argv[i], '|', cmd->argvlen[i]);
        size_t nlen = bar ? (size_t)(bar - cmd->argv[i]) : cmd->argvlen[i];
        const gw_command_t *gc = gw_command_lookup(cmd->argv[i], nlen);
        if (!gc) continue;
        size_t base = (size_t)(gc - table) * SLOTS;
        if (!bar) {
            for (int sub = -1; sub < nsubs(gc); sub++)
                marks[base + (size_t)(sub + 1)] = 1;
            continue;
        }
        int sub = gw_command_sub_named(gc, bar + 1, cmd->argvlen[i] - nlen - 1);
        if (sub >= 0) marks[base + (size_t)(sub + 1)] = 1;
    }
}

void gw_cmdstats_reply_histogram(gw_conn_t *c, gw_cmd_t *cmd, int from)
{
    pthread_once(&once, init);
    uint8_t *marks = per_cmd ? calloc(ncmds * SLOTS, 1) : NULL;
    if (!marks) {
        gw_reply_dm_error(c, DM_ENOMEM);
        return;
    }
    if (cmd->argc > from)
        mark_named(cmd, from, marks);
    else
        memset(marks, 1, ncmds * SLOTS);
    /* Keep the named slots with calls, then reply: a slot counted in the map header is
     * answered even if RESETSTAT zeroes it in between. */
    long long n = 0;
    for (size_t k = 0; k < ncmds * SLOTS; k++) {
        marks[k] = marks[k] && __atomic_load_n(&per_cmd[k].calls, __ATOMIC_RELAXED);
        n += marks[k];
    }
    gw_reply_map(c, n);
    for (size_t k = 0; k < ncmds * SLOTS; k++) {
        if (!marks[k]) continue;
        cmd_counters_t s;
        take(&per_cmd[k], &s);
        char name[80];
        gw_command_fullname(&table[k / SLOTS], (int)(k % SLOTS) - 1, name, sizeof(name));
        reply_cdf(c, name, &s);
    }
    free(marks);
}

void gw_cmdstats_info_errors(gw_buf_t *b)
{
    pthread_mutex_lock(&errors_lock);
    for (size_t i = 0; i < nerrors; i++)
        if (errors[i].count)
            gw_buf_printf(b, "errorstat_%s:count=%llu\r\n", errors[i].name,
                          (unsigned long long)errors[i].count);
    pthread_mutex_unlock(&errors_lock);
}

void gw_cmdstats_reset(void)
{
    pthread_once(&once, init);
    for (size_t i = 0; per_cmd && i < ncmds * SLOTS; i++) {
        cmd_counters_t *k = &per_cmd[i];
        __atomic_store_n(&k->calls, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&k->usec, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&k->rejected, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&k->failed, 0, __ATOMIC_RELAXED);
        for (unsigned j = 0; j < NBUCKETS; j++)
            __atomic_store_n(&k->hist[j], 0, __ATOMIC_RELAXED);
    }
    pthread_mutex_lock(&errors_lock);
    memset(errors, 0, sizeof(errors));
    nerrors = 0;
    pthread_mutex_unlock(&errors_lock);
}
