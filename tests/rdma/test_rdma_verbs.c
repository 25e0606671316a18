/* The rdma transport against a real RDMA device (Soft-RoCE rxe in the test VM, see
 * run-in-vm.sh): the transport conformance checks (sizes up to 3 MiB, unaligned access,
 * CAS/FAA, ordering within a batch, per-verb DM_ERANGE/DM_EALIGN with the connection still
 * usable, 64-verb batches, many batches outstanding beyond the send queue) plus the
 * rdma-only checks: a batch of 16 READs is one ibv_post_send with one signaled WR and one
 * round trip in the counters; close and a lost memory node complete batches with DM_EIO.
 *
 * The memory node is memnode/rdma_server.c on a thread of this process, over a 64 MiB
 * region that the test also inspects directly.
 * Environment: DMKV_RDMA_ADDR, an address on an RDMA device (192.168.77.1 in the rxe VM).
 * Exit 77 (skip) when the host has no RDMA device or DMKV_RDMA_ADDR is unset. */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "rdma_server.h"

#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/gaddr.h"
#include "dmkv/rdma.h"
#include "dmkv/stats.h"
#include "dmkv/transport.h"
#include "dmkv/worker.h"

/* uri.c refers to the tcp backend, which this test never uses; a weak stand-in lets the
 * test link whether or not dmcore has the tcp backend yet (a real one takes precedence). */
__attribute__((weak)) dm_conn_t *dm_tcp_open(uv_loop_t *loop, const char *host, int port, char *err,
                                             size_t errlen)
{
    (void)loop, (void)host, (void)port;
    snprintf(err, errlen, "tcp backend not linked into this test");
    return NULL;
}

#define REGION_SIZE (64ull << 20)

static const char *addr;
static uint8_t *region;

/* ---- memory node thread ---- */

static struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready, port;
    char err[256];
    uv_loop_t loop;
    uv_async_t stop;
    memnode_rdma_t *srv;
} mn = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void mn_stop_cb(uv_async_t *a)
{
    memnode_rdma_close(mn.srv);
    mn.srv = NULL;
    uv_close((uv_handle_t *)a, NULL);
}

static void *mn_main(void *arg)
{
    (void)arg;
    uv_loop_init(&mn.loop);
    uv_async_init(&mn.loop, &mn.stop, mn_stop_cb);
    mn.srv = memnode_rdma_open(&mn.loop, region, REGION_SIZE, addr, 0, mn.err, sizeof(mn.err));
    pthread_mutex_lock(&mn.lock);
    mn.ready = 1;
    mn.port = mn.srv ? memnode_rdma_port(mn.srv) : -1;
    pthread_cond_signal(&mn.cond);
    pthread_mutex_unlock(&mn.lock);
    if (!mn.srv) uv_close((uv_handle_t *)&mn.stop, NULL);
    uv_run(&mn.loop, UV_RUN_DEFAULT);
    uv_loop_close(&mn.loop);
    return NULL;
}

static void mn_start(void)
{
    region = mmap(NULL, REGION_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED);
    dm_region_format(region, REGION_SIZE);
    CHECK(pthread_create(&mn.thread, NULL, mn_main, NULL) == 0);
    pthread_mutex_lock(&mn.lock);
    while (!mn.ready)
        pthread_cond_wait(&mn.cond, &mn.lock);
    pthread_mutex_unlock(&mn.lock);
    CHECKF(mn.port > 0, "memory node rdma listener: %s", mn.err);
    fprintf(stderr, "memory node listening on rdma://%s:%d\n", addr, mn.port);
}

static void mn_stop(void)
{
    uv_async_send(&mn.stop);
    pthread_join(mn.thread, NULL);
}

/* ---- client side helpers ---- */

static uv_loop_t loop;
static dm_conn_t *conn;
static dm_worker_t *worker;

typedef struct wait {
    int done, status, order;
} wait_t;
static int completion_seq;

static void wait_cb(void *arg, int st)
{
    wait_t *w = arg;
    w->done = 1;
    w->status = st;
    w->order = completion_seq++;
}

/* Post verbs on c and run the loop until they complete. Returns the connection status. */
static int run_verbs(dm_conn_t *c, dm_verb_t *v, size_t n)
{
    wait_t w = {0};
    int rc = c->ops->post(c, v, n, wait_cb, &w);
    if (rc) return rc;
    CHECK(!w.done); /* remote backends never complete inside post */
    uint64_t t0 = dm_now_us();
    while (!w.done) {
        uv_run(&loop, UV_RUN_ONCE);
        CHECKF(dm_now_us() - t0 < 30000000u, "batch did not complete in 30 s");
    }
    return w.status;
}

