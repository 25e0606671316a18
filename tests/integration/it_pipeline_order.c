/* Redis's ordering guarantees for one connection's pipeline (issue 11), with runs of reads
 * and runs of plain SETs of a pipeline running concurrently (gateway/net/conn.c). One
 * memory node, two gateways. A writer on the first pipelines, in chunks of 250 rounds:
 *   A  SET tmp:i x, SET data:i v<i>, SET flag:i 1 for every round of the chunk (one long
 *      run of SETs of new keys: inserts);
 *   B  GET data:i (must return what it just wrote), INCR seq:i, SET flag2:i 1,
 *      MSET mset:i v<i> mother:i y, SET flag3:i 1, DEL tmp:i, SET flag4:i 1, EXISTS data:i;
 *   C  SET data:i u<i>, SET flag:i 2 for every round (a run of updates of present keys);
 *   D  SET flag5:i 1, SET data:i w<i>: data:i was read in B, so its SET is the
 *      one-round-trip kind (new block ‖ slot CAS, race/ops.c dm_race_update_blind) and
 *      would overtake the slower insert of flag5:i without its commit turn.
 * Readers on the second gateway poll recent rounds, each read after the previous reply:
 * flag:i "1" => data:i is v<i>, u<i> or w<i>; flag:i "2" => data:i is u<i> or w<i>;
 * data:i w<i> => flag5:i is 1; flag2:i => seq:i is 1; flag3:i => mset:i exists; flag4:i =>
 * tmp:i is gone. A reader that sees a flag must see
 * the writes the pipeline made before it. DMKV_TEST_UNORDERED_WRITES=1 (a test-only switch
 * that lets a pipeline's key commands run concurrently without commit turns) must make
 * this test fail: `it_pipeline_order --expect-violation` runs that variant and fails if no
 * reader caught it.
 *
 * Chained commits (tcp, DM_CAP_CHAIN): the updates of C and D post their slot CASes behind
 * earlier ones without waiting for them; the memory node skips the rest of a chain once one
 * fails. `--commit-miss` makes 1 in 4 chained commits fail on purpose (fault commit_miss):
 * no violation, and the memory node must have skipped some. `--chain-no-skip` adds a
 * memory node that never skips (DMKV_TEST_CHAIN_NO_SKIP): a reader must catch a flag
 * that landed before the data it follows.
 *
 * Early locks: chunk A's inserts lock their CHIME leaves before their turn and wait for it
 * at their slot CAS (a commit, like an update's); the test checks some did. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define ROUNDS 6000 /* scaled by DMKV_IT_SCALE (it_scaled), whole chunks */
#define CHUNK 250
#define READERS 3

static int wport, rport;
static atomic_int written; /* rounds whose replies the writer has read */
static atomic_int done, violations;
static atomic_long polls;

static void violation(const char *what, int i)
{
    if (atomic_fetch_add(&violations, 1) < 3)
        fprintf(stderr, "reader saw %s (round %d)\n", what, i);
}

/* A reply as a number: an integer, or a string holding one; -1 otherwise. */
static long long reply_number(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    return r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
}

/* When flag:i is set, `cmd key:i` (what the pipeline did before setting it) answers want. */
static void check_flag(redisContext *c, int i, const char *flag, const char *cmd, const char *key,
                       long long want, const char *what)
{
    redisReply *f = it_cmd(c, "GET %s:%d", flag, i);
    if (f->type == REDIS_REPLY_STRING) {
        redisReply *d = it_cmd(c, "%s %s:%d", cmd, key, i);
        if (reply_number(d) != want) violation(what, i);
        freeReplyObject(d);
    }
    freeReplyObject(f);
}

/* GET each flag, then (after its reply) what the pipeline wrote before it. */
static void check_pair(redisContext *c, int i)
{
    char u[32], v[32], w[32];
    snprintf(u, sizeof(u), "u%d", i);
    snprintf(v, sizeof(v), "v%d", i);
    snprintf(w, sizeof(w), "w%d", i);
    redisReply *f = it_cmd(c, "GET flag:%d", i);
    if (f->type == REDIS_REPLY_STRING) {
        redisReply *d = it_cmd(c, "GET data:%d", i);
        int is_u = d->type == REDIS_REPLY_STRING && !strcmp(d->str, u);
        int is_v = d->type == REDIS_REPLY_STRING && !strcmp(d->str, v);
        int is_w = d->type == REDIS_REPLY_STRING && !strcmp(d->str, w);
        if (!strcmp(f->str, "2") ? !(is_u || is_w) : !(is_u || is_v || is_w))
            violation(
                !strcmp(f->str, "2") ? "flag:i 2 before SET data:i u" : "flag:i before data:i", i);
        freeReplyObject(d);
    }
    freeReplyObject(f);
    redisReply *d = it_cmd(c, "GET data:%d", i);
    if (d->type == REDIS_REPLY_STRING && !strcmp(d->str, w)) {
        redisReply *f5 = it_cmd(c, "GET flag5:%d", i);
        if (f5->type != REDIS_REPLY_STRING) violation("data:i w before flag5:i", i);
        freeReplyObject(f5);
    }
    freeReplyObject(d);
    check_flag(c, i, "flag2", "GET", "seq", 1, "flag2:i before INCR seq:i");
    check_flag(c, i, "flag3", "EXISTS", "mset", 1, "flag3:i before MSET");
    check_flag(c, i, "flag4", "EXISTS", "tmp", 0, "flag4:i before DEL tmp:i");
}

