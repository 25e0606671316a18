/* Growable byte buffer. */
#include "util/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/log.h"
#include "util/oom.h"

void gw_buf_init(gw_buf_t *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

void gw_buf_free(gw_buf_t *b)
{
    free(b->data);
    gw_buf_init(b);
}

int gw_buf_reserve(gw_buf_t *b, size_t extra)
{
    if (b->oom) return -1;
    size_t need = b->len + extra + 1; /* +1: room for a trailing NUL */
    if (need <= b->cap) return 0;
    if (need < extra) {
        b->oom = 1;
        return -1;
    }
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap < (1u << 30) ? cap * 2 : cap + (1u << 30);
    char *p = gw_try_realloc(b->data, cap);
    if (!p) {
        dm_log(DM_LOG_WARNING, "Out of memory growing a buffer to %zu bytes", cap);
        b->oom = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void gw_buf_append(gw_buf_t *b, const void *p, size_t len)
{
    if (gw_buf_reserve(b, len)) return;
    if (len) memcpy(b->data + b->len, p, len);
    b->len += len;
    b->data[b->len] = 0;
}

void gw_buf_puts(gw_buf_t *b, const char *s)
{
    gw_buf_append(b, s, strlen(s));
}

void gw_buf_vprintf(gw_buf_t *b, const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, cp);
    va_end(cp);
    if (n < 0) return;
    if ((size_t)n < sizeof(small)) {
        gw_buf_append(b, small, (size_t)n);
        return;
    }
    if (gw_buf_reserve(b, (size_t)n)) return;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void gw_buf_printf(gw_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gw_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void gw_buf_consume(gw_buf_t *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        if (b->data) b->data[0] = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = 0;
}

char *gw_buf_take(gw_buf_t *b, size_t *len)
{
    char *p = b->data;
    if (len) *len = b->len;
    gw_buf_init(b);
    return p;
}
