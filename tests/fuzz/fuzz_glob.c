/* libFuzzer target (issue 12, hostile input): Redis glob matching (SCAN/KEYS MATCH) of a
 * pattern against a string, both from the input (split at the first 0 byte), with and
 * without nocase, and the literal prefix a MATCH seeks to. The prefix must be a prefix of
 * every string the pattern matches; nothing may read out of bounds (AddressSanitizer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/glob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *z = memchr(data, 0, size);
    size_t plen = z ? (size_t)(z - data) : size;
    const char *pat = (const char *)data, *str = z ? (const char *)z + 1 : "";
    size_t slen = z ? size - plen - 1 : 0;
    if (plen > 256) return 0; /* Redis bounds nesting, not length; keep runs quick */
    int m = gw_glob_match(pat, plen, str, slen, false);
    (void)gw_glob_match(pat, plen, str, slen, true);
    char *prefix = malloc(plen + 1);
    if (!prefix) return 0;
    size_t n = gw_glob_literal_prefix(pat, plen, prefix);
    if (n > plen) abort();
    if (m && (n > slen || memcmp(prefix, str, n) != 0)) abort();
    free(prefix);
    return 0;
}
