/* Transport conformance: the same checks against the `local` backend and against `tcp`
 * (a real dmkv-memnode process from $DMKV_MEMNODE on 127.0.0.1), plus tcp-only checks:
 * hostile raw clients get disconnected while the memory node keeps serving, backpressure,
 * auth, STATS, clean shutdown on SIGTERM and connection loss (DM_EIO, never a hang). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/superblock.h"
#include "dmkv/tcp_proto.h"
#include "dmkv/transport.h"
#include "dmkv/worker.h"
#include "harness.h"

#define REGION (64ull << 20)
#define SCRATCH (1ull << 20) /* tests use offsets from here on, far from the header */
#define TOKEN "s3cret-token"

static uv_loop_t *loop;
static dm_conn_t *conn; /* backend under test */
static pid_t memnode_pid;
static int memnode_port;

/* ---- driving the loop ---- */

typedef struct done {
    int flag;
    int status;
    int order; /* completion sequence number */
} done_t;

static int completions;

static void on_done(void *arg, int st)
{
    done_t *d = arg;
    d->flag = 1;
    d->status = st;
    d->order = completions++;
}

static void wait_done(done_t *d)
{
    while (!d->flag)
        uv_run(loop, UV_RUN_ONCE);
}

/* Post verbs on c and wait; returns the batch's conn_status (or post's error). */
static int exec_on(dm_conn_t *c, dm_verb_t *v, size_t n)
{
    done_t d = {0};
    int rc = c->ops->post(c, v, n, on_done, &d);
    if (rc) return rc;
    wait_done(&d);
    return d.status;
}

static int exec(dm_verb_t *v, size_t n)
{
    return exec_on(conn, v, n);
}

static dm_verb_t rd(uint64_t off, void *buf, uint32_t len)
{
    return (dm_verb_t){.op = DM_OP_READ, .offset = off, .buf = buf, .len = len};
}

static dm_verb_t wr(uint64_t off, const void *buf, uint32_t len)
{
    return (dm_verb_t){.op = DM_OP_WRITE, .offset = off, .buf = (void *)buf, .len = len};
}

static dm_verb_t atomic(uint8_t op, uint64_t off, uint64_t cmp, uint64_t swp)
{
    return (dm_verb_t){.op = op, .offset = off, .len = 8, .compare = cmp, .swap = swp};
}

static uint64_t get64(uint64_t off)
{
    uint64_t x = 0;
    dm_verb_t v = rd(off, &x, 8);
    CHECK(exec(&v, 1) == 0 && v.status == 0);
    return x;
}

static void put64(uint64_t off, uint64_t x)
{
    dm_verb_t v = wr(off, &x, 8);
    CHECK(exec(&v, 1) == 0 && v.status == 0);
}

/* ---- conformance checks (every backend) ---- */

static void t_superblock(void)
{
    dm_superblock_t sb;
    dm_verb_t v = rd(0, &sb, sizeof(sb));
    CHECK(exec(&v, 1) == 0 && v.status == 0);
    CHECK(sb.magic == DM_SB_MAGIC);
    CHECK(sb.version == DM_SB_VERSION);
    CHECK(sb.region_size == REGION);
    CHECK(conn->region_size == REGION);
    CHECK(sb.alloc_ptr == 65536);
    CHECK(sb.alloc_ptr >= DM_SB_SIZE && sb.alloc_ptr % 65536 == 0);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (uint8_t)(x >> 24);
    }
}

static void t_read_write(void)
{
    static const uint32_t sizes[] = {1, 7, 8, 9, 63, 64, 65, 4095, 4096, 4097, 65537, 1u << 20};
    static const uint64_t skew[] = {0, 1, 3, 8, 13};
    uint8_t *src = malloc((1u << 20) + 16), *dst = malloc((1u << 20) + 16);
    CHECK(src && dst);
    unsigned seed = 1;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (size_t j = 0; j < sizeof(skew) / sizeof(skew[0]); j++) {
            uint64_t off = SCRATCH + skew[j];
            fill(src, sizes[i], seed++);
            memset(dst, 0xEE, sizes[i] + 16);
            dm_verb_t w = wr(off, src, sizes[i]);
            CHECK(exec(&w, 1) == 0 && w.status == 0);
            dm_verb_t r = rd(off, dst, sizes[i]);
            CHECK(exec(&r, 1) == 0 && r.status == 0);
            CHECKF(memcmp(src, dst, sizes[i]) == 0, "size %u skew %llu", sizes[i],
                   (unsigned long long)skew[j]);
            CHECK(dst[sizes[i]] == 0xEE); /* nothing written past len */
        }
    }
    /* Unaligned read of part of what was written. */
    fill(src, 1000, 77);
    dm_verb_t w = wr(SCRATCH, src, 1000);
    CHECK(exec(&w, 1) == 0 && w.status == 0);
    dm_verb_t r = rd(SCRATCH + 333, dst, 555);
    CHECK(exec(&r, 1) == 0 && r.status == 0 && memcmp(dst, src + 333, 555) == 0);
    /* A READ and a WRITE of zero bytes succeed. */
    dm_verb_t z[2] = {rd(SCRATCH, dst, 0), wr(SCRATCH, src, 0)};
    CHECK(exec(z, 2) == 0 && z[0].status == 0 && z[1].status == 0);
    free(src);
    free(dst);
}

static void t_large(void)
{
    uint32_t n = 8u << 20;
    uint8_t *src = malloc(n), *dst = malloc(n);
    CHECK(src && dst);
    fill(src, n, 9);
    dm_verb_t w = wr(SCRATCH + 5, src, n);
    CHECK(exec(&w, 1) == 0 && w.status == 0);
    dm_verb_t r[2] = {rd(SCRATCH + 5, dst, n / 2), rd(SCRATCH + 5 + n / 2, dst + n / 2, n / 2)};
    CHECK(exec(r, 2) == 0 && r[0].status == 0 && r[1].status == 0);
    CHECK(memcmp(src, dst, n) == 0);
    free(src);
    free(dst);
}

