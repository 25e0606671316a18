/* Histories under faults, judged by the linearizability checker (issue 10, tests/lincheck).
 *
 * Two memory nodes, three gateways (the third with its wall clock shifted by ±1 s through
 * libfaketime when installed; max-clock-skew-ms 2000 so it keeps serving and its leases
 * and locks are exercised under skew). Twelve clients, four per gateway, run GET, SET,
 * SET NX/XX/GET, DEL, INCR, GETSET, GETDEL and APPEND on 16 keys with values unique per
 * write, recording invoke and return times. Meanwhile a fault thread, in turn:
 *   - SIGSTOPs a gateway for 2.5-4 s (its clients time out after 2 s: unknown outcomes),
 *   - SIGKILLs a gateway mid-operation and starts a new one on the same memory nodes,
 * and a scanner runs full SCANs: keys written before the run and never touched must be
 * returned, keys outside the test's key set never. Afterwards, with every gateway alive:
 * each gateway GETs the same value for every key, SCAN returns exactly the present keys,
 * DBSIZE agrees, every key can be DELeted. The history, end-state reads included, must be
 * linearizable; a failing one is written to /tmp for dmkv-lincheck.
 *
 *   it_linearizable [--ops N] [--fault-rounds R] [--seconds S] [--no-faults] [--seed S]
 *                   [--stall SPEC] [--splits] [--fill-among] [--timeout-ms MS] [--no-errors]
 *                   [--keep FILE]
 * --stall sets DMKV_FAULT_STALL for the first gateway (dmkv/fault.h); --no-errors fails
 * the run on an error reply (a fault that must cost latency only), but for "connection
 * lost": back-to-back stalls past the 3 s lease get the holder fenced (dmkv/fence.h).
 * Default (make test): at least 40000 operations and 6 fault rounds (3 stops, 3 kills),
 * within 240 s; tests/lincheck/long-run.sh runs 1e6 operations. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "integration/it_check.h"
#include "integration/procs.h"
#include "lincheck/lincheck.h"
#include "lincheck/scancheck.h"

#define NGW 3
#define CLIENTS_PER_GW 4
#define NCLIENTS (NGW * CLIENTS_PER_GW)
#define NSTR 12
#define NCNT 4
#define NSTABLE 64

static lc_history_t *hist;
static sc_log_t *scans_log;    /* the same commands as presence changes and witnesses */
static long timeout_ms = 2000; /* clients give up (outcome unknown) after this */
static int no_errors = 0;      /* --no-errors: an error reply fails the run, but "connection lost"
                                  (a holder stalled past the lease is fenced: outcome unknown) */
static atomic_long error_replies, lost_replies;
static char first_error[128];
static long ops_total = 40000, seconds_max = 240, min_rounds = 6;
static atomic_long rounds; /* fault rounds completed */
static int faults = 1;
static unsigned seed = 1;
static atomic_long ops_done, unknown_ops, stops, kills, scans;
static atomic_int stop_all, fault_exit;
static int end_failures; /* end-state disagreements: reported, then the history is checked */

#define SOFT_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: END STATE: ", __FILE__, __LINE__);                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            end_failures++;                                                                        \
        }                                                                                          \
    } while (0)
static uint64_t deadline_ns;

static pthread_mutex_t gw_mu = PTHREAD_MUTEX_INITIALIZER;
static it_proc_t gw[NGW];
static int gw_port[NGW];
static it_pool_t pools[2];
static const char *skew = NULL;  /* the third gateway's faketime offset, or NULL */
static const char *stall = NULL; /* DMKV_FAULT_STALL for the first gateway, or NULL */
static int splits = 0;           /* --splits: tiny subtables, a filler, splits held open */
static int fill_among = 0;       /* --fill-among: the filler's keys sort among the checked ones */
static atomic_long fill_acked, fill_unknown, fill_sent;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void key_name(char *buf, size_t n, int k)
{
    if (k < NSTR)
        snprintf(buf, n, "lin:s:%02d", k);
    else
        snprintf(buf, n, "lin:n:%02d", k - NSTR);
}

