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

/* One allocation per entry: the struct, then argv, argvlen and the strings. */
typedef struct entry {
    long long id, time_s, usec;
    int argc;
    char **argv;
    size_t *argvlen;
    char *addr, *name;
    struct entry *older, *newer;
} entry_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t *newest, *oldest;
static long long count, next_id;
static long long threshold = 10000, max_len = 128;

/* Drop the oldest entries beyond max_len (called with lock held). O(dropped): under load
 * every command can be slow, so a note must not walk the log. */
static void trim(void)
{
    while (count > max_len && oldest) {
        entry_t *e = oldest;
        oldest = e->newer;
        if (oldest)
            oldest->older = NULL;
        else
            newest = NULL;
        free(e);
        count--;
    }
}

/* Argument j of cmd as Redis logs it: at most MAX_STRING bytes plus a "... (N more bytes)"
 * tail; the last kept slot of a cut argument list says how many arguments were left out.
 * Writes the text to out (when not NULL) and returns its length. */
static size_t logged_arg(const gw_cmd_t *cmd, int kept, int j, char *out)
{
    char tail[64];
    const char *s = cmd->argv[j];
    size_t len = cmd->argvlen[j], tl = 0;
    if (kept != cmd->argc && j == kept - 1) {
        len = (size_t)snprintf(tail, sizeof(tail), "... (%d more arguments)", cmd->argc - kept + 1);
        if (out) memcpy(out, tail, len);
        return len;
    }
    if (len > MAX_STRING) {
        tl = (size_t)snprintf(tail, sizeof(tail), "... (%zu more bytes)", len - MAX_STRING);
        len = MAX_STRING;
    }
    if (out) {
        memcpy(out, s, len);
        memcpy(out + len, tail, tl);
    }
    return len + tl;
}

void gw_slowlog_note(gw_conn_t *c, const gw_command_t *gc, gw_cmd_t *cmd, uint64_t usec)
{
    long long th = __atomic_load_n(&threshold, __ATOMIC_RELAXED);
    if (th < 0 || (long long)usec < th) return;
    if (gc->proc == cmd_auth || gc->proc == cmd_hello || gc->proc == cmd_exec) return;
    int argc = cmd->argc > MAX_ARGC ? MAX_ARGC : cmd->argc;
    uv_mutex_lock(&c->th->lock); /* c->name is set under it (CLIENT SETNAME) */
    const char *name = c->name ? c->name : "";
    size_t addr_len = strlen(c->addr), name_len = strlen(name);
    size_t bytes = sizeof(entry_t) + (size_t)argc * (sizeof(char *) + sizeof(size_t)) + addr_len +
                   1 + name_len + 1;
    for (int j = 0; j < argc; j++)
        bytes += logged_arg(cmd, argc, j, NULL) + 1;
    entry_t *e = malloc(bytes);
    if (!e) { /* out of memory: the command ran, only its log entry is lost */
        uv_mutex_unlock(&c->th->lock);
        return;
    }
    e->argc = argc;
    e->argv = (char **)(e + 1);
    e->argvlen = (size_t *)(e->argv + argc);
    char *text = (char *)(e->argvlen + argc);
    for (int j = 0; j < argc; j++) {
        e->argv[j] = text;
        e->argvlen[j] = logged_arg(cmd, argc, j, text);
        text[e->argvlen[j]] = 0;
        text += e->argvlen[j] + 1;
    }
    e->addr = memcpy(text, c->addr, addr_len + 1);
    e->name = memcpy(text + addr_len + 1, name, name_len + 1);
    uv_mutex_unlock(&c->th->lock);
    e->usec = (long long)usec;
    e->time_s = (long long)(dm_wall_ms() / 1000);
    e->newer = NULL;
    pthread_mutex_lock(&lock);
    e->id = next_id++;
    e->older = newest;
    if (newest)
        newest->newer = e;
    else
        oldest = e;
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
    for (long long i = 0; i < n && e; i++, e = e->older) {
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
            newest = e->older;
            free(e);
        }
        oldest = NULL;
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
