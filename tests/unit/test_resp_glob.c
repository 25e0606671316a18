/* Glob matching with Redis's stringmatchlen semantics (used by SCAN MATCH, KEYS,
 * CONFIG GET). */
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

int main(void)
{
    RUN(test_basic);
    RUN(test_pathological);
    fprintf(stderr, "test_resp_glob: OK\n");
    return 0;
}
