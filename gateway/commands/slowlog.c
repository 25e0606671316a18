/* SLOWLOG (slowlog.h). */
#include "commands/slowlog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dmkv/clock.h"
#include "resp/reply.h"
#include "util/strconv.h"

#define MAX_ARGC 32    /* SLOWLOG_ENTRY_MAX_ARGC */
#define MAX_STRING 128 /* SLOWLOG_ENTRY_MAX_STRING */

typedef struct entry {
    long long id, time_s, usec;
    int argc;
    char **argv;
    size_t *argvlen;
    char *addr, *name;
    struct entry *next; /* older */
} entry_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t *newest;
static long long count, next_id;
static long long threshold = 10000, max_len = 128;

static void entry_free(entry_t *e)
{
    for (int i = 0; i < e->argc; i++)
        free(e->argv[i]);
    free(e->argv);
    free(e->argvlen);
    free(e->addr);
    free(e->name);
    free(e);
}

/* Drop entries beyond max_len (called with lock held). */
static void trim(void)
{
    entry_t **p = &newest;
    for (long long i = 0; *p && i < max_len; i++)
        p = &(*p)->next;
    while (*p) {
        entry_t *e = *p;
        *p = e->next;
        entry_free(e);
        count--;
    }
}

static char *dup_arg(const char *s, size_t len, size_t *outlen)
{
    char *d;
    if (len > MAX_STRING) {
        char tail[64];
        int tl = snprintf(tail, sizeof(tail), "... (%zu more bytes)", len - MAX_STRING);
        d = malloc(MAX_STRING + (size_t)tl + 1);
        if (!d) abort();
        memcpy(d, s, MAX_STRING);
        memcpy(d + MAX_STRING, tail, (size_t)tl + 1);
        *outlen = MAX_STRING + (size_t)tl;
    } else {
        d = malloc(len + 1);
        if (!d) abort();
        memcpy(d, s, len);
        d[len] = 0;
        *outlen = len;
    }
    return d;
}

void gw_slowlog_note(gw_conn_t *c, const gw_command_t *gc, gw_cmd_t *cmd, uint64_t usec)
{
    long long th = __atomic_load_n(&threshold, __ATOMIC_RELAXED);
    if (th < 0 || (long long)usec < th) return;
    if (gc->proc == cmd_auth || gc->proc == cmd_hello || gc->proc == cmd_exec) return;
    entry_t *e = calloc(1, sizeof(*e));
    if (!e) abort();
    e->argc = cmd->argc > MAX_ARGC ? MAX_ARGC : cmd->argc;
    e->argv = malloc(sizeof(char *) * (size_t)e->argc);
    e->argvlen = malloc(sizeof(size_t) * (size_t)e->argc);
    if (!e->argv || !e->argvlen) abort();
    for (int j = 0; j < e->argc; j++) {
        if (e->argc != cmd->argc && j == e->argc - 1) {
            char more[64];
            int n =
                snprintf(more, sizeof(more), "... (%d more arguments)", cmd->argc - e->argc + 1);
            e->argv[j] = dup_arg(more, (size_t)n, &e->argvlen[j]);
        } else {
            e->argv[j] = dup_arg(cmd->argv[j], cmd->argvlen[j], &e->argvlen[j]);
        }
    }
    e->usec = (long long)usec;
    e->time_s = (long long)(dm_wall_ms() / 1000);
    e->addr = strdup(c->addr);
    uv_mutex_lock(&c->th->lock); /* c->name is set under it (CLIENT SETNAME) */
    e->name = strdup(c->name ? c->name : "");
    uv_mutex_unlock(&c->th->lock);
    if (!e->addr || !e->name) abort();
    pthread_mutex_lock(&lock);
    e->id = next_id++;
    e->next = newest;
    newest = e;
    count++;
    trim();
    pthread_mutex_unlock(&lock);
}

long long gw_slowlog_threshold(void)
{
    return __atomic_load_n(&threshold, __ATOMIC_RELAXED);
}

void gw_slowlog_set_threshold(long long usec)
{
    __atomic_store_n(&threshold, usec, __ATOMIC_RELAXED);
}

long long gw_slowlog_max_len(void)
{
    return __atomic_load_n(&max_len, __ATOMIC_RELAXED);
}

void gw_slowlog_set_max_len(long long n)
{
    pthread_mutex_lock(&lock);
    __atomic_store_n(&max_len, n, __ATOMIC_RELAXED);
    trim();
    pthread_mutex_unlock(&lock);
}

static const char *help[] = {
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
};

static void reply_get(gw_conn_t *c, long long n)
{
    gw_buf_t *out = gw_conn_out(c);
    pthread_mutex_lock(&lock);
    if (n < 0 || n > count) n = count;
    reply_array(out, n);
    entry_t *e = newest;
    for (long long i = 0; i < n && e; i++, e = e->next) {
        reply_array(out, 6);
        reply_int(out, e->id);
        reply_int(out, e->time_s);
        reply_int(out, e->usec);
        reply_array(out, e->argc);
        for (int j = 0; j < e->argc; j++)
            reply_bulk(out, e->argv[j], e->argvlen[j]);
        reply_bulk_cstr(out, e->addr);
        reply_bulk_cstr(out, e->name);
    }
    pthread_mutex_unlock(&lock);
}

void cmd_slowlog(gw_conn_t *c, gw_cmd_t *cmd)
{
    const char *sub = cmd->argv[1];
    if (cmd->argc == 2 && !strcasecmp(sub, "help")) {
        GW_REPLY_HELP(c, help);
    } else if (cmd->argc == 2 && !strcasecmp(sub, "reset")) {
        pthread_mutex_lock(&lock);
        while (newest) {
            entry_t *e = newest;
            newest = e->next;
            entry_free(e);
        }
        count = 0;
        pthread_mutex_unlock(&lock);
        reply_status(gw_conn_out(c), "OK");
    } else if (cmd->argc == 2 && !strcasecmp(sub, "len")) {
        pthread_mutex_lock(&lock);
        long long n = count;
        pthread_mutex_unlock(&lock);
        reply_int(gw_conn_out(c), n);
    } else if ((cmd->argc == 2 || cmd->argc == 3) && !strcasecmp(sub, "get")) {
        long long n = 10;
        if (cmd->argc == 3 && (!gw_str2ll(cmd->argv[2], cmd->argvlen[2], &n) || n < -1)) {
            reply_error(gw_conn_out(c), "ERR count should be greater than or equal to -1");
            return;
        }
        reply_get(c, n);
    } else {
        gw_reply_unknown_subcommand(c, cmd);
    }
}
