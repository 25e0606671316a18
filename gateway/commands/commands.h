/* The command table and dispatcher: name lookup, arity check, Redis's error texts, and
 * the per-command procedures (strings.c, keyspace.c, connection.c, server.c). */
#ifndef GW_COMMANDS_COMMANDS_H
#define GW_COMMANDS_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

#include "dmkv/kv.h"
#include "net/conn.h"
#include "resp/parser.h"

/* A command procedure: reads cmd->argv, appends exactly one reply to c->out. May call
 * dmcore (and so yield); must not touch c's I/O (flush/close) itself. */
typedef void (*gw_cmd_proc)(gw_conn_t *c, gw_cmd_t *cmd);

typedef struct gw_command {
    const char *name;      /* lower case */
    int arity;             /* Redis convention: N exact, -N at least N (the name counts) */
    const char *flags;     /* Redis COMMAND flags, space separated ("write denyoom") */
    int first, last, step; /* key positions (COMMAND reply) */
    const char *acl;       /* ACL categories, space separated ("@write @string") */
    gw_cmd_proc proc;
    const char *const *subs; /* a container's subcommands, lower case, NULL-terminated */
} gw_command_t;

#define GW_MAX_SUBS 16 /* subcommands per container */

/* Index of cmd's subcommand (argv[1]) in gc->subs, -1 when gc has none or argv[1] is not
 * one of them. */
int gw_command_sub(const gw_command_t *gc, const gw_cmd_t *cmd);
/* The same for a name of len bytes (case-insensitive). */
int gw_command_sub_named(const gw_command_t *gc, const char *name, size_t len);
/* Subcommand sub's name (static storage), NULL for sub < 0 or past the last one. */
const char *gw_command_sub_name(const gw_command_t *gc, int sub);
/* "name" or, for subcommand sub, "name|sub" (as Redis 7 names it) into out (n bytes);
 * returns its length as snprintf does. */
int gw_command_fullname(const gw_command_t *gc, int sub, char *out, size_t n);

/* Find a command by name (case-insensitive, binary-safe length). NULL when unknown. */
const gw_command_t *gw_command_lookup(const char *name, size_t len);

/* The COMMAND flags the dispatch path tests, as bits (words of gw_command_t.flags). */
enum {
    GW_CF_READONLY = 1u << 0,
    GW_CF_FAST = 1u << 1,
    GW_CF_WRITE = 1u << 2,
    GW_CF_ADMIN = 1u << 3,
    GW_CF_NO_AUTH = 1u << 4,
    GW_CF_NO_MULTI = 1u << 5,
};

/* Whether gc (an entry of the table) carries every flag of mask (GW_CF_*). */
bool gw_command_has(const gw_command_t *gc, unsigned mask);

/* cmd's table entry (NULL when unknown), looked up once and kept in cmd->def. */
const gw_command_t *gw_command_of(gw_cmd_t *cmd);

/* The whole table, *n entries (COMMAND, COMMAND COUNT). */
const gw_command_t *gw_command_table(size_t *n);

/* Run one queued command for c: protocol-error pseudo commands reply and mark the
 * connection close-after-reply; unknown commands and wrong arity get Redis's errors;
 * NOAUTH while requirepass is set and c has not authenticated; inside MULTI the command
 * is queued (+QUEUED) and c takes it over; otherwise the procedure runs (possibly
 * yielding) and the counters are charged. Returns true when c kept cmd (queued for
 * EXEC): the caller must then not free it. */
bool gw_command_exec(gw_conn_t *c, gw_cmd_t *cmd);

/* Run an already validated command's procedure (EXEC runs its queue with this). */
void gw_command_run(gw_conn_t *c, const gw_command_t *gc, gw_cmd_t *cmd);

/* ---- Protocol-aware replies (RESP2 or RESP3 by c->resp; commands/proto_reply.c) ---- */
/* Null bulk: "$-1" (RESP2) or "_" (RESP3). */
void gw_reply_null(gw_conn_t *c);
/* Null array: "*-1" (RESP2) or "_" (RESP3). */
void gw_reply_null_array(gw_conn_t *c);
/* Map of n pairs: "*<2n>" (RESP2) or "%<n>" (RESP3); caller appends 2n elements. */
void gw_reply_map(gw_conn_t *c, long long n);
/* Set of n elements: "*<n>" (RESP2) or "~<n>" (RESP3). */
void gw_reply_set(gw_conn_t *c, long long n);
/* Text like INFO: bulk (RESP2) or verbatim "txt" (RESP3). */
void gw_reply_verbatim(gw_conn_t *c, const void *p, size_t len);

/* Reply for a negative DM_E* from dmcore: DM_ENOMEM/DM_EFULL -> "-OOM command not allowed
 * when used memory > 'maxmemory'.", anything else -> "-ERR dmkv: <dm_strerror>". */
void gw_reply_dm_error(gw_conn_t *c, int rc);

/* Read the key in argv[1] (one GET, counted as a keyspace hit or miss) into *v (free with
 * dm_value_free). Returns 1 found, 0 absent, or < 0 after replying the error. */
