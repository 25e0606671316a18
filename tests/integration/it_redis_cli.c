/* The stock tools against the gateway: redis-cli (SET/GET/DEL, --scan with and without
 * --pattern, DBSIZE, INFO, a binary value through -x; the operator modes --bigkeys,
 * --memkeys, --stat and --latency) and a short redis-benchmark run. Skipped when the tools
 * are not installed. */
#include <stdint.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

static int port;

/* Run a shell command, return its stdout (malloc'd) and exit status. */
static char *run(const char *fmt, int *status, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, status);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    FILE *f = popen(cmd, "r");
    CHECK(f);
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    size_t r;
    while ((r = fread(out + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 2) out = realloc(out, cap *= 2);
    }
    out[n] = 0;
    int st = pclose(f);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static void expect_output(const char *cmd, const char *want)
{
    int st;
    char *out = run("redis-cli -h 127.0.0.1 -p %d %s", &st, port, cmd);
    CHECKF(st == 0 && strcmp(out, want) == 0, "redis-cli %s: status %d, output '%s', want '%s'",
           cmd, st, out, want);
    free(out);
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

int main(void)
{
    it_begin("redis_cli", 300);
    int st;
    char *v = run("redis-cli --version 2>/dev/null", &st);
    if (st != 0) {
        fprintf(stderr, "SKIP: redis-cli not installed\n");
        free(v);
        return IT_SKIP;
    }
    free(v);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 2, NULL);
    port = gw.port;

    expect_output("FLUSHALL", "OK\n");
    expect_output("SET k v", "OK\n");
    expect_output("GET k", "v\n");
    expect_output("SET k2 'hello world'", "OK\n");
    expect_output("GET k2", "hello world\n");
    expect_output("MSET a 1 b 2", "OK\n");
    expect_output("DBSIZE", "4\n");
    expect_output("EXISTS k k2 nope", "2\n");
    expect_output("DEL k2", "1\n");
    expect_output("PING", "PONG\n");
    expect_output("GET nope", "\n");
    expect_output("FOO", "ERR unknown command 'FOO', with args beginning with: \n\n");

    /* -x: the value from stdin, binary included */
    int s2;
    char *out = run("printf 'a\\000b' | redis-cli -h 127.0.0.1 -p %d -x SET bin", &s2, port);
    CHECK(s2 == 0 && strcmp(out, "OK\n") == 0);
    free(out);
    expect_output("STRLEN bin", "3\n");

    for (int i = 0; i < 300; i++) {
        char cmd[64];
        snprintf(cmd, sizeof(cmd), "SET scan:%d x >/dev/null", i);
        out = run("redis-cli -h 127.0.0.1 -p %d %s", &s2, port, cmd);
        free(out);
        if (i == 0) CHECK(s2 == 0);
    }
    out = run("redis-cli -h 127.0.0.1 -p %d --scan | sort -u", &s2, port);
    CHECKF(s2 == 0 && count_lines(out) == 304, "--scan gave %zu lines", count_lines(out));
    free(out);
    out = run("redis-cli -h 127.0.0.1 -p %d --scan --pattern 'scan:1*' | sort -u", &s2, port);
    CHECKF(s2 == 0 && count_lines(out) == 111, "--scan --pattern gave %zu lines", count_lines(out));
    free(out);
    out = run("redis-cli -h 127.0.0.1 -p %d INFO server", &s2, port);
    CHECK(s2 == 0 && strstr(out, "redis_version:7.0.0") && strstr(out, "redis_mode:standalone"));
    free(out);
    out = run("redis-cli -h 127.0.0.1 -p %d KEYS 'scan:29?' | wc -l", &s2, port);
    CHECK(s2 == 0 && atoi(out) == 10);
    free(out);

    /* The operator modes: --bigkeys (TYPE, STRLEN), --memkeys (MEMORY USAGE), --stat and
     * --latency (they loop: stopped by timeout, their lines unbuffered by stdbuf). */
    expect_output("SET big:one 0123456789012345678901234567890123456789", "OK\n");
    out = run("redis-cli -h 127.0.0.1 -p %d --bigkeys 2>&1", &s2, port);
    CHECKF(s2 == 0 && strstr(out, "Biggest string found '\"big:one\"' has 40 bytes") &&
               strstr(out, "305 strings with"),
           "--bigkeys: %s", out);
    free(out);
    out = run("redis-cli -h 127.0.0.1 -p %d --memkeys 2>&1", &s2, port);
    CHECKF(s2 == 0 && strstr(out, "Biggest string found '\"big:one\"' has ") &&
               strstr(out, "305 strings with") && !strstr(out, "ERR"),
           "--memkeys: %s", out);
    free(out);
    out = run("timeout 3 stdbuf -oL redis-cli -h 127.0.0.1 -p %d --stat -i 0.5 2>&1", &s2, port);
    CHECKF(strstr(out, "------- data ------") && strstr(out, "\n305 "), "--stat: %s", out);
    free(out);
    out = run("timeout 3 stdbuf -oL redis-cli -h 127.0.0.1 -p %d --latency-history -i 1 2>&1", &s2,
              port);
    /* Without a terminal each line is "min max avg samples" of PINGs that were answered:
     * a refused connection or an error reply prints no such line. */
    long mn, mx, samples;
    double avg;
    CHECKF(count_lines(out) >= 1 && !strstr(out, "ERR") &&
               sscanf(out, "%ld %ld %lf %ld", &mn, &mx, &avg, &samples) == 4 && samples > 0 &&
               mn <= mx,
           "--latency-history: %s", out);
    free(out);

    out = run("redis-benchmark --version 2>/dev/null", &s2);
    bool have_bench = s2 == 0;
    free(out);
    if (have_bench) {
        out = run("redis-benchmark -h 127.0.0.1 -p %d -n 3000 -c 20 -P 4 -t set,get,ping,mset "
                  "-q 2>&1",
                  &s2, port);
        fprintf(stderr, "%s", out);
        CHECK(s2 == 0 && strstr(out, "SET: ") && strstr(out, "GET: ") &&
              strstr(out, "MSET (10 keys): "));
        free(out);
    } else {
        fprintf(stderr, "redis-benchmark not installed: skipped\n");
    }
    int gst = it_proc_stop(&gw);
    if (gst != 0) it_proc_dump_log(&gw);
    CHECKF(gst == 0, "gateway exit status %d", gst);
    if (pool.shared) it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_redis_cli: OK\n");
    return 0;
}
