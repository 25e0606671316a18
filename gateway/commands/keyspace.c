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
#include "util/oom.h"

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
    reply_int(gw_conn_out(c), n);
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
    reply_int(gw_conn_out(c), n);
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
        reply_int(gw_conn_out(c), n);
}

void cmd_flushall(gw_conn_t *c, gw_cmd_t *cmd)
{
    if (cmd->argc > 2 ||
        (cmd->argc == 2 && strcasecmp(cmd->argv[1], "async") && strcasecmp(cmd->argv[1], "sync"))) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        return;
    }
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_ADMIN);
    int rc = dm_kv_flushall(&ctx);
    dm_stats_op(DM_CLS_ADMIN);
    if (rc < 0)
        gw_reply_dm_error(c, rc);
    else
        reply_status(gw_conn_out(c), "OK");
}

/* Does a pattern need matching at all ("*" matches everything)? */
static bool pattern_is_all(const char *p, size_t len)
{
    return len == 1 && p[0] == '*';
}

/* SCAN's options. */
typedef struct scan_opts {
    long long count;
    const char *pat; /* MATCH pattern, NULL for none or "*" */
    size_t patlen;
    bool type_ok; /* TYPE absent or "string": dmkv holds strings only */
} scan_opts_t;

/* Parse SCAN's options from argv[2]; false after replying an error. */
static bool scan_parse(gw_conn_t *c, gw_cmd_t *cmd, scan_opts_t *o)
{
    *o = (scan_opts_t){.count = 10, .type_ok = true};
    for (int i = 2; i < cmd->argc; i += 2) {
        if (i + 1 >= cmd->argc) {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return false;
        }
        if (!strcasecmp(cmd->argv[i], "count")) {
            if (!gw_arg_ll(c, cmd, i + 1, &o->count)) return false;
            if (o->count < 1) {
                reply_error(gw_conn_out(c), "ERR syntax error");
                return false;
            }
        } else if (!strcasecmp(cmd->argv[i], "match")) {
            bool all = pattern_is_all(cmd->argv[i + 1], cmd->argvlen[i + 1]);
            o->pat = all ? NULL : cmd->argv[i + 1];
            o->patlen = all ? 0 : cmd->argvlen[i + 1];
        } else if (!strcasecmp(cmd->argv[i], "type")) {
            o->type_ok = !strcasecmp(cmd->argv[i + 1], "string");
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return false;
        }
    }
    return true;
}

/* The pattern's literal prefix (malloc'd, *plen bytes) for dm_kv_scan to seek to; NULL and
 * 0 when it has none. */
static char *match_prefix(const char *pat, size_t patlen, size_t *plen)
{
    *plen = 0;
    if (!pat || patlen == 0) return NULL;
    char *p = malloc(patlen);
    if (!p) abort();
    *plen = gw_glob_literal_prefix(pat, patlen, p);
    if (*plen == 0) {
        free(p);
        p = NULL;
    }
    return p;
}

/* Drop the keys of l that fail pat (NULL keeps all), or every key when !keep. Pages hold
 * whole leaves, so they may hold keys outside the prefix too. */
static void filter_keys(dm_keylist_t *l, const char *pat, size_t patlen, bool keep)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        dm_key_t *k = &l->keys[i];
        if (keep && (!pat || gw_glob_match(pat, patlen, (const char *)k->data, k->len, false)))
            l->keys[n++] = *k;
        else
            free(k->data);
    }
    l->n = n;
}

void cmd_scan(gw_conn_t *c, gw_cmd_t *cmd)
{
    uint64_t cursor;
    if (!gw_str2cursor(cmd->argv[1], cmd->argvlen[1], &cursor)) {
        reply_error(gw_conn_out(c), "ERR invalid cursor");
        return;
    }
    scan_opts_t o;
    if (!scan_parse(c, cmd, &o)) return;
    size_t plen;
    char *prefix = match_prefix(o.pat, o.patlen, &plen);
    dm_keylist_t l = {0};
    uint64_t next = 0;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SCAN);
    int rc = dm_kv_scan(&ctx, cursor, (size_t)o.count, prefix, plen, &l, &next);
    dm_stats_op(DM_CLS_SCAN);
    free(prefix);
    if (rc < 0) {
        dm_keylist_free(&l);
        if (rc == DM_EINVAL)
            reply_error(gw_conn_out(c), "ERR invalid cursor");
        else
            gw_reply_dm_error(c, rc);
        return;
    }
    /* Another TYPE still advances the cursor, with empty pages (as in Redis). */
    filter_keys(&l, o.pat, o.patlen, o.type_ok);
    reply_array(gw_conn_out(c), 2);
    reply_bulk_u64(gw_conn_out(c), next);
    reply_array(gw_conn_out(c), (long long)l.n);
    for (size_t i = 0; i < l.n; i++)
        reply_bulk(gw_conn_out(c), l.keys[i].data, l.keys[i].len);
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

