/* FUNCTION: answered as Redis 7.0 answers on a server with no library loaded. dmkv has no
 * scripting engine, so LOAD/RESTORE refuse and every listing is empty; FLUSH is what client
 * libraries and Redis's own test suite send before each unit (issue 13). */
#include <strings.h>

#include "commands/commands.h"
#include "resp/reply.h"

static const char *help[] = {
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DELETE <LIBRARY NAME>",
    "    Delete a library and all its functions.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "KILL",
    "    Kill a function that is currently running.",
    "LIST [LIBRARYNAME <PATTERN>] [WITHCODE]",
    "    Return general information on all the libraries.",
    "STATS",
    "    Return information about the current function running.",
    "LOAD, DUMP, RESTORE",
    "    Not supported: dmkv has no scripting engine.",
    "HELP",
    "    Prints this help.",
};

/* FUNCTION LIST's options, checked as functionListCommand checks them. */
static void reply_list(gw_conn_t *c, gw_cmd_t *cmd)
{
    for (int i = 2; i < cmd->argc; i++) {
        if (!strcasecmp(cmd->argv[i], "withcode")) continue;
        if (!strcasecmp(cmd->argv[i], "libraryname")) {
            if (++i >= cmd->argc) {
                reply_error(gw_conn_out(c), "ERR library name argument was not given");
                return;
            }
            continue;
        }
        reply_errorf(gw_conn_out(c), "ERR Unknown argument %s", cmd->argv[i]);
        return;
    }
    reply_array(gw_conn_out(c), 0);
}

/* running_script nil, no engines: what a client polling FUNCTION STATS needs to see. */
static void reply_stats(gw_conn_t *c)
{
    gw_buf_t *b = gw_conn_out(c);
    reply_map(b, 2);
    reply_bulk_cstr(b, "running_script");
    reply_null(b);
    reply_bulk_cstr(b, "engines");
    reply_map(b, 0);
}

void cmd_function(gw_conn_t *c, gw_cmd_t *cmd)
{
    const char *sub = cmd->argv[1];
    gw_buf_t *b = gw_conn_out(c);
    if (cmd->argc == 2 && !strcasecmp(sub, "help")) {
        GW_REPLY_HELP(c, help);
    } else if (cmd->argc <= 3 && !strcasecmp(sub, "flush")) {
        if (cmd->argc == 3 && strcasecmp(cmd->argv[2], "async") &&
            strcasecmp(cmd->argv[2], "sync")) {
            reply_error(b, "ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
            return;
        }
        reply_status(b, "OK");
    } else if (!strcasecmp(sub, "list")) {
        reply_list(c, cmd);
    } else if (cmd->argc == 2 && !strcasecmp(sub, "stats")) {
        reply_stats(c);
    } else if (cmd->argc == 3 && !strcasecmp(sub, "delete")) {
        reply_error(b, "ERR Library not found");
    } else if (cmd->argc == 2 && !strcasecmp(sub, "kill")) {
        reply_error(b, "NOTBUSY No scripts in execution right now.");
    } else if ((cmd->argc >= 3 && !strcasecmp(sub, "load")) ||
               (cmd->argc == 2 && !strcasecmp(sub, "dump")) ||
               (cmd->argc >= 3 && cmd->argc <= 4 && !strcasecmp(sub, "restore"))) {
        reply_errorf(b, "ERR dmkv: FUNCTION %s is not supported (no scripting engine)", sub);
    } else {
        gw_reply_unknown_subcommand(c, cmd);
    }
}
