/* dmkv-memnode: the memory-node daemon (docs/DESIGN.md "Memory node"). Allocates one region,
 * formats its header, and serves the tcp transport (and, with --rdma-port, the rdma
 * listener) on one libuv thread until SIGINT/SIGTERM.
 *
 *   dmkv-memnode [--port 7000] [--bind 127.0.0.1] [--size 1g] [--auth TOKEN]
 *                [--loglevel notice] [--rdma-port PORT] [--rdma-bind ADDR] */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "dmkv/superblock.h"
#include "dmkv/log.h"
#include "mn_region.h"
#include "rdma_server.h"
#include "tcp_server.h"

typedef struct options {
    int port;
    const char *bind;
    uint64_t size;
    const char *auth;
    int rdma_port; /* -1 = no rdma listener */
    const char *rdma_bind;
} options_t;

static mn_tcp_server_t server;
static uv_signal_t sig_int, sig_term;
static int rdma_started;

static void usage(FILE *f)
{
    fprintf(f, "Usage: dmkv-memnode [--port 7000] [--bind 127.0.0.1] [--size 1g] [--auth TOKEN]\n"
               "                    [--loglevel debug|verbose|notice|warning]\n"
               "                    [--rdma-port PORT] [--rdma-bind ADDR]\n"
               "  --size accepts k/m/g/t suffixes (powers of 1024).\n");
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

static void on_signal(uv_signal_t *h, int signum)
{
    (void)h;
    dm_log(DM_LOG_WARNING, "Received %s scheduling shutdown...",
           signum == SIGINT ? "SIGINT" : "SIGTERM");
    mn_tcp_stop(&server);
    if (rdma_started) memnode_rdma_stop();
    rdma_started = 0;
    uv_close((uv_handle_t *)&sig_int, NULL);
    uv_close((uv_handle_t *)&sig_term, NULL);
}

int main(int argc, char **argv)
{
    options_t o = {.port = 7000, .bind = "127.0.0.1", .size = 1ull << 30, .rdma_port = -1};
    int pr = parse_args(argc, argv, &o);
    if (pr) {
        usage(pr > 0 ? stdout : stderr);
        return pr > 0 ? 0 : 1;
    }
    signal(SIGPIPE, SIG_IGN);
    dm_log(DM_LOG_NOTICE, "dmkv-memnode starting, pid=%d", (int)getpid());

    mn_region_t region;
    if (mn_region_create(&region, o.size)) {
        dm_log(DM_LOG_WARNING, "Cannot allocate a %llu-byte region: %s", (unsigned long long)o.size,
               strerror(errno));
        return 1;
    }
    dm_log(DM_LOG_NOTICE,
           "Region of %llu MiB allocated (%s), node header formatted (alloc_ptr %llu)",
           (unsigned long long)(o.size >> 20), region.huge ? "huge pages" : "normal pages",
           (unsigned long long)((dm_superblock_t *)region.base)->alloc_ptr);

    uv_loop_t *loop = uv_default_loop();
    char err[256];
    if (mn_tcp_start(&server, loop, &region, o.bind, o.port, o.auth, err, sizeof(err))) {
        dm_log(DM_LOG_WARNING, "%s", err);
        uv_run(loop, UV_RUN_DEFAULT);
        mn_region_destroy(&region);
        return 1;
    }
    if (o.rdma_port >= 0) {
        if (memnode_rdma_start(loop, region.base, region.size, o.rdma_bind, o.rdma_port, err,
                               sizeof(err))) {
            dm_log(DM_LOG_WARNING, "rdma listener: %s", err);
            mn_tcp_stop(&server);
            uv_run(loop, UV_RUN_DEFAULT);
            mn_region_destroy(&region);
            return 1;
        }
        rdma_started = 1;
        dm_log(DM_LOG_NOTICE, "rdma listener on %s:%d", o.rdma_bind ? o.rdma_bind : "*",
               o.rdma_port);
    }
    uv_signal_init(loop, &sig_int);
    uv_signal_init(loop, &sig_term);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_signal_start(&sig_term, on_signal, SIGTERM);

    dm_log(DM_LOG_NOTICE, "Server initialized: tcp transport on %s:%d%s", o.bind,
           mn_tcp_port(&server), server.auth[0] ? " (auth required)" : "");
    dm_log(DM_LOG_NOTICE, "Ready to accept connections tcp");
    uv_run(loop, UV_RUN_DEFAULT);

    uv_loop_close(loop);
    mn_region_destroy(&region);
    dm_log(DM_LOG_NOTICE, "dmkv-memnode is now ready to exit, bye bye...");
    return 0;
}
