/* String read-modify-write commands, each one dm_kv_rmw (lock-free, retried on conflict):
 * INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT, APPEND, SETRANGE, GETDEL; and GETRANGE/SUBSTR,
 * MSETNX. Errors and edge cases follow Redis 7.0's t_string.c. INCR-like commands and
 * APPEND/SETRANGE keep the key's expiry, as Redis does. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands/commands.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "resp/reply.h"
#include "util/strconv.h"

#define MAX_BULK 536870912LL /* proto-max-bulk-len, bytes */

static const char e_notint[] = "ERR value is not an integer or out of range";
static const char e_overflow[] = "ERR increment or decrement would overflow";
static const char e_notfloat[] = "ERR value is not a valid float";
static const char e_toobig[] = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

static bool dup_value(dm_value_t *out, const void *p, size_t len, uint64_t expire_ms)
{
    out->data = malloc(len ? len : 1);
    if (!out->data) return false;
    if (len) memcpy(out->data, p, len);
    out->len = len;
    out->expire_ms = expire_ms;
    return true;
}

/* ---- INCR family ---- */

typedef struct incr_arg {
    long long by;
    long long result;
    const char *err; /* set when aborting */
} incr_arg_t;

static int incr_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    incr_arg_t *a = arg;
    long long v = 0;
    if (cur && !gw_str2ll((const char *)cur->data, cur->len, &v)) {
        a->err = e_notint;
        return DM_RMW_ABORT;
    }
    if ((a->by < 0 && v < 0 && a->by < LLONG_MIN - v) ||
        (a->by > 0 && v > 0 && a->by > LLONG_MAX - v)) {
        a->err = e_overflow;
        return DM_RMW_ABORT;
    }
    v += a->by;
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%lld", v);
    if (!dup_value(out, buf, (size_t)n, cur ? cur->expire_ms : 0)) {
        a->err = "OOM command not allowed when used memory > 'maxmemory'.";
        return DM_RMW_ABORT;
    }
    a->err = NULL;
    a->result = v;
    return DM_RMW_WRITE;
}

static void incr_generic(gw_conn_t *c, gw_cmd_t *cmd, long long by)
{
    incr_arg_t a = {.by = by};
    int act;
    if (!gw_rmw_key(c, cmd, incr_fn, &a, &act)) return;
    if (act == DM_RMW_ABORT)
        reply_error(gw_conn_out(c), a.err);
    else
        reply_int(gw_conn_out(c), a.result);
}

void cmd_incr(gw_conn_t *c, gw_cmd_t *cmd)
{
    incr_generic(c, cmd, 1);
}

void cmd_decr(gw_conn_t *c, gw_cmd_t *cmd)
{
    incr_generic(c, cmd, -1);
}

void cmd_incrby(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long by;
    if (!gw_arg_ll(c, cmd, 2, &by)) return;
    incr_generic(c, cmd, by);
}

void cmd_decrby(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long by;
    if (!gw_arg_ll(c, cmd, 2, &by)) return;
    if (by == LLONG_MIN) {
        reply_error(gw_conn_out(c), "ERR decrement would overflow");
        return;
    }
    incr_generic(c, cmd, -by);
}

/* Redis's string2ld: the whole string is a long double, no leading space, not NaN, no
 * overflow/underflow. */
static bool str2ld(const char *s, size_t len, long double *out)
{
    char buf[5 * 1024];
    if (len == 0 || len >= sizeof(buf)) return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    long double v = strtold(buf, &end);
    if (isspace((unsigned char)buf[0]) || *end != 0 || (size_t)(end - buf) != len ||
        (errno == ERANGE && (v == HUGE_VALL || v == -HUGE_VALL || fpclassify(v) == FP_ZERO)) ||
        errno == EINVAL || isnan(v))
        return false;
    *out = v;
    return true;
}

/* Redis's ld2string(LD_STR_HUMAN): "%.17Lf" without trailing zeros; "-0" becomes "0". */
static int ld2str_human(char *buf, size_t len, long double v)
{
    int l = snprintf(buf, len, "%.17Lf", v);
    if (l < 0 || (size_t)l + 1 > len) return 0;
    if (strchr(buf, '.')) {
        char *p = buf + l - 1;
        while (*p == '0') {
            p--;
            l--;
        }
        if (*p == '.') l--;
    }
    if (l == 2 && buf[0] == '-' && buf[1] == '0') {
        buf[0] = '0';
        l = 1;
    }
    return l;
}

