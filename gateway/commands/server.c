/* Server commands: COMMAND, CONFIG, INFO, TIME. */
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "commands/cmdstats.h"
#include "commands/latency.h"
#include "commands/slowlog.h"
#include "commands/commands.h"
#include "dmkv/alloc.h"
#include "dmkv/errors.h"
#include "dmkv/race.h"
#include "dmkv/stats.h"
#include "info.h"
#include "resp/reply.h"
#include "server/client_evict.h"
#include "server/client_obuf.h"
#include "server/server.h"
#include "server/stats.h"
#include "util/glob.h"
#include "util/strconv.h"
#include "dmkv/log.h"

/* ---- SHUTDOWN ---- */

/* SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: this gateway stops as on SIGTERM (running
 * commands finish, leases are released); the caller's connection closes without a reply,
 * as in Redis. SAVE/NOSAVE change nothing: a gateway keeps no data, the memory nodes keep
 * theirs (docs/durability.md). */
void cmd_shutdown(gw_conn_t *c, gw_cmd_t *cmd)
{
    bool abort_it = false, save = false, nosave = false;
    for (int i = 1; i < cmd->argc; i++) {
        const char *o = cmd->argv[i];
        if (!strcasecmp(o, "nosave"))
            nosave = true;
        else if (!strcasecmp(o, "save"))
            save = true;
        else if (!strcasecmp(o, "abort"))
            abort_it = true;
        else if (strcasecmp(o, "now") && strcasecmp(o, "force")) {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return;
        }
    }
    if ((save && nosave) || (abort_it && cmd->argc > 2)) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        return;
    }
    if (abort_it) {
        reply_error(gw_conn_out(c), "ERR No shutdown in progress.");
        return;
    }
    dm_log(DM_LOG_WARNING, "User requested shutdown (SHUTDOWN from id=%llu addr=%s)",
           (unsigned long long)c->id, c->addr);
    c->close_after_reply = true;
    raise(SIGTERM); /* server.c's handler: the same clean stop */
}

/* ---- CONFIG ---- */

typedef void (*cfg_value_fn)(gw_buf_t *b);

static void v_port(gw_buf_t *b)
{
    gw_buf_printf(b, "%d", gw_server.cfg->port);
}
static void v_bind(gw_buf_t *b)
{
    for (int i = 0; i < gw_server.cfg->nbind; i++)
        gw_buf_printf(b, "%s%s", i ? " " : "", gw_server.cfg->bind[i]);
}
static void v_threads(gw_buf_t *b)
{
    gw_buf_printf(b, "%d", gw_server.cfg->threads);
}
static void v_busy_poll(gw_buf_t *b)
{
    gw_buf_printf(b, "%d", gw_server.cfg->busy_poll_us);
}
static void v_maxclients(gw_buf_t *b)
{
    gw_buf_printf(b, "%d", gw_server.cfg->maxclients);
}
static void v_latency_threshold(gw_buf_t *b)
{
    gw_buf_printf(b, "%lld", gw_latency_threshold());
}
static void v_slowlog_slower(gw_buf_t *b)
{
    gw_buf_printf(b, "%lld", gw_slowlog_threshold());
}
static void v_slowlog_max_len(gw_buf_t *b)
{
    gw_buf_printf(b, "%lld", gw_slowlog_max_len());
}
static void v_maxmemory_clients(gw_buf_t *b)
{
    gw_buf_printf(b, "%llu", (unsigned long long)gw_evict_limit());
}
static void v_output_buffer_limit(gw_buf_t *b)
{
    gw_obuf_limit_t lim[GW_OBUF_CLASSES];
    gw_obuf_get(lim);
    gw_obuf_format(lim, b);
}
static void v_query_buffer_limit(gw_buf_t *b)
{
    gw_buf_printf(b, "%llu", (unsigned long long)gw_server.cfg->query_buffer_limit);
}
static void v_addr_cache_entries(gw_buf_t *b)
{
    gw_buf_printf(b, "%llu", (unsigned long long)dm_race_addr_cache_entries());
}
static void v_memnode(gw_buf_t *b)
{
    for (int i = 0; i < gw_server.cfg->nmemnodes; i++)
        gw_buf_printf(b, "%s%s", i ? " " : "", gw_server.cfg->memnodes[i]);
}
static void v_loglevel(gw_buf_t *b)
{
    static const char *names[] = {"debug", "verbose", "notice", "warning"};
    gw_buf_puts(b, names[gw_server.cfg->loglevel & 3]);
}
static void v_dir(gw_buf_t *b)
{
    char cwd[1024];
    gw_buf_puts(b, getcwd(cwd, sizeof(cwd)) ? cwd : "");
}

