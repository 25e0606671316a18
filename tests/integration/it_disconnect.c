/* Connections that go away while their commands are suspended in round trips: the gateway
 * runs on the local pool with a simulated round-trip delay (--local-delay-us), so every
 * command really yields. Clients close (FIN and RST) with pipelines in flight, a slow
 * reader makes the gateway buffer 100+ MB of replies and pause, another slow reader
 * disconnects mid-way; other clients are served throughout, and SIGTERM with commands in
 * flight still gives a clean exit (status 0: no sanitizer reports). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

static int port;

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        CHECK(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

static char *pipeline(const char *fmt, int n, size_t *len)
{
    size_t cap = 64 * (size_t)n + 64, off = 0;
    char *b = malloc(cap);
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(b + off, cap - off, fmt, i % 10, i);
    *len = off;
    return b;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_close_in_flight(void)
{
    size_t len;
    char *p = pipeline("SET dk%d:%d vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\r\n", 50, &len);
    for (int i = 0; i < 100; i++) {
        int fd = raw_connect();
        send_all(fd, p, len);
        if (i % 2) { /* RST instead of FIN */
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        if (i % 3 == 0) sleep_ms(1); /* sometimes let a command start first */
        close(fd);
    }
    free(p);
}

static void test_slow_readers(void)
{
    redisContext *c = it_connect(port);
    size_t vlen = 1 << 20;
    char *v = malloc(vlen);
    memset(v, 'x', vlen);
    EXPECT_STATUS(it_cmd(c, "SET big %b", v, vlen), "OK");
    free(v);

    int n = 120; /* ~120 MB of replies, over the gateway's 64 MB pause mark */
    size_t len = (size_t)n * 9;
    char *p = malloc(len);
    for (int i = 0; i < n; i++)
        memcpy(p + (size_t)i * 9, "GET big\r\n", 9);
    int fd = raw_connect();
    send_all(fd, p, len);
    sleep_ms(1500);
    EXPECT_STATUS(it_cmd(c, "PING"), "PONG");           /* others are served meanwhile */
    size_t want = (size_t)n * (vlen + 10 + 2), got = 0; /* "$1048576\r\n" + value + CRLF */
    char *buf = malloc(1 << 20);
    while (got < want) {
        ssize_t r = read(fd, buf, 1 << 20);
        CHECKF(r > 0, "slow reader: %zu of %zu bytes, then read %zd (%s)", got, want, r,
               r < 0 ? strerror(errno) : "end of stream");
        got += (size_t)r;
    }
    CHECK(got == want);
    close(fd);

    fd = raw_connect(); /* this one gives up half-way */
    send_all(fd, p, len);
    sleep_ms(500);
    CHECK(read(fd, buf, 1000) > 0);
    close(fd);
    free(buf);
    free(p);
    EXPECT_STATUS(it_cmd(c, "PING"), "PONG");
    redisFree(c);
}

static void *busy_client(void *arg)
{
    (void)arg;
    redisContext *c = it_connect(port);
    for (int i = 0; i < 200; i++)
        redisAppendCommand(c, "SET busy%d %d", i, i);
    redisReply *r;
    CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
    freeReplyObject(r);
    return c; /* left open with commands in flight; the gateway is stopped next */
}

int main(void)
{
    it_begin("disconnect", 300);
    const char *uris[] = {"local"};
    const char *extra[] = {"--local-delay-us", "300", NULL};
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 2, extra);
    port = gw.port;
    RUN(test_close_in_flight);
    RUN(test_slow_readers);
    redisContext *c = it_connect(port);
    /* the gateway notices the closed connections (by EOF or a failed write) soon */
    bool alone = false;
    for (int i = 0; i < 250 && !alone; i++) {
        redisReply *r = it_cmd(c, "INFO clients");
        CHECK(r->type == REDIS_REPLY_STRING);
        alone = strstr(r->str, "connected_clients:1\r\n") != NULL;
        freeReplyObject(r);
        if (!alone) sleep_ms(20);
    }
    CHECK(alone);
    redisFree(c);

    pthread_t th[8];
    void *ctx[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, busy_client, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], &ctx[i]);
    int st = it_proc_stop(&gw); /* SIGTERM with commands in flight */
    for (int i = 0; i < 8; i++)
        redisFree(ctx[i]);
    if (st != 0) it_proc_dump_log(&gw);
    CHECKF(st == 0, "gateway exit status %d", st);
    fprintf(stderr, "it_disconnect: OK\n");
    return 0;
}