static dm_verb_t vread(uint64_t off, void *buf, uint32_t len)
{
    return (dm_verb_t){.op = DM_OP_READ, .offset = off, .buf = buf, .len = len};
}
static dm_verb_t vwrite(uint64_t off, const void *buf, uint32_t len)
{
    return (dm_verb_t){.op = DM_OP_WRITE, .offset = off, .buf = (void *)buf, .len = len};
}
static dm_verb_t vcas(uint64_t off, uint64_t expect, uint64_t swap)
{
    return (dm_verb_t){.op = DM_OP_CAS, .offset = off, .len = 8, .compare = expect, .swap = swap};
}
static dm_verb_t vfaa(uint64_t off, uint64_t add)
{
    return (dm_verb_t){.op = DM_OP_FAA, .offset = off, .len = 8, .compare = add};
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
}

#define BASE (1ull << 20) /* test data lives above the node header and below 64 MiB */

/* ---- tests ---- */

static void test_connect(void)
{
    char err[256];
    CHECK(conn->region_size == REGION_SIZE);
    CHECK(!(conn->caps & DM_CAP_MASKED_CAS));
    /* URI form, node id set by dm_conn_open. */
    char uri[128];
    snprintf(uri, sizeof(uri), "rdma://%s:%d", addr, mn.port);
    dm_conn_t *c2 = dm_conn_open(&loop, uri, 3, err, sizeof(err));
    CHECKF(c2, "%s", err);
    CHECK(c2->node_id == 3 && c2->region_size == REGION_SIZE);
    uint64_t magic = 0;
    dm_verb_t v = vread(0, &magic, 8);
    CHECK(run_verbs(c2, &v, 1) == 0 && v.status == 0);
    CHECK(magic == 0x31764b4d44ull); /* DM_SB_MAGIC from the formatted header */
    c2->ops->close(c2);
    /* Bad URIs and a port nobody listens on fail with a message, quickly. */
    CHECK(!dm_conn_open(&loop, "rdma://nohostport", 0, err, sizeof(err)));
    CHECK(strstr(err, "rdma://host:port"));
    snprintf(uri, sizeof(uri), "rdma://%s:%d", addr, mn.port == 65000 ? 65001 : 65000);
    uint64_t t0 = dm_now_us();
    CHECK(!dm_conn_open(&loop, uri, 0, err, sizeof(err)));
    fprintf(stderr, "  no listener: \"%s\" after %llu ms\n", err,
            (unsigned long long)((dm_now_us() - t0) / 1000));
    CHECK(dm_now_us() - t0 < 7000000u);
    /* The memory node counts its connected clients. */
    CHECK(memnode_rdma_connections(mn.srv) >= 1);
}

static void test_sizes(void)
{
    static const uint32_t sizes[] = {
        1,       7, 8, 9, 63, 64, 65, 255, 256, 257, 1000, 4096, 65536, 1u << 20, (1u << 20) + 8,
        3u << 20};
    uint64_t off = BASE + 3; /* unaligned on purpose */
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint32_t len = sizes[k];
        uint8_t *src = malloc(len), *dst = malloc(len);
        CHECK(src && dst);
        fill(src, len, len);
        memset(dst, 0xee, len);
        dm_verb_t w = vwrite(off, src, len);
        CHECKF(run_verbs(conn, &w, 1) == 0 && w.status == 0, "write %u", len);
        CHECKF(memcmp(region + off, src, len) == 0, "region after write of %u", len);
        dm_verb_t r = vread(off, dst, len);
        CHECKF(run_verbs(conn, &r, 1) == 0 && r.status == 0, "read %u", len);
        CHECKF(memcmp(dst, src, len) == 0, "read back %u bytes", len);
        off += len + 13;
        free(src);
        free(dst);
    }
    /* Zero-length verbs at the very end of the region succeed and move nothing. */
    uint8_t b = 0x5a;
    dm_verb_t z[2] = {vread(REGION_SIZE, &b, 0), vwrite(REGION_SIZE, &b, 0)};
    CHECK(run_verbs(conn, z, 2) == 0 && z[0].status == 0 && z[1].status == 0 && b == 0x5a);
}

