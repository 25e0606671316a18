/* The command table and dispatcher: name lookup, arity check, Redis's error texts, and
 * the per-command procedures (strings.c, keyspace.c, connection.c, server.c). */
#ifndef GW_COMMANDS_COMMANDS_H
#define GW_COMMANDS_COMMANDS_H

#include <stddef.h>

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
} gw_command_t;

/* Find a command by name (case-insensitive, binary-safe length). NULL when unknown. */
const gw_command_t *gw_command_lookup(const char *name, size_t len);

/* The whole table, *n entries (COMMAND, COMMAND COUNT). */
const gw_command_t *gw_command_table(size_t *n);

/* Run one queued command for c: protocol-error pseudo commands reply and mark the
 * connection close-after-reply; unknown commands and wrong arity get Redis's errors;
 * otherwise the procedure runs (possibly yielding) and the counters are charged. */
void gw_command_exec(gw_conn_t *c, gw_cmd_t *cmd);

/* Reply for a negative DM_E* from dmcore: DM_ENOMEM/DM_EFULL -> "-OOM command not allowed
 * when used memory > 'maxmemory'.", anything else -> "-ERR dmkv: <dm_strerror>". */
void gw_reply_dm_error(gw_conn_t *c, int rc);

/* "-ERR wrong number of arguments for '<name>' command" (name like "get", "config|get"). */
void gw_reply_arity(gw_conn_t *c, const char *name);

/* "-ERR unknown subcommand '<sub>'. Try <CMD> HELP." */
void gw_reply_unknown_subcommand(gw_conn_t *c, gw_cmd_t *cmd);

/* Parse argv[i] as a long long with Redis's rules; on failure replies "-ERR value is not an
 * integer or out of range" and returns false. */
bool gw_arg_ll(gw_conn_t *c, gw_cmd_t *cmd, int i, long long *out);

/* Procedures (one file per family). */
void cmd_get(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_set(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_setnx(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_setex(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_psetex(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_getset(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_mget(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_mset(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_strlen(gw_conn_t *c, gw_cmd_t *cmd);

void cmd_del(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_exists(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_dbsize(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_flushall(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_scan(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_keys(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_type(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_ttl(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_pttl(gw_conn_t *c, gw_cmd_t *cmd);

void cmd_ping(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_echo(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_select(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_quit(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_auth(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_hello(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_client(gw_conn_t *c, gw_cmd_t *cmd);

void cmd_command(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_config(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_info(gw_conn_t *c, gw_cmd_t *cmd);
void cmd_time(gw_conn_t *c, gw_cmd_t *cmd);

#endif
