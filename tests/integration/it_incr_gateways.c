/* No lost increments across gateways (issue 6): 3 gateways on one memory node, 50 clients
 * (one thread and connection each, spread over the gateways) send INCR / INCRBY / DECR to
 * 10 shared keys. Each client counts the net amount of its acknowledged commands per key;
 * afterwards every gateway reads each key and it must equal the sum of those amounts.
 * The keys do not exist when the clients start, so several gateways create each of them at
 * the same moment (their first INCR): creation goes through the CHIME leaf lock, so no
 * increment is lost there either. Creation races: in every round all clients send
 * SET NX of one new key at once (a barrier lines them up); exactly one gets OK.
 * WATCH across gateways: a key changed on another gateway between WATCH and EXEC makes EXEC
 * answer nil. A WATCH/GET/MULTI/SET+1/EXEC counter run by all clients at once: EXEC's write
 * of the watched key is guarded inside its own slot CAS, so the counter ends exactly at
 * the number of committed transactions. BITFIELD INCRBY among the increments: 4 signed
 * 32-bit fields of one key per shared key, each equal at the end to its acknowledged sum
 * (one field's read-modify-write never loses another's). */
#include <pthread.h>
#include <stdint.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define NGW 3
#define NCLIENTS 50
#define NKEYS 10
#define OPS 400
#define TX_OPS 40

#define NX_ROUNDS 30

static int ports[NGW];
static long long acked[NCLIENTS][NKEYS];
#define NFIELDS 4
static long long bf_acked[NCLIENTS][NKEYS][NFIELDS];
static long long tx_acked[NCLIENTS];
static int nx_won[NX_ROUNDS][NCLIENTS];
static pthread_barrier_t nx_barrier;
static int nclients, ops_n, tx_n, nx_n; /* NCLIENTS (at least 12), OPS, TX_OPS, NX_ROUNDS
                                         * scaled (it_scaled) */

static void *client_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    redisContext *c = it_connect(ports[id % NGW]);
    for (int round = 0; round < nx_n; round++) {
        pthread_barrier_wait(&nx_barrier);
        redisReply *r = it_cmd(c, "SET nx:%d client%d NX", round, id);
        CHECKF(r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_NIL,
               "client %d SET NX: reply type %d %s", id, r->type,
               r->type == REDIS_REPLY_ERROR ? r->str : "");
        nx_won[round][id] = r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
    }
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    for (int j = 0; j < ops_n; j++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int k = (int)(x % NKEYS), op = (int)((x >> 16) % 5);
        if (op == 4) { /* a field of bf:k, returning its new value */
            int f = (int)((x >> 24) % NFIELDS);
            redisReply *r = it_cmd(c, "BITFIELD bf:%d INCRBY i32 #%d 3", k, f);
            CHECKF(r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                       r->element[0]->type == REDIS_REPLY_INTEGER,
                   "client %d BITFIELD: reply type %d %s", id, r->type,
                   r->type == REDIS_REPLY_ERROR ? r->str : "");
            bf_acked[id][k][f] += 3;
            freeReplyObject(r);
            continue;
        }
        long long by = op == 0 ? 5 : op == 1 ? -1 : 1;
        redisReply *r = op == 0   ? it_cmd(c, "INCRBY ctr:%d 5", k)
                        : op == 1 ? it_cmd(c, "DECR ctr:%d", k)
                                  : it_cmd(c, "INCR ctr:%d", k);
        CHECKF(r->type == REDIS_REPLY_INTEGER, "client %d op %d: reply type %d %s", id, j, r->type,
               r->type == REDIS_REPLY_ERROR ? r->str : "");
        acked[id][k] += by;
        freeReplyObject(r);
    }
    /* Optimistic transactions: WATCH, read, MULTI, SET read+1, EXEC (nil = lost the race). */
    for (int j = 0; j < tx_n; j++) {
        freeReplyObject(it_cmd(c, "WATCH txctr"));
        redisReply *g = it_cmd(c, "GET txctr");
        CHECK(g->type == REDIS_REPLY_STRING);
        long long v = atoll(g->str);
        freeReplyObject(g);
        EXPECT_STATUS(it_cmd(c, "MULTI"), "OK");
        EXPECT_STATUS(it_cmd(c, "SET txctr %lld", v + 1), "QUEUED");
        redisReply *e = it_cmd(c, "EXEC");
        CHECK(e->type == REDIS_REPLY_ARRAY || e->type == REDIS_REPLY_NIL);
        if (e->type == REDIS_REPLY_ARRAY) tx_acked[id]++;
        freeReplyObject(e);
    }
    redisFree(c);
    return NULL;
}

