/* CLIENT KILL: "CLIENT KILL ip:port" (+OK / -ERR No such client) and the filter form
 * "CLIENT KILL [ID id] [ADDR ip:port] [LADDR ip:port] [USER name] [TYPE type]
 * [SKIPME yes|no]" (integer: clients killed; a killed client leaves connected_clients at
 * once). Victims on this thread close at once; victims on other
 * threads are flagged (c->kill) and closed by their thread's cron tick (server/cron.h). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "resp/reply.h"
#include "server/server.h"
#include "server/stats.h"
#include "util/strconv.h"

typedef struct kill_filter {
    long long id; /* 0 = any */
    const char *addr, *laddr, *user;
    bool skipme;
    bool none; /* TYPE master|replica|pubsub: no dmkv client is one */
} kill_filter_t;

static bool matches(const kill_filter_t *f, gw_conn_t *self, gw_conn_t *x)
{
    if (f->none || (f->skipme && x == self)) return false;
    if (f->id && (uint64_t)f->id != x->id) return false;
    if (f->addr && strcmp(f->addr, x->addr)) return false;
    if (f->laddr && strcmp(f->laddr, x->laddr)) return false;
    if (f->user && strcmp(f->user, "default")) return false;
    return true;
}

/* Flag every matching client; returns how many. */
static long long flag_victims(gw_conn_t *self, const kill_filter_t *f)
{
    long long n = 0;
    for (int t = 0; t < gw_server.nthreads; t++) {
        gw_thread_t *th = &gw_server.threads[t];
        uv_mutex_lock(&th->lock);
        for (gw_conn_t *x = th->conns; x; x = x->next)
            if (!x->kill && matches(f, self, x)) {
                __atomic_store_n(&x->kill, true, __ATOMIC_RELAXED);
                if (!x->uncounted) { /* gone for INFO now, as in Redis, not at the close */
                    x->uncounted = true;
                    GW_STAT_SUB(connected_clients, 1);
                }
                n++;
            }
        uv_mutex_unlock(&th->lock);
    }
    return n;
}

/* Close this thread's flagged clients now (self: once the reply is written). */
static void close_local(gw_conn_t *self)
{
    gw_thread_t *th = self->th;
    if (self->kill) {
        self->kill = false;
        self->close_after_reply = true;
    }
    for (;;) {
        gw_conn_t *victim = NULL;
        uv_mutex_lock(&th->lock);
        for (gw_conn_t *x = th->conns; x && !victim; x = x->next)
            if (x->kill && x != self) victim = x;
        uv_mutex_unlock(&th->lock);
        if (!victim) break;
        gw_conn_close(victim); /* unlinks it */
    }
}

void gw_client_kill(gw_conn_t *c, gw_cmd_t *cmd)
{
    kill_filter_t f = {.id = 0, .skipme = true};
    if (cmd->argc == 3) {
        f.addr = cmd->argv[2];
        f.skipme = false;
        long long n = flag_victims(c, &f);
        close_local(c);
        if (n)
            reply_status(gw_conn_out(c), "OK");
        else
            reply_error(gw_conn_out(c), "ERR No such client");
        return;
    }
    if (cmd->argc == 2) {
        gw_reply_arity(c, "client|kill");
        return;
    }
    if (cmd->argc % 2 != 0) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        return;
    }
    for (int i = 2; i < cmd->argc; i += 2) {
        const char *o = cmd->argv[i], *v = cmd->argv[i + 1];
        if (!strcasecmp(o, "id")) {
            if (!gw_str2ll(v, cmd->argvlen[i + 1], &f.id) || f.id <= 0) {
                reply_error(gw_conn_out(c), "ERR client-id should be greater than 0");
                return;
            }
        } else if (!strcasecmp(o, "addr")) {
            f.addr = v;
        } else if (!strcasecmp(o, "laddr")) {
            f.laddr = v;
        } else if (!strcasecmp(o, "user")) {
            if (strcmp(v, "default")) { /* dmkv has one user */
                reply_errorf(gw_conn_out(c), "ERR No such user '%s'", v);
                return;
            }
            f.user = v;
        } else if (!strcasecmp(o, "type")) {
            /* Every dmkv client is a normal one: no replicas, masters or Pub/Sub. */
            if (!strcasecmp(v, "normal"))
                continue;
            else if (!strcasecmp(v, "master") || !strcasecmp(v, "replica") ||
                     !strcasecmp(v, "slave") || !strcasecmp(v, "pubsub"))
                f.none = true;
            else {
                reply_errorf(gw_conn_out(c), "ERR Unknown client type '%s'", v);
                return;
            }
        } else if (!strcasecmp(o, "skipme")) {
            if (!strcasecmp(v, "yes"))
                f.skipme = true;
            else if (!strcasecmp(v, "no"))
                f.skipme = false;
            else {
                reply_error(gw_conn_out(c), "ERR syntax error");
                return;
            }
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return;
        }
    }
    long long n = flag_victims(c, &f);
    close_local(c);
    reply_int(gw_conn_out(c), n);
}
