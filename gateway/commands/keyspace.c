/* Keyspace commands: DEL/UNLINK, EXISTS, DBSIZE, FLUSHALL/FLUSHDB, SCAN, KEYS, TYPE,
 * TTL, PTTL. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "resp/reply.h"
#include "util/glob.h"
#include "util/strconv.h"

#define KEYS_SCAN_COUNT 1000 /* keys asked per dm_kv_scan step by KEYS */

void cmd_del(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long n = 0;
    for (int i = 1; i < cmd->argc; i++) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_DEL);
        int rc = dm_kv_del(&ctx, cmd->argv[i], cmd->argvlen[i]);
        if (rc < 0) {
            dm_stats_op(DM_CLS_DEL);
            gw_reply_dm_error(c, rc);
            return;
        }
        n += rc;
    }
    dm_stats_op(DM_CLS_DEL);
    reply_int(&c->out, n);
}

void cmd_exists(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long n = 0;
    for (int i = 1; i < cmd->argc; i++) {
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
        int rc = dm_kv_exists(&ctx, cmd->argv[i], cmd->argvlen[i]);
        if (rc < 0) {
            dm_stats_op(DM_CLS_GET);
            gw_reply_dm_error(c, rc);
            return;
        }
        n += rc;
    }
    dm_stats_op(DM_CLS_GET);
    reply_int(&c->out, n);
}

void cmd_dbsize(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SCAN);
    int64_t n = dm_kv_dbsize(&ctx);
    dm_stats_op(DM_CLS_SCAN);
    if (n < 0)
        gw_reply_dm_error(c, (int)n);
    else
        reply_int(&c->out, n);
}

void cmd_flushall(gw_conn_t *c, gw_cmd_t *cmd)
{
    if (cmd->argc > 2 ||
        (cmd->argc == 2 && strcasecmp(cmd->argv[1], "async") && strcasecmp(cmd->argv[1], "sync"))) {
        reply_error(&c->out, "ERR syntax error");
        return;
    }
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_ADMIN);
    int rc = dm_kv_flushall(&ctx);
    dm_stats_op(DM_CLS_ADMIN);
    if (rc < 0)
        gw_reply_dm_error(c, rc);
    else
        reply_status(&c->out, "OK");
}

/* Does a pattern need matching at all ("*" matches everything)? */
static bool pattern_is_all(const char *p, size_t len)
{
    return len == 1 && p[0] == '*';
}

void cmd_scan(gw_conn_t *c, gw_cmd_t *cmd)
{
    uint64_t cursor;
    if (!gw_str2cursor(cmd->argv[1], cmd->argvlen[1], &cursor)) {
        reply_error(&c->out, "ERR invalid cursor");
        return;
    }
    long long count = 10;
    const char *pat = NULL, *type = NULL;
    size_t patlen = 0;
    for (int i = 2; i < cmd->argc; i += 2) {
        if (i + 1 >= cmd->argc) {
            reply_error(&c->out, "ERR syntax error");
            return;
        }
        if (!strcasecmp(cmd->argv[i], "count")) {
            if (!gw_arg_ll(c, cmd, i + 1, &count)) return;
            if (count < 1) {
                reply_error(&c->out, "ERR syntax error");
                return;
            }
        } else if (!strcasecmp(cmd->argv[i], "match")) {
            pat = cmd->argv[i + 1];
            patlen = cmd->argvlen[i + 1];
            if (pattern_is_all(pat, patlen)) pat = NULL;
        } else if (!strcasecmp(cmd->argv[i], "type")) {
            type = cmd->argv[i + 1];
        } else {
            reply_error(&c->out, "ERR syntax error");
            return;
        }
    }
    dm_keylist_t l = {0};
    uint64_t next = 0;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SCAN);
    int rc = dm_kv_scan(&ctx, cursor, (size_t)count, &l, &next);
    dm_stats_op(DM_CLS_SCAN);
    if (rc < 0) {
        dm_keylist_free(&l);
        if (rc == DM_EINVAL)
            reply_error(&c->out, "ERR invalid cursor");
        else
            gw_reply_dm_error(c, rc);
        return;
    }
    bool type_ok = !type || !strcasecmp(type, "string");
    size_t keep = 0;
    for (size_t i = 0; i < l.n; i++) {
        bool ok = type_ok && (!pat || gw_glob_match(pat, patlen, (const char *)l.keys[i].data,
                                                    l.keys[i].len, false));
        if (ok)
            l.keys[keep++] = l.keys[i];
        else
            free(l.keys[i].data);
    }
    l.n = keep;
    reply_array(&c->out, 2);
    reply_bulk_u64(&c->out, next);
    reply_array(&c->out, (long long)l.n);
    for (size_t i = 0; i < l.n; i++)
        reply_bulk(&c->out, l.keys[i].data, l.keys[i].len);
    dm_keylist_free(&l);
}

