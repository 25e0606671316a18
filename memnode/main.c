/* dmkv-memnode: the memory-node daemon (docs/DESIGN.md "Memory node"). Allocates one region,
 * formats its header, and serves the tcp transport (and, with --rdma-port, the rdma
 * listener) on one libuv thread until SIGINT/SIGTERM.
 *
 *   dmkv-memnode [--port 7000] [--bind 127.0.0.1] [--size 1g] [--auth TOKEN]
 *                [--unixsocket PATH [--unixsocketperm 700]]
 *                [--loglevel notice] [--rdma-port PORT] [--rdma-bind ADDR]
 *                [--dir DIR [--appendfsync everysec|no]]
 *
 * With --dir the region lives in DIR/dmkv-region, mapped shared: a restarted memory node
 * (SIGKILL included) comes back with every byte the verbs wrote and the same incarnation,
 * and the gateways carry on. --appendfsync says what survives a crash of the machine:
 * everysec (default) writes dirty pages back every second from a thread of its own, no
 * leaves it to the kernel; a clean shutdown (SIGINT/SIGTERM) writes everything back.
 *
 * A thread of its own hosts the retraining of a ROLEX index once node 0's superblock names
 * one (mn_retrainer.h: the only index code a memory node runs); until then it reads that word
 * every 100 ms and does nothing else. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "dmkv/superblock.h"
#include "dmkv/log.h"
#include "dmkv/busy_poll.h"
#include "mn_fence.h"
#include "mn_region.h"
#include "mn_retrainer.h"
#include "rdma_server.h"
#include "tcp_server.h"

typedef struct options {
    int port;
    const char *bind;
    uint64_t size;
    const char *auth;
    const char *unixsocket;  /* NULL: no unix listener */
    unsigned unixsocketperm; /* 0: as the umask leaves it */
    int rdma_port;           /* -1 = no rdma listener */
    const char *rdma_bind;
    const char *dir;    /* NULL: an anonymous region, gone with the process */
    int fsync_everysec; /* --appendfsync everysec (1, default) or no (0) */
    long busy_poll_us;  /* --busy-poll-us: poll this long after a request (dmkv/busy_poll.h) */
} options_t;

/* --busy-poll-us default, microseconds: off. Polling still saves one pipelining connection
 * of inserts the wake-ups of a sleeping node; re-measured at stop 71 it cost every other
 * workload CPU and bought it nothing (docs/throughput.md "The memory node's polling off by
 * default"). */
#define MN_BUSY_POLL_US 0

static mn_tcp_server_t server;
static uv_signal_t sig_int, sig_term;
static int rdma_started;

/* --appendfsync everysec: write the region's dirty pages back once a second, off the
 * loop's thread (msync of a large region takes a while). */
static struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running, stop;
    mn_region_t *region;
} syncer = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void *sync_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&syncer.lock);
    while (!syncer.stop) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_sec += 1;
        pthread_cond_timedwait(&syncer.cond, &syncer.lock, &t);
        if (syncer.stop) break;
        pthread_mutex_unlock(&syncer.lock);
        if (mn_region_sync(syncer.region) != 0)
            dm_log(DM_LOG_WARNING, "Writing the region back failed: %s", strerror(errno));
        pthread_mutex_lock(&syncer.lock);
    }
    pthread_mutex_unlock(&syncer.lock);
    return NULL;
}