/* A large request, then a smaller large one with more requests right behind it: the memory
 * node receives bodies straight into a buffer kept from the larger request, and must stop
 * at the body's end (it once read the next request's header into it and stalled). */
static void t_big_then_smaller(void)
{
    enum { BIG = 900u << 10, SMALLER = 200u << 10, ROUNDS = 8 };
    uint8_t *src = malloc(BIG), *dst = malloc(BIG);
    CHECK(src && dst);
    for (int round = 0; round < ROUNDS; round++) {
        fill(src, BIG, 20 + (unsigned)round);
        dm_verb_t w = wr(SCRATCH, src, BIG);
        CHECK(exec(&w, 1) == 0 && w.status == 0);
        dm_verb_t a = wr(SCRATCH + BIG, src + 1, SMALLER);
        dm_verb_t b[2] = {rd(SCRATCH + BIG, dst, SMALLER), rd(SCRATCH, dst + SMALLER, 64)};
        done_t da = {0}, db = {0};
        CHECK(conn->ops->post(conn, &a, 1, on_done, &da) == 0);
        CHECK(conn->ops->post(conn, b, 2, on_done, &db) == 0);
        wait_done(&da);
        wait_done(&db);
        CHECKF(da.status == 0 && db.status == 0, "round %d: status %d %d", round, da.status,
               db.status);
        CHECK(memcmp(dst, src + 1, SMALLER) == 0 && memcmp(dst + SMALLER, src, 64) == 0);
    }
    free(src);
    free(dst);
}

static void t_cas(void)
{
    uint64_t a = SCRATCH + 4096;
    put64(a, 5);
    dm_verb_t v = atomic(DM_OP_CAS, a, 5, 9);
    CHECK(exec(&v, 1) == 0 && v.status == 0 && v.result == 5);
    CHECK(get64(a) == 9);
    v = atomic(DM_OP_CAS, a, 5, 11);
    CHECK(exec(&v, 1) == 0 && v.status == 0 && v.result == 9);
    CHECK(get64(a) == 9);
    v = atomic(DM_OP_CAS, a, 9, UINT64_MAX);
    CHECK(exec(&v, 1) == 0 && v.status == 0 && v.result == 9);
    CHECK(get64(a) == UINT64_MAX);
}

static void t_faa(void)
{
    uint64_t a = SCRATCH + 4104;
    put64(a, 100);
    dm_verb_t v = atomic(DM_OP_FAA, a, 7, 0);
    CHECK(exec(&v, 1) == 0 && v.status == 0 && v.result == 100);
    CHECK(get64(a) == 107);
    v = atomic(DM_OP_FAA, a, (uint64_t)-1, 0); /* wraps: subtract one */
    CHECK(exec(&v, 1) == 0 && v.status == 0 && v.result == 107);
    CHECK(get64(a) == 106);
}

static void t_masked_cas(void)
{
    uint64_t a = SCRATCH + 4112;
    uint64_t old = 0xAABBCCDD11223344ull;
    put64(a, old);
    /* Compare only the top byte (0xAA), replace only the low 32 bits. */
    dm_verb_t v = {.op = DM_OP_MASKED_CAS,
                   .offset = a,
                   .len = 8,
                   .compare = 0xAA00000000000000ull | 0x12345ull, /* bits outside the mask */
                   .compare_mask = 0xFF00000000000000ull,
                   .swap = 0x9999999955667788ull,
                   .swap_mask = 0x00000000FFFFFFFFull};
    CHECK(exec(&v, 1) == 0 && v.status == 0 && v.result == old);
    CHECK(get64(a) == 0xAABBCCDD55667788ull);
    /* Mismatch under the mask: unchanged, old value returned. */
    dm_verb_t f = v;
    f.compare = 0xAB00000000000000ull;
    f.swap = 0;
    CHECK(exec(&f, 1) == 0 && f.status == 0 && f.result == 0xAABBCCDD55667788ull);
    CHECK(get64(a) == 0xAABBCCDD55667788ull);
    /* Zero compare mask always matches; zero swap mask writes nothing. */
    dm_verb_t g = {.op = DM_OP_MASKED_CAS, .offset = a, .len = 8, .swap = 1, .swap_mask = 0};
    CHECK(exec(&g, 1) == 0 && g.status == 0 && g.result == 0xAABBCCDD55667788ull);
    CHECK(get64(a) == 0xAABBCCDD55667788ull);
    dm_verb_t h = {.op = DM_OP_MASKED_CAS,
                   .offset = a,
                   .len = 8,
                   .swap = 0x0123456789ABCDEFull,
                   .swap_mask = UINT64_MAX};
    CHECK(exec(&h, 1) == 0 && h.status == 0 && get64(a) == 0x0123456789ABCDEFull);
    CHECK(conn->caps & DM_CAP_MASKED_CAS);
}

static void t_order_in_batch(void)
{
    uint64_t a = SCRATCH + 8192;
    uint64_t one = 1, r1 = 0, r2 = 0, r3 = 0;
    uint8_t pat[100], back[100];
    fill(pat, sizeof(pat), 3);
    dm_verb_t v[] = {
        wr(a, &one, 8),
        rd(a, &r1, 8),
        atomic(DM_OP_CAS, a, 1, 2),
        rd(a, &r2, 8),
        atomic(DM_OP_FAA, a, 40, 0),
        rd(a, &r3, 8),
        wr(a + 64, pat, sizeof(pat)),
        rd(a + 64, back, sizeof(back)),
    };
    CHECK(exec(v, 8) == 0);
    for (int i = 0; i < 8; i++)
        CHECK(v[i].status == 0);
    CHECK(r1 == 1 && v[2].result == 1 && r2 == 2 && v[4].result == 2 && r3 == 42);
    CHECK(memcmp(pat, back, sizeof(pat)) == 0);
}