static int key_cmp(const void *a, const void *b)
{
    const dm_key_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->data, y->data, n);
    if (r) return r;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* True when the pattern has no glob specials, so it names exactly one key. */
static bool pattern_is_literal(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] == '*' || p[i] == '?' || p[i] == '[' || p[i] == '\\') return false;
    return true;
}

void cmd_keys(gw_conn_t *c, gw_cmd_t *cmd)
{
    const char *pat = cmd->argv[1];
    size_t patlen = cmd->argvlen[1];
    dm_ctx_t ctx;
    if (pattern_is_literal(pat, patlen)) {
        dm_ctx_init(&ctx, c->th->w, DM_CLS_SCAN);
        int rc = dm_kv_exists(&ctx, pat, patlen);
        dm_stats_op(DM_CLS_SCAN);
        if (rc < 0) {
            gw_reply_dm_error(c, rc);
        } else {
            reply_array(&c->out, rc);
            if (rc) reply_bulk(&c->out, pat, patlen);
        }
        return;
    }
    bool all = pattern_is_all(pat, patlen);
    dm_keylist_t acc = {0};
    uint64_t cursor = 0;
    do {
        dm_keylist_t l = {0};
        uint64_t next = 0;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_SCAN);
        int rc = dm_kv_scan(&ctx, cursor, KEYS_SCAN_COUNT, &l, &next);
        if (rc < 0) {
            dm_keylist_free(&l);
            dm_keylist_free(&acc);
            dm_stats_op(DM_CLS_SCAN);
            gw_reply_dm_error(c, rc);
            return;
        }
        for (size_t i = 0; i < l.n; i++) {
            if (!all &&
                !gw_glob_match(pat, patlen, (const char *)l.keys[i].data, l.keys[i].len, false)) {
                free(l.keys[i].data);
                continue;
            }
            if (acc.n == acc.cap) {
                acc.cap = acc.cap ? acc.cap * 2 : 64;
                acc.keys = realloc(acc.keys, acc.cap * sizeof(*acc.keys));
                if (!acc.keys) abort();
            }
            acc.keys[acc.n++] = l.keys[i];
        }
        free(l.keys);
        cursor = next;
    } while (cursor != 0 && !c->closing);
    dm_stats_op(DM_CLS_SCAN);
    /* SCAN may return a key more than once: sort and drop repeats. */
    if (acc.n > 1) qsort(acc.keys, acc.n, sizeof(*acc.keys), key_cmp);
    size_t keep = 0;
    for (size_t i = 0; i < acc.n; i++) {
        if (keep && key_cmp(&acc.keys[keep - 1], &acc.keys[i]) == 0)
            free(acc.keys[i].data);
        else
            acc.keys[keep++] = acc.keys[i];
    }
    acc.n = keep;
    reply_array(&c->out, (long long)acc.n);
    for (size_t i = 0; i < acc.n; i++)
        reply_bulk(&c->out, acc.keys[i].data, acc.keys[i].len);
    dm_keylist_free(&acc);
}

void cmd_type(gw_conn_t *c, gw_cmd_t *cmd)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
    int rc = dm_kv_exists(&ctx, cmd->argv[1], cmd->argvlen[1]);
    dm_stats_op(DM_CLS_GET);
    if (rc < 0)
        gw_reply_dm_error(c, rc);
    else
        reply_status(&c->out, rc ? "string" : "none");
}

static void ttl_generic(gw_conn_t *c, gw_cmd_t *cmd, bool ms)
{
    dm_value_t v;
    int rc = gw_get_key(c, cmd, &v);
    if (rc < 0) return;
    if (rc == 0) {
        reply_int(&c->out, -2);
        return;
    }
    uint64_t exp = v.expire_ms;
    dm_value_free(&v);
    if (exp == 0) {
        reply_int(&c->out, -1);
        return;
    }
    uint64_t now = dm_wall_ms();
    long long left = exp > now ? (long long)(exp - now) : 0;
    reply_int(&c->out, ms ? left : (left + 500) / 1000);
}

void cmd_ttl(gw_conn_t *c, gw_cmd_t *cmd)
{
    ttl_generic(c, cmd, false);
}

void cmd_pttl(gw_conn_t *c, gw_cmd_t *cmd)
{
    ttl_generic(c, cmd, true);
}
