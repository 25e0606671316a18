/* Reclaiming a dead gateway's chunks (issue 5). Gateway A writes 20,000 keys, first with
 * tiny values (so the RACE subtables and CHIME leaves all grow in its first chunk), then
 * rewrites them with 3 KB values (about four more chunks holding nothing but KV blocks),
 * deletes all but the last 2,000 and is SIGKILLed. Gateway B writes and deletes a few keys
 * and stops; two more leave a chunk whose only live objects are CHIME key records (long
 * keys). With no gateway running, dmkv-pool-reclaim (--dry-run first, which must change
 * nothing) pushes the ranges no index reaches onto the memory node's free list. A new
 * gateway then finds every kept key with its value (GET, SCAN, DBSIZE) and writes new keys
 * into the reclaimed chunks: the node's alloc_ptr must not grow while free ranges remain,
 * and every kept key still reads back afterwards. */
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define NKEYS 20000
#define KEEP_FROM 18000 /* keys [KEEP_FROM, NKEYS) survive the deletes */
#define VLEN 3000
#define PIPE 500 /* commands in flight per pipelined round */
#define NLONG 20 /* long keys: their CHIME key records are all that keeps a chunk live */
#define LONG_PREFIX "a-key-too-long-to-live-inline-in-a-leaf:"

static char tool[1024];

/* Value of key i in generation gen: recognisable bytes, VLEN long (gen 0: tiny). */
static size_t value_of(int i, int gen, char *buf)
{
    if (gen == 0) return (size_t)snprintf(buf, 32, "t%d", i);
    memset(buf, 'a' + i % 26, VLEN);
    snprintf(buf, 32, "v%d-%d:", gen, i);
    return VLEN;
}

/* Pipelined "<verb> <prefix><i> [value]" for i in [lo, hi); every reply checked. */
static void pipe_cmds(redisContext *c, const char *verb, const char *prefix, int lo, int hi,
                      int gen)
{
    static char val[VLEN + 32];
    for (int start = lo; start < hi; start += PIPE) {
        int end = start + PIPE < hi ? start + PIPE : hi;
        for (int i = start; i < end; i++) {
            if (strcmp(verb, "SET") == 0) {
                size_t n = value_of(i, gen, val);
                redisAppendCommand(c, "SET %s%06d %b", prefix, i, val, n);
            } else {
                redisAppendCommand(c, "%s %s%06d", verb, prefix, i);
            }
        }
        for (int i = start; i < end; i++) {
            redisReply *r = NULL;
            CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
            if (strcmp(verb, "SET") == 0)
                EXPECT_STATUS(r, "OK");
            else
                EXPECT_INT(r, 1);
        }
    }
}

/* Every key [lo, hi) of prefix holds its generation-gen value. */
static void check_values(redisContext *c, const char *prefix, int lo, int hi, int gen)
{
    static char want[VLEN + 32];
    for (int start = lo; start < hi; start += PIPE) {
        int end = start + PIPE < hi ? start + PIPE : hi;
        for (int i = start; i < end; i++)
            redisAppendCommand(c, "GET %s%06d", prefix, i);
        for (int i = start; i < end; i++) {
            redisReply *r = NULL;
            CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
            size_t n = value_of(i, gen, want);
            EXPECT_BULK(r, want, n);
        }
    }
}