static void t_out_of_range(void)
{
    uint64_t a = SCRATCH + 12288, x = 0x1111, y = 0, z = 0;
    uint8_t buf[16] = {0};
    dm_verb_t v[] = {
        wr(a, &x, 8),
        rd(REGION - 4, buf, 8),          /* straddles the end */
        wr(UINT64_MAX - 2, buf, 8),      /* offset + len overflows */
        rd(REGION, buf, 1),              /* one past the end */
        atomic(DM_OP_CAS, REGION, 0, 1), /* atomic at the end */
        atomic(DM_OP_FAA, REGION + 8, 1, 0),
        rd(a, &y, 8),
        rd(REGION - 8, &z, 8), /* the last word is fine */
        rd(REGION, buf, 0),    /* empty read at the end is inside */
    };
    size_t n = sizeof(v) / sizeof(v[0]);
    CHECK(exec(v, n) == 0);
    CHECK(v[0].status == 0 && v[6].status == 0 && v[7].status == 0 && v[8].status == 0);
    CHECK(y == 0x1111);
    for (int i = 1; i <= 5; i++)
        CHECKF(v[i].status == DM_ERANGE, "verb %d status %d", i, v[i].status);
    CHECK(get64(a) == 0x1111); /* still usable */
}

static void t_bad_atomics(void)
{
    uint64_t a = SCRATCH + 16384;
    put64(a, 7);
    dm_verb_t v[] = {
        atomic(DM_OP_CAS, a + 4, 7, 8),
        atomic(DM_OP_FAA, a + 1, 1, 0),
        atomic(DM_OP_MASKED_CAS, a + 2, 0, 0),
        {.op = DM_OP_CAS, .offset = a, .len = 4, .compare = 7, .swap = 8},
        {.op = 99, .offset = a, .len = 8},
        atomic(DM_OP_FAA, a, 1, 0),
    };
    CHECK(exec(v, 6) == 0);
    CHECK(v[0].status == DM_EALIGN && v[1].status == DM_EALIGN && v[2].status == DM_EALIGN);
    CHECK(v[3].status == DM_EINVAL && v[4].status == DM_EINVAL);
    CHECK(v[5].status == 0 && v[5].result == 7);
    CHECK(get64(a) == 8);
}

static void t_batch64(void)
{
    uint64_t a = SCRATCH + 20480;
    uint64_t in[32], out[32];
    dm_verb_t v[64];
    for (int i = 0; i < 32; i++) {
        in[i] = 0x1000 + (uint64_t)i * 3;
        out[i] = 0;
        v[i] = wr(a + 8 * (uint64_t)i, &in[i], 8);
        v[32 + i] = rd(a + 8 * (uint64_t)(31 - i), &out[31 - i], 8);
    }
    CHECK(exec(v, 64) == 0);
    for (int i = 0; i < 64; i++)
        CHECK(v[i].status == 0);
    CHECK(memcmp(in, out, sizeof(in)) == 0);
}

