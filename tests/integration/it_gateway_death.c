/* Gateways killed with SIGKILL while the pool serves (issue 12): the survivors notice each
 * death on the clock board (a word unchanged for 2 * DM_CLOCK_STALE_MS) and repair the key
 * counter from the table, so DBSIZE equals what SCAN returns afterwards; and every write
 * whose reply arrived is there.
 *
 * 0. A gateway stopped cleanly is not taken for dead (it clears its clock-board slot).
 * 1. A gateway whose key counter FAAs are all dropped (test fault 'uncounted': the FAAs a
 *    gateway killed at the wrong instant never sends) writes 200 new keys and is killed:
 *    DBSIZE is 200 short until a survivor repairs it.
 * 2. Four writers (small values, one in 16 of 20-200 KB) create and delete keys through
 *    three gateways while one of them is SIGKILLed and restarted 4 times. The survivors
 *    take each dead gateway's quarantine over from its free log: what the deaths leave
 *    taken and unusable (measured against what dmkv-pool-reclaim --dry-run marks live)
 *    stays under a tenth of the live data.
 * 3. One more death right after 3 s of pipelined rewrites through the victim: what it
 *    leaves stays under a tenth of live. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"

#define WRITERS 4
#define KEYS_PER_WRITER 400
#define KILLS 4

static it_pool_t pool;
static it_proc_t gw[3];
static atomic_int port_of[3];
static atomic_bool stop_load;
static atomic_long acked, unknown;

/* Per key of a writer: 0 absent, 1 present (value = tag), -1 outcome unknown. */
static signed char state[WRITERS][KEYS_PER_WRITER];
static unsigned tag[WRITERS][KEYS_PER_WRITER];

static long long info_field(redisContext *c, const char *name)
{
    return (long long)it_info_field(c, "dmkv", name);
}

