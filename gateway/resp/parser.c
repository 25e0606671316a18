/* Incremental RESP2 request parser (see parser.h). Unlike Redis, it never re-scans input:
 * header lines are accumulated in p->line and bulk payloads are copied once into their
 * argument buffer, so a 512 MB argument arriving in 64 KiB reads costs O(size). */
#include "resp/parser.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/spares.h"
#include "util/oom.h"
#include "util/splitargs.h"
#include "util/strconv.h"

enum { P_IDLE = 0, P_INLINE, P_MB_COUNT, P_BULK_HDR, P_BULK_DATA, P_BULK_END, P_ERROR };

#define ARG_INITIAL_MAX (1u << 20) /* first allocation of a bulk argument, bytes */

#define SMALL_PER_ARG 32u /* inline argument bytes reserved per expected argument */
#define SMALL_MIN 128u    /* ... and at least this many (GET/SET of short keys and values) */

/* Does a live in c's own allocation (not malloc'd on its own)? */
static int in_small(const gw_cmd_t *c, const char *a)
{
    uintptr_t x = (uintptr_t)a, s = (uintptr_t)c->small;
    return c->small && x >= s && x < s + c->small_cap;
}

static int inline_arrays(const gw_cmd_t *c)
{
    return (void *)c->argv == (void *)(c + 1);
}

/* Commands of up to STD_ARGS arguments (GET, SET, INCR...) come in blocks of one size,
 * kept for reuse by the thread that frees them: with 800 commands in flight on a worker,
 * malloc's per-thread cache (7 blocks a size) missed and a GET's malloc and free of its
 * command cost ~600 instructions, 9% of the gateway's (callgrind, GET -P 16 -c 50). */
#define STD_ARGS 4
#define STD_KEPT 1024 /* blocks a thread keeps: ~300 KB */
static _Thread_local dm_spares_t std_spares;

static size_t cmd_bytes(int cap, size_t *small)
{
    *small = (size_t)cap * SMALL_PER_ARG < SMALL_MIN ? SMALL_MIN : (size_t)cap * SMALL_PER_ARG;
    return sizeof(gw_cmd_t) + (size_t)cap * (sizeof(char *) + sizeof(size_t)) + *small;
}

/* A block of the standard size: new_cmd's for STD_ARGS, the only capacity whose
 * small-argument room is STD_SMALL (a bigger capacity has more; inline commands none). */
#define STD_SMALL (STD_ARGS * SMALL_PER_ARG > SMALL_MIN ? STD_ARGS * SMALL_PER_ARG : SMALL_MIN)
_Static_assert((STD_ARGS + 1) * SMALL_PER_ARG > STD_SMALL, "capacities above STD_ARGS have more");
static int is_std(const gw_cmd_t *c)
{
    return c->small && c->small_cap == STD_SMALL;
}

void gw_cmd_free(gw_cmd_t *cmd)
{
    if (!cmd) return;
    for (int i = 0; i < cmd->argc; i++)
        if (!in_small(cmd, cmd->argv[i])) free(cmd->argv[i]);
    if (!inline_arrays(cmd)) {
        free(cmd->argv);
        free(cmd->argvlen);
    }
    free(cmd->proto_err);
    if (is_std(cmd))
        dm_spares_put(&std_spares, cmd, STD_KEPT);
    else
        free(cmd);
}

void gw_cmd_spares_release(void)
{
    dm_spares_free(&std_spares);
}

void resp_parser_init(resp_parser_t *p)
{
    memset(p, 0, sizeof(*p));
    gw_buf_init(&p->line);
}

static void reset_cmd(resp_parser_t *p)
{
    if (!p->cmd || !in_small(p->cmd, p->bulk)) free(p->bulk);
    gw_cmd_free(p->cmd);
    p->cmd = NULL;
    p->bulk = NULL;
    p->bulklen = p->bulkhave = p->bulkcap = 0;
    p->argcap = 0;
}

void resp_parser_free(resp_parser_t *p)
{
    reset_cmd(p);
    gw_buf_free(&p->line);
}