static void start_gateway(int i)
{
    const char *uris[2] = {pools[0].uri, pools[1].uri};
    const char *extra[] = {"--max-clock-skew-ms", "2000", NULL};
    if (i == NGW - 1 && skew) it_faketime_on(skew, NULL);
    if (i == 0 && stall) setenv("DMKV_FAULT_STALL", stall, 1);
    if (splits) {
        setenv("DMKV_RACE_GROUPS", "8", 1);      /* a split every ~100 keys */
        setenv("DMKV_SPLIT_PAUSE_MS", "300", 1); /* each split holds its copy unpublished */
    }
    it_proc_t p;
    it_gateway_start(&p, uris, 2, 1, extra);
    unsetenv("DMKV_FAULT_STALL");
    unsetenv("DMKV_RACE_GROUPS");
    unsetenv("DMKV_SPLIT_PAUSE_MS");
    if (i == NGW - 1 && skew) it_faketime_off();
    pthread_mutex_lock(&gw_mu);
    gw[i] = p;
    gw_port[i] = p.port;
    pthread_mutex_unlock(&gw_mu);
}

static redisContext *connect_gw(int i)
{
    pthread_mutex_lock(&gw_mu);
    int port = gw_port[i];
    pthread_mutex_unlock(&gw_mu);
    return it_try_connect(port, timeout_ms);
}

/* Map a reply to a checker result; UNKNOWN for anything that does not say what happened. */
static lc_result_t classify(redisReply *r, lc_op_t op)
{
    lc_result_t res = {.kind = LC_R_UNKNOWN};
    if (!r) return res;
    switch (r->type) {
    case REDIS_REPLY_NIL:
        res.kind = LC_R_NIL;
        break;
    case REDIS_REPLY_STATUS:
        if (!strcmp(r->str, "OK")) res.kind = LC_R_OK;
        break;
    case REDIS_REPLY_STRING:
        res.kind = LC_R_STR;
        res.str = r->str;
        res.len = r->len;
        break;
    case REDIS_REPLY_INTEGER:
        res.kind = LC_R_INT;
        res.num = r->integer;
        break;
    case REDIS_REPLY_ERROR:
        if (op == LC_INCR && strstr(r->str, "not an integer")) res.kind = LC_R_NOTINT;
        break;
    }
    return res;
}

/* What a command can do to its key's presence and what its reply proves (scancheck.h). */
static unsigned presence_of(lc_op_t op, unsigned flags, const lc_result_t *res)
{
    int known = res->kind != LC_R_UNKNOWN;
    switch (op) {
    case LC_GET:
        return !known ? 0 : res->kind == LC_R_NIL ? SC_SAW_ABSENT : SC_SAW_PRESENT;
    case LC_SET:
        if (!known) return SC_MAKES;
        if ((flags & LC_XX) && res->kind == LC_R_NIL) return SC_MAKES | SC_SAW_ABSENT;
        return SC_MAKES | SC_SAW_PRESENT; /* set, or NX found it there */
    case LC_INCR:
    case LC_APPEND:
    case LC_GETSET:
        return SC_MAKES | (known ? SC_SAW_PRESENT : 0);
    case LC_DEL:
    case LC_GETDEL:
        return SC_DELETES | (known ? SC_SAW_ABSENT : 0);
    default:
        return 0;
    }
}

/* Run one command and record it. Returns the reply (caller frees) or NULL (connection
 * lost or timed out: the caller reconnects). */
static redisReply *record(redisContext *c, int client, lc_op_t op, unsigned flags, int k,
                          const char *arg)
{
    char key[32];
    key_name(key, sizeof(key), k);
    const char *argv[6];
    size_t lens[6];
    int n = 0;
    static const char *names[] = {"GET", "SET", "DEL", "INCR", "GETSET", "GETDEL", "APPEND"};
    argv[n] = names[op], lens[n] = strlen(argv[n]), n++;
    argv[n] = key, lens[n] = strlen(key), n++;
    if (arg) argv[n] = arg, lens[n] = strlen(arg), n++;
    if (flags & LC_NX) argv[n] = "NX", lens[n++] = 2;
    if (flags & LC_XX) argv[n] = "XX", lens[n++] = 2;
    if (flags & LC_GETOLD) argv[n] = "GET", lens[n++] = 3;
    uint64_t t0 = now_ns();
    redisReply *r = redisCommandArgv(c, n, argv, lens);
    uint64_t t1 = now_ns();
    lc_result_t res = classify(r, op);
    if (res.kind == LC_R_UNKNOWN) atomic_fetch_add(&unknown_ops, 1);
    if (r && r->type == REDIS_REPLY_ERROR && res.kind != LC_R_NOTINT) {
        if (strstr(r->str, "connection lost"))
            atomic_fetch_add(&lost_replies, 1);
        else if (atomic_fetch_add(&error_replies, 1) == 0)
            snprintf(first_error, sizeof(first_error), "%s %s: %s", names[op], key, r->str);
    }
    /* A read with no answer changed nothing: left out (it only widens the search). */
    if (!(op == LC_GET && res.kind == LC_R_UNKNOWN)) {
        size_t idx =
            lc_invoke(hist, client, op, flags, key, strlen(key), arg, arg ? strlen(arg) : 0, t0);
        if (res.kind != LC_R_UNKNOWN) lc_return(hist, idx, &res, t1);
    }
    sc_log_op(scans_log, (unsigned)k, presence_of(op, flags, &res), t0,
              res.kind == LC_R_UNKNOWN ? SC_UNKNOWN : t1);
    atomic_fetch_add(&ops_done, 1);
    if (!r || c->err) {
        if (r) freeReplyObject(r);
        return NULL;
    }
    return r;
}