static void sync_stop(void)
{
    if (!syncer.running) return;
    pthread_mutex_lock(&syncer.lock);
    syncer.stop = 1;
    pthread_cond_signal(&syncer.cond);
    pthread_mutex_unlock(&syncer.lock);
    pthread_join(syncer.thread, NULL);
    syncer.running = 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: dmkv-memnode [--port 7000] [--bind 127.0.0.1] [--size 1g] [--auth TOKEN]\n"
            "                    [--unixsocket PATH [--unixsocketperm 700]]\n"
            "                    [--loglevel debug|verbose|notice|warning]\n"
            "                    [--rdma-port PORT] [--rdma-bind ADDR]\n"
            "                    [--dir DIR [--appendfsync everysec|no]] [--busy-poll-us N]\n"
            "  --size accepts k/m/g/t suffixes (powers of 1024).\n"
            "  --unixsocket: also serve gateways on this host at PATH (--memnode\n"
            "  unix://PATH), as redis-server's option; --unixsocketperm in octal.\n"
            "  --dir keeps the region in DIR/dmkv-region: a restart keeps the data (start\n"
            "  it again with the same --size); --appendfsync: how often it is written\n"
            "  back for a machine crash (everysec: every second, no: by the kernel).\n"
            "  --busy-poll-us: after a tcp request, poll the sockets this many\n"
            "  microseconds before sleeping, while no other task waits for a CPU\n"
            "  (default %d: off; 25-100 helps one connection pipelining inserts).\n",
            MN_BUSY_POLL_US);
}

/* Parse argv into o. Returns 0, 1 for --help, or -1 after printing the problem. */
static int parse_args(int argc, char **argv, options_t *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
        if (i + 1 >= argc) {
            fprintf(stderr, "dmkv-memnode: unknown option or missing value: %s\n", a);
            return -1;
        }
        const char *v = argv[++i];
        char *end;
        if (strcmp(a, "--port") == 0 || strcmp(a, "--rdma-port") == 0) {
            long p = strtol(v, &end, 10);
            if (*end || p < 0 || p > 65535) {
                fprintf(stderr, "dmkv-memnode: bad port '%s'\n", v);
                return -1;
            }
            *(a[2] == 'p' ? &o->port : &o->rdma_port) = (int)p;
        } else if (strcmp(a, "--bind") == 0) {
            o->bind = v;
        } else if (strcmp(a, "--rdma-bind") == 0) {
            o->rdma_bind = v;
        } else if (strcmp(a, "--size") == 0) {
            if (mn_parse_size(v, &o->size) || o->size < MN_REGION_MIN || o->size > MN_REGION_MAX) {
                fprintf(stderr, "dmkv-memnode: bad size '%s' (1m .. 1t, e.g. 512m, 4g)\n", v);
                return -1;
            }
        } else if (strcmp(a, "--auth") == 0) {
            o->auth = v;
        } else if (strcmp(a, "--unixsocket") == 0) {
            if (v[0] != '/' || strlen(v) >= MN_UNIX_PATH_MAX) {
                fprintf(stderr,
                        "dmkv-memnode: bad unixsocket '%s' (an absolute path under 108 "
                        "bytes)\n",
                        v);
                return -1;
            }
            o->unixsocket = v;
        } else if (strcmp(a, "--unixsocketperm") == 0) {
            long m = strtol(v, &end, 8);
            if (*end || m <= 0 || m > 0777) {
                fprintf(stderr, "dmkv-memnode: bad unixsocketperm '%s' (octal, e.g. 700)\n", v);
                return -1;
            }
            o->unixsocketperm = (unsigned)m;
        } else if (strcmp(a, "--dir") == 0) {
            o->dir = v;
        } else if (strcmp(a, "--busy-poll-us") == 0) {
            long us = strtol(v, &end, 10);
            if (*end || us < 0 || us > 1000000) {
                fprintf(stderr, "dmkv-memnode: bad busy-poll-us '%s' (0 .. 1000000)\n", v);
                return -1;
            }
            o->busy_poll_us = us;
        } else if (strcmp(a, "--appendfsync") == 0) {
            if (strcmp(v, "everysec") && strcmp(v, "no")) {
                fprintf(stderr, "dmkv-memnode: bad appendfsync '%s' (everysec or no)\n", v);
                return -1;
            }
            o->fsync_everysec = strcmp(v, "everysec") == 0;
        } else if (strcmp(a, "--loglevel") == 0) {
            int l = dm_log_level_from_name(v);
            if (l < 0) {
                fprintf(stderr, "dmkv-memnode: bad loglevel '%s'\n", v);
                return -1;
            }
            dm_log_set_level(l);
        } else {
            fprintf(stderr, "dmkv-memnode: unknown option %s\n", a);
            return -1;
        }
    }
    return 0;
}

