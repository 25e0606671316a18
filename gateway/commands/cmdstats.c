/* INFO commandstats and errorstats counters (cmdstats.h). */
#include "commands/cmdstats.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct cmd_counters {
    uint64_t calls, usec, rejected, failed;
} cmd_counters_t;

static cmd_counters_t *per_cmd; /* indexed like gw_command_table() */
static const gw_command_t *table;
static size_t ncmds;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
    table = gw_command_table(&ncmds);
    per_cmd = calloc(ncmds ? ncmds : 1, sizeof(*per_cmd));
}

static cmd_counters_t *counters_of(const gw_command_t *gc)
{
    pthread_once(&once, init);
    if (!per_cmd || gc < table || gc >= table + ncmds) return NULL;
    return &per_cmd[gc - table];
}

void gw_cmdstats_call(const gw_command_t *gc, uint64_t usec, bool failed)
{
    cmd_counters_t *k = counters_of(gc);
    if (!k) return;
    __atomic_fetch_add(&k->calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&k->usec, usec, __ATOMIC_RELAXED);
    if (failed) __atomic_fetch_add(&k->failed, 1, __ATOMIC_RELAXED);
}

void gw_cmdstats_rejected(const gw_command_t *gc)
{
    cmd_counters_t *k = gc ? counters_of(gc) : NULL;
    if (k) __atomic_fetch_add(&k->rejected, 1, __ATOMIC_RELAXED);
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

void gw_cmdstats_info_commands(gw_buf_t *b)
{
    size_t n;
    const gw_command_t *t = gw_command_table(&n);
    for (size_t i = 0; i < n; i++) {
        cmd_counters_t *k = counters_of(&t[i]);
        if (!k) return;
        uint64_t calls = __atomic_load_n(&k->calls, __ATOMIC_RELAXED);
        uint64_t usec = __atomic_load_n(&k->usec, __ATOMIC_RELAXED);
        uint64_t rej = __atomic_load_n(&k->rejected, __ATOMIC_RELAXED);
        uint64_t failed = __atomic_load_n(&k->failed, __ATOMIC_RELAXED);
        if (!calls && !rej) continue;
        gw_buf_printf(b,
                      "cmdstat_%s:calls=%llu,usec=%llu,usec_per_call=%.2f,rejected_calls=%llu,"
                      "failed_calls=%llu\r\n",
                      t[i].name, (unsigned long long)calls, (unsigned long long)usec,
                      calls ? (double)usec / (double)calls : 0.0, (unsigned long long)rej,
                      (unsigned long long)failed);
    }
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
    for (size_t i = 0; per_cmd && i < ncmds; i++) {
        __atomic_store_n(&per_cmd[i].calls, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&per_cmd[i].usec, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&per_cmd[i].rejected, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&per_cmd[i].failed, 0, __ATOMIC_RELAXED);
    }
    pthread_mutex_lock(&errors_lock);
    memset(errors, 0, sizeof(errors));
    nerrors = 0;
    pthread_mutex_unlock(&errors_lock);
}