static void *client_main(void *arg)
{
    int id = (int)(intptr_t)arg, g = id % NGW;
    unsigned rs = seed * 7919u + (unsigned)id;
    redisContext *c = NULL;
    char val[64];
    /* Until the operations are done and, with faults, min_rounds faults have happened. */
    for (long j = 0;
         !atomic_load(&stop_all) && now_ns() < deadline_ns &&
         (atomic_load(&ops_done) < ops_total || (faults && atomic_load(&rounds) < min_rounds));
         j++) {
        if (!c) {
            c = connect_gw(g);
            if (!c) {
                g = (g + 1) % NGW; /* a killed or restarting gateway: try the next */
                usleep(50000);
                j--;
                continue;
            }
        }
        snprintf(val, sizeof(val), "c%d.%ld", id, j);
        int k = rand_r(&rs) % (NSTR + NCNT);
        int p = rand_r(&rs) % 100;
        lc_op_t op;
        unsigned fl = 0;
        const char *a = NULL;
        if (k >= NSTR) { /* counters */
            if (p < 70)
                op = LC_INCR;
            else if (p < 90)
                op = LC_GET;
            else if (p < 95)
                op = LC_DEL;
            else
                op = LC_SET, a = "100";
        } else if (p < 30)
            op = LC_GET;
        else if (p < 50)
            op = LC_SET, a = val;
        else if (p < 60)
            op = LC_SET, a = val, fl = LC_NX;
        else if (p < 65)
            op = LC_SET, a = val, fl = LC_XX;
        else if (p < 70)
            op = LC_SET, a = val, fl = LC_GETOLD;
        else if (p < 80)
            op = LC_DEL;
        else if (p < 85)
            op = LC_GETSET, a = val;
        else if (p < 90)
            op = LC_GETDEL;
        else
            op = LC_APPEND, a = val;
        redisReply *r = record(c, id, op, fl, k, a);
        if (!r) {
            redisFree(c);
            c = NULL;
            g = (g + 1) % NGW;
            continue;
        }
        freeReplyObject(r);
    }
    if (c) redisFree(c);
    return NULL;
}

/* Full SCAN iterations: every stable key returned, nothing outside the key set. */
static void *scanner_main(void *arg)
{
    (void)arg;
    int g = 0;
    redisContext *c = NULL;
    while (!atomic_load(&stop_all) && now_ns() < deadline_ns) {
        if (!c) {
            c = connect_gw(g); /* one connection until it fails, then the next gateway */
            g = (g + 1) % NGW;
        }
        if (!c) {
            usleep(100000);
            continue;
        }
        char seen[NSTABLE] = {0};
        unsigned char returned[NSTR + NCNT] = {0};
        char cursor[32] = "0";
        int ok = 1;
        uint64_t t0 = now_ns();
        do {
            redisReply *r = redisCommand(c, "SCAN %s MATCH lin:* COUNT 50", cursor);
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
                ok = 0; /* a stopped or killed gateway: this iteration does not count */
                if (r) freeReplyObject(r);
                break;
            }
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            for (size_t i = 0; i < r->element[1]->elements; i++) {
                const char *k = r->element[1]->element[i]->str;
                int n;
                if (sscanf(k, "lin:stable:%d", &n) == 1 && n >= 0 && n < NSTABLE) {
                    seen[n] = 1;
                } else if (fill_among && strchr(k, '~')) {
                    continue; /* a filler's key (fill_name) */
                } else {
                    int valid = 0;
                    for (int q = 0; q < NSTR + NCNT && !valid; q++) {
                        char name[32];
                        key_name(name, sizeof(name), q);
                        valid = !strcmp(name, k);
                        if (valid) returned[q] = 1;
                    }
                    CHECKF(valid, "SCAN returned '%s', a key the test never wrote", k);
                }
            }
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0 && !atomic_load(&stop_all));
        if (ok && !strcmp(cursor, "0")) {
            sc_log_scan(scans_log, t0, now_ns(), returned);
            for (int i = 0; i < NSTABLE; i++)
                CHECKF(seen[i], "a full SCAN missed lin:stable:%d (present throughout)", i);
            atomic_fetch_add(&scans, 1);
        }
        if (!ok) {
            redisFree(c);
            c = NULL;
        }
        usleep(20000);
    }
    if (c) redisFree(c);
    return NULL;
}

