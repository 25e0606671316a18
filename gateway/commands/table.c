/* Command table, lookup and dispatch. */
#include "commands/commands.h"

#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "commands/cmdstats.h"
#include "commands/latency.h"
#include "commands/slowlog.h"
#include "dmkv/coro.h"
#include "dmkv/clock.h"
#include "dmkv/errors.h"
#include "resp/reply.h"
#include "server/monitor.h"
#include "server/server.h"
#include "server/stats.h"
#include "util/strconv.h"

#define SUBS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Sorted by name (COMMAND lists it in this order). */
static const gw_command_t table[] = {
    {"append", 3, "write denyoom fast", 1, 1, 1, "@write @string @fast", cmd_append, NULL},
    {"auth", -2, "noscript loading stale fast no_auth allow_busy", 0, 0, 0, "@fast @connection",
     cmd_auth, NULL},
    {"bitcount", -2, "readonly", 1, 1, 1, "@read @bitmap @slow", cmd_bitcount, NULL},
    {"bitfield", -2, "write denyoom", 1, 1, 1, "@write @bitmap @slow", cmd_bitfield, NULL},
    {"bitfield_ro", -2, "readonly fast", 1, 1, 1, "@read @bitmap @fast", cmd_bitfield_ro, NULL},
    {"bitop", -4, "write denyoom", 2, -1, 1, "@write @bitmap @slow", cmd_bitop, NULL},
    {"bitpos", -3, "readonly", 1, 1, 1, "@read @bitmap @slow", cmd_bitpos, NULL},
    {"client", -2, "", 0, 0, 0, "@slow", cmd_client,
     SUBS("getname", "help", "id", "info", "kill", "list", "no-evict", "reply", "setinfo",
          "setname")},
    {"command", -1, "loading stale", 0, 0, 0, "@slow @connection", cmd_command,
     SUBS("count", "docs", "getkeys", "help", "info", "list")},
    {"config", -2, "admin noscript loading stale", 0, 0, 0, "@admin @slow @dangerous", cmd_config,
     SUBS("get", "help", "resetstat", "rewrite", "set")},
    {"copy", -3, "write denyoom", 1, 2, 1, "@keyspace @write @slow", cmd_copy, NULL},
    {"dbsize", 1, "readonly fast", 0, 0, 0, "@keyspace @read @fast", cmd_dbsize, NULL},
    {"decr", 2, "write denyoom fast", 1, 1, 1, "@write @string @fast", cmd_decr, NULL},
    {"decrby", 3, "write denyoom fast", 1, 1, 1, "@write @string @fast", cmd_decrby, NULL},
    {"del", -2, "write", 1, -1, 1, "@keyspace @write @slow", cmd_del, NULL},
    {"discard", 1, "noscript loading stale fast allow_busy", 0, 0, 0, "@fast @transaction",
     cmd_discard, NULL},
    {"echo", 2, "fast", 0, 0, 0, "@fast @connection", cmd_echo, NULL},
    {"exec", 1, "noscript loading stale skip_slowlog", 0, 0, 0, "@slow @transaction", cmd_exec,
     NULL},
    {"exists", -2, "readonly fast", 1, -1, 1, "@keyspace @read @fast", cmd_exists, NULL},
    {"expire", -3, "write fast", 1, 1, 1, "@keyspace @write @fast", cmd_expire, NULL},
    {"expireat", -3, "write fast", 1, 1, 1, "@keyspace @write @fast", cmd_expireat, NULL},
    {"expiretime", 2, "readonly fast", 1, 1, 1, "@keyspace @read @fast", cmd_expiretime, NULL},
    {"flushall", -1, "write", 0, 0, 0, "@keyspace @write @slow @dangerous", cmd_flushall, NULL},
    {"flushdb", -1, "write", 0, 0, 0, "@keyspace @write @slow @dangerous", cmd_flushall, NULL},
    {"function", -2, "noscript", 0, 0, 0, "@slow @scripting", cmd_function,
     SUBS("delete", "dump", "flush", "help", "kill", "list", "load", "restore", "stats")},
    {"get", 2, "readonly fast", 1, 1, 1, "@read @string @fast", cmd_get, NULL},
    {"getbit", 3, "readonly fast", 1, 1, 1, "@read @bitmap @fast", cmd_getbit, NULL},
    {"getdel", 2, "write fast", 1, 1, 1, "@write @string @fast", cmd_getdel, NULL},
    {"getex", -2, "write fast", 1, 1, 1, "@write @string @fast", cmd_getex, NULL},
    {"getrange", 4, "readonly", 1, 1, 1, "@read @string @slow", cmd_getrange, NULL},
    {"getset", 3, "write denyoom fast", 1, 1, 1, "@write @string @fast", cmd_getset, NULL},
    {"hello", -1, "noscript loading stale fast no_auth allow_busy", 0, 0, 0, "@fast @connection",
     cmd_hello, NULL},
    {"incr", 2, "write denyoom fast", 1, 1, 1, "@write @string @fast", cmd_incr, NULL},
    {"incrby", 3, "write denyoom fast", 1, 1, 1, "@write @string @fast", cmd_incrby, NULL},
    {"incrbyfloat", 3, "write denyoom fast", 1, 1, 1, "@write @string @fast", cmd_incrbyfloat,
     NULL},
    {"info", -1, "loading stale", 0, 0, 0, "@slow @dangerous", cmd_info, NULL},
    {"keys", 2, "readonly", 0, 0, 0, "@keyspace @read @slow @dangerous", cmd_keys, NULL},
    {"latency", -2, "admin noscript loading stale", 0, 0, 0, "@admin @slow @dangerous", cmd_latency,
     SUBS("doctor", "graph", "help", "histogram", "history", "latest", "reset")},
    {"lcs", -3, "readonly", 1, 2, 1, "@read @string @slow", cmd_lcs, NULL},
    {"memory", -2, "", 0, 0, 0, "@slow", cmd_memory, SUBS("help", "usage")},
    {"mget", -2, "readonly fast", 1, -1, 1, "@read @string @fast", cmd_mget, NULL},
    {"monitor", 1, "admin noscript loading stale", 0, 0, 0, "@admin @slow @dangerous", cmd_monitor,
     NULL},
    {"mset", -3, "write denyoom", 1, -1, 2, "@write @string @slow", cmd_mset, NULL},
    {"msetnx", -3, "write denyoom", 1, -1, 2, "@write @string @slow", cmd_msetnx, NULL},
    {"multi", 1, "noscript loading stale fast allow_busy", 0, 0, 0, "@fast @transaction", cmd_multi,
     NULL},
    {"persist", 2, "write fast", 1, 1, 1, "@keyspace @write @fast", cmd_persist, NULL},
    {"pexpire", -3, "write fast", 1, 1, 1, "@keyspace @write @fast", cmd_pexpire, NULL},
    {"pexpireat", -3, "write fast", 1, 1, 1, "@keyspace @write @fast", cmd_pexpireat, NULL},
    {"pexpiretime", 2, "readonly fast", 1, 1, 1, "@keyspace @read @fast", cmd_pexpiretime, NULL},
    {"ping", -1, "fast", 0, 0, 0, "@fast @connection", cmd_ping, NULL},
    {"psetex", 4, "write denyoom", 1, 1, 1, "@write @string @slow", cmd_psetex, NULL},
    {"pttl", 2, "readonly fast", 1, 1, 1, "@keyspace @read @fast", cmd_pttl, NULL},
    {"quit", -1, "allow_busy noscript loading stale fast no_auth", 0, 0, 0, "@fast @connection",
     cmd_quit, NULL},
    {"randomkey", 1, "readonly", 0, 0, 0, "@keyspace @read @slow", cmd_randomkey, NULL},
    {"rename", 3, "write", 1, 2, 1, "@keyspace @write @slow", cmd_rename, NULL},
    {"renamenx", 3, "write fast", 1, 2, 1, "@keyspace @write @fast", cmd_renamenx, NULL},
    {"reset", 1, "noscript loading stale fast no_auth allow_busy", 0, 0, 0, "@fast @connection",
     cmd_reset, NULL},
    {"scan", -2, "readonly", 0, 0, 0, "@keyspace @read @slow", cmd_scan, NULL},
    {"select", 2, "loading stale fast", 0, 0, 0, "@keyspace @fast", cmd_select, NULL},
    {"set", -3, "write denyoom", 1, 1, 1, "@write @string @slow", cmd_set, NULL},
    {"setbit", 4, "write denyoom", 1, 1, 1, "@write @bitmap @slow", cmd_setbit, NULL},
    {"setex", 4, "write denyoom", 1, 1, 1, "@write @string @slow", cmd_setex, NULL},
    {"setnx", 3, "write denyoom fast", 1, 1, 1, "@write @string @fast", cmd_setnx, NULL},
    {"setrange", 4, "write denyoom", 1, 1, 1, "@write @string @slow", cmd_setrange, NULL},
    {"shutdown", -1, "admin noscript loading stale no_multi allow_busy", 0, 0, 0,
     "@admin @slow @dangerous", cmd_shutdown, NULL},
    {"slowlog", -2, "admin random loading stale", 0, 0, 0, "@admin @slow @dangerous", cmd_slowlog,
     SUBS("get", "help", "len", "reset")},
    {"strlen", 2, "readonly fast", 1, 1, 1, "@read @string @fast", cmd_strlen, NULL},
    {"substr", 4, "readonly", 1, 1, 1, "@read @string @slow", cmd_getrange, NULL},
    {"time", 1, "loading stale fast", 0, 0, 0, "@fast", cmd_time, NULL},
    {"touch", -2, "readonly fast", 1, -1, 1, "@keyspace @read @fast", cmd_touch, NULL},
    {"ttl", 2, "readonly fast", 1, 1, 1, "@keyspace @read @fast", cmd_ttl, NULL},
    {"type", 2, "readonly fast", 1, 1, 1, "@keyspace @read @fast", cmd_type, NULL},
    {"unlink", -2, "write fast", 1, -1, 1, "@keyspace @write @fast", cmd_del, NULL},
    {"unwatch", 1, "noscript loading stale fast allow_busy", 0, 0, 0, "@fast @transaction",
     cmd_unwatch, NULL},
    {"watch", -2, "noscript loading stale fast allow_busy", 1, -1, 1, "@fast @transaction",
     cmd_watch, NULL},
};