/* SCAN returns exactly the keys key:[lo, hi) and the NLONG long keys, each once. */
static void check_scan(redisContext *c, int lo, int hi)
{
    static unsigned char seen[NKEYS], seen_long[NLONG];
    memset(seen, 0, sizeof(seen));
    memset(seen_long, 0, sizeof(seen_long));
    char cursor[64] = "0";
    long n = 0;
    do {
        redisReply *r = it_cmd(c, "SCAN %s COUNT 500", cursor);
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t k = 0; k < r->element[1]->elements; k++) {
            const char *key = r->element[1]->element[k]->str;
            int i = -1;
            unsigned char *flag = NULL;
            if (sscanf(key, "key:%d", &i) == 1 && i >= lo && i < hi) flag = &seen[i];
            if (sscanf(key, LONG_PREFIX "%d", &i) == 1 && i >= 0 && i < NLONG) flag = &seen_long[i];
            CHECKF(flag, "SCAN returned %s", key);
            CHECKF(!*flag, "SCAN returned %s twice", key);
            *flag = 1;
            n++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    CHECKF(n == hi - lo + NLONG, "SCAN returned %ld keys, want %d", n, hi - lo + NLONG);
}

/* SCAN MATCH over the long keys returns each of them once (their key records intact). */
static void check_long_scan(redisContext *c)
{
    unsigned char seen[NLONG] = {0};
    char cursor[64] = "0";
    int n = 0;
    do {
        redisReply *r = it_cmd(c, "SCAN %s MATCH %s* COUNT 500", cursor, LONG_PREFIX);
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t k = 0; k < r->element[1]->elements; k++) {
            int i = -1;
            const char *key = r->element[1]->element[k]->str;
            CHECKF(sscanf(key, LONG_PREFIX "%d", &i) == 1 && i >= 0 && i < NLONG && !seen[i],
                   "SCAN MATCH returned %s", key);
            seen[i] = 1;
            n++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    CHECKF(n == NLONG, "SCAN MATCH returned %d long keys", n);
}

/* Run the reclaim tool on uri; returns the value of "<field> N" in its output (the whole
 * output goes to stderr). Aborts when the tool fails. */
typedef struct tool_out {
    long long alloc_ptr, ranges, free_ranges;
} tool_out_t;

static tool_out_t run_tool(const char *uri, int dry)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s --list %s %s 2>&1", tool, dry ? "--dry-run" : "", uri);
    FILE *f = popen(cmd, "r");
    CHECK(f);
    tool_out_t o = {-1, -1, -1};
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        fputs(line, stderr);
        long long v;
        if (sscanf(line, "node0 alloc_ptr %lld", &v) == 1) o.alloc_ptr = v;
        if (sscanf(line, dry ? "reclaimable_ranges %lld" : "reclaimed_ranges %lld", &v) == 1)
            o.ranges = v;
        if (sscanf(line, "node0_free_ranges %lld", &v) == 1) o.free_ranges = v;
    }
    int st = pclose(f);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed (status %d)", cmd, st);
    CHECK(o.alloc_ptr > 0 && o.ranges >= 0 && o.free_ranges >= 0);
    return o;
}

/* Gateway A: the keys, their big values, the deletes; then SIGKILL. */
static void dead_gateway(const char *uri)
{
    const char *uris[1] = {uri};
    it_proc_t a;
    it_gateway_start(&a, uris, 1, 1, NULL);
    redisContext *c = it_connect(a.port);
    pipe_cmds(c, "SET", "key:", 0, NKEYS, 0);
    pipe_cmds(c, "SET", "key:", 0, NKEYS, 1);
    pipe_cmds(c, "DEL", "key:", 0, KEEP_FROM, 0);
    redisFree(c);
    /* Verbs a command posts without waiting (the key counter's FAA, unlocks) leave with the
     * loop turn's message, which may follow the reply (transport/tcp.c): let them go out,
     * so DBSIZE is exact below (a kill in between is issue 12's counter drift). */
    usleep(200000);
    kill(a.pid, SIGKILL);
    waitpid(a.pid, NULL, 0);
    a.pid = 0;
}

/* Gateway B: a chunk of its own with only dead blocks in it; stopped cleanly. */
static void short_gateway(const char *uri)
{
    const char *uris[1] = {uri};
    it_proc_t b;
    it_gateway_start(&b, uris, 1, 1, NULL);
    redisContext *c = it_connect(b.port);
    pipe_cmds(c, "SET", "b:", 0, 10, 1);
    pipe_cmds(c, "DEL", "b:", 0, 10, 1);
    redisFree(c);
    CHECK(it_proc_stop(&b) == 0);
}

/* Gateway L1 inserts the long keys (KV blocks + CHIME key records in its chunk), gateway L2
 * rewrites their values (new blocks in its chunk): L1's chunk then holds nothing live but
 * the key records, and must be kept. They sort first, into the leaf A's deletes emptied. */