/* The filler's key number i: fill:N, or with --fill-among lin:s:KK~NNNNNN, 400 in a row
 * behind one checked key (lin:s:KK), so the CHIME leaves that hold the checked keys fill and
 * split while the checked keys' inserts share their holds (DMKV_SHARE_LOCKS=always): splits
 * under a shared hold (chime/share.c) happen with checked keys among the members and among
 * the entries that move. */
static void fill_name(char *buf, size_t n, long i)
{
    if (fill_among)
        snprintf(buf, n, "lin:s:%02ld~%06ld", (i / 400) % NSTR, i);
    else
        snprintf(buf, n, "fill:%ld", i);
}

/* --splits, --fill-among: insert fresh keys through every gateway in pipelined batches, so
 * subtables (and leaves) keep splitting under the workload's new keys. */
static void *filler_main(void *arg)
{
    (void)arg;
    int g = 1;
    while (!atomic_load(&stop_all) && now_ns() < deadline_ns) {
        redisContext *c = connect_gw(g);
        g = (g + 1) % NGW;
        if (!c) {
            usleep(50000);
            continue;
        }
        long base = atomic_fetch_add(&fill_sent, 50);
        for (long i = base; i < base + 50; i++) {
            char key[48];
            fill_name(key, sizeof(key), i);
            redisAppendCommand(c, "SET %s x", key);
        }
        for (long i = base; i < base + 50; i++) {
            redisReply *r = NULL;
            if (redisGetReply(c, (void **)&r) != REDIS_OK) {
                atomic_fetch_add(&fill_unknown, base + 50 - i);
                break;
            }
            if (r->type == REDIS_REPLY_STATUS)
                atomic_fetch_add(&fill_acked, 1);
            else
                atomic_fetch_add(&fill_unknown, 1);
            freeReplyObject(r);
        }
        redisFree(c);
        usleep(20000);
    }
    return NULL;
}

static void sleep_ms(long ms)
{
    while (ms > 0 && !atomic_load(&stop_all)) {
        long s = ms > 100 ? 100 : ms;
        usleep((useconds_t)s * 1000);
        ms -= s;
    }
}

static void *fault_main(void *arg)
{
    (void)arg;
    unsigned rs = seed * 31u + 7;
    sleep_ms(1500);
    for (int round = 0; !atomic_load(&stop_all) && now_ns() < deadline_ns; round++) {
        int victim = rand_r(&rs) % NGW;
        if (round % 2 == 0) {
            long ms = 2500 + rand_r(&rs) % 1500;
            pthread_mutex_lock(&gw_mu);
            pid_t pid = gw[victim].pid;
            pthread_mutex_unlock(&gw_mu);
            kill(pid, SIGSTOP);
            atomic_fetch_add(&stops, 1);
            sleep_ms(ms);
            kill(pid, SIGCONT);
        } else {
            pthread_mutex_lock(&gw_mu);
            it_proc_t p = gw[victim];
            pthread_mutex_unlock(&gw_mu);
            kill(p.pid, SIGKILL);
            it_proc_stop(&p); /* reaps it */
            atomic_fetch_add(&kills, 1);
            usleep(300000);
            start_gateway(victim);
        }
        atomic_fetch_add(&rounds, 1);
        sleep_ms(1500 + rand_r(&rs) % 1500);
    }
    /* Gateways this thread started die with it (PR_SET_PDEATHSIG follows the forking
     * thread): stay until the test is over. */
    while (!atomic_load(&fault_exit))
        usleep(10000);
    return NULL;
}

/* Quiescence: a command whose client gave up (unknown outcome) may still be running in a
 * gateway (resumed after SIGSTOP, or retrying after stalls under --stall, with or without
 * faults), and land after the end-state reads below. The checker accepts that (the command
 * is in the history), but GET, SCAN, DBSIZE and DEL would then judge different states:
 * the rdma run of --stall locked:3500:8 once saw a late DEL land between the final GETs and
 * SCAN (GET present, SCAN and DBSIZE without it, DEL 0). Wait until no gateway runs a
 * command (INFO dmkv commands_in_progress), for at most two minutes. */