#define NCMDS (sizeof(table) / sizeof(table[0]))

const gw_command_t *gw_command_of(gw_cmd_t *cmd)
{
    if (!cmd->def && cmd->argc > 0) cmd->def = gw_command_lookup(cmd->argv[0], cmd->argvlen[0]);
    return cmd->def;
}

/* Lookup by an open-addressing hash of the names, built once: the binary search's strcmp
 * calls were 4% of a SET's gateway instructions (callgrind), the flag words' strstr calls
 * 2% of a GET's. */
#define NSLOTS 512               /* a power of two, over twice the commands */
static uint16_t slot_of[NSLOTS]; /* table index + 1, 0 empty */
static unsigned flag_bits[NCMDS];
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

static uint32_t name_hash(const char *low, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)low[i]) * 16777619u;
    return h;
}

static bool has_word(const char *words, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = words; (p = strstr(p, w)) != NULL; p += n)
        if ((p == words || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
    return false;
}

static void build_index(void)
{
    static const struct {
        const char *word;
        unsigned bit;
    } words[] = {{"readonly", GW_CF_READONLY}, {"fast", GW_CF_FAST},
                 {"write", GW_CF_WRITE},       {"admin", GW_CF_ADMIN},
                 {"no_auth", GW_CF_NO_AUTH},   {"no_multi", GW_CF_NO_MULTI}};
    for (size_t i = 0; i < NCMDS; i++) {
        size_t len = strlen(table[i].name);
        uint32_t h = name_hash(table[i].name, len) & (NSLOTS - 1);
        while (slot_of[h])
            h = (h + 1) & (NSLOTS - 1);
        slot_of[h] = (uint16_t)(i + 1);
        for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++)
            if (has_word(table[i].flags, words[w].word)) flag_bits[i] |= words[w].bit;
    }
}

