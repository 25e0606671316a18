/* Redis's glob-style matching (stringmatchlen): '*', '?', '[a-z]', '[^x]', '\x'.
 * Binary-safe: pattern and string are byte ranges. */
#ifndef GW_UTIL_GLOB_H
#define GW_UTIL_GLOB_H

#include <stdbool.h>
#include <stddef.h>

/* True when string[0..slen) matches pattern[0..plen). nocase folds ASCII case. */
bool gw_glob_match(const char *pattern, size_t plen, const char *string, size_t slen, bool nocase);

/* The literal prefix every string matching pattern[0..plen) starts with (case-sensitive
 * matching): bytes up to the first unescaped '*', '?' or '['; "\x" gives x; a trailing lone
 * backslash ends it. Writes it to out (room for plen bytes) and returns its length. */
size_t gw_glob_literal_prefix(const char *pattern, size_t plen, char *out);

#endif