static void v_requirepass(gw_buf_t *b)
{
    gw_server_get_requirepass(b);
}

/* maxmemory is the pool's, kept in the superblock so every gateway obeys the same budget. */
static void v_maxmemory(gw_conn_t *c, gw_buf_t *b)
{
    dm_ctx_t ctx;
    uint64_t limit = 0, used = 0;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_ADMIN);
    dm_pool_usage(&ctx, &limit, &used);
    gw_buf_printf(b, "%llu", (unsigned long long)limit);
}

/* Redis memory units: 100, 1k, 1kb, 2m, 2mb, 3g, 3gb (k = 1000, kb = 1024). -1 if bad. */
static long long parse_memory(const char *s)
{
    uint64_t v;
    return gw_str2mem(s, &v) && v <= (uint64_t)LLONG_MAX ? (long long)v : -1;
}

static const struct {
    const char *name;
    const char *fixed; /* constant value, or NULL to call fn */
    cfg_value_fn fn;
} config_params[] = {
    {"addr-cache-entries", NULL, v_addr_cache_entries},
    {"appendfsync", "everysec", NULL},
    {"appendonly", "no", NULL},
    {"bind", NULL, v_bind},
    {"busy-poll-us", NULL, v_busy_poll},
    {"cluster-enabled", "no", NULL},
    {"client-output-buffer-limit", NULL, v_output_buffer_limit},
    {"client-query-buffer-limit", NULL, v_query_buffer_limit},
    {"databases", "1", NULL},
    {"dbfilename", "dump.rdb", NULL},
    {"dir", NULL, v_dir},
    {"io-threads", NULL, v_threads},
    {"loglevel", NULL, v_loglevel},
    {"latency-monitor-threshold", NULL, v_latency_threshold},
    {"maxclients", NULL, v_maxclients},
    {"maxmemory", NULL, NULL}, /* pool-wide, read from the superblock (config_get) */
    {"maxmemory-clients", NULL, v_maxmemory_clients},
    {"maxmemory-policy", "noeviction", NULL},
    {"memnode", NULL, v_memnode},
    {"port", NULL, v_port},
    {"protected-mode", "yes", NULL},
    {"proto-max-bulk-len", "536870912", NULL},
    {"replica-read-only", "yes", NULL},
    {"requirepass", NULL, v_requirepass},
    {"save", "", NULL},
    {"slowlog-log-slower-than", NULL, v_slowlog_slower},
    {"slowlog-max-len", NULL, v_slowlog_max_len},
    {"tcp-keepalive", "300", NULL},
    {"threads", NULL, v_threads},
    {"timeout", "0", NULL},
};

#define NPARAMS (sizeof(config_params) / sizeof(config_params[0]))

/* Parameter p's current value into v (emptied first). */
static void param_value(gw_conn_t *c, size_t p, gw_buf_t *v)
{
    v->len = 0;
    if (config_params[p].fixed)
        gw_buf_puts(v, config_params[p].fixed);
    else if (config_params[p].fn)
        config_params[p].fn(v);
    else
        v_maxmemory(c, v);
}

static void config_get(gw_conn_t *c, gw_cmd_t *cmd)
{
    bool hit[NPARAMS] = {false};
    size_t nhit = 0;
    for (int i = 2; i < cmd->argc; i++)
        for (size_t p = 0; p < NPARAMS; p++)
            if (!hit[p] && gw_glob_match(cmd->argv[i], cmd->argvlen[i], config_params[p].name,
                                         strlen(config_params[p].name), true)) {
                hit[p] = true;
                nhit++;
            }
    gw_reply_map(c, (long long)nhit);
    gw_buf_t v;
    gw_buf_init(&v);
    for (size_t p = 0; p < NPARAMS; p++) {
        if (!hit[p]) continue;
        reply_bulk_cstr(gw_conn_out(c), config_params[p].name);
        param_value(c, p, &v);
        reply_bulk(gw_conn_out(c), v.data ? v.data : "", v.len);
    }
    gw_buf_free(&v);
}