int gw_get_key(gw_conn_t *c, gw_cmd_t *cmd, dm_value_t *v);
/* The same for the key in argv[i]. */
int gw_get_key_at(gw_conn_t *c, gw_cmd_t *cmd, int i, dm_value_t *v);

/* dm_kv_rmw of the key in argv[1] (counted as a SET-class operation). Stores the
 * DM_RMW_* action that took effect in *action and returns true; on a dmcore error replies
 * it and returns false. */
bool gw_rmw_key(gw_conn_t *c, gw_cmd_t *cmd, dm_kv_rmw_fn fn, void *arg, int *action);

/* A subcommand's HELP: n lines as an array of simple strings (Redis's addReplyHelp). */
void gw_reply_help(gw_conn_t *c, const char *const *lines, size_t n);
#define GW_REPLY_HELP(c, lines) gw_reply_help((c), (lines), sizeof(lines) / sizeof((lines)[0]))

/* "-ERR wrong number of arguments for '<name>' command" (name like "get", "config|get"). */
void gw_reply_arity(gw_conn_t *c, const char *name);

/* "-ERR unknown subcommand '<sub>'. Try <CMD> HELP." */
void gw_reply_unknown_subcommand(gw_conn_t *c, gw_cmd_t *cmd);

/* Parse argv[i] as a long long with Redis's rules; on failure replies "-ERR value is not an
 * integer or out of range" and returns false. */
bool gw_arg_ll(gw_conn_t *c, gw_cmd_t *cmd, int i, long long *out);

/* Redis's range rule (GETRANGE, BITCOUNT, BITPOS): indexes below 0 count from the end of
 * len units, then both are clamped into [0, len - 1]. Returns false when the range is empty
 * (start > end afterwards, or len 0). */
static inline bool gw_clamp_range(long long len, long long *start, long long *end)
{
    if (*start < 0) *start += len;
    if (*end < 0) *end += len;
    if (*start < 0) *start = 0;
    if (*end < 0) *end = 0;
    if (*end >= len) *end = len - 1;
    return *start <= *end;
}

/* The bit offset in argv[i] as SETBIT, GETBIT and BITFIELD take it (Redis's
 * getBitOffsetFromArgument): 0 up to the bits of a 512 MB string; with width > 0 (BITFIELD)
 * "#N" means N * width. Else "-ERR bit offset is not an integer or out of range" is replied
 * and false returned. bits.c */
bool gw_bit_offset(gw_conn_t *c, gw_cmd_t *cmd, int i, int width, unsigned long long *off);

/* Procedures (one file per family): each runs one parsed command on c, replies (Redis's
 * wording for errors) and returns; the ones that reach the pool run on c's coroutine.
 * strings.c: GET, SET and their forms. */
void cmd_get(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_set(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_setnx(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_setex(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_psetex(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_getset(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_mget(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_mset(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_strlen(gw_conn_t *c, gw_cmd_t *cmd);

/* keyspace.c (DEL ... PTTL), expire.c (EXPIRETIME ... PERSIST), keyspace_move.c (TOUCH,
 * RENAME, RENAMENX, COPY, RANDOMKEY). */
void cmd_del(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_exists(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_dbsize(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_flushall(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_scan(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_keys(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_type(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_ttl(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_pttl(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_expiretime(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_pexpiretime(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_expire(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_pexpire(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_expireat(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_pexpireat(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_persist(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_touch(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_rename(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_renamenx(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_copy(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_randomkey(gw_conn_t *c, gw_cmd_t *cmd);

/* strings_rmw.c: read-modify-write through dm_kv_rmw. */
void cmd_incr(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_decr(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_incrby(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_decrby(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_incrbyfloat(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_append(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_setrange(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_getdel(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_getex(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_getrange(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_lcs(gw_conn_t *c, gw_cmd_t *cmd);    /* lcs.c */
void cmd_setbit(gw_conn_t *c, gw_cmd_t *cmd); /* bits.c */
void cmd_getbit(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_bitcount(gw_conn_t *c, gw_cmd_t *cmd); /* bitops.c */
void cmd_bitpos(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_bitop(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_bitfield(gw_conn_t *c, gw_cmd_t *cmd); /* bitfield.c */
void cmd_bitfield_ro(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_msetnx(gw_conn_t *c, gw_cmd_t *cmd);

/* multi.c: transactions. */
void cmd_multi(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_exec(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_discard(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_watch(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_unwatch(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_reset(gw_conn_t *c, gw_cmd_t *cmd);

/* connection.c: the connection's own state and the clients' (CLIENT, MONITOR). */
void cmd_ping(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_echo(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_select(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_quit(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_auth(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_hello(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_client(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_monitor(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_memory(gw_conn_t *c, gw_cmd_t *cmd); /* memory.c */
/* CLIENT KILL (both forms), client_kill.c. */
void gw_client_kill(gw_conn_t *c, gw_cmd_t *cmd);
/* CLIENT LIST [TYPE type] [ID id ...], client_list.c. */
void gw_client_list(gw_conn_t *c, gw_cmd_t *cmd);

/* command.c (COMMAND), server.c (CONFIG, INFO, TIME, SHUTDOWN). */
void cmd_command(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_config(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_info(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_time(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_shutdown(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_function(gw_conn_t *c, gw_cmd_t *cmd); /* function.c */

#endif
