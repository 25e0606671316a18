/* RESP3, transactions, expiry and AUTH over raw sockets (hiredis 0.14 cannot parse RESP3):
 * byte-exact replies for HELLO 3, RESP3 nulls and maps, MULTI/EXEC/DISCARD/WATCH error
 * paths, requirepass, and active expiry removing keys (INFO expired_keys, DBSIZE). */
#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    return fd;
}

/* Send an inline command and check that exactly `want` comes back. */
static void expect_raw(int fd, const char *line, const char *want)
{
    char buf[4096];
    size_t n = strlen(want), have = 0;
    CHECK(write(fd, line, strlen(line)) == (ssize_t)strlen(line));
    while (have < n) {
        ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);
        CHECKF(r > 0, "%s: connection closed after '%.*s'", line, (int)have, buf);
        have += (size_t)r;
    }
    buf[have] = 0;
    CHECKF(have == n && memcmp(buf, want, n) == 0, "%s: got '%s', want '%s'", line, buf, want);
}

/* Send a HELLO and check its reply's start (ids vary); reads through the trailing
 * "modules" entry. */
static void expect_hello(int fd, const char *line, const char *prefix)
{
    static const char tail[] = "$7\r\nmodules\r\n*0\r\n";
    char buf[4096];
    size_t have = 0, tl = strlen(tail);
    CHECK(write(fd, line, strlen(line)) == (ssize_t)strlen(line));
    while (have < tl || memcmp(buf + have - tl, tail, tl) != 0) {
        ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);
        CHECKF(r > 0, "%s: connection closed", line);
        have += (size_t)r;
        buf[have] = 0;
        if (buf[0] == '-') break;
    }
    CHECKF(strncmp(buf, prefix, strlen(prefix)) == 0, "%s: got '%s', want '%s...'", line, buf,
           prefix);
}

int main(void)
{
    it_begin("resp3_multi", 300);
    it_pool_t pool;
    it_pool_start(&pool);
    it_proc_t gw;
    const char *uris[1] = {pool.uri};
    it_gateway_start(&gw, uris, 1, 1, NULL);
    int fd = raw_connect(gw.port);
    expect_raw(fd, "HELLO 4\r\n", "-NOPROTO unsupported protocol version\r\n");
    expect_hello(fd, "HELLO 3\r\n",
                 "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n"
                 "$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:");
    expect_raw(fd, "GET nokey\r\n", "_\r\n");
    expect_raw(fd, "MGET nokey\r\n", "*1\r\n_\r\n");
    expect_raw(fd, "CONFIG GET maxmemory\r\n", "%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n");
    expect_raw(fd, "INCRBYFLOAT f 1.5\r\n", "$3\r\n1.5\r\n");
    expect_raw(fd, "INCRBYFLOAT f 0.1\r\n", "$3\r\n1.6\r\n");
    expect_raw(fd, "SET n 9223372036854775807\r\n", "+OK\r\n");
    expect_raw(fd, "INCR n\r\n", "-ERR increment or decrement would overflow\r\n");
    expect_raw(fd, "INCR f\r\n", "-ERR value is not an integer or out of range\r\n");
    expect_raw(fd, "EXEC\r\n", "-ERR EXEC without MULTI\r\n");
    expect_raw(fd, "MULTI\r\n", "+OK\r\n");
    expect_raw(fd, "MULTI\r\n", "-ERR MULTI calls can not be nested\r\n");
    expect_raw(fd, "WATCH x\r\n", "-ERR WATCH inside MULTI is not allowed\r\n");
    expect_raw(fd, "INCR c\r\n", "+QUEUED\r\n");
    expect_raw(fd, "APPEND c x\r\n", "+QUEUED\r\n");
    expect_raw(fd, "EXEC\r\n", "*2\r\n:1\r\n:2\r\n");
    expect_raw(fd, "MULTI\r\n", "+OK\r\n");
    expect_raw(fd, "GET\r\n", "-ERR wrong number of arguments for 'get' command\r\n");
    expect_raw(fd, "EXEC\r\n", "-EXECABORT Transaction discarded because of previous errors.\r\n");
    expect_raw(fd, "WATCH c\r\n", "+OK\r\n");
    redisContext *other = it_connect(gw.port);
    EXPECT_STATUS(it_cmd(other, "SET c changed"), "OK");
    expect_raw(fd, "MULTI\r\n", "+OK\r\n");
    expect_raw(fd, "SET c mine\r\n", "+QUEUED\r\n");
    expect_raw(fd, "EXEC\r\n", "_\r\n");
    expect_hello(fd, "HELLO 2\r\n",
                 "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n"
                 "$5\r\n7.0.0\r\n$5\r\nproto\r\n:2\r\n");
    expect_raw(fd, "WATCH c\r\n", "+OK\r\n");
    EXPECT_INT(it_cmd(other, "APPEND c !"), 8);
    expect_raw(fd, "MULTI\r\n", "+OK\r\n");
    expect_raw(fd, "EXEC\r\n", "*-1\r\n");
    expect_raw(fd, "DISCARD\r\n", "-ERR DISCARD without MULTI\r\n");
    /* Expiry: GETEX / PERSIST / EXPIRE GT, and active expiry removing keys. */
    expect_raw(fd, "SET t v EX 100\r\n", "+OK\r\n");
    expect_raw(fd, "EXPIRE t 50 GT\r\n", ":0\r\n");
    expect_raw(fd, "EXPIRE t 500 GT\r\n", ":1\r\n");
    expect_raw(fd, "TTL t\r\n", ":500\r\n");
    expect_raw(fd, "GETEX t PERSIST\r\n", "$1\r\nv\r\n");
    expect_raw(fd, "TTL t\r\n", ":-1\r\n");
    expect_raw(fd, "FLUSHALL\r\n", "+OK\r\n");
    for (int i = 0; i < 200; i++)
        EXPECT_STATUS(it_cmd(other, "SET exp:%d v PX 30", i), "OK");
    EXPECT_STATUS(it_cmd(other, "SET keep v"), "OK");
    long long dbsize = -1;
    for (int tries = 0; tries < 100 && dbsize != 1; tries++) {
        usleep(100000);
        redisReply *r = it_cmd(other, "DBSIZE");
        dbsize = r->integer;
        freeReplyObject(r);
    }
    CHECKF(dbsize == 1, "active expiry left %lld keys", dbsize);
    redisReply *r = it_cmd(other, "INFO stats");
    CHECK(r->type == REDIS_REPLY_STRING && strstr(r->str, "expired_keys:200\r\n"));
    freeReplyObject(r);
    /* requirepass */
    EXPECT_STATUS(it_cmd(other, "CONFIG SET requirepass s3cret"), "OK");
    expect_raw(fd, "RESET\r\n", "+RESET\r\n");
    expect_raw(fd, "GET keep\r\n", "-NOAUTH Authentication required.\r\n");
    expect_raw(fd, "AUTH wrong\r\n",
               "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    expect_hello(fd, "HELLO 3 AUTH default s3cret\r\n", "%7\r\n");
    close(fd);
    fd = raw_connect(gw.port);
    expect_raw(fd, "AUTH s3cret\r\n", "+OK\r\n");
    expect_raw(fd, "GET keep\r\n", "$1\r\nv\r\n");
    EXPECT_STATUS(it_cmd(other, "CONFIG SET requirepass %s", ""), "OK");
    close(fd);
    redisFree(other);
    CHECK(it_proc_stop(&gw) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_resp3_multi: passed\n");
    return 0;
}
