/* Active expiry of keys another gateway gave an expiry (issue 6): gateway A sets volatile
 * keys and dies (SIGKILL) before they expire, so its own expiry queue is gone. Gateway B
 * never touched them; its sweep over the CHIME key order must remove them from both
 * indexes: DBSIZE drops to the persistent keys, and nothing expired is ever returned. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define PERSISTENT 3000
#define VOLATILE 600
#define PX_MS 1500

int main(void)
{
    it_begin("expiry_sweep", 600);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[2];
    it_gateways_start(&pool, gw, 2, 1, 1, NULL);
    it_proc_t *a = &gw[0], *b = &gw[1];
    redisContext *ca = it_connect(a->port), *cb = it_connect(b->port);
    const long long t0 = it_now_ms(); /* before any SET is sent: every expiry is after t0 + PX */
    for (int i = 0; i < PERSISTENT; i++)
        redisAppendCommand(ca, "SET keep:%05d v", i);
    for (int i = 0; i < VOLATILE; i++)
        redisAppendCommand(ca, "SET vol:%05d v PX %d", i, PX_MS);
    for (int i = 0; i < PERSISTENT + VOLATILE; i++) {
        redisReply *r;
        CHECK(redisGetReply(ca, (void **)&r) == REDIS_OK);
        EXPECT_STATUS(r, "OK");
    }
    /* Every key counts until its expiry. A load slower than PX (SepHash under a loaded
     * host: over 1.5 s for the 3,600 SETs) lets the sweep take the first volatile keys
     * before DBSIZE: then only bounds hold. */
    redisReply *db = it_cmd(cb, "DBSIZE");
    long long vol_left = VOLATILE; /* volatile keys still there at DBSIZE, for B to remove */
    const int exact = it_now_ms() - t0 < PX_MS; /* answered before any key could expire */
    if (exact) {
        EXPECT_INT(db, PERSISTENT + VOLATILE);
    } else {
        CHECKF(db->type == REDIS_REPLY_INTEGER && db->integer >= PERSISTENT &&
                   db->integer <= PERSISTENT + VOLATILE,
               "DBSIZE %lld after a load of %lld ms", db->integer, it_now_ms() - t0);
        vol_left = db->integer - PERSISTENT;
        fprintf(stderr, "load took %lld ms (over PX): DBSIZE %lld\n", it_now_ms() - t0,
                db->integer);
        freeReplyObject(db);
    }
    kill(a->pid, SIGKILL);
    waitpid(a->pid, NULL, 0);
    a->pid = 0;
    redisFree(ca);
    /* Expired keys are never returned, before or after removal. */
    usleep(1600 * 1000);
    EXPECT_NIL(it_cmd(cb, "GET vol:00007"));
    redisReply *r = it_cmd(cb, "KEYS vol:*");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 0);
    freeReplyObject(r);
    /* B's sweep walks about 640 keys a second from random leaves: bounded wait. */
    long long n = -1;
    int waited = 0;
    for (; waited < 120; waited++) {
        r = it_cmd(cb, "DBSIZE");
        n = r->integer;
        freeReplyObject(r);
        if (n == PERSISTENT) break;
        sleep(1);
    }
    CHECKF(n == PERSISTENT, "DBSIZE %lld after %d s: expired keys of a dead gateway not removed", n,
           waited);
    /* B removed what was left when A died (all of them when the load beat PX; A's own
     * sweep may have taken some before its death otherwise, also after DBSIZE). */
    long long expired = (long long)it_info_field(cb, "stats", "expired_keys");
    CHECKF(exact ? expired == VOLATILE : expired >= 0 && expired <= vol_left,
           "B's expired_keys %lld, %lld volatile keys left at DBSIZE", expired, vol_left);
    EXPECT_BULKS(it_cmd(cb, "GET keep:00042"), "v");
    redisFree(cb);
    CHECK(it_proc_stop(b) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_expiry_sweep: %lld expired keys of a dead gateway removed in %d s\n",
            vol_left, waited + 2);
    return 0;
}