static void long_key_gateways(const char *uri)
{
    const char *uris[1] = {uri};
    for (int gen = 1; gen <= 2; gen++) {
        it_proc_t l;
        it_gateway_start(&l, uris, 1, 1, NULL);
        redisContext *c = it_connect(l.port);
        pipe_cmds(c, "SET", LONG_PREFIX, 0, NLONG, gen);
        redisFree(c);
        CHECK(it_proc_stop(&l) == 0);
    }
}

int main(void)
{
    it_begin("pool_reclaim", 240);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_tool_path("DMKV_POOL_RECLAIM", "bench/dmkv-pool-reclaim", tool, sizeof(tool));
    dead_gateway(pool.uri);
    short_gateway(pool.uri);
    long_key_gateways(pool.uri);

    /* No gateway runs now. A dry run changes nothing; the real run reclaims the same. */
    tool_out_t dry = run_tool(pool.uri, 1);
    /* Over SepHash a dead version stays reachable (its entry, and so its block) until its
     * segment merges; a segment merges every 128 appends, so whether a whole range of A's
     * is dead yet depends on where the last merges fell (under load: 3 runs in 16 found
     * none). The reclaim must then be safe, which the rest checks. */
    const char *engine = getenv("DMKV_IT_POINT_INDEX");
    if (engine && !strcmp(engine, "sephash") && dry.ranges == 0)
        fprintf(stderr, "SepHash: every range still holds unmerged versions\n");
    else
        CHECKF(dry.ranges >= 1, "nothing reclaimable");
    tool_out_t real = run_tool(pool.uri, 0);
    CHECK(real.ranges == dry.ranges && real.alloc_ptr == dry.alloc_ptr);
    CHECK(real.free_ranges == dry.free_ranges + real.ranges);
    fprintf(stderr, "reclaimed %lld ranges; alloc_ptr %lld\n", real.ranges, real.alloc_ptr);

    /* The kept keys are intact. */
    const char *uris[1] = {pool.uri};
    it_proc_t g;
    it_gateway_start(&g, uris, 1, 1, NULL);
    redisContext *c = it_connect(g.port);
    check_values(c, "key:", KEEP_FROM, NKEYS, 1);
    check_values(c, LONG_PREFIX, 0, NLONG, 2);
    check_scan(c, KEEP_FROM, NKEYS);
    EXPECT_INT(it_cmd(c, "DBSIZE"), NKEYS - KEEP_FROM + NLONG);

    /* New keys fill reclaimed chunks (the last pushed first: had a chunk with live key
     * records been pushed, they would be overwritten now): 2,500 keys per chunk, each
     * costing at most two 3 KB blocks (a new key's first, vetoed RACE attempt leaves its
     * block in quarantine), one chunk fewer than were reclaimed, so the list never runs dry. */
    int fresh = real.free_ranges > 1 ? (int)(real.free_ranges - 1) * 2500 : 0;
    if (fresh > 0) {
        pipe_cmds(c, "SET", "new:", 0, fresh, 2);
        check_values(c, "new:", 0, fresh, 2);
    }
    check_values(c, "key:", KEEP_FROM, NKEYS, 1);
    check_values(c, LONG_PREFIX, 0, NLONG, 2);
    check_long_scan(c);
    redisFree(c);
    CHECK(it_proc_stop(&g) == 0);
    tool_out_t after = run_tool(pool.uri, 1);
    fprintf(stderr, "%d new keys; alloc_ptr %lld -> %lld; free ranges %lld -> %lld\n", fresh,
            real.alloc_ptr, after.alloc_ptr, real.free_ranges, after.free_ranges);
    CHECKF(real.free_ranges == 0 || after.alloc_ptr == real.alloc_ptr,
           "alloc_ptr grew with free ranges left");
    CHECK(fresh == 0 || after.free_ranges < real.free_ranges);
    it_proc_stop(&pool.memnode);
    printf("it_pool_reclaim: passed\n");
    return 0;
}