static void t_outstanding(void)
{
    enum { N = 16 };
    uint64_t ctr = SCRATCH + 24576;
    put64(ctr, 0);
    dm_verb_t v[N][3];
    uint64_t val[N], back[N];
    done_t d[N];
    memset(d, 0, sizeof(d));
    int base = completions;
    for (int i = 0; i < N; i++) {
        val[i] = 0xC0DE0000u + (uint64_t)i;
        v[i][0] = atomic(DM_OP_FAA, ctr, 1, 0);
        v[i][1] = wr(ctr + 8 + 8 * (uint64_t)i, &val[i], 8);
        v[i][2] = rd(ctr + 8 + 8 * (uint64_t)i, &back[i], 8);
        CHECK(conn->ops->post(conn, v[i], 3, on_done, &d[i]) == 0);
    }
    for (int i = 0; i < N; i++)
        wait_done(&d[i]);
    for (int i = 0; i < N; i++) {
        CHECK(d[i].status == 0 && d[i].order == base + i); /* FIFO */
        CHECK(v[i][0].result == (uint64_t)i && back[i] == val[i]);
    }
    CHECK(get64(ctr) == N);
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A message with a send-by bound (a lease holder's writes): past the bound at post it is
 * refused; past it when the turn's message leaves, it is left out of that message (the
 * batches before and after it are sent and answered) and completes with DM_ELATE;
 * nothing of it lands. Before the bound it lands. */
static void t_send_by(void)
{
    uint64_t off = SCRATCH + 9000, a = SCRATCH + 9064, z = SCRATCH + 9128;
    uint64_t two = 2, three = 3, five = 5, seven = 7;
    put64(off, 1);
    put64(a, 0);
    put64(z, 0);
    dm_verb_t v = wr(off, &two, 8);
    conn->send_by_us = mono_us() - 1;
    done_t d = {0};
    CHECK(conn->ops->post(conn, &v, 1, on_done, &d) == DM_ELATE);
    conn->send_by_us = 0;
    CHECK(!d.flag && get64(off) == 1);
    /* Three batches in one turn, the middle one bounded 20 ms ahead; the turn ends 60 ms
     * later (the local backend runs each inside post: the bound is met). */
    dm_verb_t va = wr(a, &five, 8), vb = wr(off, &two, 8), vc = wr(z, &seven, 8);
    done_t da = {0}, db = {0}, dc = {0};
    CHECK(conn->ops->post(conn, &va, 1, on_done, &da) == 0);
    conn->send_by_us = mono_us() + 20000;
    CHECK(conn->ops->post(conn, &vb, 1, on_done, &db) == 0);
    conn->send_by_us = 0;
    CHECK(conn->ops->post(conn, &vc, 1, on_done, &dc) == 0);
    int local = db.flag;
    usleep(60000);
    wait_done(&da);
    wait_done(&db);
    wait_done(&dc);
    CHECK(da.status == 0 && dc.status == 0);
    if (local) {
        CHECK(db.status == 0 && get64(off) == 2);
        put64(off, 1);
    } else {
        CHECKF(db.status == DM_ELATE && vb.status == DM_ELATE, "late batch: %d", db.status);
        CHECK(get64(off) == 1);
    }
    CHECK(get64(a) == 5 && get64(z) == 7);
    v = wr(off, &three, 8);
    conn->send_by_us = mono_us() + 10000000u;
    done_t d2 = {0};
    CHECK(conn->ops->post(conn, &v, 1, on_done, &d2) == 0);
    conn->send_by_us = 0;
    wait_done(&d2);
    CHECK(d2.status == 0 && get64(off) == 3);
}

/* A late batch with chained verbs (a commit CAS and what rides behind it) on a connection
 * that chains: refused like any late batch (DM_ELATE, nothing of it runs), and the later
 * commit of the same chain posted in the same turn is skipped by the node, not run: a
 * client connection's later write must not land while an earlier one was held back. */
static void t_send_by_chained(void)
{
    if (!(conn->caps & DM_CAP_CHAIN)) return;
    uint64_t slot = SCRATCH + 9200, flag = SCRATCH + 9264, other = SCRATCH + 9328;
    uint64_t one = 1, nine = 9;
    put64(slot, 0);
    put64(flag, 0);
    put64(other, 0);
    const uint8_t tag = 200; /* no other test chains on it */
    uint16_t epoch = conn->chain_epoch[tag];
    dm_verb_t a = {.op = DM_OP_CAS, .len = 8, .offset = slot, .compare = 0, .swap = 7};
    a.chain_tag = tag, a.chain_epoch = epoch;
    dm_verb_t b = wr(flag, &one, 8);
    b.chain_tag = tag, b.chain_epoch = epoch;
    dm_verb_t c = wr(other, &nine, 8); /* unchained: unaffected */
    done_t da = {0}, db = {0}, dc = {0};
    uint64_t refused0, breaks0, refused1, breaks1;
    dm_conn_late_stats(&refused0, &breaks0);
    conn->send_by_us = mono_us() + 20000;
    CHECK(conn->ops->post(conn, &a, 1, on_done, &da) == 0);
    conn->send_by_us = 0;
    CHECK(conn->ops->post(conn, &b, 1, on_done, &db) == 0);
    CHECK(conn->ops->post(conn, &c, 1, on_done, &dc) == 0);
    usleep(60000);
    wait_done(&da);
    wait_done(&db);
    wait_done(&dc);
    CHECKF(da.status == DM_ELATE && a.status == DM_ELATE, "late chained batch: %d", da.status);
    CHECKF(b.status == DM_ESKIPPED, "the chain's next commit ran: status %d", b.status);
    CHECK(dc.status == 0 && c.status == 0);
    CHECK(get64(slot) == 0 && get64(flag) == 0 && get64(other) == 9);
    dm_conn_late_stats(&refused1, &breaks1);
    CHECK(refused1 == refused0 + 1 && breaks1 == breaks0 + 1); /* INFO lease_chain_breaks */
    conn->chain_epoch[tag]++; /* broken on the node, as the batch layer would move on */
}

static void conformance(const char *name)
{
    fprintf(stderr, "-- backend %s\n", name);
    RUN(t_superblock);
    RUN(t_read_write);
    RUN(t_large);
    RUN(t_big_then_smaller);
    RUN(t_cas);
    RUN(t_faa);
    RUN(t_masked_cas);
    RUN(t_order_in_batch);
    RUN(t_out_of_range);
    RUN(t_bad_atomics);
    RUN(t_batch64);
    RUN(t_outstanding);
    RUN(t_send_by);
    RUN(t_send_by_chained);
}

/* ---- memnode process ---- */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(a);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &sl) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Start dmkv-memnode and connect; returns 0, or -1 if it exited (port taken). */
static char unix_path[108]; /* the memory node's --unixsocket */
static const char *memnode_bin;

static int memnode_start(const char *bin)
{
    memnode_bin = bin;
    memnode_port = free_port();
    char port[16];
    snprintf(port, sizeof(port), "%d", memnode_port);
    snprintf(unix_path, sizeof(unix_path), "/tmp/dmkv-test-transport-%d-%d.sock", (int)getpid(),
             memnode_port);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execl(bin, bin, "--port", port, "--bind", "127.0.0.1", "--size", "64m", "--auth", TOKEN,
              "--unixsocket", unix_path, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    memnode_pid = pid;
    char err[256] = "";
    for (int waited = 0; waited < 20000; waited += 50) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            memnode_pid = 0;
            return -1;
        }
        conn = dm_tcp_open(loop, "127.0.0.1", memnode_port, err, sizeof(err));
        if (conn) return 0;
        sleep_ms(50);
    }
    fprintf(stderr, "memnode did not come up: %s\n", err);
    abort();
}

static void memnode_kill(void)
{
    if (memnode_pid > 0) {
        kill(memnode_pid, SIGKILL);
        waitpid(memnode_pid, NULL, 0);
        memnode_pid = 0;
    }
}

/* ---- raw sockets (hostile clients) ---- */

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)memnode_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
    (void)!send(fd, p, n, MSG_NOSIGNAL); /* the memory node may already have closed */
}

static int raw_recv(int fd, void *p, size_t n, int timeout_ms)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, timeout_ms) != 1) return -1;
        ssize_t k = recv(fd, (uint8_t *)p + got, n - got, 0);
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Send a valid HELLO with the right token and check the answer. */
static void raw_hello(int fd)
{
    uint8_t m[sizeof(dm_tcp_hdr_t) + sizeof(dm_tcp_hello_t) + sizeof(TOKEN) - 1];
    dm_tcp_hdr_t h = {.magic = DM_TCP_MAGIC, .type = DM_TCP_HELLO, .body_len = 8 + strlen(TOKEN)};
    dm_tcp_hello_t b = {.version = DM_TCP_PROTO_VERSION, .token_len = strlen(TOKEN)};
    memcpy(m, &h, sizeof(h));
    memcpy(m + sizeof(h), &b, sizeof(b));
    memcpy(m + sizeof(h) + sizeof(b), TOKEN, strlen(TOKEN));
    raw_send(fd, m, sizeof(m));
    dm_tcp_hdr_t rh;
    dm_tcp_hello_reply_t hr;
    CHECK(raw_recv(fd, &rh, sizeof(rh), 5000) == 0);
    CHECK(rh.magic == DM_TCP_MAGIC && rh.type == (DM_TCP_HELLO | DM_TCP_REPLY) && rh.status == 0);
    CHECK(raw_recv(fd, &hr, sizeof(hr), 5000) == 0 && hr.region_size == REGION && hr.incarnation);
}

