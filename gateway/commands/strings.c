/* String commands: GET, SET (EX/PX/EXAT/PXAT/NX/XX/GET/KEEPTTL), SETNX, SETEX, PSETEX,
 * GETSET, MGET, MSET, STRLEN. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "dmkv/kv.h"
#include "resp/reply.h"
#include "server/expiry_track.h"
#include "server/stats.h"
#include "util/oom.h"

static void count_lookup(int found)
{
    if (found > 0)
        GW_STAT_ADD(keyspace_hits, 1);
    else if (found == 0)
        GW_STAT_ADD(keyspace_misses, 1);
}

int gw_get_key(gw_conn_t *c, gw_cmd_t *cmd, dm_value_t *v)
{
    return gw_get_key_at(c, cmd, 1, v);
}

int gw_get_key_at(gw_conn_t *c, gw_cmd_t *cmd, int i, dm_value_t *v)
{
    dm_ctx_t ctx;
    memset(v, 0, sizeof(*v));
    dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
    int rc = dm_kv_get(&ctx, cmd->argv[i], cmd->argvlen[i], v);
    dm_stats_op(DM_CLS_GET);
    count_lookup(rc);
    if (rc < 0) gw_reply_dm_error(c, rc);
    return rc;
}

bool gw_rmw_key(gw_conn_t *c, gw_cmd_t *cmd, dm_kv_rmw_fn fn, void *arg, int *action)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
    int rc = dm_kv_rmw(&ctx, cmd->argv[1], cmd->argvlen[1], fn, arg);
    dm_stats_op(DM_CLS_SET);
    if (rc < 0) {
        gw_reply_dm_error(c, rc);
        return false;
    }
    *action = rc;
    return true;
}

void cmd_get(gw_conn_t *c, gw_cmd_t *cmd)
{
    dm_value_t v;
    int rc = gw_get_key(c, cmd, &v);
    if (rc < 0) {
        return;
    } else if (rc == 0) {
        gw_reply_null(c);
    } else {
        reply_bulk(gw_conn_out(c), v.data, v.len);
        dm_value_free(&v);
    }
}

void cmd_strlen(gw_conn_t *c, gw_cmd_t *cmd)
{
    dm_value_t v;
    int rc = gw_get_key(c, cmd, &v);
    if (rc >= 0) {
        reply_int(gw_conn_out(c), rc ? (long long)v.len : 0);
        if (rc) dm_value_free(&v);
    }
}

enum { EXP_NONE = 0, EXP_EX, EXP_PX, EXP_EXAT, EXP_PXAT };

/* Turn an expire argument into absolute wall-clock ms with Redis's checks. name is the
 * command ("set", "setex") for "invalid expire time in '<name>' command". */
static bool expire_abs_ms(gw_conn_t *c, gw_cmd_t *cmd, int argi, int kind, const char *name,
                          uint64_t *out)
{
    long long v;
    if (!gw_arg_ll(c, cmd, argi, &v)) return false;
    bool secs = kind == EXP_EX || kind == EXP_EXAT;
    if (v <= 0 || (secs && v > LLONG_MAX / 1000)) goto bad;
    if (secs) v *= 1000;
    if (kind == EXP_EX || kind == EXP_PX) {
        if (__builtin_add_overflow(v, (long long)dm_wall_ms(), &v)) goto bad;
    }
    if (v <= 0) goto bad;
    *out = (uint64_t)v;
    return true;
bad:
    reply_errorf(gw_conn_out(c), "ERR invalid expire time in '%s' command", name);
    return false;
}

/* Run dm_kv_set and reply: GET -> old value or null; otherwise +OK / null (NX/XX refused). */
static void do_set(gw_conn_t *c, gw_cmd_t *cmd, uint64_t expire_ms, unsigned flags)
{
    dm_ctx_t ctx;
    dm_value_t old = {0};
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
    int rc = dm_kv_set(&ctx, cmd->argv[1], cmd->argvlen[1], cmd->argv[2], cmd->argvlen[2],
                       expire_ms, flags, (flags & DM_SET_GET) ? &old : NULL);
    dm_stats_op(DM_CLS_SET);
    if (rc < 0) {
        gw_reply_dm_error(c, rc);
        dm_value_free(&old);
        return;
    }
    if (rc == 1) gw_expiry_track(c->th, cmd->argv[1], cmd->argvlen[1], expire_ms);
    if (flags & DM_SET_GET) {
        if (old.data)
            reply_bulk(gw_conn_out(c), old.data, old.len);
        else
            gw_reply_null(c);
        dm_value_free(&old);
    } else if (rc == 1) {
        reply_status(gw_conn_out(c), "OK");
    } else {
        gw_reply_null(c);
    }
}

