/* Strict number parsing (Redis semantics). */
#include "util/strconv.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool gw_str2ll(const char *s, size_t len, long long *out)
{
    if (len == 0 || len > 20) return false;
    size_t i = 0;
    bool neg = false;
    if (len == 1 && s[0] == '0') {
        *out = 0;
        return true;
    }
    if (s[0] == '-') {
        neg = true;
        i = 1;
        if (len == 1) return false;
    }
    if (s[i] < '1' || s[i] > '9') return false;
    unsigned long long v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (ULLONG_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1) return false;
        *out = v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)LLONG_MAX) return false;
        *out = (long long)v;
    }
    return true;
}

bool gw_str2cursor(const char *s, size_t len, uint64_t *out)
{
    if (len > 0 && isspace((unsigned char)s[0])) return false;
    if (memchr(s, 0, len)) return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno == ERANGE) return false;
    *out = v;
    return true;
}

bool gw_str2mem(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        uint64_t mul;
    } units[] = {{"", 1},          {"b", 1},           {"k", 1000},         {"kb", 1024},
                 {"m", 1000000},   {"mb", 1ull << 20}, {"g", 1000000000ull}, {"gb", 1ull << 30}};
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p == s) return false;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcasecmp(p, units[i].unit)) {
            if (v > UINT64_MAX / units[i].mul) return false;
            *out = v * units[i].mul;
            return true;
        }
    return false;
}

size_t gw_ull2str(char *buf, unsigned long long v)
{
    char tmp[21];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
    return n;
}
