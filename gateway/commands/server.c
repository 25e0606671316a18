/* Server commands: COMMAND, CONFIG, INFO, TIME. */
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
#include "dmkv/stats.h"
#include "info.h"
#include "resp/reply.h"
#include "server/server.h"
#include "server/stats.h"
#include "util/glob.h"
#include "util/strconv.h"
#include "dmkv/log.h"

/* ---- COMMAND ---- */

static size_t count_words(const char *s)
{
    size_t n = 0;
    bool in = false;
    for (; *s; s++) {
        if (*s == ' ')
            in = false;
        else if (!in) {
            in = true;
            n++;
        }
    }
    return n;
}

/* Set (RESP3) or array of status replies, one per space-separated word of s. */
static void reply_words(gw_conn_t *c, const char *s)
{
    gw_reply_set(c, (long long)count_words(s));
    while (*s) {
        while (*s == ' ')
            s++;
        const char *e = s;
        while (*e && *e != ' ')
            e++;
        if (e > s) {
            char w[64];
            size_t n = (size_t)(e - s) < sizeof(w) - 1 ? (size_t)(e - s) : sizeof(w) - 1;
            memcpy(w, s, n);
            w[n] = 0;
            reply_status(gw_conn_out(c), w);
        }
        s = e;
    }
}

/* Redis 7's 10-field command entry: name, arity, flags, first, last, step, ACL categories,
 * tips, key specs, subcommands. */
static void reply_command_entry(gw_conn_t *c, const gw_command_t *gc)
{
    reply_array(gw_conn_out(c), 10);
    reply_bulk_cstr(gw_conn_out(c), gc->name);
    reply_int(gw_conn_out(c), gc->arity);
    reply_words(c, gc->flags);
    reply_int(gw_conn_out(c), gc->first);
    reply_int(gw_conn_out(c), gc->last);
    reply_int(gw_conn_out(c), gc->step);
    reply_words(c, gc->acl);
    gw_reply_set(c, 0); /* tips */
    gw_reply_set(c, 0); /* key specs */
    gw_reply_set(c, 0); /* subcommands */
}

static const char *command_help[] = {
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all commands.",
    "COUNT",
    "    Return the total number of commands in this server.",
    "LIST",
    "    Return a list of all commands in this server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple commands.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple commands (none in dmkv).",
    "HELP",
    "    Print this help.",
};

void cmd_command(gw_conn_t *c, gw_cmd_t *cmd)
{
    size_t n;
    const gw_command_t *t = gw_command_table(&n);
    if (cmd->argc == 1) {
        reply_array(gw_conn_out(c), (long long)n);
        for (size_t i = 0; i < n; i++)
            reply_command_entry(c, &t[i]);
        return;
    }
    const char *sub = cmd->argv[1];
    if (!strcasecmp(sub, "count")) {
        if (cmd->argc != 2) {
            gw_reply_arity(c, "command|count");
            return;
        }
        reply_int(gw_conn_out(c), (long long)n);
    } else if (!strcasecmp(sub, "docs")) {
        reply_array(gw_conn_out(c), 0);
    } else if (!strcasecmp(sub, "info")) {
        if (cmd->argc == 2) {
            reply_array(gw_conn_out(c), (long long)n);
            for (size_t i = 0; i < n; i++)
                reply_command_entry(c, &t[i]);
            return;
        }
        reply_array(gw_conn_out(c), cmd->argc - 2);
        for (int i = 2; i < cmd->argc; i++) {
            const gw_command_t *gc = gw_command_lookup(cmd->argv[i], cmd->argvlen[i]);
            if (gc)
                reply_command_entry(c, gc);
            else
                gw_reply_null_array(c);
        }
    } else if (!strcasecmp(sub, "list")) {
        reply_array(gw_conn_out(c), (long long)n);
        for (size_t i = 0; i < n; i++)
            reply_bulk_cstr(gw_conn_out(c), t[i].name);
    } else if (!strcasecmp(sub, "help") && cmd->argc == 2) {
        GW_REPLY_HELP(c, command_help);
    } else {
        gw_reply_unknown_subcommand(c, cmd);
    }
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
static void v_query_buffer_limit(gw_buf_t *b)
{
    gw_buf_printf(b, "%llu", (unsigned long long)gw_server.cfg->query_buffer_limit);
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
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0) return -1;
    static const struct {
        const char *unit;
        long long mul;
    } units[] = {{"", 1},         {"k", 1000},       {"kb", 1024},     {"m", 1000000},
                 {"mb", 1 << 20}, {"g", 1000000000}, {"gb", 1ll << 30}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcasecmp(end, units[i].unit)) return v * units[i].mul;
    return -1;
}

static const struct {
    const char *name;
    const char *fixed; /* constant value, or NULL to call fn */
    cfg_value_fn fn;
} config_params[] = {
    {"appendfsync", "everysec", NULL},
    {"appendonly", "no", NULL},
    {"bind", NULL, v_bind},
    {"cluster-enabled", "no", NULL},
    {"client-query-buffer-limit", NULL, v_query_buffer_limit},
    {"databases", "1", NULL},
    {"dbfilename", "dump.rdb", NULL},
    {"dir", NULL, v_dir},
    {"io-threads", NULL, v_threads},
    {"loglevel", NULL, v_loglevel},
    {"latency-monitor-threshold", NULL, v_latency_threshold},
    {"maxclients", NULL, v_maxclients},
    {"maxmemory", NULL, NULL}, /* pool-wide, read from the superblock (config_get) */
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
        v.len = 0;
        if (config_params[p].fixed)
            gw_buf_puts(&v, config_params[p].fixed);
        else if (config_params[p].fn)
            config_params[p].fn(&v);
        else
            v_maxmemory(c, &v);
        reply_bulk(gw_conn_out(c), v.data ? v.data : "", v.len);
    }
    gw_buf_free(&v);
}

/* CONFIG SET name value [name value ...]: requirepass and the slowlog parameters (per
 * gateway process) and maxmemory (pool-wide) change at run time; other known parameters
 * answer Redis's failure text. Every value is checked before any is applied. */
static void config_set(gw_conn_t *c, gw_cmd_t *cmd)
{
    int pass_arg = 0, mem_arg = 0, slower_arg = 0, len_arg = 0, lat_arg = 0;
    for (int i = 2; i < cmd->argc; i += 2) {
        bool known = false;
        for (size_t p = 0; p < NPARAMS; p++)
            if (!strcasecmp(cmd->argv[i], config_params[p].name)) known = true;
        if (!known) {
            reply_errorf(gw_conn_out(c),
                         "ERR Unknown option or number of arguments for CONFIG SET - '%.128s'",
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
