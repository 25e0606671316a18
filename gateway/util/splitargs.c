/* A port of Redis's sdssplitargs over a length-delimited line. */
#include "util/splitargs.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util/buf.h"

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void push(gw_args_t *out, gw_buf_t *cur)
{
    if (!cur->data) gw_buf_reserve(cur, 0);
    out->argv = realloc(out->argv, sizeof(char *) * (size_t)(out->argc + 1));
    out->argvlen = realloc(out->argvlen, sizeof(size_t) * (size_t)(out->argc + 1));
    if (!out->argv || !out->argvlen) abort();
    size_t n;
    out->argv[out->argc] = gw_buf_take(cur, &n);
    out->argv[out->argc][n] = 0;
    out->argvlen[out->argc] = n;
    out->argc++;
}

int gw_splitargs(const char *line, size_t len, gw_args_t *out)
{
    const char *p = line, *end = line + len;
    out->argc = 0;
    out->argv = NULL;
    out->argvlen = NULL;
    gw_buf_t cur;
    gw_buf_init(&cur);
    for (;;) {
        while (p < end && isspace((unsigned char)*p))
            p++;
        if (p >= end) return 0;
        bool inq = false, insq = false, done = false;
        while (!done) {
            if (inq) {
                if (p >= end) goto err; /* unterminated quotes */
                if (*p == '\\' && p + 3 < end + 0 && p[1] == 'x' && hexval(p[2]) >= 0 &&
                    hexval(p[3]) >= 0) {
                    char c = (char)(hexval(p[2]) * 16 + hexval(p[3]));
                    gw_buf_append(&cur, &c, 1);
                    p += 3;
                } else if (*p == '\\' && p + 1 < end) {
                    char c;
                    p++;
                    switch (*p) {
                    case 'n':
                        c = '\n';
                        break;
                    case 'r':
                        c = '\r';
                        break;
                    case 't':
                        c = '\t';
                        break;
                    case 'b':
                        c = '\b';
                        break;
                    case 'a':
                        c = '\a';
                        break;
                    default:
                        c = *p;
                        break;
                    }
                    gw_buf_append(&cur, &c, 1);
                } else if (*p == '"') {
                    /* closing quote must be followed by a space or nothing at all */
                    if (p + 1 < end && !isspace((unsigned char)p[1])) goto err;
                    done = true;
                } else {
                    gw_buf_append(&cur, p, 1);
                }
            } else if (insq) {
                if (p >= end) goto err;
                if (*p == '\\' && p + 1 < end && p[1] == '\'') {
                    p++;
                    gw_buf_append(&cur, "'", 1);
                } else if (*p == '\'') {
                    if (p + 1 < end && !isspace((unsigned char)p[1])) goto err;
                    done = true;
                } else {
                    gw_buf_append(&cur, p, 1);
                }
            } else {
                if (p >= end) {
                    done = true;
                    break;
                }
                switch (*p) {
                case ' ':
                case '\n':
                case '\r':
                case '\t':
                case '\0':
                    done = true;
                    break;
                case '"':
                    inq = true;
                    break;
                case '\'':
                    insq = true;
                    break;
                default:
                    gw_buf_append(&cur, p, 1);
                    break;
                }
            }
            if (p < end) p++;
        }
        push(out, &cur);
    }
err:
    gw_buf_free(&cur);
    gw_args_free(out);
    return -1;
}

void gw_args_free(gw_args_t *a)
{
    for (int i = 0; i < a->argc; i++)
        free(a->argv[i]);
    free(a->argv);
    free(a->argvlen);
    a->argv = NULL;
    a->argvlen = NULL;
    a->argc = 0;
}