static void test_unaligned(void)
{
    for (uint64_t mis = 0; mis < 8; mis++) {
        for (uint32_t len = 1; len <= 24; len += 5) {
            uint64_t off = 2 * BASE + mis * 64;
            uint8_t src[32], dst[32] = {0};
            fill(src, len, (uint32_t)(mis * 100 + len));
            memset(region + off - 8, 0x11, 48);
            dm_verb_t v[2] = {vwrite(off + mis, src, len), vread(off + mis, dst, len)};
            CHECK(run_verbs(conn, v, 2) == 0 && v[0].status == 0 && v[1].status == 0);
            CHECK(memcmp(dst, src, len) == 0);
            CHECK(memcmp(region + off + mis, src, len) == 0);
            CHECK(region[off + mis - 1] == 0x11 && region[off + mis + len] == 0x11);
        }
    }
}

static void test_atomics(void)
{
    uint64_t off = 3 * BASE;
    uint64_t init = 5;
    dm_verb_t w = vwrite(off, &init, 8);
    CHECK(run_verbs(conn, &w, 1) == 0);
    dm_verb_t c = vcas(off, 5, 9);
    CHECK(run_verbs(conn, &c, 1) == 0 && c.status == 0 && c.result == 5);
    CHECK(*(uint64_t *)(region + off) == 9);
    c = vcas(off, 5, 11); /* fails: returns the current value, changes nothing */
    CHECK(run_verbs(conn, &c, 1) == 0 && c.status == 0 && c.result == 9);
    CHECK(*(uint64_t *)(region + off) == 9);
    dm_verb_t f[2] = {vfaa(off, 3), vfaa(off, UINT64_MAX)}; /* +3, then -1 */
    CHECK(run_verbs(conn, f, 2) == 0 && f[0].result == 9 && f[1].result == 12);
    CHECK(*(uint64_t *)(region + off) == 11);
    c = vcas(off, 11, 0xdeadbeefcafef00dull); /* full 64-bit values */
    CHECK(run_verbs(conn, &c, 1) == 0 && c.result == 11);
    CHECK(*(uint64_t *)(region + off) == 0xdeadbeefcafef00dull);
}

static void test_batch_order(void)
{
    uint64_t off = 4 * BASE;
    uint64_t a = 0x1111, r1 = 0, r2 = 0, r3 = 0;
    uint8_t big[200], bigr[200];
    fill(big, sizeof(big), 7);
    dm_verb_t v[8] = {
        vwrite(off, &a, 8),
        vread(off, &r1, 8),
        vcas(off, 0x1111, 0x2222),
        vread(off, &r2, 8),
        vfaa(off, 1),
        vread(off, &r3, 8),
        vwrite(off + 8, big, 200),
        vread(off + 8, bigr, 200),
    };
    CHECK(run_verbs(conn, v, 8) == 0);
    for (int i = 0; i < 8; i++)
        CHECK(v[i].status == 0);
    CHECK(r1 == 0x1111 && v[2].result == 0x1111 && r2 == 0x2222 && v[4].result == 0x2222 &&
          r3 == 0x2223);
    CHECK(memcmp(big, bigr, 200) == 0);
}

static void test_errors(void)
{
    uint64_t buf = 0, one = 1;
    uint64_t off = 5 * BASE;
    *(uint64_t *)(region + off) = 77;
    dm_verb_t v[9] = {
        vread(REGION_SIZE - 4, &buf, 8),            /* crosses the end */
        vwrite(REGION_SIZE, &one, 1),               /* starts at the end */
        vread(UINT64_MAX - 2, &buf, 8),             /* overflow */
        vcas(off + 4, 77, 1),                       /* misaligned */
        vfaa(off + 1, 1),                           /* misaligned */
        vcas(REGION_SIZE, 0, 1),                    /* out of range */
        vread(off, &buf, 8),                        /* fine */
        {.op = 99, .offset = off, .len = 8},        /* unknown op */
        {.op = DM_OP_CAS, .offset = off, .len = 4}, /* bad atomic length */
    };
    CHECK(run_verbs(conn, v, 9) == 0);
    CHECK(v[0].status == DM_ERANGE && v[1].status == DM_ERANGE && v[2].status == DM_ERANGE);
    CHECK(v[3].status == DM_EALIGN && v[4].status == DM_EALIGN && v[5].status == DM_ERANGE);
    CHECK(v[6].status == 0 && buf == 77);
    CHECK(v[7].status == DM_EINVAL && v[8].status == DM_EINVAL);
    CHECK(*(uint64_t *)(region + off) == 77);
    /* Only bad verbs: completes (asynchronously), and the connection stays usable. */
    dm_verb_t bad = vread(REGION_SIZE + 1, &buf, 1);
    CHECK(run_verbs(conn, &bad, 1) == 0 && bad.status == DM_ERANGE);
    dm_verb_t ok = vfaa(off, 1);
    CHECK(run_verbs(conn, &ok, 1) == 0 && ok.status == 0 && ok.result == 77);
}