/* True when parameter p already has value (s, len): setting it again is a no-op that
 * Redis accepts, also for what dmkv cannot change at run time (CONFIG GET then SET). */
static bool param_is(gw_conn_t *c, size_t p, const char *s, size_t len)
{
    gw_buf_t v;
    gw_buf_init(&v);
    param_value(c, p, &v);
    bool same = v.len == len && (!len || !strncasecmp(v.data, s, len));
    gw_buf_free(&v);
    return same;
}

/* CONFIG SET name value [name value ...]: requirepass, the slowlog and latency parameters,
 * maxmemory-clients and client-output-buffer-limit (per gateway process) and maxmemory
 * (pool-wide) change at run time; other known parameters answer Redis's failure text.
 * Every value is checked before any is applied. */
static void config_set(gw_conn_t *c, gw_cmd_t *cmd)
{
    int pass_arg = 0, mem_arg = 0, slower_arg = 0, len_arg = 0, lat_arg = 0, clients_arg = 0;
    gw_obuf_limit_t obuf[GW_OBUF_CLASSES];
    bool obuf_set = false;
    for (int i = 2; i < cmd->argc; i += 2) {
        size_t param = NPARAMS;
        for (size_t p = 0; p < NPARAMS; p++)
            if (!strcasecmp(cmd->argv[i], config_params[p].name)) param = p;
        if (param == NPARAMS) {
            reply_errorf(gw_conn_out(c),
                         "ERR Unknown option or number of arguments for CONFIG SET - '%.128s'",
                         cmd->argv[i]);
            return;
        }
        for (int j = 2; j < i; j += 2)
            if (!strcasecmp(cmd->argv[j], cmd->argv[i])) {
                reply_errorf(gw_conn_out(c),
                             "ERR CONFIG SET failed (possibly related to argument '%.128s') - "
                             "duplicate parameter",
                             cmd->argv[i]);
                return;
            }
        if (!strcasecmp(cmd->argv[i], "maxmemory")) {
            if (parse_memory(cmd->argv[i + 1]) < 0) {
                reply_errorf(gw_conn_out(c),
                             "ERR CONFIG SET failed (possibly related to argument 'maxmemory') "
                             "- argument must be a memory value");
                return;
            }
            mem_arg = i + 1;
            continue;
        }
        if (!strcasecmp(cmd->argv[i], "maxmemory-clients")) {
            if (parse_memory(cmd->argv[i + 1]) < 0) {
                reply_error(gw_conn_out(c),
                            "ERR CONFIG SET failed (possibly related to argument "
                            "'maxmemory-clients') - argument must be a memory value (dmkv: "
                            "bytes; a percentage of the pool's maxmemory says nothing about "
                            "this gateway's memory)");
                return;
            }
            clients_arg = i + 1;
            continue;
        }
        if (!strcasecmp(cmd->argv[i], "client-output-buffer-limit")) {
            const char *why = NULL;
            char *arg = cmd->argv[i + 1];
            gw_obuf_get(obuf);
            if (gw_obuf_parse(1, &arg, obuf, &why) != 0) {
                reply_errorf(gw_conn_out(c),
                             "ERR CONFIG SET failed (possibly related to argument "
                             "'client-output-buffer-limit') - %s",
                             why);
                return;
            }
            obuf_set = true;
            continue;
        }
        if (!strcasecmp(cmd->argv[i], "latency-monitor-threshold")) {
            long long v;
            if (!gw_str2ll(cmd->argv[i + 1], cmd->argvlen[i + 1], &v) || v < 0) {
                reply_error(gw_conn_out(c),
                            "ERR CONFIG SET failed (possibly related to argument "
                            "'latency-monitor-threshold') - argument must be between 0 and "
                            "9223372036854775807 inclusive");
                return;
            }
            lat_arg = i + 1;
            continue;
        }
        if (!strcasecmp(cmd->argv[i], "slowlog-log-slower-than") ||
            !strcasecmp(cmd->argv[i], "slowlog-max-len")) {
            long long v;
            bool is_len = !strcasecmp(cmd->argv[i], "slowlog-max-len");
            if (!gw_str2ll(cmd->argv[i + 1], cmd->argvlen[i + 1], &v) || v < (is_len ? 0 : -1)) {
                reply_errorf(gw_conn_out(c),
                             "ERR CONFIG SET failed (possibly related to argument '%s') - "
                             "argument must be between %d and 9223372036854775807 inclusive",
                             is_len ? "slowlog-max-len" : "slowlog-log-slower-than",
                             is_len ? 0 : -1);
                return;
            }
            *(is_len ? &len_arg : &slower_arg) = i + 1;
            continue;
        }
        if (strcasecmp(cmd->argv[i], "requirepass") &&
            param_is(c, param, cmd->argv[i + 1], cmd->argvlen[i + 1]))
            continue; /* already so */
        if (strcasecmp(cmd->argv[i], "requirepass")) {
            reply_errorf(gw_conn_out(c),
                         "ERR CONFIG SET failed (possibly related to argument '%.128s') - "
                         "dmkv does not support changing it at run time",
                         cmd->argv[i]);
            return;
        }
        pass_arg = i + 1;
    }
    if (mem_arg) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_ADMIN);
        int rc = dm_pool_set_maxmemory(&ctx, (uint64_t)parse_memory(cmd->argv[mem_arg]));
        if (rc) {
            reply_errorf(gw_conn_out(c), "ERR dmkv: %s", dm_strerror(rc));
            return;
        }
    }
    if (clients_arg) gw_evict_set_limit((uint64_t)parse_memory(cmd->argv[clients_arg]));
    if (obuf_set) gw_obuf_set(obuf);
    if (lat_arg) {
        long long v;
        gw_str2ll(cmd->argv[lat_arg], cmd->argvlen[lat_arg], &v);
        gw_latency_set_threshold(v);
    }
    if (slower_arg) {
        long long v;
        gw_str2ll(cmd->argv[slower_arg], cmd->argvlen[slower_arg], &v);
        gw_slowlog_set_threshold(v);
    }
    if (len_arg) {
        long long v;
        gw_str2ll(cmd->argv[len_arg], cmd->argvlen[len_arg], &v);
        gw_slowlog_set_max_len(v);
    }
    if (pass_arg) {
        gw_server_set_requirepass(cmd->argv[pass_arg], cmd->argvlen[pass_arg]);
        /* Like Redis, the connection that sets the password stays authenticated. */
        c->authed = true;
    }
    reply_status(gw_conn_out(c), "OK");
}