int main(void)
{
    it_begin("incr_gateways", 600);
    nclients = it_scaled(NCLIENTS);
    if (nclients < 12) nclients = 12;
    ops_n = it_scaled(OPS);
    tx_n = it_scaled(TX_OPS);
    nx_n = it_scaled(NX_ROUNDS);
    it_pool_t pool;
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    it_proc_t gw[NGW];
    it_gateways_start(&pool, gw, NGW, 2, 2, ports);
    redisContext *c0 = it_connect(ports[0]);
    EXPECT_STATUS(it_cmd(c0, "SET txctr 0"), "OK");
    CHECK(pthread_barrier_init(&nx_barrier, NULL, nclients) == 0);
    pthread_t t[NCLIENTS];
    for (int i = 0; i < nclients; i++)
        CHECK(pthread_create(&t[i], NULL, client_main, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < nclients; i++)
        pthread_join(t[i], NULL);
    for (int round = 0; round < nx_n; round++) {
        int winners = 0, winner = -1;
        for (int i = 0; i < nclients; i++)
            if (nx_won[round][i]) winners++, winner = i;
        CHECKF(winners == 1, "round %d: %d clients got OK for SET nx:%d NX", round, winners, round);
        char want[32];
        snprintf(want, sizeof(want), "client%d", winner);
        for (int g = 0; g < NGW; g++) {
            redisContext *c = it_connect(ports[g]);
            EXPECT_BULKS(it_cmd(c, "GET nx:%d", round), want);
            redisFree(c);
        }
    }
    fprintf(stderr, "%d SET NX races of %d clients on %d gateways: one winner each\n", nx_n,
            nclients, NGW);
    long long total_ops = 0, tx_total = 0;
    for (int i = 0; i < nclients; i++)
        tx_total += tx_acked[i];
    for (int g = 0; g < NGW; g++) {
        redisContext *c = it_connect(ports[g]);
        for (int k = 0; k < NKEYS; k++) {
            long long want = 0;
            for (int i = 0; i < nclients; i++)
                want += acked[i][k];
            redisReply *r = it_cmd(c, "GET ctr:%d", k);
            CHECK(r->type == REDIS_REPLY_STRING);
            CHECKF(atoll(r->str) == want, "gateway %d key ctr:%d = %s, acknowledged net %lld", g, k,
                   r->str, want);
            freeReplyObject(r);
            r = it_cmd(c, "BITFIELD_RO bf:%d GET i32 #0 GET i32 #1 GET i32 #2 GET i32 #3", k);
            CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == NFIELDS);
            for (int f = 0; f < NFIELDS; f++) {
                long long fwant = 0;
                for (int i = 0; i < nclients; i++)
                    fwant += bf_acked[i][k][f];
                CHECKF(r->element[f]->integer == fwant,
                       "gateway %d bf:%d field %d = %lld, acknowledged %lld", g, k, f,
                       r->element[f]->integer, fwant);
            }
            freeReplyObject(r);
        }
        redisReply *r = it_cmd(c, "GET txctr");
        CHECKF(r->type == REDIS_REPLY_STRING && atoll(r->str) == tx_total,
               "gateway %d txctr = %s, committed transactions %lld", g, r->str, tx_total);
        if (g == 0)
            fprintf(stderr, "WATCH counter: %lld commits, counter %s: no committed update lost\n",
                    tx_total, r->str);
        freeReplyObject(r);
        redisFree(c);
    }
    total_ops = (long long)nclients * ops_n;
    fprintf(stderr, "%lld acknowledged INCR/INCRBY/DECR over %d gateways: no update lost\n",
            total_ops, NGW);
    /* Sequential WATCH across gateways: changes on gateway 1 abort EXEC on gateway 0. */
    redisContext *c1 = it_connect(ports[1]);
    EXPECT_STATUS(it_cmd(c0, "WATCH w1 w2"), "OK");
    EXPECT_STATUS(it_cmd(c1, "SET w2 changed"), "OK");
    EXPECT_STATUS(it_cmd(c0, "MULTI"), "OK");
    EXPECT_STATUS(it_cmd(c0, "SET w1 mine"), "QUEUED");
    EXPECT_NIL(it_cmd(c0, "EXEC"));
    EXPECT_NIL(it_cmd(c1, "GET w1"));
    EXPECT_STATUS(it_cmd(c0, "WATCH w2"), "OK");
    EXPECT_INT(it_cmd(c1, "EXPIRE w2 100"), 1); /* an expiry change is a change too */
    EXPECT_STATUS(it_cmd(c0, "MULTI"), "OK");
    EXPECT_STATUS(it_cmd(c0, "SET w1 mine"), "QUEUED");
    EXPECT_NIL(it_cmd(c0, "EXEC"));
    EXPECT_STATUS(it_cmd(c0, "WATCH w2"), "OK");
    EXPECT_BULKS(it_cmd(c1, "GET w2"), "changed"); /* reads do not break a WATCH */
    EXPECT_STATUS(it_cmd(c0, "MULTI"), "OK");
    EXPECT_STATUS(it_cmd(c0, "SET w1 mine"), "QUEUED");
    redisReply *e = it_cmd(c0, "EXEC");
    CHECK(e->type == REDIS_REPLY_ARRAY && e->elements == 1);
    freeReplyObject(e);
    EXPECT_BULKS(it_cmd(c1, "GET w1"), "mine");
    redisFree(c1);
    redisFree(c0);
    for (int i = 0; i < NGW; i++)
        CHECK(it_proc_stop(&gw[i]) == 0);
    it_proc_stop(&pool.memnode);
    fprintf(stderr, "it_incr_gateways: passed\n");
    return 0;
}