typedef struct fincr_arg {
    long double by;
    char result[5 * 1024];
    int rlen;
    const char *err;
} fincr_arg_t;

static int fincr_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    fincr_arg_t *a = arg;
    long double v = 0;
    if (cur && !str2ld((const char *)cur->data, cur->len, &v)) {
        a->err = e_notfloat;
        return DM_RMW_ABORT;
    }
    v += a->by;
    if (isnan(v) || isinf(v)) {
        a->err = "ERR increment would produce NaN or Infinity";
        return DM_RMW_ABORT;
    }
    a->rlen = ld2str_human(a->result, sizeof(a->result), v);
    if (!dup_value(out, a->result, (size_t)a->rlen, cur ? cur->expire_ms : 0)) {
        a->err = "OOM command not allowed when used memory > 'maxmemory'.";
        return DM_RMW_ABORT;
    }
    a->err = NULL;
    return DM_RMW_WRITE;
}

void cmd_incrbyfloat(gw_conn_t *c, gw_cmd_t *cmd)
{
    fincr_arg_t *a = calloc(1, sizeof(*a));
    if (!a) abort();
    int act;
    if (!str2ld(cmd->argv[2], cmd->argvlen[2], &a->by)) {
        reply_error(gw_conn_out(c), e_notfloat);
    } else if (gw_rmw_key(c, cmd, fincr_fn, a, &act)) {
        if (act == DM_RMW_ABORT)
            reply_error(gw_conn_out(c), a->err);
        else
            reply_bulk(gw_conn_out(c), a->result, (size_t)a->rlen); /* a bulk string in RESP3 too */
    }
    free(a);
}

/* ---- APPEND, SETRANGE ---- */

typedef struct splice_arg {
    long long offset; /* -1: append at the end */
    const char *val;
    size_t vlen;
    long long result; /* resulting length */
    const char *err;
} splice_arg_t;

static int splice_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    splice_arg_t *a = arg;
    size_t olen = cur ? cur->len : 0;
    a->err = NULL;
    if (a->offset >= 0 && a->vlen == 0) { /* SETRANGE with nothing to write */
        a->result = (long long)olen;
        return DM_RMW_KEEP;
    }
    long long at = a->offset < 0 ? (long long)olen : a->offset;
    if (at > MAX_BULK || (long long)a->vlen > MAX_BULK - at) { /* no overflow for huge at */
        a->err = e_toobig;
        return DM_RMW_ABORT;
    }
    size_t nlen = (size_t)at + a->vlen;
    if (nlen < olen) nlen = olen;
    out->data = calloc(1, nlen ? nlen : 1);
    if (!out->data) {
        a->err = "OOM command not allowed when used memory > 'maxmemory'.";
        return DM_RMW_ABORT;
    }
    if (olen) memcpy(out->data, cur->data, olen);
    if (a->vlen) memcpy(out->data + at, a->val, a->vlen);
    out->len = nlen;
    out->expire_ms = cur ? cur->expire_ms : 0;
    a->result = (long long)nlen;
    return DM_RMW_WRITE;
}

static void splice_generic(gw_conn_t *c, gw_cmd_t *cmd, long long offset, int vi)
{
    splice_arg_t a = {.offset = offset, .val = cmd->argv[vi], .vlen = cmd->argvlen[vi]};
    int act;
    if (!gw_rmw_key(c, cmd, splice_fn, &a, &act)) return;
    if (act == DM_RMW_ABORT)
        reply_error(gw_conn_out(c), a.err);
    else
        reply_int(gw_conn_out(c), a.result);
}

void cmd_append(gw_conn_t *c, gw_cmd_t *cmd)
{
    splice_generic(c, cmd, -1, 2);
}

void cmd_setrange(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long off;
    if (!gw_arg_ll(c, cmd, 2, &off)) return;
    if (off < 0) {
        reply_error(gw_conn_out(c), "ERR offset is out of range");
        return;
    }
    splice_generic(c, cmd, off, 3);
}

/* ---- GETDEL ---- */

typedef struct getdel_arg {
    dm_value_t got; /* copy of the value removed (data NULL when absent) */
} getdel_arg_t;

static int getdel_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    (void)out;
    getdel_arg_t *a = arg;
    dm_value_free(&a->got);
    if (!cur) return DM_RMW_KEEP;
    if (!dup_value(&a->got, cur->data, cur->len, cur->expire_ms)) return DM_RMW_ABORT;
    return DM_RMW_DELETE;
}

