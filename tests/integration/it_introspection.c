/* What operators and Redis's own test suite ask of a gateway (issue 13), on a gateway with
 * two threads so that MONITOR lines and CLIENT KILL cross threads: MONITOR's line format
 * and order (EXEC's commands before "exec", AUTH redacted, admin commands left out),
 * CLIENT REPLY OFF/ON/SKIP, CLIENT KILL counts, LATENCY HISTOGRAM and INFO latencystats
 * with subcommands ("client|id"), MEMORY USAGE, COMMAND LIST/GETKEYS, CONFIG SET's
 * duplicate and same-value rules, FUNCTION as on a server without libraries, SETBIT and
 * GETBIT, and RANDOMKEY returning every key of a pool with many empty leaves. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

static int port;
static redisContext *c;

/* The next reply on a connection that sent nothing (MONITOR's stream). */
static redisReply *next_reply(redisContext *m)
{
    redisReply *r = NULL;
    CHECK(redisGetReply(m, (void **)&r) == REDIS_OK && r);
    return r;
}

static void expect_line(redisContext *m, const char *want)
{
    redisReply *r = next_reply(m);
    CHECKF(r->type == REDIS_REPLY_STATUS && strcasestr(r->str, want) &&
               strstr(r->str, " [0 127.0.0.1:"),
           "monitor line %s, want %s", r->str, want);
    freeReplyObject(r);
}

static void test_monitor(void)
{
    /* Several connections: the gateway spreads them over its two threads. */
    redisContext *m = it_connect(port);
    EXPECT_STATUS(it_cmd(m, "MONITOR"), "OK");
    redisContext *others[3];
    for (int i = 0; i < 3; i++) {
        others[i] = it_connect(port);
        EXPECT_STATUS(it_cmd(others[i], "SET mon:%d v\r\n%d", i, i), "OK");
        char want[64];
        snprintf(want, sizeof(want), "\"set\" \"mon:%d\" \"v\\r\\n%d\"", i, i);
        expect_line(m, want);
    }
    EXPECT_STATUS(it_cmd(c, "MULTI"), "OK");
    EXPECT_STATUS(it_cmd(c, "SET mon:x 1"), "QUEUED");
    freeReplyObject(it_cmd(c, "EXEC"));
    expect_line(m, "\"multi\"");
    expect_line(m, "\"set\" \"mon:x\" \"1\"");
    expect_line(m, "\"exec\"");
    freeReplyObject(it_cmd(others[0], "AUTH secret"));
    expect_line(m, "\"auth\" \"(redacted)\"");
    freeReplyObject(it_cmd(others[1], "CONFIG GET port")); /* admin: not fed */
    freeReplyObject(it_cmd(others[1], "GET mon:1"));
    expect_line(m, "\"get\" \"mon:1\"");
    /* RESET ends monitoring: the next line it gets is RESET's own reply. */
    EXPECT_STATUS(it_cmd(m, "RESET"), "RESET");
    freeReplyObject(it_cmd(others[2], "GET mon:2"));
    EXPECT_STATUS(it_cmd(m, "PING"), "PONG");
    for (int i = 0; i < 3; i++)
        redisFree(others[i]);
    redisFree(m);
}

static void test_client_reply(void)
{
    redisContext *d = it_connect(port);
    CHECK(redisAppendCommand(d, "CLIENT REPLY OFF") == REDIS_OK);
    CHECK(redisAppendCommand(d, "SET cr:1 a") == REDIS_OK);
    CHECK(redisAppendCommand(d, "GET cr:1") == REDIS_OK);
    CHECK(redisAppendCommand(d, "CLIENT REPLY ON") == REDIS_OK);
    CHECK(redisAppendCommand(d, "CLIENT REPLY SKIP") == REDIS_OK);
    CHECK(redisAppendCommand(d, "GET cr:1") == REDIS_OK);
    CHECK(redisAppendCommand(d, "ECHO seen") == REDIS_OK);
    EXPECT_STATUS(next_reply(d), "OK"); /* CLIENT REPLY ON */
    EXPECT_BULKS(next_reply(d), "seen");
    EXPECT_BULKS(it_cmd(c, "GET cr:1"), "a"); /* the silenced SET ran */
    redisFree(d);
}