static mn_fence_t fence;
static int fence_on; /* the mailbox is served (its timer runs) */

/* The fence mailbox's cut: every transport closes the holder's connections. */
static unsigned cut_holder(void *arg, uint16_t holder)
{
    (void)arg;
    return mn_tcp_fence(&server, holder) + (rdma_started ? memnode_rdma_fence_instance(holder) : 0);
}

static void on_signal(uv_signal_t *h, int signum)
{
    (void)h;
    dm_log(DM_LOG_WARNING, "Received %s scheduling shutdown...",
           signum == SIGINT ? "SIGINT" : "SIGTERM");
    mn_tcp_stop(&server);
    if (rdma_started) memnode_rdma_stop();
    rdma_started = 0;
    if (fence_on) mn_fence_stop(&fence);
    fence_on = 0;
    uv_close((uv_handle_t *)&sig_int, NULL);
    uv_close((uv_handle_t *)&sig_term, NULL);
}

int main(int argc, char **argv)
{
    options_t o = {.port = 7000,
                   .bind = "127.0.0.1",
                   .size = 1ull << 30,
                   .rdma_port = -1,
                   .fsync_everysec = 1,
                   .busy_poll_us = MN_BUSY_POLL_US};
    int pr = parse_args(argc, argv, &o);
    if (pr) {
        usage(pr > 0 ? stdout : stderr);
        return pr > 0 ? 0 : 1;
    }
    signal(SIGPIPE, SIG_IGN);
    dm_log(DM_LOG_NOTICE, "dmkv-memnode starting, pid=%d", (int)getpid());

    mn_region_t region;
    char err[512];
    if (o.dir) {
        char path[4096];
        int reopened = 0;
        snprintf(path, sizeof(path), "%s/dmkv-region", o.dir);
        if (mn_region_open_file(&region, path, o.size, &reopened, err, sizeof(err))) {
            dm_log(DM_LOG_WARNING, "%s", err);
            return 1;
        }
        const dm_superblock_t *sb = (const dm_superblock_t *)region.base;
        dm_log(DM_LOG_NOTICE,
               "Region of %llu MiB in %s, %s (incarnation %016llx, alloc_ptr %llu), "
               "appendfsync %s",
               (unsigned long long)(o.size >> 20), path,
               reopened ? "reopened with its data" : "created and formatted",
               (unsigned long long)sb->incarnation, (unsigned long long)sb->alloc_ptr,
               o.fsync_everysec ? "everysec" : "no");
        if (region.replayed)
            dm_log(DM_LOG_WARNING,
                   "A %llu-byte WRITE the last process was running when it stopped was completed "
                   "from %s.wal",
                   (unsigned long long)region.replayed, path);
        if (region.wal_stale)
            dm_log(DM_LOG_WARNING,
                   "%s.wal recorded a WRITE running at a stop of an earlier boot (a machine "
                   "crash): not replayed (the region holds what was written back, up to about "
                   "the last second; see --appendfsync)",
                   path);
        if (o.fsync_everysec) {
            syncer.region = &region;
            syncer.running = pthread_create(&syncer.thread, NULL, sync_main, NULL) == 0;
        }
    } else if (mn_region_create(&region, o.size)) {
        dm_log(DM_LOG_WARNING, "Cannot allocate a %llu-byte region: %s", (unsigned long long)o.size,
               strerror(errno));
        return 1;
    } else {
        dm_log(DM_LOG_NOTICE,
               "Region of %llu MiB allocated (%s), node header formatted (alloc_ptr %llu)",
               (unsigned long long)(o.size >> 20), region.huge ? "huge pages" : "normal pages",
               (unsigned long long)((dm_superblock_t *)region.base)->alloc_ptr);
    }

    uv_loop_t *loop = uv_default_loop();
    if (mn_tcp_start(&server, loop, &region, o.bind, o.port, o.auth, o.unixsocket, o.unixsocketperm,
                     err, sizeof(err))) {
        dm_log(DM_LOG_WARNING, "%s", err);
        uv_run(loop, UV_RUN_DEFAULT);
        sync_stop();
        mn_region_destroy(&region);
        return 1;
    }
    if (o.rdma_port >= 0) {
        if (memnode_rdma_start(loop, region.base, region.size, o.rdma_bind, o.rdma_port, err,
                               sizeof(err))) {
            dm_log(DM_LOG_WARNING, "rdma listener: %s", err);
            mn_tcp_stop(&server);
            uv_run(loop, UV_RUN_DEFAULT);
            sync_stop();
            mn_region_destroy(&region);
            return 1;
        }
        rdma_started = 1;
        dm_log(DM_LOG_NOTICE, "rdma listener on %s:%d", o.rdma_bind ? o.rdma_bind : "*",
               o.rdma_port);
    }
    {
        const char *ns = getenv("DMKV_TEST_CHAIN_NO_SKIP");
        server.env.chain_no_skip = ns && !strcmp(ns, "1");
        if (server.env.chain_no_skip)
            dm_log(DM_LOG_WARNING, "test mode: chained verbs are never skipped (out of order)");
        const char *tw = getenv("DMKV_TEST_TEAR_WRITE");
        unsigned long long tl, tn;
        if (tw && sscanf(tw, "%llu:%llu", &tl, &tn) == 2 && tn) {
            server.env.tear_len = tl, server.env.tear_nth = tn;
            dm_log(DM_LOG_WARNING, "test mode: the process dies in WRITE %llu of %llu bytes", tn,
                   tl);
        }
    }
    fence_on = mn_fence_start(&fence, loop, region.base, rdma_started, cut_holder, NULL) == 0;
    if (fence_on)
        server.env.fences = 1; /* HELLO reports DM_CAP_FENCE from now on */
    else
        dm_log(DM_LOG_WARNING, "fence mailbox not served: lease takeovers cannot cut a holder");
    uv_signal_init(loop, &sig_int);
    uv_signal_init(loop, &sig_term);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_signal_start(&sig_term, on_signal, SIGTERM);

    dm_log(DM_LOG_NOTICE, "Server initialized: tcp transport on %s:%d%s", o.bind,
           mn_tcp_port(&server), server.auth[0] ? " (auth required)" : "");
    if (o.unixsocket) dm_log(DM_LOG_NOTICE, "The unix socket is %s", o.unixsocket);
    dm_log(DM_LOG_NOTICE, "Ready to accept connections tcp");
    if (o.unixsocket) dm_log(DM_LOG_NOTICE, "Ready to accept connections unix");
    mn_retrainer_t retrainer;
    if (mn_retrainer_start(&retrainer, region.base, region.size, &region.gate, "memnode"))
        dm_log(DM_LOG_WARNING, "ROLEX retrainer not started: %s", strerror(errno));
    dm_busy_poll_t poll;
    dm_busy_poll_init(&poll, (uint64_t)o.busy_poll_us, &server.stats.batches);
    if (o.busy_poll_us && poll.psi_fd < 0)
        dm_log(DM_LOG_NOTICE, "No busy polling: /proc/pressure/cpu is not readable");
    dm_busy_poll_run(&poll, loop);
    if (poll.sleeps)
        dm_log(DM_LOG_VERBOSE,
               "Busy polling: %llu sleeps, %llu polls that found a request, %llu ms polled",
               (unsigned long long)poll.sleeps, (unsigned long long)poll.hits,
               (unsigned long long)(poll.polled_us / 1000));
    dm_busy_poll_close(&poll);

    mn_retrainer_stop(&retrainer); /* joined before the region goes */
    uv_loop_close(loop);
    sync_stop();
    if (region.fd >= 0) dm_log(DM_LOG_NOTICE, "Writing the region back to its file...");
    mn_region_destroy(&region); /* a file-backed region is written back first */
    dm_log(DM_LOG_NOTICE, "dmkv-memnode is now ready to exit, bye bye...");
    return 0;
}