static void wait_quiescent(void)
{
    uint64_t t0 = now_ns();
    long long first_busy = 0;
    for (int i = 0; i < NGW; i++) {
        long long busy = -1;
        int polls = 0;
        while (now_ns() - t0 < 120ull * 1000000000ull) {
            redisContext *c = connect_gw(i);
            redisReply *r = c ? redisCommand(c, "INFO dmkv") : NULL;
            const char *x =
                r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "commands_in_progress:") : NULL;
            busy = x ? atoll(x + strlen("commands_in_progress:")) : -1;
            if (r) freeReplyObject(r);
            if (c) redisFree(c);
            if (polls++ == 0 && busy > 0) first_busy += busy;
            if (busy == 0) break;
            usleep(200000);
        }
        if (busy != 0) { /* what the next look at a hang needs (docs/testing-concurrency.md) */
            fprintf(stderr, "gateway %d still runs %lld commands; its watchdog said:\n", i, busy);
            it_proc_grep_log(&gw[i], "stalled");
            it_proc_grep_log(&gw[i], "running long");
            redisContext *c = connect_gw(i);
            redisReply *r = c ? redisCommand(c, "INFO everything") : NULL;
            if (r && r->type == REDIS_REPLY_STRING) fprintf(stderr, "gateway %d:\n%s\n", i, r->str);
            if (r) freeReplyObject(r);
            r = c ? redisCommand(c, "CLIENT LIST") : NULL;
            if (r && r->type == REDIS_REPLY_STRING) fprintf(stderr, "%s\n", r->str);
            if (r) freeReplyObject(r);
            if (c) redisFree(c);
            it_proc_dump_log(&gw[i]); /* the watchdog names each stalled command there */
        }
        CHECKF(busy == 0, "gateway %d still runs %lld commands 2 minutes after the run", i, busy);
    }
    if (first_busy)
        fprintf(stderr, "%lld commands still ran after the run's end; all done after %.1f s\n",
                first_busy, (double)(now_ns() - t0) / 1e9);
}