/* Append l's keys to acc (takes them over and frees l's array). Returns DM_ENOMEM (l
 * freed, acc unchanged) when acc cannot grow. */
static int keys_append(dm_keylist_t *acc, dm_keylist_t *l)
{
    if (acc->n + l->n > acc->cap) {
        size_t cap = acc->cap;
        while (acc->n + l->n > cap)
            cap = cap ? cap * 2 : 64;
        dm_key_t *k = gw_try_realloc(acc->keys, cap * sizeof(*acc->keys));
        if (!k) {
            dm_keylist_free(l);
            return DM_ENOMEM;
        }
        acc->keys = k;
        acc->cap = cap;
    }
    if (l->n) memcpy(acc->keys + acc->n, l->keys, l->n * sizeof(*l->keys));
    acc->n += l->n;
    free(l->keys);
    *l = (dm_keylist_t){0};
    return 0;
}

/* Make acc sorted and free of repeats. A full iteration comes back in key order, each key
 * once; the sort is only a fallback so KEYS keeps that promise whatever the walk did. */
static void keys_sort_unique(dm_keylist_t *acc)
{
    for (size_t i = 1; i < acc->n; i++) {
        if (key_cmp(&acc->keys[i - 1], &acc->keys[i]) > 0) {
            qsort(acc->keys, acc->n, sizeof(*acc->keys), key_cmp);
            break;
        }
    }
    size_t keep = 0;
    for (size_t i = 0; i < acc->n; i++) {
        if (keep && key_cmp(&acc->keys[keep - 1], &acc->keys[i]) == 0)
            free(acc->keys[i].data);
        else
            acc->keys[keep++] = acc->keys[i];
    }
    acc->n = keep;
}

/* Every key matching pat (NULL: all) into acc: a prefix-seeking walk of the whole
 * keyspace. Returns 0 or DM_E*. */
static int keys_collect(gw_conn_t *c, const char *pat, size_t patlen, dm_keylist_t *acc)
{
    size_t plen;
    char *prefix = match_prefix(pat, patlen, &plen);
    uint64_t cursor = 0;
    int rc = 0;
    do {
        dm_keylist_t l = {0};
        uint64_t next = 0;
        dm_ctx_t ctx;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_SCAN);
        rc = dm_kv_scan(&ctx, cursor, KEYS_SCAN_COUNT, prefix, plen, &l, &next);
        if (rc < 0) {
            dm_keylist_free(&l);
            break;
        }
        filter_keys(&l, pat, patlen, true);
        if ((rc = keys_append(acc, &l)) != 0) break;
        cursor = next;
    } while (cursor != 0 && !c->closing);
    free(prefix);
    return rc;
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
            reply_array(gw_conn_out(c), rc);
            if (rc) reply_bulk(gw_conn_out(c), pat, patlen);
        }
        return;
    }
    if (pattern_is_all(pat, patlen)) {
        pat = NULL;
        patlen = 0;
    }
    dm_keylist_t acc = {0};
    int rc = keys_collect(c, pat, patlen, &acc);
    dm_stats_op(DM_CLS_SCAN);
    if (rc < 0) {
        dm_keylist_free(&acc);
        if (rc == DM_ENOMEM) /* this gateway's memory, not the pool's: no -OOM */
            reply_error(gw_conn_out(c),
                        "ERR Insufficient memory, failed allocating transient memory for KEYS");
        else
            gw_reply_dm_error(c, rc);
        return;
    }
    keys_sort_unique(&acc);
    reply_array(gw_conn_out(c), (long long)acc.n);
    for (size_t i = 0; i < acc.n; i++)
        reply_bulk(gw_conn_out(c), acc.keys[i].data, acc.keys[i].len);
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
        reply_status(gw_conn_out(c), rc ? "string" : "none");
}

static void ttl_generic(gw_conn_t *c, gw_cmd_t *cmd, bool ms)
{
    dm_value_t v;
    int rc = gw_get_key(c, cmd, &v);
    if (rc < 0) return;
    if (rc == 0) {
        reply_int(gw_conn_out(c), -2);
        return;
    }
    uint64_t exp = v.expire_ms;
    dm_value_free(&v);
    if (exp == 0) {
        reply_int(gw_conn_out(c), -1);
        return;
    }
    uint64_t now = dm_wall_ms();
    long long left = exp > now ? (long long)(exp - now) : 0;
    reply_int(gw_conn_out(c), ms ? left : (left + 500) / 1000);
}

void cmd_ttl(gw_conn_t *c, gw_cmd_t *cmd)
{
    ttl_generic(c, cmd, false);
}

void cmd_pttl(gw_conn_t *c, gw_cmd_t *cmd)
{
    ttl_generic(c, cmd, true);
}
