/* Process start-up and shutdown: worker threads, SIGINT/SIGTERM, the ops/sec sampler. */
#include "server/server.h"

#include "server/client_evict.h"
#include "server/client_obuf.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmkv/transport.h"
#include "server/stats.h"
#include "dmkv/alloc.h"
#include "dmkv/log.h"
#include "version.h"
#include "util/heap.h"

#define SHUTDOWN_TIMEOUT_S 15 /* give up waiting for threads after this */

gw_server_t gw_server;

static uv_signal_t sig_int, sig_term;
static uv_timer_t ops_timer;
static uint64_t ops_last;
static int shutdown_signal;

static void make_run_id(char *out)
{
    unsigned char r[20];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, r, sizeof(r)) : -1;
    if (fd >= 0) close(fd);
    if (n != (ssize_t)sizeof(r)) {
        srand((unsigned)(dm_now_us() ^ (uint64_t)getpid()));
        for (size_t i = 0; i < sizeof(r); i++)
            r[i] = (unsigned char)rand();
    }
    for (size_t i = 0; i < sizeof(r); i++)
        sprintf(out + 2 * i, "%02x", r[i]);
    out[40] = 0;
}

static void on_ops_timer(uv_timer_t *t)
{
    (void)t;
    uint64_t now = GW_STAT_GET(total_commands_processed);
    uint64_t d = now >= ops_last ? now - ops_last : now;
    ops_last = now;
    __atomic_store_n(&gw_server.ops_per_sec, d, __ATOMIC_RELAXED);
}

static void on_signal(uv_signal_t *s, int signum)
{
    shutdown_signal = signum;
    dm_log(DM_LOG_WARNING, "Received %s scheduling shutdown...",
           signum == SIGINT ? "SIGINT" : "SIGTERM");
    /* Closing the watchers restores the default action: a second signal kills at once. */
    uv_close((uv_handle_t *)&sig_int, NULL);
    uv_close((uv_handle_t *)&sig_term, NULL);
    uv_close((uv_handle_t *)&ops_timer, NULL);
    uv_stop(s->loop);
}

static void watchdog(void *arg)
{
    (void)arg;
    sleep(SHUTDOWN_TIMEOUT_S);
    dm_log(DM_LOG_WARNING, "Shutdown took longer than %d s: exiting now", SHUTDOWN_TIMEOUT_S);
    _exit(1);
}

static void stop_threads(int n)
{
    for (int i = 0; i < n; i++)
        gw_thread_stop(&gw_server.threads[i]);
    for (int i = 0; i < n; i++)
        gw_thread_join(&gw_server.threads[i]);
}

int gw_server_run(const gw_config_t *cfg)
{
    signal(SIGPIPE, SIG_IGN);
    gw_heap_tune();
    memset(&gw_server, 0, sizeof(gw_server));
    gw_server.cfg = cfg;
    gw_server.start_ms = dm_wall_ms();
    gw_server.start_us = dm_now_us();
    make_run_id(gw_server.run_id);
    size_t exe_len = 0;
    if (uv_exepath(gw_server.executable, &exe_len) != 0 || exe_len == 0) {
        exe_len = sizeof(gw_server.executable);
        if (uv_exepath(gw_server.executable, &exe_len) != 0) gw_server.executable[0] = 0;
    }
    dm_log_set_level(cfg->loglevel);
    gw_evict_set_limit(cfg->maxmemory_clients);
    gw_obuf_limit_t obuf[GW_OBUF_CLASSES];
    const char *why = NULL;
    gw_obuf_defaults(obuf);
    if (cfg->client_obuf_limit) {
        char *arg = cfg->client_obuf_limit;
        if (gw_obuf_parse(1, &arg, obuf, &why) != 0) /* checked when parsed: never */
            dm_log(DM_LOG_WARNING, "client-output-buffer-limit ignored: %s", why);
    }
    gw_obuf_set(obuf);

    dm_log(DM_LOG_WARNING, "oO0OoO0OoO0Oo dmkv gateway is starting oO0OoO0OoO0Oo");
    dm_log(DM_LOG_WARNING, "dmkv version=%s, redis_version=%s, bits=%d, pid=%d, just started",
           GW_DMKV_VERSION, GW_REDIS_VERSION, (int)(sizeof(void *) * 8), (int)getpid());
    if (cfg->config_file)
        dm_log(DM_LOG_WARNING, "Configuration loaded from %s", cfg->config_file);
    else
        dm_log(DM_LOG_WARNING, "Configuration loaded from the command line");
    if (cfg->local_size) dm_local_set_size(cfg->local_size);
    if (cfg->local_delay_us) dm_local_inject((uint32_t)cfg->local_delay_us, 0, NULL, NULL);

    gw_server.nthreads = cfg->threads;
    gw_server.threads = calloc((size_t)cfg->threads, sizeof(gw_thread_t));
    if (!gw_server.threads) {
        dm_log(DM_LOG_WARNING, "Out of memory");
        return 1;
    }
    for (int i = 0; i < cfg->threads; i++) {
        gw_thread_t *th = &gw_server.threads[i];
        th->index = i;
        th->cfg = cfg;
        gw_thread_init(th);
    }
    for (int i = 0; i < cfg->threads; i++) {
        gw_thread_t *th = &gw_server.threads[i];
        if (gw_thread_start(th) != 0) {
            dm_log(DM_LOG_WARNING, "%s", th->start_err);
            stop_threads(i);
            for (int j = i; j < cfg->threads; j++)
                gw_thread_join(&gw_server.threads[j]); /* i exited; the rest never started */
            free(gw_server.threads);
            gw_server.threads = NULL;
            return 1;
        }
    }
    for (int i = 0; i < cfg->threads; i++)
        gw_thread_listen(&gw_server.threads[i]);
    dm_log(DM_LOG_NOTICE, "Connected to %d memory node(s):", cfg->nmemnodes);
    for (int i = 0; i < cfg->nmemnodes; i++)
        dm_log(DM_LOG_NOTICE, "  node %d: %s", i, cfg->memnodes[i]);
    dm_log(DM_LOG_NOTICE, "Running mode=standalone, port=%d, threads=%d.", cfg->port, cfg->threads);
    dm_log(DM_LOG_NOTICE, "Pool chunk owner id %016llx", (unsigned long long)dm_alloc_owner_id());
    dm_log(DM_LOG_NOTICE, "Server initialized");
    dm_log(DM_LOG_NOTICE, "Ready to accept connections tcp");

    uv_loop_t loop;
    uv_loop_init(&loop);
    uv_signal_init(&loop, &sig_int);
    uv_signal_init(&loop, &sig_term);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_timer_init(&loop, &ops_timer);
    uv_timer_start(&ops_timer, on_ops_timer, 1000, 1000);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_run(&loop, UV_RUN_DEFAULT); /* let the close callbacks run */
    uv_loop_close(&loop);

    dm_log(DM_LOG_WARNING, "User requested shutdown...");
    uv_thread_t wd;
    uv_thread_create(&wd, watchdog, NULL);
    stop_threads(gw_server.nthreads);
    dm_log(DM_LOG_WARNING, "dmkv gateway is now ready to exit, bye bye...");
    free(gw_server.threads);
    gw_server.threads = NULL;
    gw_server.nthreads = 0;
    return 0;
}