const gw_command_t *gw_command_lookup(const char *name, size_t len)
{
    char low[32];
    if (len == 0 || len >= sizeof(low)) return NULL;
    for (size_t i = 0; i < len; i++) {
        if (!name[i]) return NULL; /* embedded NUL */
        low[i] = (char)tolower((unsigned char)name[i]);
    }
    low[len] = 0;
    pthread_once(&index_once, build_index);
    for (uint32_t h = name_hash(low, len) & (NSLOTS - 1); slot_of[h]; h = (h + 1) & (NSLOTS - 1)) {
        const gw_command_t *gc = &table[slot_of[h] - 1];
        if (strcmp(gc->name, low) == 0) return gc;
    }
    return NULL;
}

/* Every entry reaches callers through gw_command_lookup or gw_command_table, which build
 * the index first: no check here, on every command's path. */
bool gw_command_has(const gw_command_t *gc, unsigned mask)
{
    return (flag_bits[gc - table] & mask) == mask;
}

const gw_command_t *gw_command_table(size_t *n)
{
    pthread_once(&index_once, build_index);
    *n = NCMDS;
    return table;
}

void gw_reply_dm_error(gw_conn_t *c, int rc)
{
    if (rc == DM_ENOMEM || rc == DM_EFULL)
        reply_error(gw_conn_out(c), "OOM command not allowed when used memory > 'maxmemory'.");
    else if (rc == DM_EINDEXFULL) /* -OOM as Redis's class, but not maxmemory's text */
        reply_errorf(gw_conn_out(c),
                     "OOM dmkv: %s (range index %s; a pool created with a larger "
                     "--rolex-leaves holds more keys)",
                     dm_strerror(rc), dm_kv_range_index()->engine.name);
    else if (rc == DM_ETOOBIG && dm_kv_range_index()->engine.max_key)
        /* ROLEX stores keys inline: a longer key is refused, nothing written (DESIGN.md) */
        reply_errorf(gw_conn_out(c),
                     "ERR dmkv: %s (this pool's range index, %s, stores keys of at most %u "
                     "bytes)",
                     dm_strerror(rc), dm_kv_range_index()->engine.name,
                     dm_kv_range_index()->engine.max_key);
    else
        reply_errorf(gw_conn_out(c), "ERR dmkv: %s", dm_strerror(rc));
}

