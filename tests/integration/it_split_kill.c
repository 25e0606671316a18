/* A gateway dies in the middle of a subtable split (issue 5). The victim runs with
 * DMKV_SPLIT_PAUSE_MS so each of its splits holds still after the copy phase (moving keys
 * frozen, new subtable not yet published) and again after publishing; the test inserts
 * through it until its log says a split started, then SIGKILLs it. Two other gateways then
 * keep inserting, updating and reading: once the dead splitter's lease expires they finish
 * or redo its split. At the end every acknowledged key holds its last acknowledged value,
 * DBSIZE matches SCAN, and SCAN holds every acknowledged key (plus at most the one key
 * whose SET was in flight when the victim died). Run twice: killed during the copy phase
 * (nothing published yet) and after publishing (old copies not yet cleared). */
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define MAXKEYS 20000

static int gen[MAXKEYS]; /* last acknowledged generation, 0 = never acknowledged */

static int log_has(const it_proc_t *p, const char *needle)
{
    FILE *f = fopen(p->log, "r");
    char line[512];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    if (f) fclose(f);
    return found;
}

static void set_key(redisContext *c, int i)
{
    redisReply *r = it_cmd(c, "SET sk:%d g%d", i, gen[i] + 1);
    EXPECT_STATUS(r, "OK");
    gen[i]++;
}

static void scenario(int kill_after_ms)
{
    memset(gen, 0, sizeof(gen));
    it_pool_t p1, p2;
    it_pool_start(&p1);
    it_pool_start(&p2);
    if (!p1.shared) {
        printf("SKIP: needs dmkv-memnode\n");
        exit(IT_SKIP);
    }
    const char *uris[2] = {p1.uri, p2.uri};
    const char *verbose[] = {"--loglevel", "verbose", NULL};
    it_proc_t b, cgw, victim;
    it_gateway_start(&b, uris, 2, 1, NULL);
    it_gateway_start(&cgw, uris, 2, 1, NULL);
    it_gateway_start_env(&victim, uris, 2, 1, verbose, "DMKV_SPLIT_PAUSE_MS", "4000");

    redisContext *cb = it_connect(b.port), *cc = it_connect(cgw.port);
    int n = 0;
    for (; n < 1000; n++)
        set_key(cb, n);

    /* Insert through the victim, one key at a time, until it is inside a split. */
    redisContext *cv = it_connect(victim.port);
    redisAppendCommand(cv, "SET sk:%d g1", n);
    int inflight = n;
    for (int tries = 0; tries < 5000; tries++) {
        if (log_has(&victim, "RACE split of subtable")) break;
        /* Short replies mean no split yet: the next key. */
        redisReply *r;
        struct timeval tv = {0, 200000};
        redisSetTimeout(cv, tv);
        if (redisGetReply(cv, (void **)&r) == REDIS_OK) {
            EXPECT_STATUS(r, "OK");
            gen[inflight] = 1;
            n++;
            redisAppendCommand(cv, "SET sk:%d g1", n);
            inflight = n;
        } else {
            break; /* no reply within 200 ms: the split is holding it */
        }
    }
    usleep((useconds_t)kill_after_ms * 1000); /* copy phase done, or published too */
    CHECKF(log_has(&victim, "RACE split of subtable"), "the victim never started a split");
    fprintf(stderr, "killing the victim mid-split after %d keys (key %d in flight)\n", n, inflight);
    kill(victim.pid, SIGKILL);
    waitpid(victim.pid, NULL, 0);
    victim.pid = 0;
    redisFree(cv);
    n++;

    /* The survivors go on: new keys (which need more splits, including the dead one's),
     * updates of old keys, reads of everything acknowledged. */
    for (int round = 0; round < 3000; round++, n++) {
        set_key(round % 2 ? cb : cc, n);
        int u = (round * 37) % n;
        if (gen[u]) set_key(round % 2 ? cc : cb, u);
    }
    for (int g = 0; g < 2; g++) {
        redisContext *c = g ? cc : cb;
        for (int i = 0; i < n; i++) {
            if (!gen[i]) continue;
            char want[32];
            snprintf(want, sizeof(want), "g%d", gen[i]);
            redisReply *r = it_cmd(c, "GET sk:%d", i);
            if (r->type != REDIS_REPLY_STRING) fprintf(stderr, "sk:%d: type %d\n", i, r->type);
            EXPECT_BULKS(r, want);
        }
    }
    /* SCAN: every acknowledged key, at most one more (the in-flight SET), DBSIZE equal. */
    static unsigned char seen[MAXKEYS];
    memset(seen, 0, sizeof(seen));
    char cursor[32] = "0";
    long returned = 0;
    do {
        redisReply *r = it_cmd(cb, "SCAN %s COUNT 500", cursor);
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t k = 0; k < r->element[1]->elements; k++) {
            int i;
            CHECK(sscanf(r->element[1]->element[k]->str, "sk:%d", &i) == 1 && i < MAXKEYS);
            CHECKF(!seen[i], "sk:%d returned twice", i);
            seen[i] = 1;
            returned++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    long acked = 0;
    for (int i = 0; i < n; i++) {
        if (gen[i]) {
            acked++;
            CHECKF(seen[i], "SCAN missed acknowledged key sk:%d", i);
        } else {
            CHECKF(!seen[i] || i == inflight, "SCAN returned never-written key sk:%d", i);
        }
    }
    redisReply *r = it_cmd(cb, "DBSIZE");
    CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == returned);
    freeReplyObject(r);
    fprintf(stderr, "%ld acknowledged keys, SCAN returned %ld\n", acked, returned);
    CHECK(returned == acked || returned == acked + 1);
    CHECKF(log_has(&b, "taking over its split") || log_has(&b, "finishing its split") ||
               log_has(&cgw, "taking over its split") || log_has(&cgw, "finishing its split"),
           "no survivor took over the dead gateway's split");
    redisFree(cb);
    redisFree(cc);
    CHECK(it_proc_stop(&b) == 0);
    CHECK(it_proc_stop(&cgw) == 0);
    it_proc_stop(&p1.memnode);
    it_proc_stop(&p2.memnode);
}

int main(void)
{
    it_begin("split_kill", 600);
    setenv("DMKV_RACE_GROUPS", "8", 1);
    scenario(300);  /* inside the first pause: keys frozen, nothing published */
    scenario(5000); /* inside the second pause: published, old copies not cleared */
    printf("it_split_kill: passed\n");
    return 0;
}
