/* RESP2 and RESP3 reply encoders appending to an output buffer. Protocol-aware helpers
 * that pick the encoding from the connection live in commands/commands.h (gw_reply_*). */
#ifndef GW_RESP_REPLY_H
#define GW_RESP_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* "+<s>\r\n"; s must not contain CR or LF. */
void reply_status(gw_buf_t *b, const char *s);
/* "-<msg>\r\n"; msg starts with the error code ("ERR ...", "OOM ..."). CR/LF in msg are
 * replaced by spaces, as Redis does. */
void reply_error(gw_buf_t *b, const char *msg);
/* printf-style reply_error. */
void reply_errorf(gw_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ":<v>\r\n" */
void reply_int(gw_buf_t *b, long long v);
/* "$<len>\r\n<bytes>\r\n" (binary-safe) */
void reply_bulk(gw_buf_t *b, const void *p, size_t len);
/* reply_bulk of a NUL-terminated string. */
void reply_bulk_cstr(gw_buf_t *b, const char *s);
/* Bulk of an unsigned 64-bit number in decimal (SCAN cursors). */
void reply_bulk_u64(gw_buf_t *b, uint64_t v);
/* Null bulk "$-1\r\n". */
void reply_null(gw_buf_t *b);
/* Null array "*-1\r\n". */
void reply_null_array(gw_buf_t *b);
/* Array header "*<n>\r\n"; the caller appends n elements. */
void reply_array(gw_buf_t *b, long long n);

/* RESP3 only (callers choose by the connection's protocol). */
/* Map header "%<n>\r\n"; the caller appends n key/value pairs (2n elements). */
void reply_map(gw_buf_t *b, long long n);
/* Set header "~<n>\r\n"; the caller appends n elements. */
void reply_set(gw_buf_t *b, long long n);
/* RESP3 null "_\r\n". */
void reply_null3(gw_buf_t *b);
/* Verbatim string "=<len+4>\r\ntxt:<bytes>\r\n" (format "txt"). */
void reply_verbatim(gw_buf_t *b, const void *p, size_t len);

#endif