static void *reader_main(void *arg)
{
    unsigned rs = (unsigned)(uintptr_t)arg * 7919u + 1;
    redisContext *c = it_connect(rport);
    while (!atomic_load(&done)) {
        int hi = atomic_load(&written) + 2 * CHUNK; /* rounds in flight in the pipeline too */
        int i = hi - 1 - (int)(rand_r(&rs) % (CHUNK * 2));
        if (i < 0) continue;
        check_pair(c, i);
        atomic_fetch_add(&polls, 1);
    }
    redisFree(c);
    return NULL;
}

static redisReply *next_reply(redisContext *c)
{
    redisReply *r = NULL;
    CHECKF(redisGetReply(c, (void **)&r) == REDIS_OK && r, "reply: %s", c->errstr);
    return r;
}

/* One writer pipeline over a fresh pool and two fresh gateways, with the readers; returns
 * the violations seen plus the pipeline's own missed reads. */
enum { MODE_ORDERED, MODE_UNORDERED, MODE_COMMIT_MISS, MODE_CHAIN_NO_SKIP };

static int run_once(int mode)
{
    int expect_violation = mode == MODE_UNORDERED || mode == MODE_CHAIN_NO_SKIP;
    atomic_store(&written, 0);
    atomic_store(&done, 0);
    atomic_store(&violations, 0);
    atomic_store(&polls, 0);
    if (mode == MODE_UNORDERED) setenv("DMKV_TEST_UNORDERED_WRITES", "1", 1);
    if (mode == MODE_CHAIN_NO_SKIP) setenv("DMKV_TEST_CHAIN_NO_SKIP", "1", 1);
    it_pool_t pool;
    it_pool_start(&pool);
    unsetenv("DMKV_TEST_CHAIN_NO_SKIP");
    if (mode == MODE_COMMIT_MISS || mode == MODE_CHAIN_NO_SKIP)
        setenv("DMKV_FAULT_STALL", "commit_miss:1:4", 1);
    it_proc_t gw[2];
    it_gateways_start(&pool, gw, 2, 1, 1, NULL);
    unsetenv("DMKV_TEST_UNORDERED_WRITES");
    unsetenv("DMKV_FAULT_STALL");
    wport = gw[0].port;
    rport = gw[1].port;
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++)
        pthread_create(&th[i], NULL, reader_main, (void *)(uintptr_t)i);
    redisContext *c = it_connect(wport);
    char want[32];
    int own_misses = 0;
    int rounds = (it_scaled(ROUNDS) + CHUNK - 1) / CHUNK * CHUNK;
    /* A variant that must show disorder stops at the first chunk in which a reader saw it:
     * the rest of the pipeline would only repeat what is already shown. */
    for (int base = 0; base < rounds && !(expect_violation && atomic_load(&violations));
         base += CHUNK) {
        for (int i = base; i < base + CHUNK; i++) {
            redisAppendCommand(c, "SET tmp:%d x", i);
            redisAppendCommand(c, "SET data:%d v%d", i, i);
            redisAppendCommand(c, "SET flag:%d 1", i);
        }
        for (int i = base; i < base + CHUNK; i++) {
            redisAppendCommand(c, "GET data:%d", i);
            redisAppendCommand(c, "INCR seq:%d", i);
            redisAppendCommand(c, "SET flag2:%d 1", i);
            redisAppendCommand(c, "MSET mset:%d v%d mother:%d y", i, i, i);
            redisAppendCommand(c, "SET flag3:%d 1", i);
            redisAppendCommand(c, "DEL tmp:%d", i);
            redisAppendCommand(c, "SET flag4:%d 1", i);
            redisAppendCommand(c, "EXISTS data:%d", i);
        }
        for (int i = base; i < base + CHUNK; i++) {
            redisAppendCommand(c, "SET data:%d u%d", i, i);
            redisAppendCommand(c, "SET flag:%d 2", i);
        }
        for (int i = base; i < base + CHUNK; i++) {
            redisAppendCommand(c, "SET flag5:%d 1", i);
            redisAppendCommand(c, "SET data:%d w%d", i, i);
        }
        for (int i = base; i < base + 3 * CHUNK; i++)
            EXPECT_STATUS(next_reply(c), "OK");
        for (int i = base; i < base + CHUNK; i++) {
            redisReply *g = next_reply(c);
            snprintf(want, sizeof(want), "v%d", i);
            if (g->type != REDIS_REPLY_STRING || strcmp(g->str, want) != 0) own_misses++;
            freeReplyObject(g);
            EXPECT_INT(next_reply(c), 1);
            EXPECT_STATUS(next_reply(c), "OK");
            EXPECT_STATUS(next_reply(c), "OK");
            EXPECT_STATUS(next_reply(c), "OK");
            EXPECT_INT(next_reply(c), 1);
            EXPECT_STATUS(next_reply(c), "OK");
            redisReply *e = next_reply(c);
            if (e->type != REDIS_REPLY_INTEGER || e->integer != 1) own_misses++;
            freeReplyObject(e);
        }
        for (int i = base; i < base + 4 * CHUNK; i++)
            EXPECT_STATUS(next_reply(c), "OK");
        atomic_store(&written, base + CHUNK);
    }
    atomic_store(&done, 1);
    for (int i = 0; i < READERS; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr,
            "%d rounds pipelined in chunks of %d; %ld reader polls; %d ordering violations, %d "
            "reads of the pipeline's own writes missed%s\n",
            atomic_load(&written), CHUNK, atomic_load(&polls), atomic_load(&violations), own_misses,
            expect_violation ? " (writes unordered on purpose)" : "");
    double chained = it_info_field(c, "dmkv", "chained_commits");
    double skipped = it_info_field(c, "dmkv", "chained_commits_skipped");
    fprintf(stderr, "writer's gateway: %.0f chained commits, %.0f skipped by the memory node\n",
            chained, skipped);
    /* SepHash's appends are never chained (docs/DESIGN.md "A pipeline's appends are
     * placed"): there the test checks the order the commit turns give alone. */
    const char *off = getenv("DMKV_CHAIN"), *engine = getenv("DMKV_IT_POINT_INDEX");
    int chains = !(off && !strcmp(off, "0")) && !(engine && !strcmp(engine, "sephash"));
    if (mode != MODE_UNORDERED && chains)
        CHECKF(chained > 0, "no commit was chained: the test does not exercise chains");
    if (mode == MODE_COMMIT_MISS)
        CHECKF(skipped > 0, "no chained commit was skipped after a failed one");
    /* Chunk A's inserts lock their leaves before their turn (dmkv/coro.h "Early locks"),
     * CHIME's leaves: ROLEX's range role locks a chain head in the turn (its lock has no
     * early form), so there the order rests on the turns alone. */
    double early = it_info_field(c, "dmkv", "early_leaf_locks");
    fprintf(stderr, "writer's gateway: %.0f early leaf locks, %.0f given back\n", early,
            it_info_field(c, "dmkv", "early_leaf_lock_yields"));
    const char *early_off = getenv("DMKV_EARLY_LOCK"), *range = getenv("DMKV_IT_RANGE_INDEX");
    int early_locks =
        !(early_off && !strcmp(early_off, "0")) && !(range && !strcmp(range, "rolex"));
    if (mode != MODE_UNORDERED && early_locks)
        CHECKF(early > 0, "no insert locked its leaf early: the test does not exercise them");
    redisFree(c);
    for (int i = 0; i < 2; i++)
        it_proc_stop(&gw[i]);
    it_proc_stop(&pool.memnode);
    if (!expect_violation) {
        CHECKF(atomic_load(&violations) == 0, "a reader saw a later write before an earlier one");
        CHECKF(own_misses == 0, "a read missed an earlier write of its own pipeline");
    }
    return atomic_load(&violations) + own_misses;
}

int main(int argc, char **argv)
{
    const char *arg = argc > 1 ? argv[1] : "";
    int mode = !strcmp(arg, "--expect-violation") ? MODE_UNORDERED
               : !strcmp(arg, "--commit-miss")    ? MODE_COMMIT_MISS
               : !strcmp(arg, "--chain-no-skip")  ? MODE_CHAIN_NO_SKIP
                                                  : MODE_ORDERED;
    int expect_violation = mode == MODE_UNORDERED || mode == MODE_CHAIN_NO_SKIP;
    it_begin("pipeline_order", 600);
    int seen = run_once(mode);
    /* The unordered variants show themselves by chance (a reader polling at the wrong
     * moment): on a loaded machine one pass saw nothing once; try up to three. */
    for (int i = 1; expect_violation && !seen && i < 3; i++)
        seen = run_once(mode);
    if (expect_violation)
        CHECKF(seen > 0, "the unordered variant went unnoticed in 3 passes: the test cannot see "
                         "reordering");
    fprintf(stderr, "it_pipeline_order: OK\n");
    return 0;
}