void gw_reply_arity(gw_conn_t *c, const char *name)
{
    reply_errorf(gw_conn_out(c), "ERR wrong number of arguments for '%s' command", name);
}

void gw_reply_help(gw_conn_t *c, const char *const *lines, size_t n)
{
    reply_array(gw_conn_out(c), (long long)n);
    for (size_t i = 0; i < n; i++)
        reply_status(gw_conn_out(c), lines[i]);
}

void gw_reply_unknown_subcommand(gw_conn_t *c, gw_cmd_t *cmd)
{
    char up[32];
    size_t n = 0;
    for (; cmd->argv[0][n] && n < sizeof(up) - 1; n++)
        up[n] = (char)toupper((unsigned char)cmd->argv[0][n]);
    up[n] = 0;
    reply_errorf(gw_conn_out(c), "ERR unknown subcommand '%.128s'. Try %s HELP.", cmd->argv[1], up);
}

bool gw_arg_ll(gw_conn_t *c, gw_cmd_t *cmd, int i, long long *out)
{
    if (!gw_str2ll(cmd->argv[i], cmd->argvlen[i], out)) {
        reply_error(gw_conn_out(c), "ERR value is not an integer or out of range");
        return false;
    }
    return true;
}

static void reply_unknown(gw_conn_t *c, gw_cmd_t *cmd)
{
    /* Redis: args quoted while the list is under 128 chars, each cut to what fits. */
    gw_buf_t args;
    gw_buf_init(&args);
    for (int i = 1; i < cmd->argc && args.len < 128; i++)
        gw_buf_printf(&args, "'%.*s' ", (int)(128 - args.len), cmd->argv[i]);
    reply_errorf(gw_conn_out(c), "ERR unknown command '%.128s', with args beginning with: %s",
                 cmd->argv[0], args.data ? args.data : "");
    gw_buf_free(&args);
}

