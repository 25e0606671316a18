/* Strict number parsing with Redis's rules (string2ll / string2ull / strtod checks). */
#ifndef GW_UTIL_STRCONV_H
#define GW_UTIL_STRCONV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Redis's string2ll: optional '-', digits, no '+', no spaces, no leading zeros (except "0"),
 * must fit in long long. Returns true and sets *out on success. */
bool gw_str2ll(const char *s, size_t len, long long *out);

/* SCAN cursor parsing like Redis 7.0 (strtoull, base 10): rejects a leading space,
 * trailing garbage and overflow; "" is 0. s must be NUL-terminated at s[len]. */
bool gw_str2cursor(const char *s, size_t len, uint64_t *out);

/* Redis's memory values (memtoull): digits and an optional unit, b k kb m mb g gb in any
 * case (k = 1000, kb = 1024), e.g. "512mb"; no sign, no spaces; the bytes must fit in 64
 * bits. s is NUL-terminated. Returns true and sets *out (bytes). */
bool gw_str2mem(const char *s, uint64_t *out);

/* Format v in decimal into buf (at least 21 bytes); returns the length. */
size_t gw_ull2str(char *buf, unsigned long long v);

#endif