/* After the run: every gateway agrees on every key; SCAN, DBSIZE and DEL agree with GET. */
static void check_end_state(void)
{
    redisContext *c[NGW];
    for (int i = 0; i < NGW; i++) {
        uint64_t t0 = now_ns();
        c[i] = connect_gw(i);
        for (int tries = 0; !c[i] && tries < 30; tries++) {
            sleep(1);
            c[i] = connect_gw(i);
        }
        CHECKF(c[i], "gateway %d (pid %d) does not accept connections after the run", i,
               (int)gw[i].pid);
        if (now_ns() - t0 > 1000000000ull)
            fprintf(stderr, "gateway %d accepted again after %.1f s\n", i,
                    (double)(now_ns() - t0) / 1e9);
        struct timeval tv = {30, 0};
        redisSetTimeout(c[i], tv);
    }
    /* INFO counters summed over the gateways: did the run reach the windows it aims at? */
    const char *f[13] = {
        "chime_lease_takeovers:",      "hybrid_repairs:",        "race_splits:",
        "race_stranded_inserts:",      "race_stranded_adopted:", "chime_lease_fences:",
        "race_addr_cache_blind_sets:", "chime_shared_joins:",    "lease_batches_refused:",
        "lease_chain_breaks:",         "chime_shared_splits:",   "sets_locked_first:",
        "chime_shared_joins_direct:"};
    long long sum[13] = {0};
    for (int i = 0; i < NGW; i++) {
        redisReply *r = it_cmd(c[i], "INFO");
        for (int j = 0; j < 13 && r->type == REDIS_REPLY_STRING; j++) {
            const char *x = strstr(r->str, f[j]);
            if (x) sum[j] += atoll(x + strlen(f[j]));
        }
        freeReplyObject(r);
    }
    fprintf(stderr,
            "gateways now up: %lld leaf lease takeovers (%lld holders fenced), %lld hybrid "
            "repairs, %lld RACE splits, %lld stranded inserts taken back (%lld with a newer "
            "value), %lld one-round-trip SETs, %lld joins of shared leaf holds (%lld by the "
            "hold's key range; %lld leaves split under them), %lld SETs that locked first, %lld "
            "lease holders' batches refused for lateness (%lld chains broken)\n",
            sum[0], sum[5], sum[1], sum[2], sum[3], sum[4], sum[6], sum[7], sum[12], sum[10],
            sum[11], sum[8], sum[9]);
    if (stall && strstr(stall, "late:") && !faults)
        CHECKF(sum[8] > 0, "no batch was refused for lateness: the run missed its window");
    /* Killed gateways take their counters along: judged on runs without faults. */
    const char *share = getenv("DMKV_SHARE_LOCKS");
    if (share && !strcmp(share, "always") && !faults) {
        CHECKF(sum[7] > 0, "no insert joined a shared hold: the run does not exercise them");
        CHECKF(sum[12] > 0, "no join found its hold by key range: the run does not exercise it");
        CHECKF(sum[10] > 0, "no leaf split under a shared hold: the run does not exercise it");
    }
    const char *first = getenv("DMKV_LOCK_FIRST");
    if (first && !strcmp(first, "always") && !faults)
        CHECKF(sum[11] > 0, "no SET locked first: the run does not exercise it");
    int present = NSTABLE;
    char present_key[NSTR + NCNT] = {0};
    for (int k = 0; k < NSTR + NCNT; k++) {
        redisReply *first = NULL;
        for (int i = 0; i < NGW; i++) {
            redisReply *r = record(c[i], 100 + i, LC_GET, 0, k, NULL);
            CHECKF(r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL),
                   "final GET on gateway %d (pid %d %s, port %d) failed: %s", i, (int)gw[i].pid,
                   kill(gw[i].pid, 0) == 0 ? "alive" : "dead", gw_port[i],
                   r && r->type == REDIS_REPLY_ERROR ? r->str : c[i]->errstr);
            if (!first) {
                first = r;
                continue;
            }
            SOFT_CHECK(r->type == first->type && r->len == first->len &&
                           (r->type == REDIS_REPLY_NIL || !memcmp(r->str, first->str, r->len)),
                       "gateways disagree on key %d", k);
            freeReplyObject(r);
        }
        if (first->type == REDIS_REPLY_STRING) present_key[k] = 1, present++;
        freeReplyObject(first);
    }
    /* A full SCAN returns exactly the present keys. */
    int scanned = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = it_cmd(c[0], "SCAN %s MATCH lin:* COUNT 100", cursor);
        CHECKF(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "final SCAN answered %s",
               r && r->type == REDIS_REPLY_ERROR ? r->str : "no array");
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const char *key = r->element[1]->element[i]->str;
            int n, found = 0;
            if (fill_among && strchr(key, '~')) continue; /* a filler's (counted apart) */
            if (sscanf(key, "lin:stable:%d", &n) == 1) found = 1;
            for (int k = 0; k < NSTR + NCNT && !found; k++) {
                char name[32];
                key_name(name, sizeof(name), k);
                if (!strcmp(name, key)) {
                    SOFT_CHECK(present_key[k], "SCAN returned '%s', which GET finds absent", key);
                    found = 1;
                }
            }
            CHECKF(found, "SCAN returned a stranger '%s'", key);
            scanned++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    SOFT_CHECK(scanned == present, "SCAN returned %d keys, GET found %d", scanned, present);
    /* DBSIZE is a counter changed by FAA after the slot CAS: a gateway killed between the
     * two leaves it off by one for good (issue 12, repair of a dead gateway's leftovers).
     * Exact without kills; with kills, off by at most one per in-flight write killed. */
    long long tolerance = atomic_load(&kills) * CLIENTS_PER_GW + atomic_load(&fill_unknown);
    redisReply *r = it_cmd(c[1], "DBSIZE");
    CHECK(r->type == REDIS_REPLY_INTEGER);
    long long drift = r->integer - present - atomic_load(&fill_acked);
    SOFT_CHECK(llabs(drift) <= tolerance, "DBSIZE %lld, want %d (%lld kills)", r->integer, present,
               (long long)atomic_load(&kills));
    if (drift)
        fprintf(stderr, "DBSIZE off by %lld after %ld kills (issue 12)\n", drift,
                atomic_load(&kills));
    freeReplyObject(r);
    /* Every key can be deleted, through the history too. */
    for (int k = 0; k < NSTR + NCNT; k++) {
        r = record(c[k % NGW], 100 + k % NGW, LC_DEL, 0, k, NULL);
        CHECK(r && r->type == REDIS_REPLY_INTEGER);
        SOFT_CHECK(r->integer == present_key[k], "DEL of key %d answered %lld, GET said %s", k,
                   r->integer, present_key[k] ? "present" : "absent");
        freeReplyObject(r);
    }
    for (int i = 0; i < NSTABLE; i++)
        EXPECT_INT(it_cmd(c[i % NGW], "DEL lin:stable:%d", i), 1);
    long filled = atomic_load(&fill_sent), deleted = 0;
    for (long i = 0; i < filled; i += 100) {
        for (long j = i; j < i + 100 && j < filled; j++) {
            char key[48];
            fill_name(key, sizeof(key), j);
            redisAppendCommand(c[1], "DEL %s", key);
        }
        for (long j = i; j < i + 100 && j < filled; j++) {
            redisReply *d;
            CHECK(redisGetReply(c[1], (void **)&d) == REDIS_OK && d->type == REDIS_REPLY_INTEGER);
            deleted += d->integer;
            freeReplyObject(d);
        }
    }
    SOFT_CHECK(deleted >= atomic_load(&fill_acked) &&
                   deleted <= atomic_load(&fill_acked) + atomic_load(&fill_unknown),
               "DEL removed %ld filler keys, %ld were acknowledged (%ld unknown)", deleted,
               atomic_load(&fill_acked), atomic_load(&fill_unknown));
    drift += atomic_load(&fill_acked) - deleted; /* unknown fillers that did land */
    for (int i = 0; i < NGW; i++) {
        r = it_cmd(c[i], "DBSIZE");
        SOFT_CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == (drift > 0 ? drift : 0),
                   "gateway %d: DBSIZE %lld after deleting every key (the counter is off by %lld)",
                   i, r->integer, drift);
        if (r->integer != (drift > 0 ? drift : 0)) {
            /* A count that settles later was late (a DEL answered before its FAA ran);
             * one that stays off was lost or doubled. */
            sleep(1);
            redisReply *again = it_cmd(c[i], "DBSIZE");
            fprintf(stderr, "gateway %d: DBSIZE 1 s later: %lld\n", i, again->integer);
            freeReplyObject(again);
        }
        freeReplyObject(r);
        for (int k = 0; k < NSTR + NCNT; k++) {
            r = record(c[i], 100 + i, LC_GET, 0, k, NULL);
            CHECK(r);
            SOFT_CHECK(r->type == REDIS_REPLY_NIL, "key %d still there after its DEL", k);
            freeReplyObject(r);
        }
        redisFree(c[i]);
    }
}

