/* Growth under load (issue 5): two memory nodes, three writer gateways and one reader
 * gateway. Six writer clients insert and update their own keys, pipelined, through tiny
 * subtables (DMKV_RACE_GROUPS=8: a split every ~100 keys), while a reader checks that every
 * acknowledged key reads back an acknowledged value. Afterwards every key holds its last
 * acknowledged value on every gateway, DBSIZE is exact, SCAN returns exactly the key set,
 * and the gateways' logs show many splits and at least two directory doublings. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define WRITERS 6
#define KEYS 3000 /* per writer, at most (nkeys: scaled by DMKV_IT_SCALE) */
#define BATCH 50

static int writer_ports[3], reader_port;
static int nkeys; /* per writer: KEYS scaled (the TSan run: its reads back took 2 minutes a
                     gateway at 3,000) */
static _Atomic int progress[WRITERS]; /* keys acknowledged so far, per writer */
static int gen[WRITERS][KEYS];        /* last acknowledged generation per key */
static atomic_bool writers_done;

static void *writer_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    redisContext *c = it_connect(writer_ports[id % 3]);
    for (int base = 0; base < nkeys; base += BATCH) {
        for (int i = base; i < base + BATCH; i++)
            redisAppendCommand(c, "SET rs:%d:%d v:%d:%d:1", id, i, id, i);
        for (int i = base; i < base + BATCH; i++) {
            redisReply *r;
            CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
            EXPECT_STATUS(r, "OK");
            gen[id][i] = 1;
        }
        atomic_store(&progress[id], base + BATCH);
        /* Update an older key now and then: updates meet splits too. */
        int u = (base * 7 + id) % (base + BATCH);
        redisReply *r = it_cmd(c, "SET rs:%d:%d v:%d:%d:%d", id, u, id, u, gen[id][u] + 1);
        EXPECT_STATUS(r, "OK");
        gen[id][u]++;
    }
    redisFree(c);
    return NULL;
}

static void *reader_main(void *arg)
{
    (void)arg;
    redisContext *c = it_connect(reader_port);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    long reads = 0;
    while (!atomic_load(&writers_done)) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int id = (int)(x % WRITERS);
        int upto = atomic_load(&progress[id]);
        if (upto == 0) continue;
        int i = (int)((x >> 16) % (uint64_t)upto);
        redisReply *r = it_cmd(c, "GET rs:%d:%d", id, i);
        char prefix[64];
        int pl = snprintf(prefix, sizeof(prefix), "v:%d:%d:", id, i);
        CHECKF(r->type == REDIS_REPLY_STRING && r->len > (size_t)pl &&
                   memcmp(r->str, prefix, (size_t)pl) == 0,
               "acknowledged key rs:%d:%d read as type %d during resizing", id, i, r->type);
        freeReplyObject(r);
        reads++;
    }
    fprintf(stderr, "reader: %ld reads during the load\n", reads);
    redisFree(c);
    return NULL;
}

static int count_in_log(const it_proc_t *p, const char *needle)
{
    FILE *f = fopen(p->log, "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    if (f) fclose(f);
    return n;
}

int main(void)
{
    it_begin("resize", 600);
    nkeys = it_scaled(KEYS) / BATCH * BATCH; /* whole batches */
    if (nkeys < BATCH) nkeys = BATCH;
    if (nkeys > KEYS) nkeys = KEYS;
    setenv("DMKV_RACE_GROUPS", "8", 1);
    it_pool_t p1, p2;
    it_pool_start(&p1);
    it_pool_start(&p2);
    if (!p1.shared) {
        printf("SKIP: needs dmkv-memnode\n");
        return IT_SKIP;
    }
    const char *uris[2] = {p1.uri, p2.uri};
    const char *verbose[] = {"--loglevel", "verbose", NULL};
    it_proc_t gw[4];
    for (int i = 0; i < 4; i++)
        it_gateway_start(&gw[i], uris, 2, 1, verbose);
    for (int i = 0; i < 3; i++)
        writer_ports[i] = gw[i].port;
    reader_port = gw[3].port;

    pthread_t w[WRITERS], rd;
    pthread_create(&rd, NULL, reader_main, NULL);
    for (int i = 0; i < WRITERS; i++)
        pthread_create(&w[i], NULL, writer_main, (void *)(intptr_t)i);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(w[i], NULL);
    atomic_store(&writers_done, true);
    pthread_join(rd, NULL);

    /* Every key reads back its last acknowledged value, on every gateway. */
    for (int g = 0; g < 4; g++) {
        redisContext *c = it_connect(gw[g].port);
        for (int id = 0; id < WRITERS; id++) {
            for (int i = 0; i < nkeys; i++)
                redisAppendCommand(c, "GET rs:%d:%d", id, i);
            for (int i = 0; i < nkeys; i++) {
                redisReply *r;
                CHECK(redisGetReply(c, (void **)&r) == REDIS_OK);
                char want[64];
                snprintf(want, sizeof(want), "v:%d:%d:%d", id, i, gen[id][i]);
                EXPECT_BULKS(r, want);
            }
        }
        EXPECT_INT(it_cmd(c, "DBSIZE"), WRITERS * nkeys);
        redisFree(c);
    }
    /* SCAN returns exactly the key set. */
    static unsigned char seen[WRITERS][KEYS];
    redisContext *c = it_connect(reader_port);
    char cursor[32] = "0";
    long returned = 0;
    do {
        redisReply *r = it_cmd(c, "SCAN %s COUNT 500", cursor);
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t k = 0; k < r->element[1]->elements; k++) {
            int id, i;
            CHECK(sscanf(r->element[1]->element[k]->str, "rs:%d:%d", &id, &i) == 2);
            CHECK(id >= 0 && id < WRITERS && i >= 0 && i < nkeys);
            seen[id][i] = 1;
            returned++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    for (int id = 0; id < WRITERS; id++)
        for (int i = 0; i < nkeys; i++)
            CHECKF(seen[id][i], "SCAN missed rs:%d:%d", id, i);
    redisFree(c);

    int splits = 0, doublings = 0;
    for (int g = 0; g < 4; g++) {
        splits += count_in_log(&gw[g], "RACE split of subtable") / 2;
        doublings += count_in_log(&gw[g], "RACE directory doubled");
    }
    fprintf(stderr, "%d keys, %ld returned by SCAN, %d splits, %d directory doublings\n",
            WRITERS * nkeys, returned, splits, doublings);
    CHECK(splits >= 50 * nkeys / KEYS && doublings >= 2); /* 50 at full size */
    for (int g = 0; g < 4; g++)
        CHECK(it_proc_stop(&gw[g]) == 0);
    it_proc_stop(&p1.memnode);
    it_proc_stop(&p2.memnode);
    printf("it_resize: passed\n");
    return 0;
}