static void test_client_kill(void)
{
    redisContext *v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = it_connect(port);
        EXPECT_STATUS(it_cmd(v[i], "PING"), "PONG"); /* accepted by its thread */
    }
    double before = it_info_field(c, "clients", "connected_clients");
    EXPECT_INT(it_cmd(c, "CLIENT KILL SKIPME yes"), (long long)before - 1);
    /* Gone from INFO at once, on both threads (Redis frees killed clients before replying). */
    CHECK(it_info_field(c, "clients", "connected_clients") == 1);
    EXPECT_ERR(it_cmd(c, "CLIENT KILL"), "ERR wrong number of arguments for 'client|kill' command");
    EXPECT_ERR(it_cmd(c, "CLIENT KILL TYPE bogus"), "ERR Unknown client type 'bogus'");
    EXPECT_ERR(it_cmd(c, "CLIENT KILL USER nobody"), "ERR No such user 'nobody'");
    EXPECT_INT(it_cmd(c, "CLIENT KILL TYPE pubsub"), 0);
    for (int i = 0; i < 4; i++)
        redisFree(v[i]);
    redisReply *r = it_cmd(c, "CLIENT INFO");
    CHECKF(strstr(r->str, " qbuf=26 ") && strstr(r->str, " cmd=client|info "), "%s", r->str);
    freeReplyObject(r);
}

/* The ID of the first client line in a CLIENT LIST reply, and how many lines it has. */
static long long first_id(redisReply *r, int *lines)
{
    CHECKF(r->type == REDIS_REPLY_STRING, "type %d", r->type);
    *lines = 0;
    for (const char *p = r->str; (p = strchr(p, '\n')); p++)
        (*lines)++;
    return r->len ? strtoll(r->str + 3, NULL, 10) : 0;
}

/* CLIENT LIST's filters, with other clients connected (the Redis suite's "CLIENT LIST with
 * IDs" saw another client's line first when the filter was ignored). */
static void test_client_list(void)
{
    redisContext *v[3];
    long long ids[3];
    for (int i = 0; i < 3; i++) {
        v[i] = it_connect(port);
        redisReply *r = it_cmd(v[i], "CLIENT ID");
        ids[i] = r->integer;
        freeReplyObject(r);
    }
    int lines;
    redisReply *r = it_cmd(v[0], "CLIENT LIST ID %lld", ids[0]);
    CHECKF(first_id(r, &lines) == ids[0] && lines == 1 && strstr(r->str, " cmd=client|list "), "%s",
           r->str);
    freeReplyObject(r);
    r = it_cmd(c, "CLIENT LIST ID %lld 999999 %lld", ids[2], ids[1]); /* the order asked */
    CHECKF(first_id(r, &lines) == ids[2] && lines == 2, "%s", r->str);
    char want[32];
    snprintf(want, sizeof(want), "\nid=%lld ", ids[1]);
    CHECKF(strstr(r->str, want), "%s", r->str);
    freeReplyObject(r);
    r = it_cmd(c, "CLIENT LIST"); /* every client, ascending IDs */
    lines = 0;
    long long last = 0;
    for (const char *p = r->str; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        long long id = strtoll(p + 3, NULL, 10);
        CHECKF(id > last, "%s", r->str);
        last = id;
        lines++;
    }
    CHECKF(lines >= 4, "%s", r->str);
    freeReplyObject(r);
    r = it_cmd(c, "CLIENT LIST TYPE normal");
    CHECKF(first_id(r, &lines) > 0 && lines >= 4, "%s", r->str);
    freeReplyObject(r);
    r = it_cmd(c, "CLIENT LIST TYPE pubsub");
    CHECKF(r->len == 0, "%s", r->str);
    freeReplyObject(r);
    EXPECT_ERR(it_cmd(c, "CLIENT LIST TYPE bogus"), "ERR Unknown client type 'bogus'");
    EXPECT_ERR(it_cmd(c, "CLIENT LIST ID 12x"), "ERR Invalid client ID");
    EXPECT_ERR(it_cmd(c, "CLIENT LIST ID"), "ERR syntax error");
    EXPECT_ERR(it_cmd(c, "CLIENT LIST extra"), "ERR syntax error");
    for (int i = 0; i < 3; i++)
        redisFree(v[i]);
}

