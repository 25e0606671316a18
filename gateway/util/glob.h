/* Redis's glob-style matching (stringmatchlen): '*', '?', '[a-z]', '[^x]', '\x'.
 * Binary-safe: pattern and string are byte ranges. */
#ifndef GW_UTIL_GLOB_H
#define GW_UTIL_GLOB_H

#include <stdbool.h>
#include <stddef.h>

/* True when string[0..slen) matches pattern[0..plen). nocase folds ASCII case. */
bool gw_glob_match(const char *pattern, size_t plen, const char *string, size_t slen, bool nocase);

#endif