/* The memory node must close fd within 5 s (any error reply before that is drained).
 * Returns the status of the first reply header seen, or 0 if none. */
static int expect_closed(int fd)
{
    uint8_t buf[4096];
    int status = 0, first = 1;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        CHECKF(poll(&pfd, 1, 5000) == 1, "memory node kept a hostile connection open");
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k <= 0) break;
        if (first && (size_t)k >= sizeof(dm_tcp_hdr_t)) {
            dm_tcp_hdr_t h;
            memcpy(&h, buf, sizeof(h));
            CHECK(h.magic == DM_TCP_MAGIC);
            status = h.status;
        }
        first = 0;
    }
    close(fd);
    return status;
}

/* The memory node still serves: a fresh connection works, and so does the old one. */
static void still_serving(void)
{
    char err[256];
    dm_conn_t *c2 = dm_tcp_open(loop, "127.0.0.1", memnode_port, err, sizeof(err));
    CHECKF(c2, "%s", err);
    uint64_t x = 0;
    dm_verb_t v = rd(0, &x, 8);
    CHECK(exec_on(c2, &v, 1) == 0 && v.status == 0 && x == DM_SB_MAGIC);
    c2->ops->close(c2);
    CHECK(get64(0) == DM_SB_MAGIC);
}

static void send_hdr(int fd, uint8_t type, uint32_t count, uint64_t body_len)
{
    dm_tcp_hdr_t h = {
        .magic = DM_TCP_MAGIC, .type = type, .seq = 7, .count = count, .body_len = body_len};
    raw_send(fd, &h, sizeof(h));
}

static void t_hostile(void)
{
    int fd;
    uint8_t junk[512];
    fill(junk, sizeof(junk), 42);

    fd = raw_connect(); /* garbage bytes */
    raw_send(fd, junk, sizeof(junk));
    expect_closed(fd);
    still_serving();

    fd = raw_connect(); /* bad magic, otherwise a HELLO */
    dm_tcp_hdr_t h = {.magic = 0x12345678, .type = DM_TCP_HELLO, .body_len = 8};
    raw_send(fd, &h, sizeof(h));
    CHECK(expect_closed(fd) == DM_EPROTO);
    still_serving();

    fd = raw_connect(); /* VERBS before HELLO */
    send_hdr(fd, DM_TCP_VERBS, 0, 0);
    CHECK(expect_closed(fd) == DM_EPROTO);

    fd = raw_connect(); /* wrong protocol version */
    {
        uint8_t m[sizeof(dm_tcp_hdr_t) + 8];
        dm_tcp_hdr_t hh = {.magic = DM_TCP_MAGIC, .type = DM_TCP_HELLO, .body_len = 8};
        dm_tcp_hello_t b = {.version = 99};
        memcpy(m, &hh, sizeof(hh));
        memcpy(m + sizeof(hh), &b, sizeof(b));
        raw_send(fd, m, sizeof(m));
        CHECK(expect_closed(fd) == DM_EPROTO);
    }

    fd = raw_connect(); /* huge HELLO */
    send_hdr(fd, DM_TCP_HELLO, 0, 1ull << 40);
    CHECK(expect_closed(fd) == DM_EINVAL);

    fd = raw_connect(); /* huge VERBS body */
    raw_hello(fd);
    send_hdr(fd, DM_TCP_VERBS, 1, 1ull << 40);
    CHECK(expect_closed(fd) == DM_ETOOBIG);
    still_serving();

    fd = raw_connect(); /* too many verbs */
    raw_hello(fd);
    send_hdr(fd, DM_TCP_VERBS, DM_TCP_MAX_VERBS + 1, (DM_TCP_MAX_VERBS + 1) * 48ull);
    CHECK(expect_closed(fd) == DM_ETOOBIG);

    fd = raw_connect(); /* body too short for its verbs */
    raw_hello(fd);
    send_hdr(fd, DM_TCP_VERBS, 4, 10);
    CHECK(expect_closed(fd) == DM_ETOOBIG);

    fd = raw_connect(); /* a verb longer than the limit */
    raw_hello(fd);
    {
        dm_tcp_verb_t tv = {.op = DM_OP_READ, .len = (uint32_t)DM_TCP_MAX_IO + 1, .offset = 0};
        send_hdr(fd, DM_TCP_VERBS, 1, sizeof(tv));
        raw_send(fd, &tv, sizeof(tv));
        CHECK(expect_closed(fd) == DM_ETOOBIG);
    }

    fd = raw_connect(); /* WRITE payload does not match the body length */
    raw_hello(fd);
    {
        dm_tcp_verb_t tv = {.op = DM_OP_WRITE, .len = 100, .offset = SCRATCH};
        send_hdr(fd, DM_TCP_VERBS, 1, sizeof(tv) + 50);
        raw_send(fd, &tv, sizeof(tv));
        raw_send(fd, junk, 50);
        CHECK(expect_closed(fd) == DM_EINVAL);
    }

    fd = raw_connect(); /* unknown request type */
    raw_hello(fd);
    send_hdr(fd, 42, 0, 0);
    CHECK(expect_closed(fd) == DM_EINVAL);

    fd = raw_connect(); /* truncated message, then the client half-closes */
    raw_hello(fd);
    send_hdr(fd, DM_TCP_VERBS, 2, 96 + 1000);
    raw_send(fd, junk, 30);
    shutdown(fd, SHUT_WR);
    expect_closed(fd);

    fd = raw_connect(); /* truncated header, then a full close */
    raw_send(fd, junk, 10);
    close(fd);

    still_serving();
    /* Nothing was written by any of them. */
    CHECK(get64(DM_SB_OFF(alloc_ptr)) == 65536);
}