void cmd_set(gw_conn_t *c, gw_cmd_t *cmd)
{
    unsigned flags = 0;
    int kind = EXP_NONE, exp_arg = 0;
    for (int j = 3; j < cmd->argc; j++) {
        const char *o = cmd->argv[j];
        bool has_next = j + 1 < cmd->argc;
        if (!strcasecmp(o, "nx") && !(flags & DM_SET_XX)) {
            flags |= DM_SET_NX;
        } else if (!strcasecmp(o, "xx") && !(flags & DM_SET_NX)) {
            flags |= DM_SET_XX;
        } else if (!strcasecmp(o, "get")) {
            flags |= DM_SET_GET;
        } else if (!strcasecmp(o, "keepttl") && kind == EXP_NONE) {
            flags |= DM_SET_KEEPTTL;
        } else if (!strcasecmp(o, "ex") && !(flags & DM_SET_KEEPTTL) &&
                   (kind == EXP_NONE || kind == EXP_EX) && has_next) {
            kind = EXP_EX;
            exp_arg = ++j;
        } else if (!strcasecmp(o, "px") && !(flags & DM_SET_KEEPTTL) &&
                   (kind == EXP_NONE || kind == EXP_PX) && has_next) {
            kind = EXP_PX;
            exp_arg = ++j;
        } else if (!strcasecmp(o, "exat") && !(flags & DM_SET_KEEPTTL) &&
                   (kind == EXP_NONE || kind == EXP_EXAT) && has_next) {
            kind = EXP_EXAT;
            exp_arg = ++j;
        } else if (!strcasecmp(o, "pxat") && !(flags & DM_SET_KEEPTTL) &&
                   (kind == EXP_NONE || kind == EXP_PXAT) && has_next) {
            kind = EXP_PXAT;
            exp_arg = ++j;
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return;
        }
    }
    uint64_t expire_ms = 0;
    if (kind != EXP_NONE && !expire_abs_ms(c, cmd, exp_arg, kind, "set", &expire_ms)) return;
    do_set(c, cmd, expire_ms, flags);
}

void cmd_setnx(gw_conn_t *c, gw_cmd_t *cmd)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
    int rc = dm_kv_set(&ctx, cmd->argv[1], cmd->argvlen[1], cmd->argv[2], cmd->argvlen[2], 0,
                       DM_SET_NX, NULL);
    dm_stats_op(DM_CLS_SET);
    if (rc < 0)
        gw_reply_dm_error(c, rc);
    else
        reply_int(gw_conn_out(c), rc);
}

/* SETEX/PSETEX key expire value: rearranged into do_set's argv shape. */
static void setex_generic(gw_conn_t *c, gw_cmd_t *cmd, int kind, const char *name)
{
    uint64_t expire_ms;
    if (!expire_abs_ms(c, cmd, 2, kind, name, &expire_ms)) return;
    gw_cmd_t view = *cmd;
    char *argv[3] = {cmd->argv[0], cmd->argv[1], cmd->argv[3]};
    size_t lens[3] = {cmd->argvlen[0], cmd->argvlen[1], cmd->argvlen[3]};
    view.argv = argv;
    view.argvlen = lens;
    view.argc = 3;
    do_set(c, &view, expire_ms, 0);
}

void cmd_setex(gw_conn_t *c, gw_cmd_t *cmd)
{
    setex_generic(c, cmd, EXP_EX, "setex");
}

void cmd_psetex(gw_conn_t *c, gw_cmd_t *cmd)
{
    setex_generic(c, cmd, EXP_PX, "psetex");
}

void cmd_getset(gw_conn_t *c, gw_cmd_t *cmd)
{
    do_set(c, cmd, 0, DM_SET_GET);
}

void cmd_mget(gw_conn_t *c, gw_cmd_t *cmd)
{
    int n = cmd->argc - 1;
    dm_value_t *vals = gw_try_calloc((size_t)n, sizeof(*vals));
    int *found = gw_try_calloc((size_t)n, sizeof(*found));
    if (!vals || !found) {
        free(vals);
        free(found);
        reply_error(gw_conn_out(c),
                    "ERR Insufficient memory, failed allocating transient memory for MGET");
        return;
    }
    int err = 0;
    for (int i = 0; i < n && !err; i++) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
        int rc = dm_kv_get(&ctx, cmd->argv[i + 1], cmd->argvlen[i + 1], &vals[i]);
        count_lookup(rc);
        if (rc < 0)
            err = rc;
        else
            found[i] = rc;
    }
    dm_stats_op(DM_CLS_GET);
    if (err) {
        gw_reply_dm_error(c, err);
    } else {
        reply_array(gw_conn_out(c), n);
        for (int i = 0; i < n; i++) {
            if (found[i])
                reply_bulk(gw_conn_out(c), vals[i].data, vals[i].len);
            else
                gw_reply_null(c);
        }
    }
    for (int i = 0; i < n; i++)
        if (found[i]) dm_value_free(&vals[i]);
    free(vals);
    free(found);
}

void cmd_mset(gw_conn_t *c, gw_cmd_t *cmd)
{
    if (cmd->argc % 2 == 0) {
        gw_reply_arity(c, "mset");
        return;
    }
    for (int i = 1; i < cmd->argc; i += 2) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
        int rc = dm_kv_set(&ctx, cmd->argv[i], cmd->argvlen[i], cmd->argv[i + 1],
                           cmd->argvlen[i + 1], 0, 0, NULL);
        if (rc < 0) {
            dm_stats_op(DM_CLS_SET);
            gw_reply_dm_error(c, rc);
            return;
        }
    }
    dm_stats_op(DM_CLS_SET);
    reply_status(gw_conn_out(c), "OK");
}
