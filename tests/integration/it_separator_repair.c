/* A gateway dies between a CHIME leaf split and its separator's insertion into the parent
 * (issue 12: a dead gateway's leftovers repaired while the pool serves). The victim runs
 * with DMKV_FAULT_STALL=propagate:600000:1: its first leaf split writes both leaves, then
 * stalls before the separator goes up, holding the leaf's lock; the test SIGKILLs it. A
 * survivor (DMKV_SEP_REPAIR_MS=300) keeps inserting into that range: its inserts take the
 * dead lock over once its lease runs out, then move right past the left leaf (the parent
 * does not know the right one) until one of them, 300 ms after the first sighting, inserts
 * the separator. Then inserts into the range stop moving right (INFO chime_right_moves
 * flat), and every acknowledged key is there (GET and SCAN). */
#include <signal.h>
#include <stdint.h>
#include <sys/time.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define MAXKEYS 4000

static bool acked[MAXKEYS];

static long long chime_field(redisContext *c, const char *name)
{
    return (long long)it_info_field(c, "dmkv", name);
}

/* SET sr:<i> on c; true when acknowledged. */
static bool set_key(redisContext *c, int i)
{
    redisReply *r = redisCommand(c, "SET sr:%05d v%d", i, i);
    bool ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK");
    if (r) freeReplyObject(r);
    if (ok) acked[i] = true;
    return ok;
}

int main(void)
{
    it_begin("separator_repair", 300);
    it_pool_t pool;
    it_pool_start(&pool);
    const char *uris[] = {pool.uri};
    it_proc_t victim, survivor;
    setenv("DMKV_FAULT_STALL", "propagate:600000:1", 1);
    it_gateway_start(&victim, uris, 1, 1, NULL);
    unsetenv("DMKV_FAULT_STALL");
    setenv("DMKV_SEP_REPAIR_MS", "300", 1);
    it_gateway_start(&survivor, uris, 1, 1, NULL);
    unsetenv("DMKV_SEP_REPAIR_MS");

    /* Through the victim until its first leaf split stalls (a SET that does not answer). */
    redisContext *v = it_connect(victim.port);
    struct timeval tv = {1, 0};
    redisSetTimeout(v, tv);
    int n = 0;
    while (n < MAXKEYS / 2 && set_key(v, n))
        n++;
    CHECKF(n < MAXKEYS / 2, "the victim never stalled (%d keys)", n);
    redisContext *vi = it_connect(victim.port);
    CHECK(chime_field(vi, "chime_leaf_splits") >= 1);
    redisFree(vi);
    fprintf(stderr, "victim stalled in a split after %d keys: SIGKILL\n", n);
    kill(victim.pid, SIGKILL);
    it_proc_stop(&victim);
    redisFree(v);

    /* The survivor inserts above the split point until it has repaired the separator. */
    redisContext *s = it_connect(survivor.port);
    int next = n + 1; /* n's SET was in flight: its fate is unknown */
    for (int t = 0; t < 400 && chime_field(s, "chime_separator_repairs") == 0; t++) {
        CHECK(set_key(s, next));
        next++;
        usleep(10000);
    }
    long long repairs = chime_field(s, "chime_separator_repairs");
    long long moves = chime_field(s, "chime_right_moves");
    fprintf(stderr, "survivor: %lld right moves, %lld separator repairs, %d keys\n", moves, repairs,
            next);
    CHECK(repairs >= 1 && moves >= 1);
    /* Repaired: inserts into the range reach their leaf straight from the parent. */
    for (int i = 0; i < 100; i++)
        CHECK(set_key(s, next++));
    long long after = chime_field(s, "chime_right_moves");
    CHECKF(after == moves, "right moves went on after the repair: %lld -> %lld", moves, after);

    /* Every acknowledged key is there: GET and SCAN. */
    for (int i = 0; i < next; i++) {
        if (!acked[i]) continue;
        redisReply *r = it_cmd(s, "GET sr:%05d", i);
        CHECKF(r->type == REDIS_REPLY_STRING && atoi(r->str + 1) == i, "sr:%05d", i);
        freeReplyObject(r);
    }
    int seen = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = it_cmd(s, "SCAN %s MATCH sr:* COUNT 500", cursor);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            int k = atoi(r->element[1]->element[i]->str + 3);
            seen += k >= 0 && k < MAXKEYS && acked[k];
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0"));
    int want = 0;
    for (int i = 0; i < next; i++)
        want += acked[i];
    CHECKF(seen == want, "SCAN saw %d of %d acknowledged keys", seen, want);
    redisFree(s);
    int st = it_proc_stop(&survivor);
    if (st != 0) it_proc_dump_log(&survivor);
    CHECKF(st == 0, "survivor exit status %d", st);
    if (pool.shared) it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_separator_repair: OK\n");
    return 0;
}