static const char *config_help[] = {
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value> (dmkv: requirepass, maxmemory,",
    "    slowlog-log-slower-than, slowlog-max-len, latency-monitor-threshold).",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "HELP",
    "    Print this help.",
};

void cmd_config(gw_conn_t *c, gw_cmd_t *cmd)
{
    const char *sub = cmd->argv[1];
    if (!strcasecmp(sub, "get")) {
        if (cmd->argc < 3) {
            gw_reply_arity(c, "config|get");
            return;
        }
        config_get(c, cmd);
    } else if (!strcasecmp(sub, "set")) {
        if (cmd->argc < 4 || cmd->argc % 2 != 0) {
            gw_reply_arity(c, "config|set");
            return;
        }
        config_set(c, cmd);
    } else if (!strcasecmp(sub, "resetstat")) {
        if (cmd->argc != 2) {
            gw_reply_arity(c, "config|resetstat");
            return;
        }
        gw_stats_reset();
        gw_cmdstats_reset();
        dm_stats_reset();
        reply_status(gw_conn_out(c), "OK");
    } else if (!strcasecmp(sub, "rewrite")) {
        reply_error(gw_conn_out(c), "ERR The server is running without a config file");
    } else if (!strcasecmp(sub, "help") && cmd->argc == 2) {
        GW_REPLY_HELP(c, config_help);
    } else {
        gw_reply_unknown_subcommand(c, cmd);
    }
}

/* ---- INFO, TIME ---- */

void cmd_info(gw_conn_t *c, gw_cmd_t *cmd)
{
    gw_buf_t b;
    gw_buf_init(&b);
    gw_info_generate(c, cmd->argc - 1, cmd->argv + 1, &b);
    gw_reply_verbatim(c, b.data ? b.data : "", b.len);
    gw_buf_free(&b);
}

void cmd_time(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    char s[32];
    reply_array(gw_conn_out(c), 2);
    snprintf(s, sizeof(s), "%lld", (long long)tv.tv_sec);
    reply_bulk_cstr(gw_conn_out(c), s);
    snprintf(s, sizeof(s), "%lld", (long long)tv.tv_usec);
    reply_bulk_cstr(gw_conn_out(c), s);
}
