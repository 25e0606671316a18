/* Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, and RESET.
 * EXEC runs the queued commands one after another on this connection's coroutine: no
 * other command of this connection interleaves, but commands from other connections and
 * other gateways may run between them (README "Transactions"). WATCH records each key's
 * version token (dm_kv_version: 0 when absent; RACE's slot word); EXEC re-reads them all
 * and aborts (null reply) if any changed, whichever gateway changed it. The queued commands
 * then run under write guards (kv.h): a write of a watched key goes ahead only if its
 * version token is still the watched one, inside the write's own commit (RACE: slot CAS). A guard
 * that trips before anything was written aborts the EXEC (null reply), so a watched key changed
 * after the check is never overwritten; one that trips later fails that command (README
 * "Transactions"). */
#include <stdlib.h>
#include <string.h>

#include "commands/commands.h"
#include "dmkv/kv.h"
#include "resp/reply.h"
#include "server/monitor.h"
#include "server/server.h"

/* One watched key. */
typedef struct gw_watch {
    char *key;
    size_t klen;
    uint64_t version;    /* version token at WATCH time, 0 = absent */
    uint64_t write_id;   /* its block's write id (a reused block recurs the slot word) */
    uint64_t absent_sig; /* absent at WATCH time: dm_kv_absent_sig (SET + DEL changes it) */
} gw_watch_t;

static void unwatch_all(gw_conn_t *c)
{
    for (size_t i = 0; i < c->nwatches; i++)
        free(c->watches[i].key);
    free(c->watches);
    c->watches = NULL;
    c->nwatches = c->capwatches = 0;
}

static void discard_queue(gw_conn_t *c)
{
    while (c->mq_head) {
        gw_cmd_t *cmd = c->mq_head;
        c->mq_head = cmd->next;
        gw_cmd_free(cmd);
    }
    c->mq_tail = NULL;
    c->mq_n = 0;
    c->in_multi = false;
    c->multi_dirty = false;
}

void gw_conn_reset_multi(gw_conn_t *c)
{
    discard_queue(c);
    unwatch_all(c);
}

void cmd_multi(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    if (c->in_multi) {
        reply_error(gw_conn_out(c), "ERR MULTI calls can not be nested");
        return;
    }
    c->in_multi = true;
    c->multi_dirty = false;
    reply_status(gw_conn_out(c), "OK");
}

void cmd_discard(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    if (!c->in_multi) {
        reply_error(gw_conn_out(c), "ERR DISCARD without MULTI");
        return;
    }
    gw_conn_reset_multi(c);
    reply_status(gw_conn_out(c), "OK");
}

/* 1 when every watched key still has its recorded version token, 0 if one changed, DM_E*. */
static int watches_hold(gw_conn_t *c)
{
    for (size_t i = 0; i < c->nwatches; i++) {
        dm_ctx_t ctx;
        uint64_t version, wid;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
        int rc = dm_kv_version(&ctx, c->watches[i].key, c->watches[i].klen, &version, &wid);
        dm_stats_op(DM_CLS_GET);
        if (rc < 0) return rc;
        if (version != c->watches[i].version || wid != c->watches[i].write_id) return 0;
        if (!version) {
            uint64_t sig;
            rc = dm_kv_absent_sig(&ctx, c->watches[i].key, c->watches[i].klen, &sig);
            if (rc < 0) return rc;
            if (sig != c->watches[i].absent_sig) return 0; /* created and deleted since */
        }
    }
    return 1;
}