int main(int argc, char **argv)
{
    const char *keep = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ops") && i + 1 < argc)
            ops_total = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds_max = atol(argv[++i]);
        else if (!strcmp(argv[i], "--no-faults"))
            faults = 0;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (unsigned)atol(argv[++i]);
        else if (!strcmp(argv[i], "--fault-rounds") && i + 1 < argc)
            min_rounds = atol(argv[++i]);
        else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc)
            timeout_ms = atol(argv[++i]);
        else if (!strcmp(argv[i], "--splits"))
            splits = 1;
        else if (!strcmp(argv[i], "--fill-among"))
            fill_among = 1;
        else if (!strcmp(argv[i], "--stall") && i + 1 < argc)
            stall = argv[++i];
        else if (!strcmp(argv[i], "--no-errors"))
            no_errors = 1;
        else if (!strcmp(argv[i], "--keep") && i + 1 < argc)
            keep = argv[++i];
    }
    it_begin("linearizable", (unsigned)seconds_max + 300);
    it_pool_start(&pools[0]);
    if (!pools[0].shared) {
        fprintf(stderr, "SKIP: needs real memory nodes\n");
        return IT_SKIP;
    }
    it_pool_start(&pools[1]);
    if (faults && access(IT_FAKETIME_LIB, R_OK) == 0) skew = seed % 2 ? "+1s" : "-1s";
    for (int i = 0; i < NGW; i++)
        start_gateway(i);
    fprintf(stderr, "2 memory nodes, %d gateways (the third %s), %d clients, %ld operations%s\n",
            NGW, skew ? skew : "unshifted", NCLIENTS, ops_total,
            faults ? ", faults: SIGSTOP 2.5-4 s / SIGKILL + restart in turn" : "");
    redisContext *c0 = it_connect(gw_port[0]);
    for (int i = 0; i < NSTABLE; i++)
        EXPECT_STATUS(it_cmd(c0, "SET lin:stable:%d v", i), "OK");
    redisFree(c0);

    hist = lc_history_new();
    scans_log = sc_log_new(NSTR + NCNT);
    deadline_ns = now_ns() + (uint64_t)seconds_max * 1000000000ull;
    uint64_t t0 = now_ns();
    pthread_t th[NCLIENTS], sc, ft, fl;
    for (int i = 0; i < NCLIENTS; i++)
        pthread_create(&th[i], NULL, client_main, (void *)(intptr_t)i);
    pthread_create(&sc, NULL, scanner_main, NULL);
    if (splits || fill_among) pthread_create(&fl, NULL, filler_main, NULL);
    if (faults) pthread_create(&ft, NULL, fault_main, NULL);
    for (int i = 0; i < NCLIENTS; i++)
        pthread_join(th[i], NULL);
    atomic_store(&stop_all, 1);
    pthread_join(sc, NULL);
    if (splits || fill_among) pthread_join(fl, NULL);
    double secs = (double)(now_ns() - t0) / 1e9;
    fprintf(stderr,
            "%ld operations in %.1f s (%ld unknown); faults: %ld SIGSTOP, %ld SIGKILL; %ld full "
            "SCANs checked\n",
            atomic_load(&ops_done), secs, atomic_load(&unknown_ops), atomic_load(&stops),
            atomic_load(&kills), atomic_load(&scans));
    wait_quiescent();
    if (no_errors)
        fprintf(stderr, "%ld error replies, %ld of them 'connection lost' (fenced)\n",
                atomic_load(&error_replies) + atomic_load(&lost_replies),
                atomic_load(&lost_replies));
    CHECKF(!no_errors || atomic_load(&error_replies) == 0,
           "%ld commands answered an error (none may here), the first: %s",
           atomic_load(&error_replies), first_error);
    check_end_state();

    /* A key that passes the search bound leaves the history undecided, not judged: then
     * once more with a larger bound. A CI run on 2026-11-29 (it_linearizable_shared, 73
     * unknown operations after SIGKILLs) was undecided at 4x and linearizable after 6.2e8
     * steps; a clean-clone run on 2026-12-04 (nomcas/it_linearizable_lock_first, 83 unknown
     * operations after 3 SIGKILLs) was undecided at 25x and linearizable after 1.77e9 steps
     * (dmkv-lincheck, offline): the last bound is 100x (5e9 steps per key, about 7 minutes
     * under ASan; only an undecided history pays it). */
    static const unsigned bound_x[] = {1, 4, 25, 100};
    lc_report_t rep;
    int rc = 2;
    for (unsigned i = 0; i < sizeof(bound_x) / sizeof(bound_x[0]) && rc == 2; i++) {
        uint64_t c1 = now_ns();
        rc = lc_check(hist, bound_x[i] * LC_DEFAULT_MAX_STEPS, &rep, stderr); /* bad key: stderr */
        fprintf(stderr,
                "checker (bound %ux): %zu operations (%zu unknown) on %zu keys, %llu steps, "
                "%.2f s: %s\n",
                bound_x[i], rep.ops, rep.unknown, rep.keys, (unsigned long long)rep.steps,
                (double)(now_ns() - c1) / 1e9,
                rc == 0   ? "linearizable"
                : rc == 1 ? "NOT LINEARIZABLE"
                          : "undecided");
    }
    if (rc != 0 || keep || end_failures) {
        char path[256];
        snprintf(path, sizeof(path), "%s", keep ? keep : "");
        if (!keep) snprintf(path, sizeof(path), "/tmp/dmkv-lin-%d.hist", (int)getpid());
        FILE *f = fopen(path, "w");
        if (f) {
            lc_history_write(hist, f);
            fclose(f);
            fprintf(stderr, "history written to %s (dmkv-lincheck %s)\n", path, path);
        }
    }
    if (rc == 1) {
        fprintf(stderr, "first bad key: %s\n", rep.first_bad_key);
    }
    size_t judged, scan_bad = sc_check(scans_log, stderr, &judged);
    fprintf(stderr, "SCAN guarantee on the %d workload keys: %zu scans judged, %zu violations\n",
            NSTR + NCNT, judged, scan_bad);
    sc_log_free(scans_log);
    lc_history_free(hist);
    for (int i = 0; i < NGW; i++)
        it_proc_stop(&gw[i]);
    atomic_store(&fault_exit, 1);
    if (faults) pthread_join(ft, NULL);
    it_proc_stop(&pools[0].memnode);
    it_proc_stop(&pools[1].memnode);
    CHECKF(rc == 0, "the history is not linearizable (or undecided)");
    CHECKF(scan_bad == 0, "%zu SCAN results break SCAN's guarantee (above)", scan_bad);
    CHECKF(end_failures == 0, "%d end-state checks failed (above)", end_failures);
    fprintf(stderr, "it_linearizable: OK\n");
    return 0;
}
