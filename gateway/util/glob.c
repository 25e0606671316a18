/* Glob matching with Redis's exact semantics (a port of util.c:stringmatchlen, including
 * the early exit for patterns with many '*' and the nesting limit). */
#include "util/glob.h"

#include <ctype.h>

static int fold(unsigned char c, bool nocase)
{
    return nocase ? tolower(c) : c;
}

static bool match_impl(const unsigned char *p, size_t plen, const unsigned char *s, size_t slen,
                       bool nocase, bool *skip_longer, int nesting)
{
    if (nesting > 1000) return false; /* protection against abusive patterns */
    while (plen && slen) {
        switch (p[0]) {
        case '*':
            while (plen > 1 && p[1] == '*') {
                p++;
                plen--;
            }
            if (plen == 1) return true;
            while (slen) {
                if (match_impl(p + 1, plen - 1, s, slen, nocase, skip_longer, nesting + 1))
                    return true;
                if (*skip_longer) return false;
                s++;
                slen--;
            }
            /* The rest of the pattern matches nowhere in the rest of the string: no
             * earlier '*' can help by matching more either. */
            *skip_longer = true;
            return false;
        case '?':
            s++;
            slen--;
            break;
        case '[': {
            bool neg, match = false;
            p++;
            plen--;
            neg = plen && p[0] == '^';
            if (neg) {
                p++;
                plen--;
            }
            for (;;) {
                if (plen >= 2 && p[0] == '\\') {
                    p++;
                    plen--;
                    if (p[0] == s[0]) match = true;
                } else if (plen == 0) {
                    /* Unterminated class: step back so the outer advance lands at the end. */
                    p--;
                    plen++;
                    break;
                } else if (p[0] == ']') {
                    break;
                } else if (plen >= 3 && p[1] == '-') {
                    int lo = fold(p[0], nocase), hi = fold(p[2], nocase), c = fold(s[0], nocase);
                    if (lo > hi) {
                        int t = lo;
                        lo = hi;
                        hi = t;
                    }
                    p += 2;
                    plen -= 2;
                    if (c >= lo && c <= hi) match = true;
                } else if (fold(p[0], nocase) == fold(s[0], nocase)) {
                    match = true;
                }
                p++;
                plen--;
            }
            if (neg) match = !match;
            if (!match) return false;
            s++;
            slen--;
            break;
        }
        case '\\':
            if (plen >= 2) {
                p++;
                plen--;
            }
            /* fall through */
        default:
            if (fold(p[0], nocase) != fold(s[0], nocase)) return false;
            s++;
            slen--;
            break;
        }
        p++;
        plen--;
        if (slen == 0) {
            while (plen && p[0] == '*') {
                p++;
                plen--;
            }
            break;
        }
    }
    return plen == 0 && slen == 0;
}

bool gw_glob_match(const char *pattern, size_t plen, const char *string, size_t slen, bool nocase)
{
    bool skip = false;
    return match_impl((const unsigned char *)pattern, plen, (const unsigned char *)string, slen,
                      nocase, &skip, 0);
}

size_t gw_glob_literal_prefix(const char *pattern, size_t plen, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < plen; i++) {
        char ch = pattern[i];
        if (ch == '*' || ch == '?' || ch == '[') break;
        if (ch == '\\') {
            /* Redis matches a lone trailing backslash literally; stopping short is safe. */
            if (i + 1 == plen) break;
            ch = pattern[++i];
        }
        out[n++] = ch;
    }
    return n;
}
