/* Glob matching with Redis's stringmatchlen semantics (used by SCAN MATCH, KEYS,
 * CONFIG GET) and the literal prefix SCAN/KEYS seek to. */
#include <string.h>

#include "harness.h"
#include "util/glob.h"

static int m(const char *p, const char *s)
{
    return gw_glob_match(p, strlen(p), s, strlen(s), false);
}

static void test_basic(void)
{
    CHECK(!m("*", "")); /* as in Redis: callers special-case a lone "*" */
    CHECK(m("*", "anything"));
    CHECK(m("h?llo", "hello") && m("h?llo", "hallo") && !m("h?llo", "hllo"));
    CHECK(m("h*llo", "hllo") && m("h*llo", "heeeello") && !m("h*llo", "hellox"));
    CHECK(m("h[ae]llo", "hello") && m("h[ae]llo", "hallo") && !m("h[ae]llo", "hillo"));
    CHECK(m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
    CHECK(m("h[a-b]llo", "hbllo") && !m("h[a-b]llo", "hcllo"));
    CHECK(m("h[b-a]llo", "hallo")); /* reversed range */
    CHECK(m("h\\*llo", "h*llo") && !m("h\\*llo", "hello"));
    CHECK(m("[\\]]", "]") && m("a[\\-]b", "a-b"));
    CHECK(m("key:0001*", "key:000123") && !m("key:0001*", "key:000223"));
    CHECK(m("*a*b*c*", "xxaxxbxxcxx") && !m("*a*b*c*", "xxaxxcxxbxx"));
    CHECK(m("[abc", "a")); /* unterminated class: matches like Redis */
    CHECK(!m("abc", "ab") && !m("ab", "abc") && m("ab*", "ab"));
    (void)m("a\\", "a\\"); /* trailing backslash: no crash */
    CHECK(gw_glob_match("A*", 2, "abc", 3, true) && !gw_glob_match("A*", 2, "abc", 3, false));
    CHECK(gw_glob_match("a?c", 3, "a\0c", 3, false)); /* binary-safe */
}

static void test_pathological(void)
{
    /* Many stars against a long non-matching string must finish quickly. */
    char pat[200], str[4000];
    for (int i = 0; i < 100; i++) {
        pat[2 * i] = '*';
        pat[2 * i + 1] = 'a';
    }
    pat[200 - 1] = 'b';
    memset(str, 'a', sizeof(str));
    CHECK(!gw_glob_match(pat, sizeof(pat), str, sizeof(str), false));
}

/* Does pattern p[0..plen) have the literal prefix want[0..wlen)? */
static int prefix_is(const char *p, size_t plen, const char *want, size_t wlen)
{
    char out[64];
    size_t n = gw_glob_literal_prefix(p, plen, out);
    return n == wlen && memcmp(out, want, n) == 0;
}

#define PREFIX_IS(p, want) prefix_is(p, sizeof(p) - 1, want, sizeof(want) - 1)

static void test_literal_prefix(void)
{
    CHECK(PREFIX_IS("user:*", "user:"));
    CHECK(PREFIX_IS("*", "") && PREFIX_IS("*abc", ""));
    CHECK(PREFIX_IS("a\\*b*", "a*b"));
    CHECK(PREFIX_IS("a\\?\\[\\\\x?", "a?[\\x"));
    CHECK(PREFIX_IS("key[0-9]*", "key") && PREFIX_IS("[abc]", ""));
    CHECK(PREFIX_IS("k?y", "k") && PREFIX_IS("?", ""));
    CHECK(PREFIX_IS("plain", "plain"));
    CHECK(PREFIX_IS("a]^-b*", "a]^-b")); /* only '*', '?', '[' are special outside a class */
    CHECK(PREFIX_IS("", ""));
    CHECK(PREFIX_IS("abc\\", "abc") && PREFIX_IS("\\", ""));
    CHECK(PREFIX_IS("ab\\\\", "ab\\")); /* an escaped backslash is not a trailing one */
    CHECK(PREFIX_IS("b\0\xff\r\n*", "b\0\xff\r\n")); /* binary-safe */
    CHECK(PREFIX_IS("\xfe\\\0*", "\xfe\0"));
    /* Every string the pattern matches starts with its prefix. */
    CHECK(m("a\\*b*", "a*bc") && m("abc\\", "abc\\"));
}

/* A random string of 0..7 bytes over glob specials (deterministic LCG). */
static size_t rand_glob(unsigned *seed, char *out)
{
    static const char abc[] = "ab*?[]^-\\";
    *seed = *seed * 1103515245u + 12345u;
    size_t n = (*seed >> 16) % 8;
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        out[i] = abc[(*seed >> 16) % (sizeof(abc) - 1)];
    }
    return n;
}

/* Whatever matches a pattern starts with its literal prefix (so SCAN may seek to it without
 * losing keys). */
static void test_literal_prefix_sound(void)
{
    unsigned seed = 12345;
    for (int iter = 0; iter < 200000; iter++) {
        char p[8], s[8], pre[8];
        size_t plen = rand_glob(&seed, p), slen = rand_glob(&seed, s);
        size_t n = gw_glob_literal_prefix(p, plen, pre);
        CHECK(n <= plen);
        if (gw_glob_match(p, plen, s, slen, false))
            CHECKF(slen >= n && memcmp(s, pre, n) == 0, "pattern %.*s string %.*s", (int)plen, p,
                   (int)slen, s);
    }
}

int main(void)
{
    RUN(test_basic);
    RUN(test_pathological);
    RUN(test_literal_prefix);
    RUN(test_literal_prefix_sound);
    fprintf(stderr, "test_resp_glob: OK\n");
    return 0;
}