static void test_latency_histogram(void)
{
    EXPECT_STATUS(it_cmd(c, "CONFIG RESETSTAT"), "OK");
    EXPECT_STATUS(it_cmd(c, "SET lh:a b"), "OK");
    EXPECT_STATUS(it_cmd(c, "SET lh:c d"), "OK");
    freeReplyObject(it_cmd(c, "CLIENT ID"));
    redisReply *r = it_cmd(c, "LATENCY HISTOGRAM set client nosuch");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 4);
    CHECK(!strcmp(r->element[0]->str, "set") || !strcmp(r->element[2]->str, "set"));
    for (int i = 0; i < 4; i += 2) {
        redisReply *h = r->element[i + 1];
        CHECK(h->elements == 4 && !strcmp(h->element[0]->str, "calls"));
        long long calls = !strcmp(r->element[i]->str, "set") ? 2 : 1;
        CHECK(h->element[1]->integer == calls);
        redisReply *cdf = h->element[3]; /* bucket => cumulative count, the last one = calls */
        CHECK(cdf->elements >= 2 && cdf->element[cdf->elements - 1]->integer == calls);
    }
    CHECK(!strcmp(r->element[0]->str, "client|id") || !strcmp(r->element[2]->str, "client|id"));
    freeReplyObject(r);
    r = it_cmd(c, "INFO latencystats");
    CHECKF(strstr(r->str, "latency_percentiles_usec_set:p50=") &&
               strstr(r->str, "latency_percentiles_usec_client|id:p50="),
           "%s", r->str);
    freeReplyObject(r);
    r = it_cmd(c, "INFO commandstats");
    CHECKF(strstr(r->str, "cmdstat_client|id:calls=1,"), "%s", r->str);
    freeReplyObject(r);
    EXPECT_ERR(it_cmd(c, "LATENCY HELP x"),
               "ERR wrong number of arguments for 'latency|help' command");
}

static void test_memory_usage(void)
{
    EXPECT_STATUS(it_cmd(c, "SET mu:small x"), "OK");
    char big[10000];
    memset(big, 'v', sizeof(big));
    EXPECT_STATUS(it_cmd(c, "SET mu:big %b", big, sizeof(big)), "OK");
    redisReply *s = it_cmd(c, "MEMORY USAGE mu:small");
    redisReply *b = it_cmd(c, "MEMORY USAGE mu:big SAMPLES 5");
    CHECK(s->type == REDIS_REPLY_INTEGER && s->integer >= 32 && s->integer < 1024);
    CHECK(b->type == REDIS_REPLY_INTEGER && b->integer >= 10000 && b->integer < 12000);
    freeReplyObject(s);
    freeReplyObject(b);
    EXPECT_NIL(it_cmd(c, "MEMORY USAGE mu:none"));
    EXPECT_ERR(it_cmd(c, "MEMORY USAGE mu:big SAMPLES"), "ERR syntax error");
}

static void test_command_list(void)
{
    redisReply *r = it_cmd(c, "COMMAND LIST FILTERBY PATTERN config|*re*");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2); /* resetstat, rewrite */
    freeReplyObject(r);
    r = it_cmd(c, "COMMAND LIST");
    bool sub = false;
    for (size_t i = 0; i < r->elements; i++) {
        const char *name = r->element[i]->str;
        sub |= !strcmp(name, "client|list");
        if (strchr(name, '|')) continue;
        /* Every listed command is found by name (the table's lookup is a binary search). */
        redisReply *info = it_cmd(c, "COMMAND INFO %s", name);
        CHECKF(info->elements == 1 && info->element[0]->type == REDIS_REPLY_ARRAY,
               "COMMAND INFO %s", name);
        freeReplyObject(info);
    }
    CHECK(sub);
    freeReplyObject(r);
    EXPECT_ERR(it_cmd(c, "COMMAND LIST bad"), "ERR syntax error");
    r = it_cmd(c, "COMMAND LIST FILTERBY ACLCAT nosuch");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 0);
    freeReplyObject(r);
    r = it_cmd(c, "COMMAND GETKEYS MSET a 1 b 2");
    CHECK(r->elements == 2 && !strcmp(r->element[1]->str, "b"));
    freeReplyObject(r);
    r = it_cmd(c, "COMMAND GETKEYS MEMORY USAGE k");
    CHECK(r->elements == 1 && !strcmp(r->element[0]->str, "k"));
    freeReplyObject(r);
    EXPECT_ERR(it_cmd(c, "COMMAND GETKEYS PING"), "ERR The command has no key arguments");
    EXPECT_ERR(it_cmd(c, "COMMAND GETKEYS NOSUCH x"), "ERR Invalid command specified");
}

static void test_config_set(void)
{
    EXPECT_ERR(it_cmd(c, "CONFIG SET slowlog-max-len 10 slowlog-max-len 11"),
               "ERR CONFIG SET failed (possibly related to argument 'slowlog-max-len') - "
               "duplicate parameter");
    /* What CONFIG GET answered can be set back, also where dmkv cannot change it. */
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "CONFIG SET port %d appendfsync everysec", port);
    EXPECT_STATUS(it_cmd(c, cmd), "OK");
    redisReply *r = it_cmd(c, "CONFIG SET port 1");
    CHECKF(r->type == REDIS_REPLY_ERROR && strstr(r->str, "does not support changing it"), "%s",
           r->str);
    freeReplyObject(r);
}

