/* RESP request parser: multibulk and inline commands, binary payloads, pipelines, every
 * split point of the input (two and three pieces, and byte by byte) giving the same
 * commands, and Redis's protocol errors. */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "resp/parser.h"

#define MAXCMDS 64

typedef struct result {
    int ncmds;
    gw_cmd_t *cmds[MAXCMDS];
    int err; /* 1 when RESP_ERROR was returned */
    char errtext[128];
} result_t;

static void result_free(result_t *r)
{
    for (int i = 0; i < r->ncmds; i++)
        gw_cmd_free(r->cmds[i]);
    memset(r, 0, sizeof(*r));
}

/* Feed p with data[0..len), collecting commands into r. */
static void feed(resp_parser_t *p, const char *data, size_t len, result_t *r)
{
    size_t pos = 0;
    while (!r->err) {
        size_t used;
        gw_cmd_t *cmd;
        int rc = resp_parse(p, data + pos, len - pos, &used, &cmd);
        CHECK(used <= len - pos);
        pos += used;
        if (rc == RESP_CMD) {
            CHECK(cmd && r->ncmds < MAXCMDS);
            r->cmds[r->ncmds++] = cmd;
            continue;
        }
        if (rc == RESP_ERROR) {
            r->err = 1;
            snprintf(r->errtext, sizeof(r->errtext), "%s", p->err);
            break;
        }
        CHECK(rc == RESP_NEED_MORE && pos == len);
        break;
    }
}

/* Parse input split at the given cut points (sorted, n cuts). */
static void parse_split(const char *in, size_t len, const size_t *cuts, int ncuts, result_t *r)
{
    resp_parser_t p;
    resp_parser_init(&p);
    memset(r, 0, sizeof(*r));
    size_t prev = 0;
    for (int i = 0; i <= ncuts && !r->err; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        feed(&p, in + prev, end - prev, r);
        prev = end;
    }
    resp_parser_free(&p);
}

static void same(const result_t *a, const result_t *b)
{
    CHECK(a->ncmds == b->ncmds && a->err == b->err);
    CHECK(strcmp(a->errtext, b->errtext) == 0);
    for (int i = 0; i < a->ncmds; i++) {
        CHECK(a->cmds[i]->argc == b->cmds[i]->argc);
        CHECK(a->cmds[i]->bytes == b->cmds[i]->bytes);
        for (int j = 0; j < a->cmds[i]->argc; j++) {
            CHECK(a->cmds[i]->argvlen[j] == b->cmds[i]->argvlen[j]);
            CHECK(memcmp(a->cmds[i]->argv[j], b->cmds[i]->argv[j], a->cmds[i]->argvlen[j]) == 0);
            CHECK(a->cmds[i]->argv[j][a->cmds[i]->argvlen[j]] == 0); /* NUL-terminated */
        }
    }
}

/* Every 1-cut and 2-cut split, and byte-by-byte, equals the whole-buffer parse. */
static void check_all_splits(const char *in, size_t len, result_t *whole)
{
    parse_split(in, len, NULL, 0, whole);
    for (size_t a = 0; a <= len; a++) {
        result_t r;
        size_t cuts[2] = {a, 0};
        parse_split(in, len, cuts, 1, &r);
        same(whole, &r);
        result_free(&r);
        if (len <= 200) {
            for (size_t b = a; b <= len; b++) {
                cuts[1] = b;
                parse_split(in, len, cuts, 2, &r);
                same(whole, &r);
                result_free(&r);
            }
        }
    }
    size_t *every = malloc((len + 1) * sizeof(size_t));
    for (size_t i = 0; i < len; i++)
        every[i] = i;
    result_t r;
    parse_split(in, len, every, (int)len, &r);
    same(whole, &r);
    result_free(&r);
    free(every);
}

static void expect_arg(const gw_cmd_t *c, int i, const char *s, size_t n)
{
    CHECK(i < c->argc && c->argvlen[i] == n && memcmp(c->argv[i], s, n) == 0);
}
#define ARG(c, i, lit) expect_arg((c), (i), (lit), sizeof(lit) - 1)

