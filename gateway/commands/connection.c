/* Connection commands: PING, ECHO, SELECT, QUIT, AUTH, HELLO, CLIENT. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "resp/reply.h"
#include "server/monitor.h"
#include "server/server.h"
#include "util/strconv.h"
#include "version.h"

void cmd_ping(gw_conn_t *c, gw_cmd_t *cmd)
{
    if (cmd->argc > 2)
        gw_reply_arity(c, "ping");
    else if (cmd->argc == 2)
        reply_bulk(gw_conn_out(c), cmd->argv[1], cmd->argvlen[1]);
    else
        reply_status(gw_conn_out(c), "PONG");
}

void cmd_echo(gw_conn_t *c, gw_cmd_t *cmd)
{
    reply_bulk(gw_conn_out(c), cmd->argv[1], cmd->argvlen[1]);
}

void cmd_select(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long id;
    if (!gw_arg_ll(c, cmd, 1, &id)) return;
    if (id < -2147483648LL || id > 2147483647LL) {
        reply_error(gw_conn_out(c), "ERR value is not an integer or out of range");
        return;
    }
    if (id != 0)
        reply_error(gw_conn_out(c), "ERR DB index is out of range");
    else
        reply_status(gw_conn_out(c), "OK");
}

void cmd_quit(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    reply_status(gw_conn_out(c), "OK");
    c->close_after_reply = true;
}

/* The only user is "default": without requirepass it takes any password (nopass, like a
 * stock Redis); with requirepass it needs that password. */
static bool auth_ok(const char *user, const char *pass, size_t passlen)
{
    if (strcmp(user, "default") != 0) return false;
    return !gw_server_requirepass_set() || gw_server_check_pass(pass, passlen);
}

static const char wrongpass[] = "WRONGPASS invalid username-password pair or user is disabled.";

void cmd_auth(gw_conn_t *c, gw_cmd_t *cmd)
{
    c->auth_queued = false; /* authenticated now, or the limits before AUTH apply again */
    if (cmd->argc > 3) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        return;
    }
    if (cmd->argc == 2) {
        if (!gw_server_requirepass_set()) {
            reply_error(gw_conn_out(c),
                        "ERR AUTH <password> called without any password configured "
                        "for the default user. Are you sure your configuration is "
                        "correct?");
        } else if (gw_server_check_pass(cmd->argv[1], cmd->argvlen[1])) {
            c->authed = true;
            reply_status(gw_conn_out(c), "OK");
        } else {
            reply_error(gw_conn_out(c), wrongpass);
        }
        return;
    }
    if (auth_ok(cmd->argv[1], cmd->argv[2], cmd->argvlen[2])) {
        c->authed = true;
        reply_status(gw_conn_out(c), "OK");
    } else {
        reply_error(gw_conn_out(c), wrongpass);
    }
}

/* Client names and library info: printable ASCII without spaces ('!'..'~'). */
static bool valid_name(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] < '!' || s[i] > '~') return false;
    return true;
}

static void set_str(gw_conn_t *c, char **field, const char *s, size_t len)
{
    char *v = len ? strndup(s, len) : NULL;
    uv_mutex_lock(&c->th->lock);
    free(*field);
    *field = v;
    uv_mutex_unlock(&c->th->lock);
}

void cmd_hello(gw_conn_t *c, gw_cmd_t *cmd)
{
    c->auth_queued = false; /* as in cmd_auth */
    int j = 1;
    long long ver = 0;
    if (cmd->argc >= 2) {
        if (!gw_str2ll(cmd->argv[1], cmd->argvlen[1], &ver)) {
            reply_error(gw_conn_out(c), "ERR Protocol version is not an integer or out of range");
            return;
        }
        if (ver != 2 && ver != 3) {
            reply_error(gw_conn_out(c), "NOPROTO unsupported protocol version");
            return;
        }
        j = 2;
    }
    const char *setname = NULL, *user = NULL, *pass = NULL;
    size_t setname_len = 0, pass_len = 0;
    for (; j < cmd->argc; j++) {
        int more = cmd->argc - j - 1;
        if (!strcasecmp(cmd->argv[j], "auth") && more >= 2) {
            user = cmd->argv[j + 1];
            pass = cmd->argv[j + 2];
            pass_len = cmd->argvlen[j + 2];
            j += 2;
        } else if (!strcasecmp(cmd->argv[j], "setname") && more >= 1) {
            setname = cmd->argv[j + 1];
            setname_len = cmd->argvlen[j + 1];
            j++;
        } else {
            reply_errorf(gw_conn_out(c), "ERR Syntax error in HELLO option '%.128s'", cmd->argv[j]);
            return;
        }
    }
    if (user) {
        if (!auth_ok(user, pass, pass_len)) {
            reply_error(gw_conn_out(c), wrongpass);
            return;
        }
        c->authed = true;
    }
    if (!c->authed) {
        reply_error(gw_conn_out(c),
                    "NOAUTH HELLO must be called with the client already "
                    "authenticated, otherwise the HELLO AUTH <user> <pass> option can "
                    "be used to authenticate the client and select the RESP protocol "
                    "version at the same time");
        return;
    }
    if (setname) {
        if (!valid_name(setname, setname_len)) {
            reply_error(gw_conn_out(c),
                        "ERR Client names cannot contain spaces, newlines or special "
                        "characters.");
            return;
        }
        set_str(c, &c->name, setname, setname_len);
    }
    if (ver) c->resp = (int)ver;
    gw_reply_map(c, 7);
    reply_bulk_cstr(gw_conn_out(c), "server");
    reply_bulk_cstr(gw_conn_out(c), "redis");
    reply_bulk_cstr(gw_conn_out(c), "version");
    reply_bulk_cstr(gw_conn_out(c), GW_REDIS_VERSION);
    reply_bulk_cstr(gw_conn_out(c), "proto");
    reply_int(gw_conn_out(c), c->resp);
    reply_bulk_cstr(gw_conn_out(c), "id");
    reply_int(gw_conn_out(c), (long long)c->id);
    reply_bulk_cstr(gw_conn_out(c), "mode");
    reply_bulk_cstr(gw_conn_out(c), "standalone");
    reply_bulk_cstr(gw_conn_out(c), "role");
    reply_bulk_cstr(gw_conn_out(c), "master");
    reply_bulk_cstr(gw_conn_out(c), "modules");
    reply_array(gw_conn_out(c), 0);
}