static void test_function_and_bits(void)
{
    EXPECT_STATUS(it_cmd(c, "FUNCTION FLUSH"), "OK");
    redisReply *r = it_cmd(c, "FUNCTION LIST");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 0);
    freeReplyObject(r);
    EXPECT_ERR(it_cmd(c, "FUNCTION DELETE lib"), "ERR Library not found");
    EXPECT_INT(it_cmd(c, "SETBIT bits 9 1"), 0);
    EXPECT_INT(it_cmd(c, "SETBIT bits 9 1"), 1);
    EXPECT_BULK(it_cmd(c, "GET bits"), "\x00\x40", 2);
    EXPECT_INT(it_cmd(c, "GETBIT bits 9"), 1);
    EXPECT_INT(it_cmd(c, "GETBIT bits 100000"), 0);
    EXPECT_ERR(it_cmd(c, "SETBIT bits 4294967296000 1"),
               "ERR bit offset is not an integer or out of range");
    EXPECT_ERR(it_cmd(c, "SETBIT bits 1 2"), "ERR bit is not an integer or out of range");
}

/* Not under TSan: one client's 10,200 inserts, nothing across threads, 100 s of its run. */
#if !defined(__SANITIZE_THREAD__)
/* After FLUSHALL most leaves are empty (leaves never merge). With a few leaves between
 * "bar" and "foo" and hundreds after "foo", taking the first key after a random leaf
 * returns "bar" ~98% of the time; RANDOMKEY must return both about evenly. */
static void test_randomkey_spread(void)
{
    for (int i = 0; i < 10200; i++)
        CHECK(redisAppendCommand(c, i < 200 ? "SET c:%05d x" : "SET z:%05d x", i) == REDIS_OK);
    it_pipeline_ok(c, 10200);
    EXPECT_STATUS(it_cmd(c, "FLUSHALL"), "OK");
    EXPECT_STATUS(it_cmd(c, "SET bar y"), "OK");
    EXPECT_STATUS(it_cmd(c, "SET foo x"), "OK");
    int seen_foo = 0, seen_bar = 0;
    for (int i = 0; i < 200; i++) {
        redisReply *r = it_cmd(c, "RANDOMKEY");
        seen_foo += !strcmp(r->str, "foo");
        seen_bar += !strcmp(r->str, "bar");
        freeReplyObject(r);
    }
    CHECKF(seen_foo >= 40 && seen_bar >= 40 && seen_foo + seen_bar == 200, "foo %d bar %d",
           seen_foo, seen_bar);
}
#endif

/* SHUTDOWN refused inside MULTI (Redis 7's no_multi), ABORT with nothing to abort; then the
 * gateway stops cleanly and the caller's connection closes without a reply. */
static void test_shutdown(void)
{
    EXPECT_STATUS(it_cmd(c, "MULTI"), "OK");
    EXPECT_ERR(it_cmd(c, "SHUTDOWN"), "ERR Command not allowed inside a transaction");
    EXPECT_ERR(it_cmd(c, "EXEC"), "EXECABORT Transaction discarded because of previous errors.");
    EXPECT_ERR(it_cmd(c, "SHUTDOWN ABORT"), "ERR No shutdown in progress.");
    EXPECT_ERR(it_cmd(c, "SHUTDOWN NOSAVE SAVE"), "ERR syntax error");
    redisReply *r = redisCommand(c, "SHUTDOWN NOSAVE");
    CHECK(r == NULL); /* closed, no reply */
}

int main(void)
{
    it_begin("introspection", 300);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 2, NULL);
    port = gw.port;
    c = it_connect(port);
    EXPECT_STATUS(it_cmd(c, "FLUSHALL"), "OK");
    RUN(test_monitor);
    RUN(test_client_reply);
    RUN(test_latency_histogram);
    RUN(test_memory_usage);
    RUN(test_command_list);
    RUN(test_config_set);
    RUN(test_function_and_bits);
#if !defined(__SANITIZE_THREAD__)
    RUN(test_randomkey_spread);
#endif
    RUN(test_client_kill);
    RUN(test_client_list);
    RUN(test_shutdown);
    redisFree(c);
    int st = it_proc_wait(&gw, 20000); /* SHUTDOWN stopped it */
    if (st != 0) it_proc_dump_log(&gw);
    CHECKF(st == 0, "gateway exit status %d", st);
    if (pool.shared) it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_introspection: OK\n");
    return 0;
}
