/* Keyspace commands that read one key and write another: RENAME, RENAMENX, COPY; and
 * TOUCH, RANDOMKEY. RENAME is read source -> write destination -> delete the source only if
 * it still holds what was read (dm_kv_rmw): not atomic across the two keys (README
 * "Transactions"), but never deletes a value written meanwhile. Replies follow Redis 7.0. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "resp/reply.h"
#include "server/expiry_track.h"
#include "util/strconv.h"

/* Read key argv[i]: 1 found (*v filled), 0 absent, or replied an error (-1). */
static int read_key(gw_conn_t *c, gw_cmd_t *cmd, int i, dm_value_t *v)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
    int rc = dm_kv_get(&ctx, cmd->argv[i], cmd->argvlen[i], v);
    dm_stats_op(DM_CLS_GET);
    if (rc < 0) {
        gw_reply_dm_error(c, rc);
        return -1;
    }
    return rc;
}

/* Write v (value and expiry) to argv[i]: 1 written, 0 refused (nx and present), -1 replied
 * an error. */
static int write_key(gw_conn_t *c, gw_cmd_t *cmd, int i, const dm_value_t *v, bool nx)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
    int rc = dm_kv_set(&ctx, cmd->argv[i], cmd->argvlen[i], v->data, v->len, v->expire_ms,
                       nx ? DM_SET_NX : 0, NULL);
    dm_stats_op(DM_CLS_SET);
    if (rc < 0) {
        gw_reply_dm_error(c, rc);
        return -1;
    }
    if (rc == 1) gw_expiry_track(c->th, cmd->argv[i], cmd->argvlen[i], v->expire_ms);
    return rc;
}

static int del_if_same(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    (void)out;
    const dm_value_t *was = arg;
    if (cur && cur->len == was->len && cur->expire_ms == was->expire_ms &&
        (was->len == 0 || memcmp(cur->data, was->data, was->len) == 0))
        return DM_RMW_DELETE;
    return DM_RMW_KEEP;
}

static void rename_generic(gw_conn_t *c, gw_cmd_t *cmd, bool nx)
{
    dm_value_t v = {0};
    int rc = read_key(c, cmd, 1, &v);
    if (rc < 0) return;
    if (rc == 0) {
        reply_error(gw_conn_out(c), "ERR no such key");
        return;
    }
    if (cmd->argvlen[1] == cmd->argvlen[2] &&
        !memcmp(cmd->argv[1], cmd->argv[2], cmd->argvlen[1])) {
        if (nx)
            reply_int(gw_conn_out(c), 0);
        else
            reply_status(gw_conn_out(c), "OK");
        dm_value_free(&v);
        return;
    }
    rc = write_key(c, cmd, 2, &v, nx);
    if (rc == 1) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_DEL);
        rc = dm_kv_rmw(&ctx, cmd->argv[1], cmd->argvlen[1], del_if_same, &v);
        dm_stats_op(DM_CLS_DEL);
        if (rc < 0)
            gw_reply_dm_error(c, rc);
        else if (nx)
            reply_int(gw_conn_out(c), 1);
        else
            reply_status(gw_conn_out(c), "OK");
    } else if (rc == 0) {
        reply_int(gw_conn_out(c), 0);
    }
    dm_value_free(&v);
}

void cmd_rename(gw_conn_t *c, gw_cmd_t *cmd)
{
    rename_generic(c, cmd, false);
}

void cmd_renamenx(gw_conn_t *c, gw_cmd_t *cmd)
{
    rename_generic(c, cmd, true);
}

void cmd_copy(gw_conn_t *c, gw_cmd_t *cmd)
{
    bool replace = false;
    for (int j = 3; j < cmd->argc; j++) {
        if (!strcasecmp(cmd->argv[j], "replace")) {
            replace = true;
        } else if (!strcasecmp(cmd->argv[j], "db") && j + 1 < cmd->argc) {
            long long db;
            if (!gw_arg_ll(c, cmd, j + 1, &db)) return;
            if (db != 0) { /* dmkv has one database */
                reply_error(gw_conn_out(c), "ERR DB index is out of range");
                return;
            }
            j++;
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return;
        }
    }
    if (cmd->argvlen[1] == cmd->argvlen[2] &&
        !memcmp(cmd->argv[1], cmd->argv[2], cmd->argvlen[1])) {
        reply_error(gw_conn_out(c), "ERR source and destination objects are the same");
        return;
    }
    dm_value_t v = {0};
    int rc = read_key(c, cmd, 1, &v);
    if (rc < 0) return;
    if (rc == 0) {
        reply_int(gw_conn_out(c), 0);
        return;
    }
    rc = write_key(c, cmd, 2, &v, !replace);
    if (rc >= 0) reply_int(gw_conn_out(c), rc);
    dm_value_free(&v);
}

void cmd_touch(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long n = 0;
    for (int i = 1; i < cmd->argc; i++) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
        int rc = dm_kv_exists(&ctx, cmd->argv[i], cmd->argvlen[i]);
        dm_stats_op(DM_CLS_GET);
        if (rc < 0) {
            gw_reply_dm_error(c, rc);
            return;
        }
        n += rc;
    }
    reply_int(gw_conn_out(c), n);
}

void cmd_randomkey(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SCAN);
    dm_key_t k;
    int rc = dm_kv_random_key(&ctx, &k);
    dm_stats_op(DM_CLS_SCAN);
    if (rc < 0) {
        gw_reply_dm_error(c, rc);
    } else if (rc == 0) {
        gw_reply_null(c);
    } else {
        reply_bulk(gw_conn_out(c), k.data, k.len);
        free(k.data);
    }
}
