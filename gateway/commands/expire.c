/* Expiry commands: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (NX/XX/GT/LT), PERSIST, EXPIRETIME,
 * PEXPIRETIME, GETEX. Changing a key's expiry rewrites its KV block with dm_kv_rmw (the
 * block is immutable), so a concurrent write of the key is never lost. An expiry in the
 * past deletes the key, as Redis does. Times are the gateways' wall clocks (README
 * "Expiry"). Replies and errors follow Redis 7.0's expire.c / t_string.c. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "resp/reply.h"
#include "server/expiry_track.h"
#include "util/strconv.h"

enum { F_NX = 1, F_XX = 2, F_GT = 4, F_LT = 8 };

typedef struct expire_arg {
    long long when; /* absolute ms */
    int flags;      /* F_* */
    int result;     /* 1 changed, 0 not */
} expire_arg_t;

static int expire_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    expire_arg_t *a = arg;
    a->result = 0;
    if (!cur) return DM_RMW_KEEP;
    long long have = cur->expire_ms ? (long long)cur->expire_ms : -1;
    if ((a->flags & F_NX) && have != -1) return DM_RMW_KEEP;
    if ((a->flags & F_XX) && have == -1) return DM_RMW_KEEP;
    if ((a->flags & F_GT) && (a->when <= have || have == -1)) return DM_RMW_KEEP;
    if ((a->flags & F_LT) && have != -1 && a->when >= have) return DM_RMW_KEEP;
    a->result = 1;
    if (a->when <= (long long)dm_wall_ms()) return DM_RMW_DELETE;
    out->data = malloc(cur->len ? cur->len : 1);
    if (!out->data) {
        a->result = 0;
        return DM_RMW_ABORT;
    }
    memcpy(out->data, cur->data, cur->len);
    out->len = cur->len;
    out->expire_ms = (uint64_t)a->when;
    return DM_RMW_WRITE;
}

static void expire_generic(gw_conn_t *c, gw_cmd_t *cmd, bool secs, bool relative)
{
    int flags = 0;
    for (int j = 3; j < cmd->argc; j++) {
        const char *o = cmd->argv[j];
        if (!strcasecmp(o, "nx"))
            flags |= F_NX;
        else if (!strcasecmp(o, "xx"))
            flags |= F_XX;
        else if (!strcasecmp(o, "gt"))
            flags |= F_GT;
        else if (!strcasecmp(o, "lt"))
            flags |= F_LT;
        else {
            reply_errorf(gw_conn_out(c), "ERR Unsupported option %.128s", o);
            return;
        }
    }
    if ((flags & F_NX) && (flags & (F_XX | F_GT | F_LT))) {
        reply_error(gw_conn_out(c), "ERR NX and XX, GT or LT options at the same time are not "
                                    "compatible");
        return;
    }
    if ((flags & F_GT) && (flags & F_LT)) {
        reply_error(gw_conn_out(c), "ERR GT and LT options at the same time are not compatible");
        return;
    }
    long long when;
    if (!gw_arg_ll(c, cmd, 2, &when)) return;
    long long base = relative ? (long long)dm_wall_ms() : 0;
    if (secs) {
        if (when > LLONG_MAX / 1000 || when < LLONG_MIN / 1000) goto bad;
        when *= 1000;
    }
    if (when > LLONG_MAX - base) goto bad;
    when += base;
    expire_arg_t a = {.when = when, .flags = flags};
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
    int rc = dm_kv_rmw(&ctx, cmd->argv[1], cmd->argvlen[1], expire_fn, &a);
    dm_stats_op(DM_CLS_SET);
    if (rc < 0)
        gw_reply_dm_error(c, rc);
    else if (rc == DM_RMW_ABORT)
        gw_reply_dm_error(c, DM_ENOMEM);
    else {
        if (rc == DM_RMW_WRITE)
            gw_expiry_track(c->th, cmd->argv[1], cmd->argvlen[1], (uint64_t)a.when);
        reply_int(gw_conn_out(c), a.result);
    }
    return;
bad:
    reply_errorf(gw_conn_out(c), "ERR invalid expire time in '%s' command", c->last_cmd);
}

void cmd_expire(gw_conn_t *c, gw_cmd_t *cmd)
{
    expire_generic(c, cmd, true, true);
}

void cmd_pexpire(gw_conn_t *c, gw_cmd_t *cmd)
{
    expire_generic(c, cmd, false, true);
}

void cmd_expireat(gw_conn_t *c, gw_cmd_t *cmd)
{
    expire_generic(c, cmd, true, false);
}

void cmd_pexpireat(gw_conn_t *c, gw_cmd_t *cmd)
{
    expire_generic(c, cmd, false, false);
}

/* ---- PERSIST ---- */

static int persist_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    int *result = arg;
    *result = 0;
    if (!cur || cur->expire_ms == 0) return DM_RMW_KEEP;
    out->data = malloc(cur->len ? cur->len : 1);
    if (!out->data) return DM_RMW_ABORT;
    memcpy(out->data, cur->data, cur->len);
    out->len = cur->len;
    out->expire_ms = 0;
    *result = 1;
    return DM_RMW_WRITE;
}

