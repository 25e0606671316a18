/* CLIENT LIST [TYPE normal|master|replica|pubsub] [ID client-id [client-id ...]]: one line
 * per client (gw_conn_describe), in ascending ID order over every thread as Redis lists
 * them; the ID form lists the given IDs in the order given, leaving out unknown ones.
 * Every dmkv client is a normal one (MONITOR clients too, as Redis reports them). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "resp/reply.h"
#include "server/server.h"
#include "util/oom.h"
#include "util/strconv.h"

typedef struct line {
    uint64_t id;
    size_t off, len; /* in the description buffer */
} line_t;

static int by_id(const void *a, const void *b)
{
    const line_t *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Describe every client whose ID is in ids[0..nids) (every client when nids is 0) into
 * *b, one line each, recorded in *lines. Returns the line count, -1 out of memory. */
static long describe(const long long *ids, int nids, gw_buf_t *b, line_t **lines)
{
    long n = 0, cap = 0;
    *lines = NULL;
    for (int t = 0; t < gw_server.nthreads; t++) {
        gw_thread_t *th = &gw_server.threads[t];
        uv_mutex_lock(&th->lock);
        for (gw_conn_t *x = th->conns; x; x = x->next) {
            bool wanted = nids == 0;
            for (int i = 0; i < nids && !wanted; i++)
                wanted = (uint64_t)ids[i] == x->id;
            if (!wanted) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                line_t *grown = gw_try_realloc(*lines, (size_t)cap * sizeof(line_t));
                if (!grown) {
                    uv_mutex_unlock(&th->lock);
                    return -1;
                }
                *lines = grown;
            }
            size_t off = b->len;
            gw_conn_describe(x, b);
            (*lines)[n++] = (line_t){.id = x->id, .off = off, .len = b->len - off};
        }
        uv_mutex_unlock(&th->lock);
    }
    return n;
}

void gw_client_list(gw_conn_t *c, gw_cmd_t *cmd)
{
    const long long *ids = NULL;
    long long *parsed = NULL;
    int nids = 0;
    if (cmd->argc == 4 && !strcasecmp(cmd->argv[2], "type")) {
        const char *v = cmd->argv[3];
        if (!strcasecmp(v, "master") || !strcasecmp(v, "replica") || !strcasecmp(v, "slave") ||
            !strcasecmp(v, "pubsub")) {
            gw_reply_verbatim(c, "", 0);
            return;
        }
        if (strcasecmp(v, "normal")) {
            reply_errorf(gw_conn_out(c), "ERR Unknown client type '%.128s'", v);
            return;
        }
    } else if (cmd->argc > 3 && !strcasecmp(cmd->argv[2], "id")) {
        nids = cmd->argc - 3;
        parsed = gw_try_malloc((size_t)nids * sizeof(*parsed));
        if (!parsed) {
            reply_error(gw_conn_out(c), "ERR dmkv: out of memory listing clients");
            return;
        }
        for (int i = 0; i < nids; i++)
            if (!gw_str2ll(cmd->argv[3 + i], cmd->argvlen[3 + i], &parsed[i])) {
                reply_error(gw_conn_out(c), "ERR Invalid client ID");
                free(parsed);
                return;
            }
        ids = parsed;
    } else if (cmd->argc != 2) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        return;
    }
    gw_buf_t b, out;
    gw_buf_init(&b);
    gw_buf_init(&out);
    line_t *lines;
    long n = describe(ids, nids, &b, &lines);
    if (n < 0 || b.oom) {
        reply_error(gw_conn_out(c), "ERR dmkv: out of memory listing clients");
    } else {
        if (nids == 0) {
            qsort(lines, (size_t)n, sizeof(*lines), by_id);
            for (long i = 0; i < n; i++)
                gw_buf_append(&out, b.data + lines[i].off, lines[i].len);
        } else { /* the order asked, each ID once per time asked as Redis does */
            for (int i = 0; i < nids; i++)
                for (long j = 0; j < n; j++)
                    if (lines[j].id == (uint64_t)ids[i]) {
                        gw_buf_append(&out, b.data + lines[j].off, lines[j].len);
                        break;
                    }
        }
        if (out.oom)
            reply_error(gw_conn_out(c), "ERR dmkv: out of memory listing clients");
        else
            gw_reply_verbatim(c, out.data ? out.data : "", out.len);
    }
    free(lines);
    free(parsed);
    gw_buf_free(&b);
    gw_buf_free(&out);
}