static void t_auth(void)
{
    char err[256];
    dm_tcp_set_auth("wrong");
    dm_conn_t *c = dm_tcp_open(loop, "127.0.0.1", memnode_port, err, sizeof(err));
    CHECK(c == NULL && strstr(err, "auth"));
    dm_tcp_set_auth(NULL);
    c = dm_tcp_open(loop, "127.0.0.1", memnode_port, err, sizeof(err));
    CHECK(c == NULL && strstr(err, "auth"));
    dm_tcp_set_auth(TOKEN);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", memnode_port);
    c = dm_conn_open(loop, uri, 3, err, sizeof(err));
    CHECKF(c, "%s", err);
    CHECK(c->node_id == 3 && c->region_size == REGION);
    c->ops->close(c);
    /* Nothing listens on a fresh port: a clear error, no hang. */
    c = dm_tcp_open(loop, "127.0.0.1", free_port(), err, sizeof(err));
    CHECK(c == NULL && strstr(err, "connect"));
    CHECK(dm_conn_open(loop, "rdma-bogus://x", 0, err, sizeof(err)) == NULL);
    CHECK(dm_conn_open(loop, "tcp://127.0.0.1", 0, err, sizeof(err)) == NULL);
}

/* The same memory node over its unix socket (--unixsocket, unix:///path): the same region,
 * the same HELLO (auth included), clear errors for a missing or relative path. */
static void t_unix(void)
{
    char err[256], uri[160];
    snprintf(uri, sizeof(uri), "unix://%s", unix_path);
    dm_conn_t *u = dm_conn_open(loop, uri, 1, err, sizeof(err));
    CHECKF(u, "%s", err);
    CHECK(u->region_size == REGION && u->caps == conn->caps);
    put64(SCRATCH, 0x756e6978ull); /* over tcp, read back over unix, and the other way */
    dm_conn_t *tcp = conn;
    conn = u;
    CHECK(get64(SCRATCH) == 0x756e6978ull);
    put64(SCRATCH + 8, 77);
    conn = tcp;
    CHECK(get64(SCRATCH + 8) == 77);
    dm_tcp_stats_t st;
    CHECKF(dm_tcp_query_stats(unix_path, 0, &st, err, sizeof(err)) == 0, "%s", err);
    CHECK(st.region_size == REGION);
    u->ops->close(u);
    dm_tcp_set_auth("wrong");
    CHECK(dm_conn_open(loop, uri, 1, err, sizeof(err)) == NULL && strstr(err, "auth"));
    dm_tcp_set_auth(TOKEN);
    CHECK(dm_conn_open(loop, "unix:///tmp/dmkv-no-such.sock", 0, err, sizeof(err)) == NULL);
    CHECKF(strstr(err, "unix:///tmp/dmkv-no-such.sock"), "%s", err);
    CHECK(dm_conn_open(loop, "unix://relative.sock", 0, err, sizeof(err)) == NULL);
    CHECKF(strstr(err, "absolute"), "%s", err);
    /* A second memory node on the same path refuses to start and leaves the socket to the
     * one that serves it. */
    char port[16];
    snprintf(port, sizeof(port), "%d", free_port());
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        execl(memnode_bin, memnode_bin, "--port", port, "--size", "8m", "--unixsocket", unix_path,
              (char *)NULL);
        _exit(127);
    }
    int status = 0, done = 0;
    for (int waited = 0; waited < 5000 && !done; waited += 20) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done) sleep_ms(20);
    }
    if (!done) { /* it took the path over and serves it */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    CHECKF(done && WIFEXITED(status) && WEXITSTATUS(status) == 1,
           "a second memory node started on a live unix socket");
    u = dm_conn_open(loop, uri, 1, err, sizeof(err));
    CHECKF(u, "%s", err);
    u->ops->close(u);
}

static void t_stats(void)
{
    dm_tcp_stats_t st;
    char err[256];
    CHECKF(dm_tcp_query_stats("127.0.0.1", memnode_port, &st, err, sizeof(err)) == 0, "%s", err);
    CHECK(st.region_size == REGION && st.alloc_ptr == 65536);
    CHECK(st.verbs > 100 && st.batches > 50 && st.bytes_read > (8u << 20));
    CHECK(st.bytes_written > (8u << 20) && st.connections >= 2);
}

/* A client that sends many big READs and never reads the replies must not make the memory
 * node buffer them all: it stops reading from that client. */
static void t_backpressure(void)
{
    enum { REQS = 1000 };
    dm_tcp_stats_t before, after;
    char err[256];
    CHECK(dm_tcp_query_stats("127.0.0.1", memnode_port, &before, err, sizeof(err)) == 0);
    int fd = raw_connect();
    raw_hello(fd);
    int sndbuf = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    uint8_t m[sizeof(dm_tcp_hdr_t) + sizeof(dm_tcp_verb_t)];
    int sent = 0;
    for (; sent < REQS; sent++) {
        dm_tcp_hdr_t h = {.magic = DM_TCP_MAGIC,
                          .type = DM_TCP_VERBS,
                          .seq = (uint32_t)sent,
                          .count = 1,
                          .body_len = sizeof(dm_tcp_verb_t)};
        dm_tcp_verb_t tv = {.op = DM_OP_READ, .len = 1u << 20, .offset = SCRATCH};
        memcpy(m, &h, sizeof(h));
        memcpy(m + sizeof(h), &tv, sizeof(tv));
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, 500) != 1) break; /* the memory node stopped reading from us */
        if (send(fd, m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(m)) break;
    }
    sleep_ms(300);
    CHECK(dm_tcp_query_stats("127.0.0.1", memnode_port, &after, err, sizeof(err)) == 0);
    uint64_t served = after.batches - before.batches;
    fprintf(stderr, "   sent %d requests of 1 MiB, memory node executed %llu\n", sent,
            (unsigned long long)served);
    CHECK(served < 400); /* ~64 MiB high water + socket buffers, far below 1000 MiB */
    still_serving();
    close(fd);
}