void cmd_getdel(gw_conn_t *c, gw_cmd_t *cmd)
{
    getdel_arg_t a = {0};
    int act;
    if (!gw_rmw_key(c, cmd, getdel_fn, &a, &act)) {
        dm_value_free(&a.got);
        return;
    }
    if (act == DM_RMW_DELETE && a.got.data)
        reply_bulk(gw_conn_out(c), a.got.data, a.got.len);
    else if (act == DM_RMW_ABORT)
        gw_reply_dm_error(c, DM_ENOMEM);
    else
        gw_reply_null(c);
    dm_value_free(&a.got);
}

/* ---- GETRANGE / SUBSTR ---- */

void cmd_getrange(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long start, end;
    if (!gw_arg_ll(c, cmd, 2, &start) || !gw_arg_ll(c, cmd, 3, &end)) return;
    dm_value_t v;
    int rc = gw_get_key(c, cmd, &v);
    if (rc < 0) return;
    long long len = rc ? (long long)v.len : 0;
    if (rc == 0 || (start < 0 && end < 0 && start > end) || !gw_clamp_range(len, &start, &end))
        reply_bulk(gw_conn_out(c), "", 0);
    else
        reply_bulk(gw_conn_out(c), v.data + start, (size_t)(end - start + 1));
    if (rc) dm_value_free(&v);
}

/* ---- MSETNX ---- */

/* Undo of a key this MSETNX created: delete it only while it still holds our value. */
typedef struct undo_arg {
    const char *val;
    size_t vlen;
} undo_arg_t;

static int undo_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    (void)out;
    undo_arg_t *u = arg;
    if (cur && cur->len == u->vlen && (!u->vlen || !memcmp(cur->data, u->val, u->vlen)))
        return DM_RMW_DELETE;
    return DM_RMW_KEEP; /* someone wrote it since: theirs now */
}

/* 1 when the key at argv[i] appears again later in the command. */
static int later_same_key(const gw_cmd_t *cmd, int i)
{
    for (int j = i + 2; j < cmd->argc; j += 2)
        if (cmd->argvlen[j] == cmd->argvlen[i] &&
            !memcmp(cmd->argv[j], cmd->argv[i], cmd->argvlen[i]))
            return 1;
    return 0;
}

/* MSETNX: every key is written with NX, so an existing key is never overwritten, also when
 * another client creates it between the check and the write. If a key turns out to exist
 * after some were created, those are deleted again (each only while it still holds this
 * command's value) and the reply is 0. Not atomic across keys (README "Transactions"):
 * another client may see the created keys before the undo. */
void cmd_msetnx(gw_conn_t *c, gw_cmd_t *cmd)
{
    if (cmd->argc % 2 == 0) {
        gw_reply_arity(c, "msetnx");
        return;
    }
    for (int i = 1; i < cmd->argc; i += 2) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
        int rc = dm_kv_exists(&ctx, cmd->argv[i], cmd->argvlen[i]);
        dm_stats_op(DM_CLS_GET);
        if (rc < 0) {
            gw_reply_dm_error(c, rc);
            return;
        }
        if (rc) {
            reply_int(gw_conn_out(c), 0);
            return;
        }
    }
    int done = 1, err = 0, i;
    for (i = 1; i < cmd->argc && done == 1; i += 2) {
        if (later_same_key(cmd, i)) continue; /* a repeated key: its last value wins */
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
        done = dm_kv_set(&ctx, cmd->argv[i], cmd->argvlen[i], cmd->argv[i + 1], cmd->argvlen[i + 1],
                         0, DM_SET_NX, NULL);
        dm_stats_op(DM_CLS_SET);
    }
    if (done == 1) {
        reply_int(gw_conn_out(c), 1);
        return;
    }
    if (done < 0) err = done;
    /* Keys [1, i - 2) were created by us: take them back. */
    for (int k = 1; k < i - 2; k += 2) {
        if (later_same_key(cmd, k)) continue; /* not written (a later value was) */
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_DEL);
        undo_arg_t u = {cmd->argv[k + 1], cmd->argvlen[k + 1]};
        int rc = dm_kv_rmw(&ctx, cmd->argv[k], cmd->argvlen[k], undo_fn, &u);
        dm_stats_op(DM_CLS_DEL);
        if (rc < 0 && !err) err = rc;
    }
    if (err)
        gw_reply_dm_error(c, err);
    else
        reply_int(gw_conn_out(c), 0);
}