static void test_batch64(void)
{
    uint64_t off = 6 * BASE;
    uint8_t src[32][100], dst[32][100];
    dm_verb_t v[64];
    for (int i = 0; i < 32; i++) {
        fill(src[i], 100, (uint32_t)i);
        v[i] = vwrite(off + (uint64_t)i * 128, src[i], 100);
        v[32 + i] = vread(off + (uint64_t)i * 128, dst[i], 100);
    }
    CHECK(run_verbs(conn, v, 64) == 0);
    for (int i = 0; i < 32; i++) {
        CHECK(v[i].status == 0 && v[32 + i].status == 0);
        CHECK(memcmp(src[i], dst[i], 100) == 0);
    }
}

/* Many batches in flight at once, far beyond the send queue (40 x 64 WRs vs 512): they
 * queue in software, go out as chains of as many batches as the SQ holds (one doorbell
 * and one signaled WR per chain), complete in posting order, and a shared FAA counter
 * proves that they executed in order too. Large READs also exercise the staging ring's
 * wrap-around. */
static void test_many_outstanding(void)
{
    enum { NB = 40, PER = 64 };
    uint64_t ctr = 7 * BASE, data = 8 * BASE;
    *(uint64_t *)(region + ctr) = 0;
    dm_rdma_counters_t c0, c1;
    dm_rdma_counters_get(&c0);
    static dm_verb_t v[NB][PER];
    static uint8_t rd[NB][PER / 2][512];
    wait_t w[NB];
    memset(w, 0, sizeof(w));
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < PER / 2; i++) {
            v[b][2 * i] = vfaa(ctr, 1);
            uint32_t len = (b % 4 == 3) ? 512 : 64;
            v[b][2 * i + 1] = vread(data + (uint64_t)((b * 7 + i) % 64) * 512, rd[b][i], len);
        }
    }
    for (int i = 0; i < 64 * 512; i++)
        region[data + i] = (uint8_t)(i * 31);
    completion_seq = 0;
    for (int b = 0; b < NB; b++)
        CHECK(conn->ops->post(conn, v[b], PER, wait_cb, &w[b]) == 0);
    uint64_t t0 = dm_now_us();
    for (int b = 0; b < NB; b++)
        while (!w[b].done) {
            uv_run(&loop, UV_RUN_ONCE);
            CHECK(dm_now_us() - t0 < 60000000u);
        }
    uint64_t expect = 0;
    for (int b = 0; b < NB; b++) {
        CHECK(w[b].status == 0 && w[b].order == b);
        for (int i = 0; i < PER / 2; i++) {
            CHECK(v[b][2 * i].status == 0 && v[b][2 * i].result == expect++);
            dm_verb_t *r = &v[b][2 * i + 1];
            CHECK(r->status == 0 && memcmp(rd[b][i], region + r->offset, r->len) == 0);
        }
    }
    CHECK(*(uint64_t *)(region + ctr) == (uint64_t)NB * PER / 2);
    dm_rdma_counters_get(&c1);
    fprintf(stderr, "  %d batches: %llu doorbells, %llu WRs, %llu signaled, %llu queued\n", NB,
            (unsigned long long)(c1.post_send_calls - c0.post_send_calls),
            (unsigned long long)(c1.wrs_posted - c0.wrs_posted),
            (unsigned long long)(c1.wrs_signaled - c0.wrs_signaled),
            (unsigned long long)(c1.batches_queued - c0.batches_queued));
    uint64_t doorbells = c1.post_send_calls - c0.post_send_calls;
    CHECK(doorbells >= (uint64_t)NB * PER / 512 && doorbells < NB);
    CHECK(c1.wrs_posted - c0.wrs_posted == (uint64_t)NB * PER);
    CHECK(c1.wrs_signaled - c0.wrs_signaled == doorbells);
    CHECK(c1.batches_queued - c0.batches_queued > 0);
}

/* CHIME's lock batch one at a time, nothing else posted meanwhile: a CAS, a READ that must
 * see it (dm_verb_t.fence) and another READ. Every READ sees its CAS, and no batch waits past
 * the transport's timeout. On the guest's rxe (Linux 6.1) with IBV_SEND_FENCE on those READs
 * (DMKV_RDMA_FENCE=1) the QP stalled within seconds, no completion in 10 s (rdma.c use_fence).
 * DMKV_RDMA_FENCE_STRESS sets the number of batches (default 20000, about 10 s in the guest). */