/* Commands that run at once inside MULTI instead of being queued. */
static bool runs_in_multi(const gw_command_t *gc)
{
    return gc->proc == cmd_exec || gc->proc == cmd_discard || gc->proc == cmd_multi ||
           gc->proc == cmd_watch || gc->proc == cmd_quit || gc->proc == cmd_reset;
}

/* Count an error reply that starts at byte `at` of c's output (errorstats). */
static void count_error(gw_conn_t *c, size_t at)
{
    const gw_buf_t *out = gw_conn_out(c);
    GW_STAT_ADD(total_error_replies, 1);
    if (out->len > at + 1) gw_cmdstats_error(out->data + at + 1, out->len - at - 1);
}

/* A command rejected before running (its error reply starts at byte `at` of the output;
 * gc NULL when unknown): inside MULTI it also dooms the transaction. */
/* Whether a key of cmd is longer than max bytes (the range engine's engine.max_key). */
static bool long_key(const gw_command_t *gc, const gw_cmd_t *cmd, uint32_t max)
{
    int last = gc->last < 0 ? cmd->argc + gc->last : gc->last;
    int step = gc->step > 0 ? gc->step : 1;
    for (int i = gc->first; i <= last && i < cmd->argc; i += step)
        if (cmd->argvlen[i] > max) return true;
    return false;
}

static void rejected(gw_conn_t *c, const gw_command_t *gc, size_t at)
{
    if (c->in_multi) c->multi_dirty = true;
    gw_cmdstats_rejected(gc);
    count_error(c, at);
}

void gw_command_run(gw_conn_t *c, const gw_command_t *gc, gw_cmd_t *cmd)
{
    size_t before = gw_conn_out(c)->len;
    int sub = gw_command_sub(gc, cmd);
    __atomic_store_n(&c->last_cmd, gc->name, __ATOMIC_RELAXED);
    dm_coro_set_name(gc->name);
    __atomic_store_n(&c->last_sub, gw_command_sub_name(gc, sub), __ATOMIC_RELAXED);
    __atomic_store_n(&c->running_bytes, cmd->wire, __ATOMIC_RELAXED);
    uint64_t t0 = dm_now_us();
    __atomic_store_n(&c->last_ms, t0 / 1000, __ATOMIC_RELAXED);
    dm_coro_begin_bounded(t0 / 1000); /* the watchdog's "running long" (server/watchdog.h) */
    gw_thread_t *th = c->th;          /* commands run on their connection's thread: a plain count */
    __atomic_store_n(&th->commands_running, th->commands_running + 1, __ATOMIC_RELAXED);
    gc->proc(c, cmd);
    dm_coro_end_bounded();
    __atomic_store_n(&th->commands_running, th->commands_running - 1, __ATOMIC_RELAXED);
    GW_STAT_ADD(total_commands_processed, 1);
    bool failed =
        !c->closing && gw_conn_out(c)->len > before && gw_conn_out(c)->data[before] == '-';
    uint64_t usec = dm_now_us() - t0;
    __atomic_store_n(&c->running_bytes, 0, __ATOMIC_RELAXED);
    gw_cmdstats_call(gc, sub, usec, failed);
    gw_slowlog_note(c, gc, cmd, usec);
    gw_monitor_feed(c, gc, cmd);
    gw_latency_note(gc, usec);
    if (failed) count_error(c, before);
}

int gw_command_sub_named(const gw_command_t *gc, const char *name, size_t len)
{
    for (int i = 0; gc->subs && gc->subs[i] && i < GW_MAX_SUBS; i++)
        if (strlen(gc->subs[i]) == len && !strncasecmp(gc->subs[i], name, len)) return i;
    return -1;
}

const char *gw_command_sub_name(const gw_command_t *gc, int sub)
{
    if (sub < 0 || sub >= GW_MAX_SUBS || !gc->subs) return NULL;
    for (int i = 0; i < sub; i++)
        if (!gc->subs[i]) return NULL;
    return gc->subs[sub];
}

