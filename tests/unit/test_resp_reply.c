/* RESP reply encoders (gateway/resp/reply.c): integer, array and bulk-string headers are
 * written without snprintf, so their bytes are checked here against Redis's wire format,
 * including the extremes of a long long. */
#include <limits.h>
#include <string.h>

#include "harness.h"
#include "resp/reply.h"

static void expect(gw_buf_t *b, const char *want)
{
    CHECKF(b->len == strlen(want) && memcmp(b->data, want, b->len) == 0,
           "got \"%.*s\", want \"%s\"", (int)b->len, b->data, want);
    gw_buf_free(b);
    gw_buf_init(b);
}

static void test_numbers(void)
{
    gw_buf_t b;
    gw_buf_init(&b);
    reply_int(&b, 0);
    expect(&b, ":0\r\n");
    reply_int(&b, -1);
    expect(&b, ":-1\r\n");
    reply_int(&b, 1234567890123LL);
    expect(&b, ":1234567890123\r\n");
    reply_int(&b, LLONG_MAX);
    expect(&b, ":9223372036854775807\r\n");
    reply_int(&b, LLONG_MIN);
    expect(&b, ":-9223372036854775808\r\n");
    reply_array(&b, -1);
    expect(&b, "*-1\r\n");
    reply_array(&b, 3);
    expect(&b, "*3\r\n");
}

static void test_bulk(void)
{
    gw_buf_t b;
    gw_buf_init(&b);
    reply_bulk(&b, "", 0);
    expect(&b, "$0\r\n\r\n");
    reply_bulk(&b, "hello", 5);
    expect(&b, "$5\r\nhello\r\n");
    char big[1000];
    memset(big, 'x', sizeof(big));
    reply_bulk(&b, big, sizeof(big));
    CHECK(b.len == 7 + 1000 + 2 && memcmp(b.data, "$1000\r\nx", 8) == 0);
    gw_buf_free(&b);
}

int main(void)
{
    RUN(test_numbers);
    RUN(test_bulk);
    printf("test_resp_reply: passed\n");
    return 0;
}