void cmd_exec(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    if (!c->in_multi) {
        reply_error(gw_conn_out(c), "ERR EXEC without MULTI");
        return;
    }
    if (c->multi_dirty) {
        gw_conn_reset_multi(c);
        reply_error(gw_conn_out(c), "EXECABORT Transaction discarded because of previous errors.");
        return;
    }
    int ok = c->nwatches ? watches_hold(c) : 1;
    if (ok <= 0) {
        gw_conn_reset_multi(c);
        if (ok < 0)
            gw_reply_dm_error(c, ok);
        else
            gw_reply_null_array(c);
        return;
    }
    /* The watch list moves into the guards (a queued UNWATCH then finds nothing to free). */
    gw_watch_t *ws = c->watches;
    size_t nw = c->nwatches;
    c->watches = NULL;
    c->nwatches = c->capwatches = 0;
    dm_kv_guard_t *guards = calloc(nw ? nw : 1, sizeof(*guards));
    if (!guards) abort();
    for (size_t i = 0; i < nw; i++)
        guards[i] = (dm_kv_guard_t){(const uint8_t *)ws[i].key, ws[i].klen, ws[i].version,
                                    ws[i].write_id, 0};
    dm_kv_guard_set_t gs = {.g = guards, .n = nw};
    gw_cmd_t *q = c->mq_head;
    int n = c->mq_n;
    c->mq_head = c->mq_tail = NULL;
    c->mq_n = 0;
    c->in_multi = false;
    size_t mark = gw_conn_out(c)->len; /* nothing is flushed while EXEC runs */
    reply_array(gw_conn_out(c), n);
    dm_kv_guard_begin(&gs);
    while (q) {
        gw_cmd_t *next = q->next;
        if (!c->closing) {
            const gw_command_t *gc = gw_command_of(q);
            gw_command_run(c, gc, q);
        }
        gw_cmd_free(q);
        q = next;
        if (gs.tripped && gs.writes == 0) {
            /* A watched key changed after the check and before anything was written:
             * abort as if the check had seen it. */
            while (q) {
                next = q->next;
                gw_cmd_free(q);
                q = next;
            }
            gw_conn_out(c)->len = mark;
            gw_reply_null_array(c);
        }
    }
    dm_kv_guard_end(&gs);
    for (size_t i = 0; i < nw; i++)
        free(ws[i].key);
    free(ws);
    free(guards);
}

void cmd_watch(gw_conn_t *c, gw_cmd_t *cmd)
{
    if (c->in_multi) {
        reply_error(gw_conn_out(c), "ERR WATCH inside MULTI is not allowed");
        return;
    }
    for (int i = 1; i < cmd->argc; i++) {
        dm_ctx_t ctx;
        uint64_t version, wid;
        dm_ctx_init(&ctx, c->th->w, DM_CLS_GET);
        int rc = dm_kv_version(&ctx, cmd->argv[i], cmd->argvlen[i], &version, &wid);
        uint64_t sig = 0;
        if (rc == 0 && !version) rc = dm_kv_absent_sig(&ctx, cmd->argv[i], cmd->argvlen[i], &sig);
        dm_stats_op(DM_CLS_GET);
        if (rc < 0) {
            gw_reply_dm_error(c, rc);
            return;
        }
        bool seen = false; /* a key watched twice keeps its first word, as in Redis */
        for (size_t k = 0; k < c->nwatches && !seen; k++)
            seen = c->watches[k].klen == cmd->argvlen[i] &&
                   memcmp(c->watches[k].key, cmd->argv[i], cmd->argvlen[i]) == 0;
        if (seen) continue;
        if (c->nwatches == c->capwatches) {
            c->capwatches = c->capwatches ? 2 * c->capwatches : 4;
            c->watches = realloc(c->watches, c->capwatches * sizeof(*c->watches));
            if (!c->watches) abort();
        }
        gw_watch_t *w = &c->watches[c->nwatches++];
        w->key = malloc(cmd->argvlen[i] + 1);
        if (!w->key) abort();
        memcpy(w->key, cmd->argv[i], cmd->argvlen[i] + 1);
        w->klen = cmd->argvlen[i];
        w->version = version;
        w->write_id = wid;
        w->absent_sig = sig;
    }
    reply_status(gw_conn_out(c), "OK");
}

void cmd_unwatch(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    unwatch_all(c);
    reply_status(gw_conn_out(c), "OK");
}

void cmd_reset(gw_conn_t *c, gw_cmd_t *cmd)
{
    (void)cmd;
    gw_conn_reset_multi(c);
    c->resp = 2;
    c->no_evict = false;
    c->reply_off = false;
    c->reply_skip = 0;
    gw_monitor_remove(c);
    c->authed = !gw_server_requirepass_set();
    c->auth_queued = false;
    uv_mutex_lock(&c->th->lock);
    free(c->name);
    c->name = NULL;
    uv_mutex_unlock(&c->th->lock);
    reply_status(gw_conn_out(c), "RESET");
}