int gw_command_fullname(const gw_command_t *gc, int sub, char *out, size_t n)
{
    const char *s = gw_command_sub_name(gc, sub);
    return s ? snprintf(out, n, "%s|%s", gc->name, s) : snprintf(out, n, "%s", gc->name);
}

int gw_command_sub(const gw_command_t *gc, const gw_cmd_t *cmd)
{
    return gc->subs && cmd->argc > 1 ? gw_command_sub_named(gc, cmd->argv[1], cmd->argvlen[1]) : -1;
}

static bool exec_one(gw_conn_t *c, gw_cmd_t *cmd);

bool gw_command_exec(gw_conn_t *c, gw_cmd_t *cmd)
{
    size_t at = gw_conn_out(c)->len;
    bool kept = exec_one(c, cmd);
    /* CLIENT REPLY OFF/SKIP: the reply is dropped (errors too, as in Redis); SKIP drops
     * its own +OK and the next command's reply, unless that is CLIENT REPLY ON. */
    gw_buf_t *out = gw_conn_out(c);
    bool drop = c->reply_off || c->reply_skip;
    if (c->reply_skip) c->reply_skip--;
    if (drop && !c->close_after_reply && out->len > at) out->len = at;
    return kept;
}

static bool exec_one(gw_conn_t *c, gw_cmd_t *cmd)
{
    size_t at = gw_conn_out(c)->len; /* where a rejection's error reply starts */
    if (cmd->proto_err) {
        reply_error(gw_conn_out(c), cmd->proto_err);
        c->close_after_reply = true;
        count_error(c, at);
        return false;
    }
    const gw_command_t *gc = gw_command_of(cmd);
    if (!gc) {
        reply_unknown(c, cmd);
        rejected(c, NULL, at);
        return false;
    }
    if ((gc->arity > 0 && cmd->argc != gc->arity) || (cmd->argc < -gc->arity)) {
        gw_reply_arity(c, gc->name);
        rejected(c, gc, at);
        return false;
    }
    if (!c->authed && !gw_command_has(gc, GW_CF_NO_AUTH)) {
        if (!gw_server_requirepass_set()) {
            c->authed = true; /* the password was cleared meanwhile */
        } else {
            reply_error(gw_conn_out(c), "NOAUTH Authentication required.");
            rejected(c, gc, at);
            return false;
        }
    }
    if (gc->first > 0 && dm_clock_skewed()) {
        /* Expiry written here would be judged by the other gateways' clocks. */
        dm_clock_status_t cs;
        dm_clock_status(&cs);
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "ERR dmkv: this gateway's clock is off by %lld..%lld ms from %d of %d other "
                 "gateways (max-clock-skew-ms %u): fix the clock (NTP)",
                 (long long)cs.lo_ms, (long long)cs.hi_ms, cs.far_peers, cs.peers,
                 dm_clock_bound_ms());
        reply_error(gw_conn_out(c), msg);
        rejected(c, gc, at);
        return false;
    }
    uint32_t max_key = dm_kv_range_index()->engine.max_key; /* 0: any length */
    if (max_key && gc->first > 0 && gw_command_has(gc, GW_CF_WRITE) && long_key(gc, cmd, max_key)) {
        /* Refused whole before anything runs: an MSET must not write the keys before it. */
        const dm_index_engine_t *re = &dm_kv_range_index()->engine;
        reply_errorf(gw_conn_out(c),
                     "ERR dmkv: key too long (this pool's range index, %s, stores keys of at "
                     "most %u bytes)",
                     re->name, re->max_key);
        rejected(c, gc, at);
        return false;
    }
    if (c->in_multi && gw_command_has(gc, GW_CF_NO_MULTI)) {
        reply_error(gw_conn_out(c), "ERR Command not allowed inside a transaction");
        rejected(c, gc, at);
        return false;
    }
    if (c->in_multi && !runs_in_multi(gc)) {
        cmd->next = NULL;
        if (c->mq_tail)
            c->mq_tail->next = cmd;
        else
            c->mq_head = cmd;
        c->mq_tail = cmd;
        c->mq_n++;
        reply_status(gw_conn_out(c), "QUEUED");
        return true;
    }
    gw_command_run(c, gc, cmd);
    return false;
}
