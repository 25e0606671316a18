/* The command table's lookup (a hash of the names) and flag bits: every command is found
 * by its name in any case, nothing else is, and each flag bit agrees with the words of
 * the entry's COMMAND flags. */
#include <ctype.h>
#include <string.h>

#include "commands/commands.h"
#include "harness.h"

static void test_lookup(void)
{
    size_t n;
    const gw_command_t *t = gw_command_table(&n);
    CHECK(n > 50);
    for (size_t i = 0; i < n; i++) {
        char up[64];
        size_t len = strlen(t[i].name);
        for (size_t k = 0; k < len; k++)
            up[k] = (char)(k % 2 ? toupper((unsigned char)t[i].name[k]) : t[i].name[k]);
        CHECKF(gw_command_lookup(t[i].name, len) == &t[i], "%s not found", t[i].name);
        CHECKF(gw_command_lookup(up, len) == &t[i], "%.*s not found", (int)len, up);
        CHECKF(gw_command_lookup(t[i].name, len - 1) == NULL ||
                   strlen(gw_command_lookup(t[i].name, len - 1)->name) == len - 1,
               "a prefix of %s found as another name", t[i].name);
    }
    CHECK(gw_command_lookup("", 0) == NULL);
    CHECK(gw_command_lookup("gett", 4) == NULL);
    CHECK(gw_command_lookup("get\0x", 5) == NULL); /* an embedded NUL */
    CHECK(gw_command_lookup("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 40) == NULL);
}

static int word_in(const char *words, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = words; *p;) {
        size_t len = strcspn(p, " ");
        if (len == n && strncmp(p, w, n) == 0) return 1;
        p += len;
        while (*p == ' ')
            p++;
    }
    return 0;
}

static void test_flags(void)
{
    /* The words Redis's COMMAND reply uses, in the order of the GW_CF_* bits. */
    const char *const word[] = {"readonly", "fast", "write", "admin", "no_auth", "no_multi"};
    const unsigned bit[] = {GW_CF_READONLY, GW_CF_FAST,    GW_CF_WRITE,
                            GW_CF_ADMIN,    GW_CF_NO_AUTH, GW_CF_NO_MULTI};
    size_t n;
    const gw_command_t *t = gw_command_table(&n);
    for (size_t i = 0; i < n; i++)
        for (size_t w = 0; w < sizeof(bit) / sizeof(bit[0]); w++)
            CHECKF(gw_command_has(&t[i], bit[w]) == word_in(t[i].flags, word[w]), "%s: flag %s",
                   t[i].name, word[w]);
    const gw_command_t *get = gw_command_lookup("get", 3), *set = gw_command_lookup("set", 3);
    CHECK(gw_command_has(get, GW_CF_READONLY | GW_CF_FAST) && !gw_command_has(get, GW_CF_WRITE));
    CHECK(gw_command_has(set, GW_CF_WRITE) && !gw_command_has(set, GW_CF_READONLY | GW_CF_FAST));
    CHECK(gw_command_has(gw_command_lookup("auth", 4), GW_CF_NO_AUTH));
}

int main(void)
{
    RUN(test_lookup);
    RUN(test_flags);
    printf("test_command_table: passed\n");
    return 0;
}