/* A memory node that stops answering (SIGSTOP) fails the outstanding batch with
 * DM_ETIMEDOUT after DMKV_TCP_TIMEOUT_MS; other connections recover after SIGCONT. */
static void t_timeout(void)
{
    char err[256];
    setenv("DMKV_TCP_TIMEOUT_MS", "1500", 1);
    dm_conn_t *c2 = dm_tcp_open(loop, "127.0.0.1", memnode_port, err, sizeof(err));
    unsetenv("DMKV_TCP_TIMEOUT_MS");
    CHECKF(c2, "%s", err);
    kill(memnode_pid, SIGSTOP);
    uint64_t x;
    dm_verb_t v = rd(0, &x, 8);
    int rc = exec_on(c2, &v, 1);
    kill(memnode_pid, SIGCONT);
    CHECKF(rc == DM_ETIMEDOUT && v.status == DM_ETIMEDOUT, "rc %d", rc);
    v = rd(0, &x, 8);
    CHECK(exec_on(c2, &v, 1) == DM_EIO); /* broken for good */
    c2->ops->close(c2);
    CHECK(get64(0) == DM_SB_MAGIC);
}

/* SIGTERM: the memory node exits cleanly (status 0); our connection then fails every batch
 * with DM_EIO instead of hanging. */
static void t_shutdown(void)
{
    uint64_t x;
    dm_verb_t v = rd(0, &x, 8);
    done_t d = {0};
    CHECK(conn->ops->post(conn, &v, 1, on_done, &d) == 0);
    kill(memnode_pid, SIGTERM);
    int st = 0;
    for (int waited = 0; waited < 10000; waited += 20) {
        if (waitpid(memnode_pid, &st, WNOHANG) == memnode_pid) break;
        uv_run(loop, UV_RUN_NOWAIT);
        sleep_ms(20);
    }
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memnode exit status 0x%x", st);
    memnode_pid = 0;
    wait_done(&d);
    CHECK(d.status == 0 || d.status == DM_EIO);
    for (int i = 0; i < 3; i++) {
        dm_verb_t w = rd(0, &x, 8);
        int rc = exec(&w, 1);
        CHECK(rc == DM_EIO && w.status == DM_EIO);
    }
}

/* Two connections opened by another thread (another holder id in their HELLO), the second
 * opened MN_FENCE_FRESH_MS + 100 ms after the first. */
typedef struct victim {
    dm_conn_t *old, *young;
    uint16_t holder;
    char err[256];
} victim_t;

static void open_victims(void *arg)
{
    victim_t *v = arg;
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", memnode_port);
    v->holder = dm_holder_id();
    v->old = dm_conn_open(loop, uri, 0, v->err, sizeof(v->err));
    usleep(600 * 1000);
    if (v->old) v->young = dm_conn_open(loop, uri, 0, v->err, sizeof(v->err));
}

/* Ask the memory node through the fence mailbox (from the main connection) to cut
 * holder's connections and wait for its ack; returns the request word, still posted
 * (fence_clear takes it back). */
static uint64_t fence_request(uint16_t holder)
{
    static uint64_t seq; /* a request equal to the entry's last ack is taken as done */
    uint64_t req = (0xf00dull + ++seq) << 16 | holder, box = DM_SB_OFF(fence_box) + 3 * 16;
    dm_verb_t c = atomic(DM_OP_CAS, box, 0, req);
    CHECK(exec(&c, 1) == 0 && c.result == 0);
    uint64_t ack = 0;
    for (int ms = 0; ms < 2000 && ack != req; ms += 5) {
        ack = get64(box + 8);
        if (ack != req) sleep_ms(5);
    }
    CHECKF(ack == req, "no ack from the memory node (ack %llx)", (unsigned long long)ack);
    return req;
}

static void fence_clear(uint64_t req)
{
    dm_verb_t c = atomic(DM_OP_CAS, DM_SB_OFF(fence_box) + 3 * 16, req, 0);
    CHECK(exec(&c, 1) == 0 && c.result == req);
}

/* The fence mailbox (dmkv/fence.h, memnode/mn_fence.h): a request naming another thread's
 * holder id makes the memory node close that thread's connection before it acks; what
 * that connection sends afterwards never lands. The holder's connection opened within
 * the last 500 ms (after the hold being taken over ended) and the requester's stay. */
static void t_fence(void)
{
    CHECK(conn->caps & DM_CAP_FENCE);
    victim_t vic = {0};
    for (int tries = 0; tries < 5 && (!vic.old || vic.holder == dm_holder_id()); tries++) {
        if (vic.old) vic.old->ops->close(vic.old);
        if (vic.young) vic.young->ops->close(vic.young);
        vic.old = vic.young = NULL;
        uv_thread_t t;
        CHECK(uv_thread_create(&t, open_victims, &vic) == 0);
        uv_thread_join(&t);
        CHECKF(vic.old && vic.young, "%s", vic.err);
    }
    CHECK(vic.holder != dm_holder_id());
    uint64_t off = SCRATCH + 12000, off2 = SCRATCH + 12064, one = 1, two = 2;
    put64(off, 0);
    put64(off2, 0);
    dm_verb_t w = wr(off, &one, 8);
    CHECK(exec_on(vic.old, &w, 1) == 0 && get64(off) == 1);

    uint64_t req = fence_request(vic.holder);
    dm_verb_t w2 = wr(off, &two, 8);
    int rc = exec_on(vic.old, &w2, 1);
    CHECKF(rc == DM_EIO, "a fenced connection's write answered %d", rc);
    CHECK(get64(off) == 1); /* nothing of it landed; our connection still serves */
    dm_verb_t w3 = wr(off2, &two, 8);
    rc = exec_on(vic.young, &w3, 1);
    CHECKF(rc == 0 && get64(off2) == 2, "the young connection's write answered %d", rc);
    fence_clear(req);
    vic.old->ops->close(vic.old);
    vic.young->ops->close(vic.young);
}