static void test_multibulk(void)
{
    const char in[] = "*3\r\n$3\r\nSET\r\n$5\r\nk\0\r\ny\r\n$10\r\nv\r\n\r\n\0\0*1\r\n\r\n"
                      "*1\r\n$4\r\nPING\r\n"
                      "*2\r\n$3\r\nGET\r\n$0\r\n\r\n";
    result_t r;
    check_all_splits(in, sizeof(in) - 1, &r);
    CHECK(!r.err && r.ncmds == 3);
    CHECK(r.cmds[0]->argc == 3);
    ARG(r.cmds[0], 0, "SET");
    ARG(r.cmds[0], 1, "k\0\r\ny");
    ARG(r.cmds[0], 2, "v\r\n\r\n\0\0*1\r");
    /* bytes is the memory the command holds: its arguments and their argv entries */
    CHECK(r.cmds[0]->bytes >= 3 + 5 + 10 + 3 * (sizeof(char *) + sizeof(size_t)));
    ARG(r.cmds[1], 0, "PING");
    ARG(r.cmds[2], 1, "");
    result_free(&r);
    /* Empty arguments are not free: 5000 of them count their argv entries (what lets
     * client-query-buffer-limit stop "*2147483647" followed by endless "$0"). */
    size_t n = 5000, len = 0;
    char *many = malloc(16 + 6 * n);
    CHECK(many);
    len += (size_t)sprintf(many, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(many + len, "$0\r\n\r\n");
    parse_split(many, len, NULL, 0, &r);
    CHECK(!r.err && r.ncmds == 1 && r.cmds[0]->argc == (int)n);
    CHECK(r.cmds[0]->bytes >= n * (sizeof(char *) + sizeof(size_t)));
    result_free(&r);
    free(many);
}

static void test_empty_and_inline(void)
{
    const char in[] = "*0\r\n*-1\r\n\r\n   \r\nset a \"x y\\r\\n\\x41\\\"\" 'it\\'s' plain\r\n"
                      "PING\nEXISTS  a   b\r\n";
    result_t r;
    check_all_splits(in, sizeof(in) - 1, &r);
    CHECK(!r.err && r.ncmds == 3);
    CHECK(r.cmds[0]->argc == 5);
    ARG(r.cmds[0], 0, "set");
    ARG(r.cmds[0], 2, "x y\r\nA\"");
    ARG(r.cmds[0], 3, "it's");
    ARG(r.cmds[0], 4, "plain");
    CHECK(r.cmds[1]->argc == 1);
    ARG(r.cmds[1], 0, "PING");
    CHECK(r.cmds[2]->argc == 3);
    ARG(r.cmds[2], 2, "b");
    result_free(&r);
}

static void expect_error(const char *in, size_t len, int ncmds_before, const char *err)
{
    result_t r;
    check_all_splits(in, len, &r);
    CHECKF(r.err && strcmp(r.errtext, err) == 0, "input '%.30s': got '%s' want '%s'", in, r.errtext,
           err);
    CHECK(r.ncmds == ncmds_before);
    result_free(&r);
}
#define ERR(lit, n, e) expect_error((lit), sizeof(lit) - 1, (n), (e))

static void test_errors(void)
{
    ERR("*abc\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*+1\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*2147483648\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("PING\r\n*1\r\n$x\r\n", 1, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$-1\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$01\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$536870913\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\nX\r\n", 0, "ERR Protocol error: expected '$', got 'X'");
    ERR("*1\r\n:1\r\n", 0, "ERR Protocol error: expected '$', got ':'");
    ERR("*2\r\n$1\r\na\r\n*\r\n", 0, "ERR Protocol error: expected '$', got '*'");
    ERR("SET \"a\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("SET 'a\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("SET \"a\"b\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("PING\r\nPING\r\nSET 'a'b\r\n", 2, "ERR Protocol error: unbalanced quotes in request");
    /* a bulk of the maximum length is accepted (only the header is parsed here) */
    result_t r;
    const char max[] = "*1\r\n$536870912\r\nabc";
    parse_split(max, sizeof(max) - 1, NULL, 0, &r);
    CHECK(!r.err && r.ncmds == 0);
    result_free(&r);
}

static void test_limits(void)
{
    size_t n = 70000;
    char *s = malloc(n);
    memset(s, 'x', n);
    result_t r;
    parse_split(s, n, NULL, 0, &r);
    CHECK(r.err && strcmp(r.errtext, "ERR Protocol error: too big inline request") == 0);
    result_free(&r);
    /* the same input in 1000-byte reads */
    size_t cuts[70];
    for (int i = 0; i < 70; i++)
        cuts[i] = (size_t)(i + 1) * 1000 - 1;
    parse_split(s, n, cuts, 69, &r);
    CHECK(r.err && strcmp(r.errtext, "ERR Protocol error: too big inline request") == 0);
    result_free(&r);
    /* an inline line just under the limit is fine */
    memset(s, 'y', 60000);
    memcpy(s + 60000, "\r\n", 2);
    parse_split(s, 60002, NULL, 0, &r);
    CHECK(!r.err && r.ncmds == 1 && r.cmds[0]->argvlen[0] == 60000);
    result_free(&r);
    s[0] = '*';
    memset(s + 1, '1', n - 1);
    parse_split(s, n, NULL, 0, &r);
    CHECK(r.err && strcmp(r.errtext, "ERR Protocol error: too big mbulk count string") == 0);
    result_free(&r);
    memcpy(s, "*1\r\n$", 5);
    parse_split(s, n, NULL, 0, &r);
    CHECK(r.err && strcmp(r.errtext, "ERR Protocol error: too big bulk count string") == 0);
    result_free(&r);
    free(s);
}

static void test_big_bulk_pieces(void)
{
    /* 3 MB argument delivered in uneven pieces */
    size_t vlen = 3u << 20;
    char hdr[64];
    int h = snprintf(hdr, sizeof(hdr), "*2\r\n$4\r\nECHO\r\n$%zu\r\n", vlen);
    size_t len = (size_t)h + vlen + 2;
    char *in = malloc(len);
    memcpy(in, hdr, (size_t)h);
    for (size_t i = 0; i < vlen; i++)
        in[h + (int)i] = (char)(i * 7);
    memcpy(in + h + vlen, "\r\n", 2);
    size_t cuts[40];
    int nc = 0;
    for (size_t c = 1; c < len && nc < 40; c += 1 + (c * 13) % 200000)
        cuts[nc++] = c;
    result_t r;
    parse_split(in, len, cuts, nc, &r);
    CHECK(!r.err && r.ncmds == 1 && r.cmds[0]->argvlen[1] == vlen);
    CHECK(memcmp(r.cmds[0]->argv[1], in + h, vlen) == 0);
    result_free(&r);
    free(in);
}

/* Arguments that fit the command's own allocation and ones that do not, in one command;
 * more arguments than the first allocation holds; an error while an argument sits in the
 * allocation (ASan checks that only malloc'd arguments are freed). */
static void test_arg_storage(void)
{
    char small[40], mid[100], big[300];
    memset(small, 's', sizeof(small));
    memset(mid, 'm', sizeof(mid));
    memset(big, 'b', sizeof(big));
    char in[700];
    int n = snprintf(in, sizeof(in),
                     "*5\r\n$3\r\nSET\r\n$40\r\n%.40s\r\n$100\r\n%.100s\r\n"
                     "$300\r\n%.300s\r\n$0\r\n\r\n",
                     small, mid, big);
    result_t r;
    check_all_splits(in, (size_t)n, &r);
    CHECK(!r.err && r.ncmds == 1 && r.cmds[0]->argc == 5);
    expect_arg(r.cmds[0], 0, "SET", 3);
    expect_arg(r.cmds[0], 1, small, sizeof(small));
    expect_arg(r.cmds[0], 2, mid, sizeof(mid));
    expect_arg(r.cmds[0], 3, big, sizeof(big));
    expect_arg(r.cmds[0], 4, "", 0);
    result_free(&r);

    /* 3000 arguments: the first allocation has room for 1024 */
    size_t cap = 16 + 3000 * 16, len = 0;
    char *many = malloc(cap);
    len += (size_t)snprintf(many, cap, "*3000\r\n");
    for (int i = 0; i < 3000; i++)
        len += (size_t)snprintf(many + len, cap - len, "$%d\r\n%d\r\n",
                                i < 10     ? 1
                                : i < 100  ? 2
                                : i < 1000 ? 3
                                           : 4,
                                i);
    resp_parser_t p;
    resp_parser_init(&p);
    memset(&r, 0, sizeof(r));
    feed(&p, many, len, &r);
    CHECK(!r.err && r.ncmds == 1 && r.cmds[0]->argc == 3000);
    for (int i = 0; i < 3000; i += 7) {
        char want[8];
        int w = snprintf(want, sizeof(want), "%d", i);
        expect_arg(r.cmds[0], i, want, (size_t)w);
    }
    result_free(&r);
    resp_parser_free(&p);
    free(many);

    ERR("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n!\r\n", 0, "ERR Protocol error: expected '$', got '!'");
    ERR("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$x\r\n", 0, "ERR Protocol error: invalid bulk length");
}

/* Commands of up to four arguments reuse the blocks of freed ones (the thread keeps them):
 * a freed GET's block serves the next SET, which gets its own arguments, not the GET's;
 * a command of more arguments gets a block of its own. */
static void test_kept_blocks(void)
{
    gw_cmd_spares_release();
    result_t r;
    memset(&r, 0, sizeof(r));
    resp_parser_t p;
    resp_parser_init(&p);
    const char *get = "*2\r\n$3\r\nGET\r\n$3\r\nabc\r\n";
    feed(&p, get, strlen(get), &r);
    CHECK(!r.err && r.ncmds == 1);
    gw_cmd_t *first = r.cmds[0];
    result_free(&r);
    const char *set = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
    feed(&p, set, strlen(set), &r);
    CHECK(!r.err && r.ncmds == 1 && r.cmds[0] == first && r.cmds[0]->argc == 3);
    expect_arg(r.cmds[0], 0, "SET", 3);
    expect_arg(r.cmds[0], 1, "k", 1);
    expect_arg(r.cmds[0], 2, "value", 5);
    result_free(&r);
    const char *five = "*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n";
    feed(&p, five, strlen(five), &r);
    CHECK(!r.err && r.ncmds == 1 && r.cmds[0] != first && r.cmds[0]->argc == 5);
    expect_arg(r.cmds[0], 4, "2", 1);
    result_free(&r);
    resp_parser_free(&p);
    gw_cmd_spares_release();
}

int main(void)
{
    RUN(test_multibulk);
    RUN(test_empty_and_inline);
    RUN(test_errors);
    RUN(test_limits);
    RUN(test_big_bulk_pieces);
    RUN(test_arg_storage);
    RUN(test_kept_blocks);
    fprintf(stderr, "test_resp_parser: OK\n");
    return 0;
}