/* One allocation: the command, argv[*cap], argvlen[*cap], then the small-argument bytes.
 * *cap is raised to STD_ARGS for a command of fewer arguments (a kept block). */
static gw_cmd_t *new_cmd(int *cap)
{
    int std = *cap <= STD_ARGS;
    if (std) *cap = STD_ARGS;
    size_t small, bytes = cmd_bytes(*cap, &small);
    gw_cmd_t *c = std ? dm_spares_take(&std_spares) : NULL;
    if (!c) c = gw_try_malloc(bytes);
    if (!c) return NULL;
    memset(c, 0, sizeof(*c));
    c->argv = (char **)(c + 1);
    c->argvlen = (size_t *)(c->argv + *cap);
    c->small = (char *)(c->argvlen + *cap);
    c->small_cap = small;
    c->bytes = bytes;
    return c;
}

/* An argument's share of a command's memory besides its bytes: its argv and argvlen
 * entries (after the first 1024, reallocated arrays of pointers and lengths). */
#define ARG_OVERHEAD (sizeof(char *) + sizeof(size_t))

size_t resp_parser_pending_bytes(const resp_parser_t *p)
{
    size_t n = p->line.cap;
    if (p->cmd) n += p->cmd->bytes;
    if (p->state == P_BULK_DATA && p->cmd &&
        !(p->cmd->small && p->bulk >= p->cmd->small && p->bulk < p->cmd->small + p->cmd->small_cap))
        n += p->bulkcap; /* an argument being read into its own allocation */
    return n;
}

/* Append an argument to the command being read. Returns -1 when its arrays cannot grow
 * (out of memory: the command keeps what it had, arg is not in it). */
static int push_arg(resp_parser_t *p, char *arg, size_t len)
{
    gw_cmd_t *c = p->cmd;
    if (c->argc == p->argcap) {
        int cap = p->argcap ? p->argcap * 2 : 8;
        if (inline_arrays(c)) { /* move the arrays out of the allocation */
            char **av = gw_try_malloc(sizeof(char *) * (size_t)cap);
            size_t *al = gw_try_malloc(sizeof(size_t) * (size_t)cap);
            if (!av || !al) {
                free(av);
                free(al);
                return -1;
            }
            memcpy(av, c->argv, sizeof(char *) * (size_t)c->argc);
            memcpy(al, c->argvlen, sizeof(size_t) * (size_t)c->argc);
            c->argv = av;
            c->argvlen = al;
        } else {
            char **av = gw_try_realloc(c->argv, sizeof(char *) * (size_t)cap);
            if (av) c->argv = av;
            size_t *al = av ? gw_try_realloc(c->argvlen, sizeof(size_t) * (size_t)cap) : NULL;
            if (al) c->argvlen = al;
            if (!av || !al) return -1;
        }
        p->argcap = cap;
    }
    c->argv[c->argc] = arg;
    c->argvlen[c->argc] = len;
    c->argc++;
    c->bytes += len + ARG_OVERHEAD;
    return 0;
}

static int fail(resp_parser_t *p, const char *msg)
{
    snprintf(p->err, sizeof(p->err), "ERR Protocol error: %s", msg);
    p->state = P_ERROR;
    reset_cmd(p);
    gw_buf_free(&p->line);
    return RESP_ERROR;
}

/* An allocation the command needs failed: the client gets this error and is closed (as
 * after a protocol error), and the gateway goes on (util/oom.h). */
static int fail_oom(resp_parser_t *p)
{
    int rc = fail(p, "");
    snprintf(p->err, sizeof(p->err), "ERR dmkv: out of memory reading the command");
    p->oom = 1;
    return rc;
}

/* Accumulate a header line up to '\r' (Redis skips the byte after it unchecked).
 * Returns 1 when p->line holds a complete line, 0 when more input is needed, -1 when the
 * line is longer than Redis allows, -2 when it could not be stored (out of memory). */