void cmd_persist(gw_conn_t *c, gw_cmd_t *cmd)
{
    int result = 0;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
    int rc = dm_kv_rmw(&ctx, cmd->argv[1], cmd->argvlen[1], persist_fn, &result);
    dm_stats_op(DM_CLS_SET);
    if (rc < 0)
        gw_reply_dm_error(c, rc);
    else if (rc == DM_RMW_ABORT)
        gw_reply_dm_error(c, DM_ENOMEM);
    else
        reply_int(gw_conn_out(c), result);
}

/* ---- EXPIRETIME, PEXPIRETIME ---- */

static void expiretime_generic(gw_conn_t *c, gw_cmd_t *cmd, bool ms)
{
    dm_value_t v;
    int rc = gw_get_key(c, cmd, &v);
    if (rc < 0) return;
    if (rc == 0) {
        reply_int(gw_conn_out(c), -2);
        return;
    }
    long long exp = (long long)v.expire_ms;
    dm_value_free(&v);
    if (exp == 0)
        reply_int(gw_conn_out(c), -1);
    else
        reply_int(gw_conn_out(c), ms ? exp : (exp + 500) / 1000);
}

void cmd_expiretime(gw_conn_t *c, gw_cmd_t *cmd)
{
    expiretime_generic(c, cmd, false);
}

void cmd_pexpiretime(gw_conn_t *c, gw_cmd_t *cmd)
{
    expiretime_generic(c, cmd, true);
}

/* ---- GETEX ---- */

enum { GX_NONE = 0, GX_EX, GX_PX, GX_EXAT, GX_PXAT, GX_PERSIST };

typedef struct getex_arg {
    int kind;
    long long when;  /* absolute ms for GX_EX..GX_PXAT */
    dm_value_t got;  /* copy of the value (data NULL when absent) */
    const char *err; /* invalid expire argument: reported only if the key exists (Redis) */
} getex_arg_t;

static int getex_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    getex_arg_t *a = arg;
    dm_value_free(&a->got);
    if (!cur || a->err) return a->err && cur ? DM_RMW_ABORT : DM_RMW_KEEP;
    a->got.data = malloc(cur->len ? cur->len : 1);
    if (!a->got.data) return DM_RMW_ABORT;
    memcpy(a->got.data, cur->data, cur->len);
    a->got.len = cur->len;
    uint64_t exp;
    if (a->kind == GX_NONE || (a->kind == GX_PERSIST && cur->expire_ms == 0)) {
        return DM_RMW_KEEP;
    } else if (a->kind == GX_PERSIST) {
        exp = 0;
    } else {
        if ((a->kind == GX_EXAT || a->kind == GX_PXAT) && a->when <= (long long)dm_wall_ms())
            return DM_RMW_DELETE;
        exp = (uint64_t)a->when;
    }
    out->data = malloc(cur->len ? cur->len : 1);
    if (!out->data) return DM_RMW_ABORT;
    memcpy(out->data, cur->data, cur->len);
    out->len = cur->len;
    out->expire_ms = exp;
    return DM_RMW_WRITE;
}

static const char e_badtime[] = "ERR invalid expire time in 'getex' command";

void cmd_getex(gw_conn_t *c, gw_cmd_t *cmd)
{
    getex_arg_t a = {0};
    int arg = 0;
    for (int j = 2; j < cmd->argc; j++) {
        const char *o = cmd->argv[j];
        bool next = j + 1 < cmd->argc;
        bool timed = a.kind >= GX_EX && a.kind <= GX_PXAT;
        int k = !strcasecmp(o, "ex")     ? GX_EX
                : !strcasecmp(o, "px")   ? GX_PX
                : !strcasecmp(o, "exat") ? GX_EXAT
                : !strcasecmp(o, "pxat") ? GX_PXAT
                                         : GX_NONE;
        if (!strcasecmp(o, "persist") && !timed) {
            a.kind = GX_PERSIST;
        } else if (k != GX_NONE && next && a.kind != GX_PERSIST && (!timed || a.kind == k)) {
            a.kind = k;
            arg = ++j;
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return;
        }
    }
    if (arg) {
        long long v;
        bool secs = a.kind == GX_EX || a.kind == GX_EXAT;
        if (!gw_str2ll(cmd->argv[arg], cmd->argvlen[arg], &v))
            a.err = "ERR value is not an integer or out of range";
        else if (v <= 0 || (secs && v > LLONG_MAX / 1000))
            a.err = e_badtime;
        else if (secs)
            v *= 1000;
        if (!a.err && (a.kind == GX_EX || a.kind == GX_PX) &&
            __builtin_add_overflow(v, (long long)dm_wall_ms(), &v))
            a.err = e_badtime;
        if (!a.err && v <= 0) a.err = e_badtime;
        a.when = v;
    }
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
    int rc = dm_kv_rmw(&ctx, cmd->argv[1], cmd->argvlen[1], getex_fn, &a);
    dm_stats_op(DM_CLS_SET);
    if (rc < 0)
        gw_reply_dm_error(c, rc);
    else if (rc == DM_RMW_ABORT)
        a.err ? reply_error(gw_conn_out(c), a.err) : gw_reply_dm_error(c, DM_ENOMEM);
    else if (a.got.data) {
        if (rc == DM_RMW_WRITE && a.kind != GX_PERSIST)
            gw_expiry_track(c->th, cmd->argv[1], cmd->argvlen[1], (uint64_t)a.when);
        reply_bulk(gw_conn_out(c), a.got.data, a.got.len);
    } else
        gw_reply_null(c);
    dm_value_free(&a.got);
}