static void test_fence_stress(void)
{
    const char *e = getenv("DMKV_RDMA_FENCE_STRESS");
    long n = e ? atol(e) : 20000;
    uint64_t off = 20 * BASE;
    *(uint64_t *)(region + off) = 0;
    uint64_t t0 = dm_now_us(), worst = 0;
    for (long i = 0; i < n; i++) {
        uint64_t a = 0, b = 0;
        dm_verb_t v[3] = {vcas(off, (uint64_t)i, (uint64_t)i + 1), vread(off, &a, 8),
                          vread(off + 64, &b, 8)};
        v[1].fence = 1;
        uint64_t t = dm_now_us();
        CHECKF(run_verbs(conn, v, 3) == 0, "batch %ld of %ld", i, n);
        CHECK(v[0].status == 0 && v[0].result == (uint64_t)i && a == (uint64_t)i + 1);
        if (dm_now_us() - t > worst) worst = dm_now_us() - t;
    }
    fprintf(stderr, "  %ld lock batches in %.1f s, slowest %.1f ms\n", n,
            (double)(dm_now_us() - t0) / 1e6, (double)worst / 1e3);
}

/* Batches posted in one event-loop turn (here: before the loop runs) leave as one chain:
 * one ibv_post_send, one signaled WR, each batch completed with its own data, in order. */
static void test_turn_coalesced(void)
{
    enum { NB = 10 };
    uint64_t off = 12 * BASE;
    for (int i = 0; i < NB * 2; i++)
        *(uint64_t *)(region + off + (uint64_t)i * 64) = 5000u + (uint64_t)i;
    dm_verb_t v[NB][2];
    uint64_t got[NB][2];
    wait_t w[NB];
    memset(w, 0, sizeof(w));
    dm_rdma_counters_t c0, c1;
    dm_rdma_counters_get(&c0);
    completion_seq = 0;
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < 2; i++)
            v[b][i] = vread(off + (uint64_t)(2 * b + i) * 64, &got[b][i], 8);
        CHECK(conn->ops->post(conn, v[b], 2, wait_cb, &w[b]) == 0);
    }
    dm_rdma_counters_get(&c1);
    CHECK(c1.post_send_calls == c0.post_send_calls); /* nothing posted inside post() */
    uint64_t t0 = dm_now_us();
    for (int b = 0; b < NB; b++)
        while (!w[b].done) {
            uv_run(&loop, UV_RUN_ONCE);
            CHECK(dm_now_us() - t0 < 10000000u);
        }
    dm_rdma_counters_get(&c1);
    fprintf(stderr, "  %d batches in one turn: %llu doorbells, %llu WRs, %llu signaled\n", NB,
            (unsigned long long)(c1.post_send_calls - c0.post_send_calls),
            (unsigned long long)(c1.wrs_posted - c0.wrs_posted),
            (unsigned long long)(c1.wrs_signaled - c0.wrs_signaled));
    CHECK(c1.post_send_calls - c0.post_send_calls == 1);
    CHECK(c1.wrs_posted - c0.wrs_posted == 2 * NB);
    CHECK(c1.wrs_signaled - c0.wrs_signaled == 1);
    for (int b = 0; b < NB; b++) {
        CHECK(w[b].status == 0 && w[b].order == b);
        for (int i = 0; i < 2; i++)
            CHECK(v[b][i].status == 0 && got[b][i] == 5000u + (uint64_t)(2 * b + i));
    }
}

/* A lease holder's message (dm_conn_t.send_by_us): past its bound at post it is refused;
 * past it when the turn's doorbell rings, it is left out of the chain (the batches around
 * it go) and completes with DM_ELATE; nothing of it lands. */
static void test_send_by(void)
{
    uint64_t off = 13 * BASE, two = 2, five = 5, seven = 7;
    uint64_t *x = (uint64_t *)(region + off), *a = x + 8, *z = x + 16;
    *x = 1, *a = 0, *z = 0;
    dm_verb_t v = vwrite(off, &two, 8);
    wait_t w = {0};
    conn->send_by_us = dm_now_us() - 1;
    CHECK(conn->ops->post(conn, &v, 1, wait_cb, &w) == DM_ELATE);
    conn->send_by_us = 0;
    dm_verb_t va = vwrite(off + 64, &five, 8), vb = vwrite(off, &two, 8),
              vc = vwrite(off + 128, &seven, 8);
    wait_t wa = {0}, wb = {0}, wc = {0};
    CHECK(conn->ops->post(conn, &va, 1, wait_cb, &wa) == 0);
    conn->send_by_us = dm_now_us() + 20000;
    CHECK(conn->ops->post(conn, &vb, 1, wait_cb, &wb) == 0);
    conn->send_by_us = 0;
    CHECK(conn->ops->post(conn, &vc, 1, wait_cb, &wc) == 0);
    usleep(60000);
    uint64_t t0 = dm_now_us();
    while (!wa.done || !wb.done || !wc.done) {
        uv_run(&loop, UV_RUN_ONCE);
        CHECK(dm_now_us() - t0 < 10000000u);
    }
    CHECK(wa.status == 0 && wc.status == 0);
    CHECKF(wb.status == DM_ELATE, "late batch: %d", wb.status);
    CHECK(*x == 1 && *a == 5 && *z == 7);
}