static long long dbsize(redisContext *c)
{
    redisReply *r = it_cmd(c, "DBSIZE");
    CHECK(r->type == REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

static long long scan_count(redisContext *c)
{
    long long n = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = it_cmd(c, "SCAN %s COUNT 200", cursor);
        CHECKF(r->type == REDIS_REPLY_ARRAY && r->elements == 2, "SCAN answered %s",
               r->type == REDIS_REPLY_ERROR ? r->str : "no array");
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        n += (long long)r->element[1]->elements;
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

static void kill_gateway(it_proc_t *p)
{
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

/* Sum of an INFO dmkv field over the two gateways that are never killed. */
static long long survivors(redisContext *a, redisContext *b, const char *name)
{
    return info_field(a, name) + info_field(b, name);
}

/* Wait until the survivors have found `dead` deaths and no repair is running. */
static void wait_repaired(redisContext *a, redisContext *b, long long dead)
{
    for (int i = 0; i < 600; i++) {
        if (survivors(a, b, "dead_gateways_found") >= dead &&
            !survivors(a, b, "dead_gateway_repair_running")) {
            CHECK(survivors(a, b, "dead_gateway_repairs_failed") == 0);
            return;
        }
        usleep(100 * 1000);
    }
    CHECKF(0, "the survivors found %lld of %lld deaths, %lld repairs",
           survivors(a, b, "dead_gateways_found"), dead, survivors(a, b, "dead_gateway_repairs"));
}

static redisContext *connect_to(int g)
{
    int port = atomic_load(&port_of[g]);
    if (!port) return NULL;
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    struct timeval tv = {5, 0};
    redisSetTimeout(c, tv);
    return c;
}

/* The pool and allocator lines of each gateway's INFO (when a write failed). */
static void print_allocators(void)
{
    const char *want[] = {"allocator_", "pool_", "chunk_tail", "free_list"};
    for (int g = 0; g < 3; g++) {
        redisContext *d = connect_to(g);
        if (!d) continue;
        redisReply *x = redisCommand(d, "INFO");
        char *save = NULL;
        for (char *ln = x ? strtok_r(x->str, "\r\n", &save) : NULL; ln;
             ln = strtok_r(NULL, "\r\n", &save))
            for (int j = 0; j < 4; j++)
                if (!strncmp(ln, want[j], strlen(want[j]))) fprintf(stderr, "gw%d %s\n", g, ln);
        if (x) freeReplyObject(x);
        redisFree(d);
    }
}

/* INFO dmkv field of gateway g (0 when it is not running). */
static long long info_field_of(int g, const char *name)
{
    redisContext *d = connect_to(g);
    if (!d) return 0;
    long long v = info_field(d, name);
    redisFree(d);
    return v;
}

/* One line of what gateway g holds before it is killed (what a death may lose): its free
 * lists, current region and returned blocks it took back. The runs that lost most had the
 * victim take dozens of returned blocks back. */
static void print_victim(int g, int kill)
{
    fprintf(stderr,
            "kill %d: the victim holds %lld bytes listed free (%lld claimed ahead, %lld in no "
            "free log), %lld of region; took %lld returned blocks back; %lld claims, %lld "
            "waits\n",
            kill, info_field_of(g, "allocator_free_list_bytes"),
            info_field_of(g, "allocator_claimed_ahead_bytes"),
            info_field_of(g, "allocator_unlogged_free_bytes"),
            info_field_of(g, "allocator_region_bytes"),
            info_field_of(g, "allocator_blocks_taken_back"), info_field_of(g, "allocator_claims"),
            info_field_of(g, "allocator_claim_waits"));
}

/* What dead gateways left: the pool's taken bytes that are neither live (what the indexes
 * reach, marked by dmkv-pool-reclaim --dry-run, which changes nothing) nor free for
 * someone (the spare board, the returned stacks, each running gateway's lists, current
 * regions, spare tails and free logs). Before the free logs, the dead gateways'
 * quarantines were most of it: 36 MB against 10 MB live after the kills below. Call with
 * no command running. Returns the lost bytes; *live: the marked live bytes. */
static long long pool_lost(redisContext *a, const char *uri, const char *when, long long *live)
{
    usleep(300 * 1000); /* every gateway's cron has flushed its counts */
    long long held = 0;
    const char *fields[] = {"allocator_free_list_bytes", "allocator_region_bytes",
                            "chunk_tail_bytes_spare", "allocator_free_log_bytes"};
    for (int g = 0; g < 3; g++)
        for (int k = 0; k < 4; k++)
            held += info_field_of(g, fields[k]);
    redisReply *r = it_cmd(a, "INFO memory");
    long long taken = atoll(strstr(r->str, "pool_taken_bytes:") + 17),
              spare = atoll(strstr(r->str, "pool_spare_board_bytes:") + 23),
              ret = atoll(strstr(r->str, "pool_returned_bytes:") + 20);
    freeReplyObject(r);
    char tool[1024], cmd[2048], line[512];
    it_tool_path("DMKV_POOL_RECLAIM", "bench/dmkv-pool-reclaim", tool, sizeof(tool));
    snprintf(cmd, sizeof(cmd), "%s --dry-run %s 2>&1", tool, uri);
    FILE *f = popen(cmd, "r");
    CHECK(f);
    *live = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "live_bytes %lld", live) != 1 && !strncmp(line, "dmkv-pool", 9))
            fputs(line, stderr);
    CHECK(pclose(f) == 0 && *live > 0);
    long long lost = taken - *live - spare - ret - held;
    fprintf(stderr,
            "pool %s: %lld taken = %lld live + %lld free (board, stacks; gateways' lists, "
            "regions, logs) + %lld lost (%.1f%% of live)\n",
            when, taken, *live, spare + ret + held, lost, 100.0 * (double)lost / (double)*live);
    return lost;
}

/* pool_lost counted until two counts a second apart agree (at most 8 counts): a gateway's
 * INFO lists are a cron tick old against the pool's own counters, so a count taken while a
 * survivor pushes a dead one's quarantine on the returned stack counts those blocks twice
 * for a moment (16.8 MB of 73 MB pushed, a negative loss of -102% of live that the smaller
 * of two counts took), or while it takes them, not at all (CI on 2026-12-05: 17.4 MB
 * "lost" to the four kills under load, 202% of live, in the one count taken then). */
static long long pool_lost_settled(redisContext *a, const char *uri, const char *when,
                                   long long *live)
{
    long long settled = pool_lost(a, uri, when, live), prev;
    int counts = 1;
    do {
        prev = settled;
        usleep(1000 * 1000);
        settled = pool_lost(a, uri, "a second later", live);
    } while (settled != prev && ++counts < 8);
    return settled;
}

/* Print the lines of gateway g's log that say a peer took it for dead (pool/alloc.c,
 * free_log.c warnings). */
static void print_taken_for_dead(int g)
{
    FILE *f = fopen(gw[g].log, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "found this gateway dead"))
            fprintf(stderr, "gateway %d was taken for dead while it ran: %s", g, line);
    fclose(f);
}

static void *writer_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    int g = id % 3;
    redisContext *c = NULL;
    static __thread char big[200 * 1024];
    memset(big, 'a' + id, sizeof(big));
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    for (unsigned n = 0; !atomic_load(&stop_load); n++) {
        if (c && g != id % 3 && n % 64 == 0 && atomic_load(&port_of[id % 3])) {
            redisFree(c); /* back to our own gateway once it was restarted */
            c = NULL;
            g = id % 3;
        }
        if (!c) c = connect_to(g);
        if (!c) {
            usleep(20 * 1000);
            g = (g + 1) % 3;
            continue;
        }
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int k = (int)(x % KEYS_PER_WRITER), del = (x >> 20) % 3 == 0;
        redisReply *r;
        size_t len = (x >> 30) % 16 == 0 ? 20 * 1024 + (x >> 40) % (180 * 1024) : 100;
        if (del) {
            r = redisCommand(c, "DEL gd:%d:%d", id, k);
        } else {
            snprintf(big, 16, "%u:", n);
            r = redisCommand(c, "SET gd:%d:%d %b", id, k, big, len);
        }
        if (!r || (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "ERR dmkv", 8))) {
            state[id][k] = -1; /* the gateway died under it: it may or may not have landed */
            atomic_fetch_add(&unknown, 1);
            if (r) freeReplyObject(r);
            redisFree(c);
            c = NULL;
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) print_allocators();
        CHECKF(r->type == (del ? REDIS_REPLY_INTEGER : REDIS_REPLY_STATUS), "writer %d: %s", id,
               r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        state[id][k] = del ? 0 : 1;
        tag[id][k] = n;
        atomic_fetch_add(&acked, 1);
        freeReplyObject(r);
    }
    if (c) redisFree(c);
    return NULL;
}

