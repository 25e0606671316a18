/* MEMORY USAGE and MEMORY HELP. A key's usage is what it takes in the pool (its KV block as
 * allocated plus its share of the RACE and CHIME index, dm_kv_footprint), read with one GET;
 * SAMPLES is accepted and has no effect (a string has nothing to sample). */
#include <strings.h>

#include "commands/commands.h"
#include "resp/reply.h"

static const char *help[] = {
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value in the memory pool: the KV",
    "    block as allocated plus its share of the RACE and CHIME index.",
    "HELP",
    "    Prints this help.",
};

static void memory_usage(gw_conn_t *c, gw_cmd_t *cmd)
{
    for (int i = 3; i < cmd->argc; i += 2) {
        long long n;
        if (strcasecmp(cmd->argv[i], "samples") || i + 1 >= cmd->argc) {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return;
        }
        if (!gw_arg_ll(c, cmd, i + 1, &n)) return;
        if (n < 0) {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return;
        }
    }
    dm_value_t v;
    int rc = gw_get_key_at(c, cmd, 2, &v);
    if (rc < 0) return;
    if (rc == 0) {
        gw_reply_null(c);
        return;
    }
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
    reply_int(gw_conn_out(c), (long long)dm_kv_footprint(&ctx, cmd->argvlen[2], v.len));
    dm_value_free(&v);
}

void cmd_memory(gw_conn_t *c, gw_cmd_t *cmd)
{
    const char *sub = cmd->argv[1];
    if (cmd->argc == 2 && !strcasecmp(sub, "help")) {
        GW_REPLY_HELP(c, help);
    } else if (!strcasecmp(sub, "usage")) {
        if (cmd->argc < 3)
            gw_reply_arity(c, "memory|usage");
        else
            memory_usage(c, cmd);
    } else {
        gw_reply_unknown_subcommand(c, cmd);
    }
}