/* A batch larger than the staging ring (8 x 1 MiB READs + 2 x 2 MiB WRITEs). */
static void test_larger_than_staging(void)
{
    uint64_t off = 16 * BASE;
    uint8_t *src = malloc(4u << 20), *dst = malloc(8u << 20);
    CHECK(src && dst);
    fill(src, 4u << 20, 99);
    dm_verb_t v[10];
    v[0] = vwrite(off, src, 2u << 20);
    v[1] = vwrite(off + (2u << 20), src + (2u << 20), 2u << 20);
    for (int i = 0; i < 8; i++)
        v[2 + i] = vread(off + (uint64_t)i * (384u << 10), dst + (size_t)i * (1u << 20), 1u << 20);
    CHECK(run_verbs(conn, v, 10) == 0);
    for (int i = 0; i < 10; i++)
        CHECK(v[i].status == 0);
    for (int i = 0; i < 8; i++)
        CHECK(memcmp(dst + (size_t)i * (1u << 20), src + (size_t)i * (384u << 10), 1u << 20) == 0);
    free(src);
    free(dst);
}

/* rdma-only: a doorbell batch of 16 READs to one node through the batch layer is one
 * ibv_post_send (16 WRs, 1 signaled) and one round trip in the counters. Inline WRITEs. */
static void test_doorbell_one_rtt(void)
{
    uint64_t off = 9 * BASE;
    uint64_t bufs[16];
    for (int i = 0; i < 16; i++)
        *(uint64_t *)(region + off + (uint64_t)i * 64) = 1000u + (uint64_t)i;
    dm_batch_t b;
    dm_batch_init(&b);
    for (int i = 0; i < 16; i++)
        CHECK(dm_batch_read(&b, dm_gaddr_make(0, off + (uint64_t)i * 64), &bufs[i], 8));
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, worker, DM_CLS_GET);
    dm_cls_stats_t s0, s1;
    dm_rdma_counters_t c0, c1;
    dm_stats_get(DM_CLS_GET, &s0);
    dm_rdma_counters_get(&c0);
    CHECK(dm_batch_exec(&ctx, &b) == 0);
    dm_stats_get(DM_CLS_GET, &s1);
    dm_rdma_counters_get(&c1);
    for (int i = 0; i < 16; i++)
        CHECK(bufs[i] == 1000u + (uint64_t)i && b.v[i].status == 0);
    fprintf(stderr,
            "  16 READs: rtts +%llu, verbs +%llu, ibv_post_send +%llu, WRs +%llu, "
            "signaled +%llu\n",
            (unsigned long long)(s1.rtts - s0.rtts), (unsigned long long)(s1.verbs - s0.verbs),
            (unsigned long long)(c1.post_send_calls - c0.post_send_calls),
            (unsigned long long)(c1.wrs_posted - c0.wrs_posted),
            (unsigned long long)(c1.wrs_signaled - c0.wrs_signaled));
    CHECK(s1.rtts - s0.rtts == 1);
    CHECK(s1.verbs - s0.verbs == 16);
    CHECK(c1.post_send_calls - c0.post_send_calls == 1);
    CHECK(c1.wrs_posted - c0.wrs_posted == 16);
    CHECK(c1.wrs_signaled - c0.wrs_signaled == 1);

    /* Small WRITEs go inline; masked CAS is downgraded to CAS by the batch layer. */
    uint64_t x = 42;
    dm_batch_init(&b);
    dm_batch_write(&b, dm_gaddr_make(0, off), &x, 8);
    dm_verb_t *m = dm_batch_masked_cas(&b, dm_gaddr_make(0, off), 42, 0xff, 0x100, 0xff00, 42);
    dm_rdma_counters_get(&c0);
    CHECK(dm_batch_exec(&ctx, &b) == 0);
    dm_rdma_counters_get(&c1);
    CHECK(c1.wrs_inline - c0.wrs_inline == 1 && c1.post_send_calls - c0.post_send_calls == 1);
    CHECK(m->status == 0 && m->result == 42);
    CHECK(*(uint64_t *)(region + off) == 0x12a);
}