int main(void)
{
    it_begin("gateway_death", 600);
    if (!it_shared_pool_start(&pool)) return IT_SKIP;
    const char *uris[] = {pool.uri};
    it_gateway_start(&gw[0], uris, 1, 1, NULL);
    it_gateway_start(&gw[1], uris, 1, 2, NULL);
    redisContext *a = it_connect(gw[0].port), *b = it_connect(gw[1].port);
    atomic_store(&port_of[0], gw[0].port);
    atomic_store(&port_of[1], gw[1].port);
    /* Taken and neither reached nor listed before any gateway stopped or died (what the
     * walk does not see of the gateways' start, ~135 KB): the base of what deaths add. */
    long long live0, lost0 = pool_lost(a, uris[0], "at the start", &live0);

    /* 0. A gateway stopped cleanly clears its clock-board slot: not a death. Its chunk
     * tail stays registered and its free blocks are handed over: the next gateway that
     * claims the slot (gw[2], below) takes both over. */
    it_proc_t clean;
    it_gateway_start(&clean, uris, 1, 1, NULL);
    redisContext *cc = it_connect(clean.port);
    for (int i = 0; i < 100; i++)
        redisAppendCommand(cc, "SET clean:%d v", i);
    it_pipeline_ok(cc, 100);
    for (int i = 0; i < 100; i++)
        redisAppendCommand(cc, "DEL clean:%d", i);
    it_pipeline_ok(cc, 100);
    redisFree(cc);
    CHECK(it_proc_stop(&clean) == 0);

    /* 1. Counter FAAs that never left. */
    setenv("DMKV_FAULT_STALL", "uncounted:1:1", 1);
    it_gateway_start(&gw[2], uris, 1, 1, NULL);
    unsetenv("DMKV_FAULT_STALL");
    redisContext *lossy = it_connect(gw[2].port);
    for (int i = 0; i < 50 && !info_field(lossy, "chunk_tails_adopted"); i++)
        usleep(100 * 1000);
    CHECKF(info_field(lossy, "chunk_tails_adopted") == 1,
           "the cleanly stopped gateway's chunk tail was not taken over by its slot's next "
           "owner");
    /* ... and the 100 blocks its DELs freed, handed over at its stop (32 bytes each: a
     * compact KV block, dmkv/kvblock.h). */
    CHECKF(info_field(lossy, "free_lists_adopted") == 1 &&
               info_field(lossy, "free_list_bytes_adopted") >= 100 * 32,
           "the cleanly stopped gateway's free blocks were not taken over (%lld bytes)",
           info_field(lossy, "free_list_bytes_adopted"));
    /* ... but not its free log's 1 MiB block, which went back to the pool whole (in the
     * handoff it was lost when its taker died holding it past the reuse horizon). */
    CHECKF(info_field(lossy, "free_list_bytes_adopted") < 1024 * 1024,
           "the stopped gateway handed over %lld bytes: its free log's block among them",
           info_field(lossy, "free_list_bytes_adopted"));
    for (int i = 0; i < 200; i++)
        redisAppendCommand(lossy, "SET lost:%d v", i);
    it_pipeline_ok(lossy, 200);
    redisFree(lossy);
    CHECKF(dbsize(a) == 0, "DBSIZE %lld with the counter FAAs dropped", dbsize(a));
    kill_gateway(&gw[2]);
    fprintf(stderr, "a gateway that wrote 200 keys without counting them was killed\n");
    wait_repaired(a, b, 1);
    CHECKF(survivors(a, b, "dead_gateways_found") == 1,
           "%lld deaths found: the cleanly stopped gateway was taken for dead",
           survivors(a, b, "dead_gateways_found"));
    CHECKF(dbsize(a) == 200 && dbsize(b) == 200 && scan_count(a) == 200,
           "after the repair: DBSIZE %lld / %lld, SCAN %lld", dbsize(a), dbsize(b), scan_count(a));
    CHECK(survivors(a, b, "key_count_repaired_by") == 200);
    for (int i = 0; i < 200; i++)
        redisAppendCommand(a, "DEL lost:%d", i);
    it_pipeline_ok(a, 200);
    CHECK(dbsize(b) == 0);
    pool_lost(a, uris[0], "after the first death", &live0);

    /* 2. Kills under write load. */
    it_gateway_start(&gw[2], uris, 1, 1, NULL);
    for (int g = 0; g < 3; g++)
        atomic_store(&port_of[g], gw[g].port);
    pthread_t th[WRITERS];
    for (int i = 0; i < WRITERS; i++)
        pthread_create(&th[i], NULL, writer_main, (void *)(intptr_t)i);
    static char qval[8192];
    memset(qval, 'q', sizeof(qval));
    for (int k = 0; k < KILLS; k++) {
        /* Every other victim lives past its reuse horizon (2 s less 300 ms), so it holds
         * large blocks it could have reused: a survivor takes those its log never claimed
         * (3.5 MB lost per such death before claims). */
        usleep((k % 2 ? 3500 : 1500) * 1000);
        /* Kill it once it has freed a block (listed free, and so in its free log while
         * quarantined), so there is quarantine for a survivor to take over (checked below).
         * The writers' frees through it were not enough in the rxe guest on a busy host:
         * 2026-11-28, four victims with 0 bytes listed free after 1.5 s of load, then 160
         * bytes after waiting for them. One 8 KB value written and deleted through it makes
         * sure. */
        redisContext *v = connect_to(2);
        CHECK(v);
        EXPECT_STATUS(it_cmd(v, "SET gd:quarantine %b", qval, sizeof(qval)), "OK");
        redisReply *dr = it_cmd(v, "DEL gd:quarantine");
        CHECK(dr->type == REDIS_REPLY_INTEGER && dr->integer == 1);
        freeReplyObject(dr);
        redisFree(v);
        for (int w = 0; w < 200 && info_field_of(2, "allocator_free_list_bytes") <= 0; w++)
            usleep(100 * 1000);
        print_victim(2, k + 1);
        atomic_store(&port_of[2], 0);
        kill_gateway(&gw[2]);
        usleep(300 * 1000);
        it_gateway_start(&gw[2], uris, 1, 1, NULL);
        atomic_store(&port_of[2], gw[2].port);
    }
    usleep(1000 * 1000);
    atomic_store(&stop_load, 1);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr, "%d kills under load: %ld writes acknowledged, %ld with unknown outcome\n",
            KILLS, atomic_load(&acked), atomic_load(&unknown));
    CHECK(atomic_load(&acked) > 200);
    wait_repaired(a, b, 1 + KILLS);

    /* Every acknowledged write is there; DBSIZE equals SCAN and the keys GET finds. */
    long long present = 0;
    for (int id = 0; id < WRITERS; id++)
        for (int k = 0; k < KEYS_PER_WRITER; k++) {
            redisReply *r = it_cmd(k % 2 ? a : b, "GET gd:%d:%d", id, k);
            CHECK(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL);
            if (state[id][k] == 0)
                CHECKF(r->type == REDIS_REPLY_NIL, "gd:%d:%d deleted, GET found it", id, k);
            if (state[id][k] == 1) {
                char want[16];
                snprintf(want, sizeof(want), "%u:", tag[id][k]);
                CHECKF(r->type == REDIS_REPLY_STRING && !strncmp(r->str, want, strlen(want)),
                       "gd:%d:%d: GET does not return its acknowledged SET", id, k);
            }
            present += r->type == REDIS_REPLY_STRING;
            freeReplyObject(r);
        }
    long long db = dbsize(a), scanned = scan_count(b);
    fprintf(stderr,
            "after the repairs: %lld keys present, DBSIZE %lld, SCAN %lld; key count corrected "
            "by %lld in all\n",
            present, db, scanned, survivors(a, b, "key_count_repaired_by"));
    CHECKF(db == present && scanned == present, "DBSIZE %lld, SCAN %lld, GET finds %lld", db,
           scanned, present);
    /* Each dead gateway's registered chunk tail (above its watermark) was taken over by a
     * survivor or by its own successor (gw[2], whose count a later kill may have lost). */
    long long tails = survivors(a, b, "chunk_tails_adopted"),
              tail_bytes = survivors(a, b, "chunk_tail_bytes_adopted");
    fprintf(stderr,
            "%lld chunk tails of dead gateways taken over by the survivors (%lld bytes; %lld "
            "taken from the spare board by them)\n",
            tails, tail_bytes, survivors(a, b, "chunk_tails_from_spare_board"));
    CHECKF(tails >= 1 && tail_bytes > 0, "no dead gateway's chunk tail was taken over");

    long long logs = survivors(a, b, "free_logs_adopted") + info_field_of(2, "free_logs_adopted");
    long long log_bytes =
        survivors(a, b, "free_log_bytes_adopted") + info_field_of(2, "free_log_bytes_adopted");
    long long early = survivors(a, b, "free_log_early_bytes_adopted") +
                      info_field_of(2, "free_log_early_bytes_adopted");
    fprintf(stderr,
            "free logs of dead gateways taken over: %lld (%lld bytes of quarantine, %lld of "
            "them large blocks past their horizon never claimed)\n",
            logs, log_bytes, early);
    /* A live gateway a peer took for dead (its clock-board ticks late: seen once in the
     * emulated rdma guest) has its tail and free log taken over while it still counts its
     * region as its own until its next raise: the sums below then count that region twice. */
    for (int g = 0; g < 3; g++)
        print_taken_for_dead(g);
    long long live, lost = pool_lost_settled(a, uris[0], "after the kills", &live) - lost0;
    CHECKF(logs >= KILLS && log_bytes > 0, "%lld free logs of %d dead gateways taken over", logs,
           KILLS);
    /* Each death still loses its reserve above the carve point (16 KB, or twice its last
     * tick's carving of small blocks; a block of 16 KB or more raises the watermark to its
     * own end plus that), the frees staged since its last free-log write (under 64 KB: more
     * calls for a write at once), a value in flight (up to 200 KB), the small blocks it
     * freed within the names window before its horizon and those it claimed ahead of use.
     * 0.6-4.2% of the ~10 MB live in 12 runs of three variants on 2026-12-06; 1.1-22.7%
     * before the small pieces kept reusable were logged (docs/leases.md "Pieces kept
     * reusable"), 173% before claims with every victim living 4.5 s. The bound, a tenth of
     * live, was a fifth until then. */
    fprintf(stderr, "lost to the %d deaths: %lld bytes (%.1f%% of live)\n", KILLS + 1, lost,
            100.0 * (double)lost / (double)live);
    CHECKF(lost <= live / 10, "%lld bytes lost to dead gateways, %lld live", lost, live);

    /* 3. A death under pipelined rewrites: one connection pipelines SETs of FAST_KEYS keys 64
     * at a time through the victim for 3 s (longer, up to 15 s, until a quarter of the keys
     * was written again), each rewrite freeing the block of the value before, and the victim
     * is killed right after. (In 3 s the ROLEX variants, 2-6k SETs a second, rewrote no key:
     * the victim freed nothing and the check below tested nothing, in 16 of 16 runs. With
     * 5,000 keys instead, the RACE victims ran 33-55k SETs a second and one of 30 runs lost
     * 1.27 MB to the names window, docs/leases.md "Open: a fast death ...".) A free log's
     * 1 MiB ring (32,766 entries) laps within a quarantine from about 16,000 frees a second: by
     * hand (release build, 100-140k frees a second) one death lost 29% of live until a ring that
     * laps moves to a block four times as large (5%). The release build runs 160-230k SETs a
     * second: there the ring grew a step a second too slowly (52 MB lost against 12.7 MB live) and
     * the horizon's 300 ms lead lost 55-80% of live, until the ring grew to its rate at once and a
     * busy worker's lead became 30 ms (0.9-1.1 MB, 6-9%). The ASan build here runs 5-10k SETs a
     * second: this checks a pipelined death's loss and prints the victim's free log size;
     * test_pool_free test_log_grows and test_log_grows_fast check the growth itself. */
    /* Measured from the settled count after the kills (pool_lost_settled: a single count
     * may read blocks in motion twice, or not at all). */
    long long lost_before = lost > 0 ? lost + lost0 : lost0; /* below the start's: a moment */
    redisContext *v = it_connect(gw[2].port);
    static char fval[100];
    memset(fval, 'f', sizeof(fval));
    enum { FAST_KEYS = 20000 };
    long long sets = 0, freed0 = info_field_of(2, "allocator_freed_bytes"), t0 = it_now_ms();
    for (long long n = 0;
         it_now_ms() - t0 < 3000 || (sets < FAST_KEYS + FAST_KEYS / 4 && it_now_ms() - t0 < 15000);
         n++) {
        for (int i = 0; i < 64; i++)
            redisAppendCommand(v, "SET fast:%d %b", (int)((n * 64 + i) * 7919 % FAST_KEYS), fval,
                               sizeof(fval));
        it_pipeline_ok(v, 64);
        sets += 64;
    }
    long long ms = it_now_ms() - t0, per_s = sets * 1000 / ms;
    redisFree(v);
    long long log_bytes_victim = info_field_of(2, "allocator_free_log_bytes");
    long long freed = info_field_of(2, "allocator_freed_bytes") - freed0;
    /* INFO's count is flushed by the cron, and ROLEX's rewrites came only in the loop's
     * last moments: a run read 0 with 5,024 rewrites done. Look again for up to 2 s. */
    for (int k = 0; k < 20 && freed <= 0; k++) {
        usleep(100000);
        freed = info_field_of(2, "allocator_freed_bytes") - freed0;
    }
    fprintf(stderr,
            "the fast victim: %lld SETs in %lld ms (%lld a second), %lld bytes freed, its free "
            "log %lld bytes\n",
            sets, ms, per_s, freed, log_bytes_victim);
    CHECKF(freed > 0, "the fast victim freed nothing in %lld SETs of %d keys", sets, FAST_KEYS);
    print_victim(2, KILLS + 1); /* the fast victim */
    kill_gateway(&gw[2]);
    wait_repaired(a, b, 2 + KILLS);
    long long settled = pool_lost_settled(a, uris[0], "after the fast death", &live);
    long long fast = settled - lost_before;
    fprintf(stderr, "lost to the fast death: %lld bytes (%.1f%% of live)\n", fast,
            100.0 * (double)fast / (double)live);
    /* What a death may lose grows with its rate: the horizon's lead (30 ms when busy) and the
     * frees staged since the last tick (10 ms) and on the wire, each a 100-byte value's block
     * (160 bytes at most in the 32-byte grain), plus a twentieth of live for the rest. The
     * victim's freed bytes count when more: with SepHash each merge (one per 128 appends)
     * also frees the segment's old MainSegment, 300-400 bytes freed per SET in all (a clean
     * clone's ASan run lost 584,640 bytes against a bound of 584,281 from the values). */
    long long freed_per_s = freed * 1000 / ms;
    long long rate = per_s * 160 > freed_per_s ? per_s * 160 : freed_per_s; /* bytes/s */
    long long bound = live / 20 + rate * 50 / 1000;
    CHECKF(fast <= bound,
           "%lld bytes lost to one death at %lld SETs a second, %lld live (bound %lld)", fast,
           per_s, live, bound);
    redisFree(a);
    redisFree(b);
    for (int g = 0; g < 3; g++)
        it_proc_stop(&gw[g]);
    return 0;
}
