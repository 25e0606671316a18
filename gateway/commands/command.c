/* COMMAND: the command table as Redis 7 describes it (COMMAND, COUNT, INFO, LIST with its
 * filters, GETKEYS from the key positions, DOCS empty). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "resp/reply.h"
#include "util/glob.h"

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
    "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
    "    Return a list of all commands in this server (subcommands as \"name|sub\").",
    "INFO [<command-name> ...]",
    "    Return details about multiple commands.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple commands (none in dmkv).",
    "HELP",
    "    Print this help.",
};

/* COMMAND LIST: every command and subcommand ("config|get"), optionally only those of an
 * ACL category or matching a glob pattern (a module: none, dmkv has no modules). */
static void command_list(gw_conn_t *c, gw_cmd_t *cmd)
{
    const char *by = NULL, *arg = NULL;
    size_t arglen = 0;
    if (cmd->argc == 5 && !strcasecmp(cmd->argv[2], "filterby")) {
        by = cmd->argv[3];
        arg = cmd->argv[4];
        arglen = cmd->argvlen[4];
        if (strcasecmp(by, "module") && strcasecmp(by, "aclcat") && strcasecmp(by, "pattern"))
            by = NULL;
    }
    if (cmd->argc != 2 && !by) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        return;
    }
    size_t n;
    const gw_command_t *t = gw_command_table(&n);
    gw_buf_t names; /* NUL-separated */
    gw_buf_init(&names);
    long long count = 0;
    for (size_t i = 0; i < n; i++) {
        if (by && !strcasecmp(by, "module")) break;
        if (by && !strcasecmp(by, "aclcat")) {
            char cat[64];
            int len = snprintf(cat, sizeof(cat), "@%.*s", (int)arglen, arg);
            const char *p = strcasestr(t[i].acl, cat);
            if (len >= (int)sizeof(cat) || !p || (p[len] && p[len] != ' ')) continue;
        }
        for (int sub = -1; sub < 0 || gw_command_sub_name(&t[i], sub); sub++) {
            char full[96];
            int len = gw_command_fullname(&t[i], sub, full, sizeof(full));
            if (by && !strcasecmp(by, "pattern") &&
                !gw_glob_match(arg, arglen, full, (size_t)len, true))
                continue;
            gw_buf_append(&names, full, (size_t)len + 1);
            count++;
        }
    }
    reply_array(gw_conn_out(c), count);
    for (size_t off = 0; off < names.len; off += strlen(names.data + off) + 1)
        reply_bulk_cstr(gw_conn_out(c), names.data + off);
    gw_buf_free(&names);
}

/* Key positions of the subcommands that take keys (Redis's key specs, for GETKEYS). */
static int sub_first_key(const gw_command_t *gc, const char *sub)
{
    return !strcmp(gc->name, "memory") && !strcasecmp(sub, "usage") ? 2 : 0;
}

/* COMMAND GETKEYS <command> <args...>: the keys by the table's first/last/step. */
static void command_getkeys(gw_conn_t *c, gw_cmd_t *cmd)
{
    const gw_command_t *gc = gw_command_lookup(cmd->argv[2], cmd->argvlen[2]);
    int argc = cmd->argc - 2; /* the full command's */
    char **argv = cmd->argv + 2;
    if (!gc) {
        reply_error(gw_conn_out(c), "ERR Invalid command specified");
        return;
    }
    if ((gc->arity > 0 && argc != gc->arity) || argc < -gc->arity) {
        reply_error(gw_conn_out(c), "ERR Invalid number of arguments specified for command");
        return;
    }
    int first = gc->first, last = gc->last, step = gc->step;
    if (gc->subs && argc > 1 && (first = sub_first_key(gc, argv[1])) > 0) last = first, step = 1;
    if (first <= 0) {
        reply_error(gw_conn_out(c), "ERR The command has no key arguments");
        return;
    }
    if (last < 0) last = argc + last;
    if (last >= argc) last = argc - 1;
    reply_array(gw_conn_out(c), last >= first ? (last - first) / step + 1 : 0);
    for (int i = first; i <= last; i += step)
        reply_bulk(gw_conn_out(c), argv[i], cmd->argvlen[i + 2]);
}

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
        command_list(c, cmd);
    } else if (!strcasecmp(sub, "getkeys")) {
        if (cmd->argc < 3)
            gw_reply_arity(c, "command|getkeys");
        else
            command_getkeys(c, cmd);
    } else if (!strcasecmp(sub, "help") && cmd->argc == 2) {
        GW_REPLY_HELP(c, command_help);
    } else {
        gw_reply_unknown_subcommand(c, cmd);
    }
}