/* Coroutines overlapping their batches on one connection through dm_batch_exec. */
typedef struct co_arg {
    int idx, done;
    uint64_t sum;
} co_arg_t;

static void co_fn(void *p)
{
    co_arg_t *a = p;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, worker, DM_CLS_SET);
    uint64_t ctr = 10 * BASE;
    for (int r = 0; r < 20; r++) {
        dm_batch_t b;
        dm_batch_init(&b);
        uint64_t val = (uint64_t)a->idx * 1000 + (uint64_t)r, back = 0;
        uint64_t slot = 10 * BASE + 64 + (uint64_t)a->idx * 8;
        dm_batch_write(&b, dm_gaddr_make(0, slot), &val, 8);
        dm_batch_read(&b, dm_gaddr_make(0, slot), &back, 8);
        dm_verb_t *f = dm_batch_faa(&b, dm_gaddr_make(0, ctr), 1);
        CHECK(dm_batch_exec(&ctx, &b) == 0);
        CHECK(back == val);
        a->sum += f->result;
    }
    a->done = 1;
}

static void test_coroutines(void)
{
    enum { N = 16 };
    *(uint64_t *)(region + 10 * BASE) = 0;
    co_arg_t a[N];
    memset(a, 0, sizeof(a));
    for (int i = 0; i < N; i++) {
        a[i].idx = i;
        dm_coro_spawn(co_fn, &a[i]);
    }
    uint64_t t0 = dm_now_us();
    while (dm_coro_live() > 0) {
        uv_run(&loop, UV_RUN_ONCE);
        CHECK(dm_now_us() - t0 < 60000000u);
    }
    uint64_t total = 0;
    for (int i = 0; i < N; i++) {
        CHECK(a[i].done);
        total += a[i].sum;
    }
    /* FAA results are 0..N*20-1, each exactly once. */
    CHECK(total == (uint64_t)(N * 20) * (N * 20 - 1) / 2);
    CHECK(*(uint64_t *)(region + 10 * BASE) == N * 20);
}

/* close() with a batch in flight completes it with DM_EIO before returning. */
static void test_close_outstanding(void)
{
    char err[256];
    dm_conn_t *c2 = dm_rdma_open(&loop, addr, mn.port, err, sizeof(err));
    CHECKF(c2, "%s", err);
    uint8_t buf[4096];
    dm_verb_t v = vread(BASE, buf, sizeof(buf));
    wait_t w = {0};
    CHECK(c2->ops->post(c2, &v, 1, wait_cb, &w) == 0);
    c2->ops->close(c2);
    CHECK(w.done && w.status == DM_EIO && v.status == DM_EIO);
    for (int i = 0; i < 5; i++)
        uv_run(&loop, UV_RUN_NOWAIT); /* let the handles close */
}

/* A verb the device rejects (here: beyond the registration, after lying to the client-side
 * bounds check) puts the QP in error: the batches behind it complete with DM_EIO, later posts
 * return DM_EIO, the connection that made it is the only one affected. */
static void test_qp_error(void)
{
    char err[256];
    dm_conn_t *c3 = dm_rdma_open(&loop, addr, mn.port, err, sizeof(err));
    CHECKF(c3, "%s", err);
    c3->region_size = 2 * REGION_SIZE; /* defeat the pre-post check on purpose */
    uint64_t a = 0, b = 0, d = 0;
    dm_verb_t v1 = vread(BASE, &a, 8);
    dm_verb_t v2[2] = {vread(REGION_SIZE + BASE, &b, 8), vread(BASE, &b, 8)};
    dm_verb_t v3 = vread(BASE, &d, 8);
    wait_t w[3] = {{0}, {0}, {0}};
    /* v1 completes first; v2 and v3 leave in one chain: v2's bad READ fails the QP and
     * both with it (a batch chained with a failing one has an unknown fate, as after any
     * lost connection: its WRs are unsignaled). */
    CHECK(c3->ops->post(c3, &v1, 1, wait_cb, &w[0]) == 0);
    uint64_t t0 = dm_now_us();
    while (!w[0].done) {
        uv_run(&loop, UV_RUN_ONCE);
        CHECK(dm_now_us() - t0 < 20000000u);
    }
    CHECK(c3->ops->post(c3, v2, 2, wait_cb, &w[1]) == 0);
    CHECK(c3->ops->post(c3, &v3, 1, wait_cb, &w[2]) == 0);
    while (!w[0].done || !w[1].done || !w[2].done) {
        uv_run(&loop, UV_RUN_ONCE);
        CHECKF(dm_now_us() - t0 < 20000000u, "batches hung behind a QP error");
    }
    CHECK(w[0].status == 0 && v1.status == 0);
    CHECK(w[1].status == DM_EIO && v2[0].status == DM_EIO && v2[1].status == DM_EIO);
    CHECK(w[2].status == DM_EIO && v3.status == DM_EIO);
    CHECK(c3->ops->post(c3, &v1, 1, wait_cb, &w[0]) == DM_EIO);
    c3->ops->close(c3);
    /* The main connection still works. */
    dm_verb_t ok = vread(BASE, &a, 8);
    CHECK(run_verbs(conn, &ok, 1) == 0 && ok.status == 0);
}

