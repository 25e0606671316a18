/* A growable byte buffer (output buffers, INFO text, line accumulation). */
#ifndef GW_UTIL_BUF_H
#define GW_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct gw_buf {
    char *data; /* malloc'd, NULL while empty and never grown */
    size_t len; /* bytes in use */
    size_t cap; /* bytes allocated */
    int oom;    /* a reserve failed: appends since were dropped (sticky until freed) */
} gw_buf_t;

/* Initialise an empty buffer (no allocation). */
void gw_buf_init(gw_buf_t *b);
/* Free the storage and reset to empty. */
void gw_buf_free(gw_buf_t *b);
/* Make room for at least extra more bytes. Returns 0, or -1 when out of memory: then b
 * keeps what it had, oom is set, and every later append is dropped, so the owner (a
 * client's reply, a command being read) must give it up: the connection is closed
 * instead of the gateway aborting (util/oom.h). */
int gw_buf_reserve(gw_buf_t *b, size_t extra);
/* Append len bytes (binary-safe). */
void gw_buf_append(gw_buf_t *b, const void *p, size_t len);
/* Append a NUL-terminated string (without the NUL). */
void gw_buf_puts(gw_buf_t *b, const char *s);
/* Append printf-formatted text (without a NUL; data[len] is kept NUL for convenience). */
void gw_buf_printf(gw_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same with a va_list. */
void gw_buf_vprintf(gw_buf_t *b, const char *fmt, va_list ap);
/* Drop the first n bytes (n <= len), moving the rest to the front. */
void gw_buf_consume(gw_buf_t *b, size_t n);
/* Hand the storage to the caller (who frees it) and reset b to empty. */
char *gw_buf_take(gw_buf_t *b, size_t *len);

#endif
