/* Rebuilding a lost range index from the point index (issue 14 item 5, dmkv/rebuild.h).
 * A gateway writes NKEYS keys (short ones inline in CHIME leaves, long ones with key
 * records, some with a TTL), deletes every fifth and stops. With no gateway running,
 * dmkv-index-rebuild: `check` finds the indexes in agreement; `drop-range` throws the
 * range index away and `check` then reports every key without an entry (exit 3). A gateway
 * on the damaged pool still GETs every key (the point index is intact) while SCAN returns
 * nothing. `rebuild-range` gives every key its entry back: a new gateway's full SCAN
 * returns exactly the key set, SCAN MATCH finds the long keys, TTLs are kept, DBSIZE
 * agrees, and every key can be deleted (its entry goes with it). */
#include <sys/wait.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define NKEYS 3000
#define LONG_EVERY 7 /* key i with i % LONG_EVERY == 0 is long (a CHIME key record) */
#define TTL_EVERY 11 /* key i with i % TTL_EVERY == 0 has a TTL */
#define DEL_EVERY 5  /* key i with i % DEL_EVERY == 0 is deleted before the damage */

static char tool[1024];

static int key_name(int i, char *buf, size_t n)
{
    if (i % LONG_EVERY == 0)
        return snprintf(buf, n, "rebuild:a-key-long-enough-for-a-key-record:%05d", i);
    return snprintf(buf, n, "rebuild:%05d", i);
}

static int kept(int i)
{
    return i % DEL_EVERY != 0;
}

/* Kept keys, all of them or the long ones only. */
static int kept_count_of(int long_only)
{
    int n = 0;
    for (int i = 0; i < NKEYS; i++)
        n += kept(i) && (!long_only || i % LONG_EVERY == 0);
    return n;
}

static int kept_count(void)
{
    return kept_count_of(0);
}

/* Run `tool mode uri`; its output goes to stderr. Returns its exit status (-1: signal). */
static int run_tool(const char *mode, const char *uri)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s %s %s 2>&1", tool, mode, uri);
    FILE *f = popen(cmd, "r");
    CHECK(f);
    char line[512];
    while (fgets(line, sizeof(line), f))
        fprintf(stderr, "  [%s] %s", mode, line);
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A full SCAN MATCH rebuild:*: the keys it returns, each at most once and each kept. */
static int scan_all(redisContext *c)
{
    static char seen[NKEYS];
    memset(seen, 0, sizeof(seen));
    int n = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = it_cmd(c, "SCAN %s MATCH rebuild:* COUNT 200", cursor);
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t j = 0; j < r->element[1]->elements; j++) {
            const char *k = r->element[1]->element[j]->str;
            const char *num = strrchr(k, ':');
            int i = num ? atoi(num + 1) : -1;
            char want[128];
            CHECKF(i >= 0 && i < NKEYS, "SCAN returned a stranger '%s'", k);
            key_name(i, want, sizeof(want));
            CHECKF(!strcmp(want, k) && kept(i), "SCAN returned '%s', never written or deleted", k);
            CHECKF(!seen[i], "SCAN returned '%s' twice", k);
            seen[i] = 1;
            n++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

/* Every kept key reads back with its value (and TTL), every deleted one is absent. */
static void check_values(redisContext *c)
{
    for (int i = 0; i < NKEYS; i++) {
        char k[128], v[64];
        key_name(i, k, sizeof(k));
        snprintf(v, sizeof(v), "value-%d", i);
        redisReply *r = it_cmd(c, "GET %s", k);
        if (kept(i))
            EXPECT_BULKS(r, v);
        else
            EXPECT_NIL(r);
        if (kept(i) && i % TTL_EVERY == 0) {
            r = it_cmd(c, "TTL %s", k);
            CHECKF(r->type == REDIS_REPLY_INTEGER && r->integer > 3000 && r->integer <= 3600,
                   "TTL of %s: %lld", k, r->integer);
            freeReplyObject(r);
        }
    }
}

static void load(const char *uri)
{
    const char *uris[1] = {uri};
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 1, NULL);
    redisContext *c = it_connect(gw.port);
    for (int i = 0; i < NKEYS; i++) {
        char k[128], v[64];
        key_name(i, k, sizeof(k));
        snprintf(v, sizeof(v), "value-%d", i);
        if (i % TTL_EVERY == 0)
            redisAppendCommand(c, "SET %s %s EX 3600", k, v);
        else
            redisAppendCommand(c, "SET %s %s", k, v);
    }
    it_pipeline_ok(c, NKEYS);
    for (int i = 0; i < NKEYS; i += DEL_EVERY) {
        char k[128];
        key_name(i, k, sizeof(k));
        EXPECT_INT(it_cmd(c, "DEL %s", k), 1);
    }
    CHECK(scan_all(c) == kept_count());
    redisFree(c);
    CHECK(it_proc_stop(&gw) == 0);
}

int main(void)
{
    it_begin("index_rebuild", 300);
    it_tool_path("DMKV_INDEX_REBUILD", "tools/dmkv-index-rebuild", tool, sizeof(tool));
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    load(pool.uri);

    CHECKF(run_tool("check", pool.uri) == 0, "check of an intact pool found mismatches");
    CHECKF(run_tool("drop-range", pool.uri) == 0, "drop-range failed");
    CHECKF(run_tool("check", pool.uri) == 3, "check did not see the lost range index");

    /* Damaged: values intact, the order gone. */
    const char *uris[1] = {pool.uri};
    it_proc_t gw;
    it_gateway_start(&gw, uris, 1, 1, NULL);
    redisContext *c = it_connect(gw.port);
    check_values(c);
    CHECKF(scan_all(c) == 0, "SCAN found keys in a dropped range index");
    redisFree(c);
    CHECK(it_proc_stop(&gw) == 0);

    CHECKF(run_tool("rebuild-range", pool.uri) == 0, "rebuild-range failed or left mismatches");
    CHECKF(run_tool("check", pool.uri) == 0, "check after the rebuild found mismatches");

    it_gateway_start(&gw, uris, 1, 2, NULL); /* two workers this time */
    c = it_connect(gw.port);
    int n = scan_all(c);
    CHECKF(n == kept_count(), "SCAN after the rebuild returned %d keys, want %d", n, kept_count());
    CHECKF(it_scan_count(c, "rebuild:a-key-long-enough*") == kept_count_of(1),
           "SCAN MATCH of the long keys");
    check_values(c);
    EXPECT_INT(it_cmd(c, "DBSIZE"), kept_count());
    for (int i = 0; i < NKEYS; i++) {
        char k[128];
        key_name(i, k, sizeof(k));
        EXPECT_INT(it_cmd(c, "DEL %s", k), kept(i));
    }
    CHECKF(scan_all(c) == 0, "SCAN after deleting every key");
    EXPECT_INT(it_cmd(c, "DBSIZE"), 0);
    redisFree(c);
    CHECK(it_proc_stop(&gw) == 0);
    fprintf(stderr, "it_index_rebuild: OK\n");
    return 0;
}