static int read_header(resp_parser_t *p, const char *data, size_t len, size_t *pos)
{
    const char *start = data + *pos;
    size_t avail = len - *pos;
    const char *cr = memchr(start, '\r', avail);
    if (!cr) {
        gw_buf_append(&p->line, start, avail);
        *pos = len;
        return p->line.oom ? -2 : p->line.len > RESP_INLINE_MAX ? -1 : 0;
    }
    if (p->line.len == 0) { /* the whole line is in data: read it there, no copy */
        p->hdr = start;
        p->hdr_len = (size_t)(cr - start);
    } else {
        gw_buf_append(&p->line, start, (size_t)(cr - start));
        p->hdr = p->line.data;
        p->hdr_len = p->line.len;
    }
    *pos += (size_t)(cr - start) + 1;
    p->skip = 1; /* the '\n' */
    return p->line.oom ? -2 : 1;
}

static int finish_cmd(resp_parser_t *p, gw_cmd_t **out)
{
    *out = p->cmd;
    p->cmd = NULL;
    p->state = P_IDLE;
    return RESP_CMD;
}

int resp_parse(resp_parser_t *p, const char *data, size_t len, size_t *used, gw_cmd_t **out)
{
    size_t pos = 0;
    int rc = RESP_NEED_MORE;
    *out = NULL;
    while (rc == RESP_NEED_MORE) {
        if (p->state == P_ERROR) {
            rc = RESP_ERROR;
            break;
        }
        if (p->skip) {
            size_t n = len - pos < (size_t)p->skip ? len - pos : (size_t)p->skip;
            pos += n;
            p->skip -= (int)n;
            if (p->skip) break;
            if (p->state == P_BULK_END) {
                if (push_arg(p, p->bulk, p->bulklen)) {
                    rc = fail_oom(p); /* frees the bulk with the command */
                    break;
                }
                p->bulk = NULL;
                p->bulklen = p->bulkhave = p->bulkcap = 0;
                if (--p->mb_left == 0) {
                    rc = finish_cmd(p, out);
                    break;
                }
                p->state = P_BULK_HDR;
            }
        }
        if (p->line.oom) {
            rc = fail_oom(p);
            break;
        }
        /* Out of input; a complete (e.g. empty) bulk payload still needs one more step. */
        if (pos >= len && !(p->state == P_BULK_DATA && p->bulkhave == p->bulklen)) break;
        switch (p->state) {
        case P_IDLE:
            p->line.len = 0;
            if (data[pos] == '*') {
                pos++;
                p->state = P_MB_COUNT;
            } else {
                p->state = P_INLINE;
            }
            break;

        case P_INLINE: {
            const char *start = data + pos;
            const char *nl = memchr(start, '\n', len - pos);
            if (!nl) {
                gw_buf_append(&p->line, start, len - pos);
                pos = len;
                if (p->line.len > RESP_INLINE_MAX) rc = fail(p, "too big inline request");
                break;
            }
            gw_buf_append(&p->line, start, (size_t)(nl - start));
            pos += (size_t)(nl - start) + 1;
            size_t ll = p->line.len;
            if (ll && p->line.data[ll - 1] == '\r') ll--;
            gw_args_t a;
            if (gw_splitargs(p->line.data ? p->line.data : "", ll, &a) != 0) {
                rc = fail(p, "unbalanced quotes in request");
                break;
            }
            p->line.len = 0;
            p->state = P_IDLE;
            if (a.argc == 0) {
                gw_args_free(&a);
                break;
            }
            gw_cmd_t *c = gw_try_calloc(1, sizeof(*c));
            if (!c) {
                gw_args_free(&a);
                rc = fail_oom(p);
                break;
            }
            c->argc = a.argc;
            c->argv = a.argv;
            c->argvlen = a.argvlen;
            c->bytes = sizeof(*c);
            for (int i = 0; i < a.argc; i++)
                c->bytes += a.argvlen[i] + ARG_OVERHEAD;
            *out = c;
            rc = RESP_CMD;
            break;
        }

        case P_MB_COUNT: {
            int r = read_header(p, data, len, &pos);
            if (r == -2) {
                rc = fail_oom(p);
                break;
            }
            if (r < 0) {
                rc = fail(p, "too big mbulk count string");
                break;
            }
            if (r == 0) break;
            long long n;
            if (!gw_str2ll(p->hdr, p->hdr_len, &n) || n > INT_MAX) {
                rc = fail(p, "invalid multibulk length");
                break;
            }
            if (n > RESP_UNAUTH_MULTIBULK && p->unauth) {
                rc = fail(p, "unauthenticated multibulk length");
                break;
            }
            p->line.len = 0;
            if (n <= 0) {
                p->state = P_IDLE; /* empty multibulk: nothing to run */
                break;
            }
            p->mb_left = n;
            p->argcap = n < 1024 ? (int)n : 1024;
            p->cmd = new_cmd(&p->argcap);
            if (!p->cmd) {
                rc = fail_oom(p);
                break;
            }
            p->state = P_BULK_HDR;
            break;
        }

        case P_BULK_HDR: {
            int r = read_header(p, data, len, &pos);
            if (r == -2) {
                rc = fail_oom(p);
                break;
            }
            if (r < 0) {
                rc = fail(p, "too big bulk count string");
                break;
            }
            if (r == 0) break;
            if (p->hdr_len == 0 || p->hdr[0] != '$') {
                char c = p->hdr_len ? p->hdr[0] : '\r';
                char msg[64];
                if (c == '\r' || c == '\n')
                    c = ' '; /* Redis turns newlines in error texts into spaces */
                snprintf(msg, sizeof(msg), "expected '$', got '%c'", c);
                rc = fail(p, msg);
                break;
            }
            long long n;
            if (!gw_str2ll(p->hdr + 1, p->hdr_len - 1, &n) || n < 0 ||
                (unsigned long long)n > RESP_BULK_MAX) {
                rc = fail(p, "invalid bulk length");
                break;
            }
            if (n > RESP_UNAUTH_BULK && p->unauth) {
                rc = fail(p, "unauthenticated bulk length");
                break;
            }
            p->line.len = 0;
            p->bulklen = (size_t)n;
            p->bulkhave = 0;
            gw_cmd_t *c = p->cmd;
            if (c->small && c->small_cap - c->small_used > p->bulklen) {
                p->bulk = c->small + c->small_used; /* fits: no allocation */
                c->small_used += p->bulklen + 1;
                p->bulkcap = p->bulklen;
            } else {
                p->bulkcap = p->bulklen < ARG_INITIAL_MAX ? p->bulklen : ARG_INITIAL_MAX;
                p->bulk = gw_try_malloc(p->bulkcap + 1);
                if (!p->bulk) {
                    rc = fail_oom(p);
                    break;
                }
            }
            p->state = P_BULK_DATA;
            break;
        }

        case P_BULK_DATA: {
            size_t want = p->bulklen - p->bulkhave;
            size_t n = len - pos < want ? len - pos : want;
            if (p->bulkhave + n > p->bulkcap) {
                size_t cap = p->bulkcap * 2;
                if (cap < p->bulkhave + n) cap = p->bulkhave + n;
                if (cap > p->bulklen) cap = p->bulklen;
                char *nb = gw_try_realloc(p->bulk, cap + 1);
                if (!nb) {
                    rc = fail_oom(p); /* frees the old bulk */
                    break;
                }
                p->bulk = nb;
                p->bulkcap = cap;
            }
            if (n) memcpy(p->bulk + p->bulkhave, data + pos, n);
            p->bulkhave += n;
            pos += n;
            if (p->bulkhave < p->bulklen) break; /* pos == len: the loop ends */
            p->bulk[p->bulklen] = 0;
            p->state = P_BULK_END;
            p->skip = 2; /* CRLF, unchecked as in Redis */
            break;
        }
        default:
            rc = fail(p, "internal parser state");
            break;
        }
    }
    *used = pos;
    return rc;
}