typedef struct redial_run {
    int fenced_twice_rc; /* the second write after the second fence */
    char err[256];
} redial_run_t;

/* One write of the worker's; returns its batch's status. */
static int worker_write(dm_worker_t *w, uint64_t off, uint64_t x)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, dm_gaddr_make(0, off), &x, 8);
    return dm_batch_exec(&ctx, &b);
}

/* A worker of its own thread (so its holder id is not the main connection's): fenced 600
 * ms after it connected, the write in flight fails and the next one reconnects; fenced
 * again 600 ms later (within a second of that reconnect), the write after the failed one
 * reconnects again instead of failing until a second has passed. */
static void redial_thread(void *arg)
{
    redial_run_t *r = arg;
    uv_loop_t wl;
    uv_loop_init(&wl);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", memnode_port);
    const char *uris[1] = {uri};
    dm_worker_t *w = dm_worker_create(&wl, uris, 1, r->err, sizeof(r->err));
    if (!w) return;
    uint64_t off = SCRATCH + 13000;
    CHECK(worker_write(w, off, 1) == 0);
    for (int round = 0; round < 2; round++) {
        sleep_ms(600); /* older than the memory node's young-connection grace */
        fence_clear(fence_request(dm_holder_id()));
        sleep_ms(50);
        int first = worker_write(w, off, 2); /* may find the cut first */
        int second = worker_write(w, off, 3);
        fprintf(stderr, "   fence %d: writes after it answered %d, %d\n", round + 1, first, second);
        if (round == 1)
            r->fenced_twice_rc = second;
        else
            CHECK(second == 0);
    }
    dm_worker_destroy(w);
    uv_run(&wl, UV_RUN_DEFAULT);
    uv_loop_close(&wl);
}

static void t_redial_after_fence(void)
{
    redial_run_t r = {.fenced_twice_rc = 1};
    uv_thread_t t;
    CHECK(uv_thread_create(&t, redial_thread, &r) == 0);
    uv_thread_join(&t); /* the main loop is used by the thread meanwhile (fence_request) */
    CHECKF(!r.err[0], "%s", r.err);
    CHECKF(r.fenced_twice_rc == 0,
           "a write after the second fence answered %d: no reconnect within a second of the "
           "last one",
           r.fenced_twice_rc);
}

/* Doorbell batching across batches: everything posted in one loop turn leaves as one
 * message, and the memory node answers one read's requests with one write. */
static void t_coalesce(void)
{
    enum { N = 64 };
    dm_tcp_stats_t before, after;
    char err[256];
    uint64_t ctr = SCRATCH + 32768;
    put64(ctr, 0);
    CHECK(dm_tcp_query_stats("127.0.0.1", memnode_port, &before, err, sizeof(err)) == 0);
    uint64_t msgs0 = conn->messages, verbs0 = conn->verbs_posted;
    dm_verb_t v[N][2];
    uint64_t back[N];
    done_t d[N];
    memset(d, 0, sizeof(d));
    for (int i = 0; i < N; i++) {
        v[i][0] = atomic(DM_OP_FAA, ctr, 1, 0);
        v[i][1] = rd(ctr, &back[i], 8);
        CHECK(conn->ops->post(conn, v[i], 2, on_done, &d[i]) == 0);
    }
    for (int i = 0; i < N; i++)
        wait_done(&d[i]);
    for (int i = 0; i < N; i++)
        CHECK(d[i].status == 0 && v[i][0].result == (uint64_t)i && back[i] == (uint64_t)i + 1);
    CHECK(dm_tcp_query_stats("127.0.0.1", memnode_port, &after, err, sizeof(err)) == 0);
    fprintf(stderr,
            "   %d batches: %llu message(s) of %llu verbs; memory node: %llu reads, %llu "
            "reply writes\n",
            N, (unsigned long long)(conn->messages - msgs0),
            (unsigned long long)(conn->verbs_posted - verbs0),
            (unsigned long long)(after.reads - before.reads),
            (unsigned long long)(after.reply_writes - before.reply_writes));
    CHECK(conn->messages - msgs0 == 1 && conn->verbs_posted - verbs0 == 2 * N);
    CHECK(after.batches - before.batches == N);
    CHECK(after.reply_writes - before.reply_writes <= 4); /* one per read, not one per batch */
}

static void run_tcp(const char *bin)
{
    dm_tcp_set_auth(TOKEN);
    int ok = -1;
    for (int attempt = 0; attempt < 5 && ok; attempt++)
        ok = memnode_start(bin);
    CHECK(ok == 0);
    fprintf(stderr, "-- memnode pid %d on 127.0.0.1:%d\n", (int)memnode_pid, memnode_port);
    conformance("tcp");
    RUN(t_hostile);
    RUN(t_auth);
    RUN(t_unix);
    RUN(t_stats);
    RUN(t_coalesce);
    RUN(t_fence);
    RUN(t_redial_after_fence);
    RUN(t_backpressure);
    RUN(t_timeout);
    RUN(t_shutdown);
    conn->ops->close(conn);
    conn = NULL;
    memnode_kill();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    static uv_loop_t l;
    loop = &l;
    CHECK(uv_loop_init(loop) == 0);

    char err[256];
    dm_local_set_size(REGION);
    conn = dm_conn_open(loop, "local:transport-test", 0, err, sizeof(err));
    CHECKF(conn, "%s", err);
    conformance("local");
    conn->ops->close(conn);
    conn = NULL;

    const char *bin = getenv("DMKV_MEMNODE");
    if (bin && *bin && access(bin, X_OK) == 0)
        run_tcp(bin);
    else
        fprintf(stderr, "-- DMKV_MEMNODE not set: tcp backend skipped\n");

    uv_run(loop, UV_RUN_DEFAULT); /* release closed handles */
    CHECK(uv_loop_close(loop) == 0);
    fprintf(stderr, "OK\n");
    return 0;
}