/* The memory node goes away: outstanding batches complete with DM_EIO, later posts return
 * DM_EIO, nothing hangs. */
static void test_lost_node(void)
{
    uint64_t buf;
    mn_stop();
    uint64_t t0 = dm_now_us();
    int saw_eio = 0;
    while (!saw_eio) {
        dm_verb_t v = vread(BASE, &buf, 8);
        wait_t w = {0};
        int rc = conn->ops->post(conn, &v, 1, wait_cb, &w);
        if (rc == DM_EIO) {
            saw_eio = 1;
            break;
        }
        CHECK(rc == 0);
        while (!w.done) {
            uv_run(&loop, UV_RUN_ONCE);
            CHECKF(dm_now_us() - t0 < 20000000u, "batch hung after the memory node left");
        }
        if (w.status == DM_EIO) {
            CHECK(v.status == DM_EIO);
            saw_eio = 1;
        }
        CHECKF(dm_now_us() - t0 < 20000000u, "connection not marked broken in 20 s");
        usleep(10000);
    }
    dm_verb_t v = vread(BASE, &buf, 8);
    wait_t w = {0};
    CHECK(conn->ops->post(conn, &v, 1, wait_cb, &w) == DM_EIO);
    fprintf(stderr, "  broken after %llu ms\n", (unsigned long long)((dm_now_us() - t0) / 1000));
}

int main(void)
{
    setvbuf(stderr, NULL, _IOLBF, 0);
    int ndev = 0;
    struct ibv_device **devs = ibv_get_device_list(&ndev);
    if (devs) ibv_free_device_list(devs);
    if (ndev == 0) {
        fprintf(stderr, "SKIP: no RDMA device on this host (run tests/rdma/run-in-vm.sh)\n");
        return 77;
    }
    addr = getenv("DMKV_RDMA_ADDR");
    if (!addr || !*addr) {
        fprintf(stderr, "SKIP: set DMKV_RDMA_ADDR to an address of an RDMA device "
                        "(run-in-vm.sh sets 192.168.77.1)\n");
        return 77;
    }
    mn_start();
    uv_loop_init(&loop);
    char err[256];
    conn = dm_rdma_open(&loop, addr, mn.port, err, sizeof(err));
    CHECKF(conn, "%s", err);
    worker = calloc(1, sizeof(*worker));
    worker->loop = &loop;
    worker->n_nodes = 1;
    worker->conns[0] = conn;

    RUN(test_connect);
    RUN(test_sizes);
    RUN(test_unaligned);
    RUN(test_atomics);
    RUN(test_batch_order);
    RUN(test_errors);
    RUN(test_batch64);
    RUN(test_many_outstanding);
    RUN(test_turn_coalesced);
    RUN(test_fence_stress);
    RUN(test_send_by);
    RUN(test_larger_than_staging);
    RUN(test_doorbell_one_rtt);
    RUN(test_coroutines);
    RUN(test_close_outstanding);
    RUN(test_qp_error);
    RUN(test_lost_node);

    dm_rdma_counters_t c;
    dm_rdma_counters_get(&c);
    fprintf(stderr,
            "rdma counters: %llu doorbells, %llu WRs (%llu inline), %llu queued, %llu large "
            "regs, %llu cq events, %llu busy polls, %llu conn failures\n",
            (unsigned long long)c.post_send_calls, (unsigned long long)c.wrs_posted,
            (unsigned long long)c.wrs_inline, (unsigned long long)c.batches_queued,
            (unsigned long long)c.large_regs, (unsigned long long)c.cq_events,
            (unsigned long long)c.busy_polls, (unsigned long long)c.conn_failures);
    conn->ops->close(conn);
    free(worker);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0);
    munmap(region, REGION_SIZE);
    fprintf(stderr, "test_rdma_verbs: all passed\n");
    return 0;
}