static const char *client_help[] = {
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are: ID <client-id>, ADDR <ip:port>, LADDR <ip:port>,",
    "    USER <username>, TYPE <normal|master|replica|pubsub>, SKIPME (YES|NO).",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <LIB-NAME|LIB-VER> <value>",
    "    Set client library name or version.",
    "HELP",
    "    Print this help.",
};

void cmd_monitor(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    gw_monitor_add(c);
    reply_status(gw_conn_out(c), "OK");
}

void cmd_client(gw_conn_t *c, gw_cmd_t *cmd)
{
    const char *sub = cmd->argv[1];
    int argc = cmd->argc;
    if (!strcasecmp(sub, "id")) {
        if (argc != 2) {
            gw_reply_arity(c, "client|id");
            return;
        }
        reply_int(gw_conn_out(c), (long long)c->id);
    } else if (!strcasecmp(sub, "getname")) {
        if (argc != 2) {
            gw_reply_arity(c, "client|getname");
            return;
        }
        if (c->name)
            reply_bulk_cstr(gw_conn_out(c), c->name);
        else
            gw_reply_null(c);
    } else if (!strcasecmp(sub, "setname")) {
        if (argc != 3) {
            gw_reply_arity(c, "client|setname");
            return;
        }
        if (!valid_name(cmd->argv[2], cmd->argvlen[2])) {
            reply_error(gw_conn_out(c),
                        "ERR Client names cannot contain spaces, newlines or special characters.");
            return;
        }
        set_str(c, &c->name, cmd->argv[2], cmd->argvlen[2]);
        reply_status(gw_conn_out(c), "OK");
    } else if (!strcasecmp(sub, "setinfo")) {
        if (argc != 4) {
            gw_reply_arity(c, "client|setinfo");
            return;
        }
        char **field;
        if (!strcasecmp(cmd->argv[2], "lib-name"))
            field = &c->lib_name;
        else if (!strcasecmp(cmd->argv[2], "lib-ver"))
            field = &c->lib_ver;
        else {
            reply_errorf(gw_conn_out(c), "ERR Unrecognized option '%.128s'", cmd->argv[2]);
            return;
        }
        if (!valid_name(cmd->argv[3], cmd->argvlen[3])) {
            reply_errorf(gw_conn_out(c),
                         "ERR %s cannot contain spaces, newlines or special characters.",
                         field == &c->lib_name ? "lib-name" : "lib-ver");
            return;
        }
        set_str(c, field, cmd->argv[3], cmd->argvlen[3]);
        reply_status(gw_conn_out(c), "OK");
    } else if (!strcasecmp(sub, "list")) {
        gw_client_list(c, cmd);
    } else if (!strcasecmp(sub, "info")) {
        if (argc != 2) {
            gw_reply_arity(c, "client|info");
            return;
        }
        gw_buf_t b;
        gw_buf_init(&b);
        uv_mutex_lock(&c->th->lock);
        gw_conn_describe(c, &b);
        uv_mutex_unlock(&c->th->lock);
        gw_reply_verbatim(c, b.data, b.len);
        gw_buf_free(&b);
    } else if (!strcasecmp(sub, "kill")) {
        gw_client_kill(c, cmd);
    } else if (!strcasecmp(sub, "no-evict")) {
        if (argc != 3) {
            gw_reply_arity(c, "client|no-evict");
        } else if (!strcasecmp(cmd->argv[2], "on") || !strcasecmp(cmd->argv[2], "off")) {
            c->no_evict = !strcasecmp(cmd->argv[2], "on");
            reply_status(gw_conn_out(c), "OK");
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
        }
    } else if (!strcasecmp(sub, "reply")) {
        const char *m = argc == 3 ? cmd->argv[2] : "";
        if (argc != 3) {
            gw_reply_arity(c, "client|reply");
        } else if (!strcasecmp(m, "on") || !strcasecmp(m, "off") || !strcasecmp(m, "skip")) {
            c->reply_off = !strcasecmp(m, "off");
            c->reply_skip = !strcasecmp(m, "skip") ? 2 : 0;
            reply_status(gw_conn_out(c), "OK"); /* dropped for OFF and SKIP (table.c) */
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
        }
    } else if (!strcasecmp(sub, "help") && argc == 2) {
        GW_REPLY_HELP(c, client_help);
    } else {
        gw_reply_unknown_subcommand(c, cmd);
    }
}
