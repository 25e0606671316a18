/* Integration-test process control (see procs.h). */
#include "procs.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 32

static pid_t children[MAX_CHILDREN];
static char child_log[MAX_CHILDREN][sizeof(((it_proc_t *)0)->log)];
static const char *test_name = "it";
static int log_seq;

/* Unix socket files of this test's memory nodes: a SIGKILLed node leaves its file. */
static char unix_paths[4][108];

static void kill_children(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0) {
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    }
    for (int i = 0; i < 4; i++)
        if (unix_paths[i][0]) unlink(unix_paths[i]);
}

/* The last bytes of every running child's log (a failed test's evidence: over rdma the
 * logs stay in the guest). Plain system calls: this runs in a signal handler. */
static void dump_children_logs(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] <= 0) continue;
        int fd = open(child_log[i], O_RDONLY);
        if (fd < 0) continue;
        off_t end = lseek(fd, 0, SEEK_END);
        lseek(fd, end > 3000 ? end - 3000 : 0, SEEK_SET);
        (void)!write(2, "---- ", 5);
        (void)!write(2, child_log[i], strlen(child_log[i]));
        (void)!write(2, " (last 3000 bytes) ----\n", 24);
        char buf[3000];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n > 0) (void)!write(2, buf, (size_t)n);
        close(fd);
    }
}

/* Once per process: several client threads may fail at once. */
static void dump_children_logs_once(void)
{
    static int dumped;
    if (!__atomic_exchange_n(&dumped, 1, __ATOMIC_ACQ_REL)) dump_children_logs();
}

static void on_fatal(int sig)
{
    if (sig != SIGINT && sig != SIGTERM) dump_children_logs_once();
    kill_children();
    if (sig == SIGALRM) {
        const char msg[] = "integration test timed out\n";
        (void)!write(2, msg, sizeof(msg) - 1);
        _exit(1);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The log of the seq-th daemon this test process started. */
static void log_path(char *buf, size_t n, int seq)
{
    snprintf(buf, n, "/tmp/dmkv-%s-%d-%d.log", test_name, (int)getpid(), seq);
}

/* A test that exits 0 passed: its children's logs are of no more use (every run left them
 * in /tmp: 7,222 files after a few days of make test). A failed one keeps them; so does an
 * abort, which runs no exit handler. */
static void remove_logs_if_passed(int status, void *arg)
{
    (void)arg;
    if (status != 0 || getenv("DMKV_IT_KEEP_LOGS")) return;
    char path[sizeof(((it_proc_t *)0)->log)];
    for (int i = 0; i < log_seq; i++) {
        log_path(path, sizeof(path), i);
        unlink(path);
    }
}

void it_begin(const char *name, unsigned timeout_s)
{
    test_name = name;
    atexit(kill_children);
    on_exit(remove_logs_if_passed, NULL);        /* runs before kill_children (reverse order) */
    harness_fail_hook = dump_children_logs_once; /* a CHECK's message after the logs */
    signal(SIGABRT, on_fatal);
    signal(SIGSEGV, on_fatal);
    signal(SIGBUS, on_fatal);
    signal(SIGINT, on_fatal);
    signal(SIGTERM, on_fatal);
    signal(SIGALRM, on_fatal);
    signal(SIGPIPE, SIG_IGN);
    alarm(timeout_s);
    setvbuf(stdout, NULL, _IONBF, 0);
}

int it_free_port(void)
{
    for (int attempt = 0; attempt < 50; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sizeof(a);
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &sl) == 0) {
            int port = ntohs(a.sin_port);
            close(fd);
            if (port > 1024 && port < 61000) return port;
            continue;
        }
        close(fd);
    }
    fprintf(stderr, "no free port\n");
    abort();
}

bool it_wait_port(int port, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(fd);
        if (ok) return true;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static pid_t spawn(it_proc_t *p, char *const argv[])
{
    log_path(p->log, sizeof(p->log), log_seq++);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        abort();
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == 0) {
            children[i] = pid;
            memcpy(child_log[i], p->log, sizeof(child_log[i]));
            break;
        }
    }
    p->pid = pid;
    return pid;
}

static void forget_child(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid) children[i] = 0;
}

void it_proc_dump_log(const it_proc_t *p)
{
    FILE *f = fopen(p->log, "r");
    if (!f) return;
    fprintf(stderr, "---- %s ----\n", p->log);
    char line[1024];
    static char ring[40][1024];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        snprintf(ring[n++ % 40], sizeof(ring[0]), "%s", line);
    int start = n > 40 ? n - 40 : 0;
    for (int i = start; i < n; i++)
        fputs(ring[i % 40], stderr);
    fclose(f);
}

void it_proc_grep_log(const it_proc_t *p, const char *needle)
{
    FILE *f = fopen(p->log, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle)) fprintf(stderr, "%s: %s", p->log, line);
    fclose(f);
}

static bool executable(const char *path)
{
    struct stat st;
    return path && *path && stat(path, &st) == 0 && (st.st_mode & S_IXUSR);
}

/* Start argv (with the port already in it) and wait until port accepts. */
static bool start_and_wait(it_proc_t *p, char *const argv[], int port)
{
    p->port = port;
    spawn(p, argv);
    for (int waited = 0; waited < 15000; waited += 50) {
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            forget_child(p->pid);
            p->pid = 0;
            return false; /* exited: maybe the port was taken; the caller retries */
        }
        if (it_wait_port(port, 50)) return true;
    }
    return false;
}

/* Poll p's log until it contains text (the memory node logs its rdma listener after the tcp
 * port already accepts); false when p exits or after timeout_ms. */
static bool wait_log(it_proc_t *p, const char *text, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        FILE *f = fopen(p->log, "r");
        char line[1024];
        bool found = false;
        while (f && !found && fgets(line, sizeof(line), f))
            found = strstr(line, text) != NULL;
        if (f) fclose(f);
        if (found) return true;
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            forget_child(p->pid);
            p->pid = 0;
            return false;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

void it_pool_start(it_pool_t *pool)
{
    memset(pool, 0, sizeof(*pool));
    const char *bin = getenv("DMKV_MEMNODE");
    const char *force_local = getenv("DMKV_IT_LOCAL");
    if ((force_local && *force_local == '1') || !executable(bin)) {
        fprintf(stderr,
                "[procs] no dmkv-memnode binary (DMKV_MEMNODE=%s): using --memnode "
                "local\n",
                bin ? bin : "(unset)");
        snprintf(pool->uri, sizeof(pool->uri), "local");
        pool->shared = false;
        return;
    }
    const char *size = getenv("DMKV_IT_MEMNODE_SIZE");
    if (!size) size = "512m";
    /* DMKV_IT_MEMNODE_RDMA=ADDR: the memory node also serves rdma on ADDR (a free port) and
     * the pool's URI is rdma://ADDR:port, so every gateway a test starts uses the rdma
     * transport (tests/rdma/it-in-vm.sh, inside the Soft-RoCE VM). DMKV_IT_MEMNODE_ARGS:
     * extra memory-node flags, split at spaces. */
    const char *rdma = getenv("DMKV_IT_MEMNODE_RDMA");
    if (rdma && !*rdma) rdma = NULL;
    const char *more = getenv("DMKV_IT_MEMNODE_ARGS");
    /* DMKV_IT_MEMNODE_UNIX=1: the memory node also listens on a unix socket and the pool's
     * URI is unix:///tmp/dmkv-<test>-<pid>-<port>.sock (the unix/ tests). */
    const char *ux = getenv("DMKV_IT_MEMNODE_UNIX");
    int use_unix = !rdma && ux && *ux == '1';
    for (int attempt = 0; attempt < 5; attempt++) {
        char extra[512];
        snprintf(extra, sizeof(extra), "%s", more ? more : "");
        int port = it_free_port(), rport = rdma ? it_free_port() : 0;
        char ps[16], rps[16];
        snprintf(ps, sizeof(ps), "%d", port);
        snprintf(rps, sizeof(rps), "%d", rport);
        char *argv[40] = {(char *)bin, "--port", ps, "--size", (char *)size, NULL};
        int n = 5;
        if (rdma) {
            argv[n++] = "--rdma-port";
            argv[n++] = rps;
            argv[n++] = "--rdma-bind";
            argv[n++] = (char *)rdma;
        }
        if (use_unix) {
            snprintf(pool->unix_path, sizeof(pool->unix_path), "/tmp/dmkv-%s-%d-%d.sock", test_name,
                     (int)getpid(), port);
            argv[n++] = "--unixsocket";
            argv[n++] = pool->unix_path;
            for (int i = 0; i < 4; i++)
                if (!unix_paths[i][0] || !strcmp(unix_paths[i], pool->unix_path)) {
                    memcpy(unix_paths[i], pool->unix_path, sizeof(unix_paths[i]));
                    break;
                }
        }
        char *save = NULL;
        for (char *w = strtok_r(extra, " ", &save); w && n < 39; w = strtok_r(NULL, " ", &save))
            argv[n++] = w;
        argv[n] = NULL;
        if (start_and_wait(&pool->memnode, argv, port) &&
            (!rdma || wait_log(&pool->memnode, "rdma listener on", 15000))) {
            if (rdma)
                snprintf(pool->uri, sizeof(pool->uri), "rdma://%s:%d", rdma, rport);
            else if (use_unix)
                snprintf(pool->uri, sizeof(pool->uri), "unix://%s", pool->unix_path);
            else
                snprintf(pool->uri, sizeof(pool->uri), "tcp://127.0.0.1:%d", port);
            pool->shared = true;
            pool->tcp_port = port;
            pool->rdma_port = rport;
            snprintf(pool->rdma_addr, sizeof(pool->rdma_addr), "%s", rdma ? rdma : "");
            fprintf(stderr, "[procs] memnode pid %d on %d, %s (log %s)\n", (int)pool->memnode.pid,
                    port, pool->uri, pool->memnode.log);
            return;
        }
        it_proc_dump_log(&pool->memnode);
        if (pool->memnode.pid) it_proc_stop(&pool->memnode);
    }
    fprintf(stderr, "[procs] cannot start dmkv-memnode\n");
    abort();
}

void it_gateway_start_env(it_proc_t *gw, const char *const *uris, int nuris, int threads,
                          const char *const *extra, const char *name, const char *value)
{
    setenv(name, value, 1);
    it_gateway_start(gw, uris, nuris, threads, extra);
    unsetenv(name);
}

void it_gateway_start(it_proc_t *gw, const char *const *uris, int nuris, int threads,
                      const char *const *extra)
{
    const char *bin = getenv("DMKV_GATEWAY");
    if (!executable(bin)) {
        fprintf(stderr, "[procs] DMKV_GATEWAY is not set to the dmkv-gateway binary\n");
        abort();
    }
    memset(gw, 0, sizeof(*gw));
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = it_free_port();
        char ps[16], ts[16];
        snprintf(ps, sizeof(ps), "%d", port);
        snprintf(ts, sizeof(ts), "%d", threads);
        char *argv[64];
        int n = 0;
        argv[n++] = (char *)bin;
        argv[n++] = "--port";
        argv[n++] = ps;
        argv[n++] = "--bind";
        argv[n++] = "127.0.0.1";
        argv[n++] = "--threads";
        argv[n++] = ts;
        for (int i = 0; i < nuris && n < 50; i++) {
            argv[n++] = "--memnode";
            argv[n++] = (char *)uris[i];
        }
        /* DMKV_IT_POINT_INDEX=name: every gateway runs that point engine (a test's own
         * --point-index, later in argv, wins). */
        const char *point = getenv("DMKV_IT_POINT_INDEX");
        if (point && *point) {
            argv[n++] = "--point-index";
            argv[n++] = (char *)point;
        }
        /* DMKV_IT_RANGE_INDEX=name: the same for the range engine. */
        const char *range = getenv("DMKV_IT_RANGE_INDEX");
        if (range && *range) {
            argv[n++] = "--range-index";
            argv[n++] = (char *)range;
        }
        for (int i = 0; extra && extra[i] && n < 62; i++)
            argv[n++] = (char *)extra[i];
        argv[n] = NULL;
        if (start_and_wait(gw, argv, port)) {
            fprintf(stderr, "[procs] gateway pid %d on %d (log %s)\n", (int)gw->pid, port, gw->log);
            return;
        }
        it_proc_dump_log(gw);
        if (gw->pid) it_proc_stop(gw);
    }
    fprintf(stderr, "[procs] cannot start dmkv-gateway\n");
    abort();
}

int it_proc_wait(it_proc_t *p, int timeout_ms)
{
    if (p->pid <= 0) return -1;
    int st = 0;
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            forget_child(p->pid);
            p->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -2;
}

int it_proc_stop(it_proc_t *p)
{
    if (p->pid <= 0) return -1;
    kill(p->pid, SIGTERM);
    int st = 0;
    for (int waited = 0; waited < 10000; waited += 20) {
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            forget_child(p->pid);
            p->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
    forget_child(p->pid);
    p->pid = 0;
    return -1;
}

redisContext *it_connect(int port)
{
    struct timeval tv = {30, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        fprintf(stderr, "connect to %d: %s\n", port, c ? c->errstr : "alloc");
        abort();
    }
    redisSetTimeout(c, tv);
    return c;
}

redisContext *it_try_connect(int port, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

redisReply *it_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        fprintf(stderr, "command '%s' failed: %s\n", fmt, c->errstr);
        abort();
    }
    return r;
}

long long it_scan_count(redisContext *c, const char *match)
{
    long long n = 0;
    char cursor[64] = "0";
    do {
        redisReply *r = it_cmd(c, "SCAN %s MATCH %s COUNT 500", cursor, match);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            fprintf(stderr, "SCAN did not answer a cursor and keys\n");
            abort();
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        n += (long long)r->element[1]->elements;
        freeReplyObject(r);
    } while (strcmp(cursor, "0"));
    return n;
}

void it_pipeline_ok(redisContext *c, int n)
{
    for (int i = 0; i < n; i++) {
        redisReply *r;
        if (redisGetReply(c, (void **)&r) != REDIS_OK) {
            fprintf(stderr, "pipelined reply %d: %s\n", i, c->errstr);
            abort();
        }
        if (r->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "pipelined reply %d: error %s\n", i, r->str);
            abort();
        }
        freeReplyObject(r);
    }
}

long long it_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double it_info_field(redisContext *c, const char *section, const char *name)
{
    redisReply *r = it_cmd(c, "INFO %s", section);
    char pat[96];
    snprintf(pat, sizeof(pat), "\r\n%s:", name);
    const char *p = r->type == REDIS_REPLY_STRING ? strstr(r->str, pat) : NULL;
    if (!p) {
        fprintf(stderr, "INFO %s has no %s\n", section, name);
        abort();
    }
    double v = strtod(p + strlen(pat), NULL);
    freeReplyObject(r);
    return v;
}

bool it_shared_pool_start(it_pool_t *pool)
{
    it_pool_start(pool);
    if (!pool->shared)
        fprintf(stderr, "SKIP: needs a memory node shared by several gateway processes\n");
    return pool->shared;
}

bool it_pool_kill(it_pool_t *pool)
{
    if (!pool->shared || !pool->tcp_port) {
        fprintf(stderr, "SKIP: needs a memory node this test can restart\n");
        return false;
    }
    kill(pool->memnode.pid, SIGKILL);
    waitpid(pool->memnode.pid, NULL, 0);
    forget_child(pool->memnode.pid);
    return true;
}

bool it_dir_pool_start(it_pool_t *pool, char *dir, char *args)
{
    snprintf(dir, 64, "/tmp/dmkv-%s-XXXXXX", test_name);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    snprintf(args, 128, "--dir %s", dir);
    setenv("DMKV_IT_MEMNODE_ARGS", args, 1);
    bool shared = it_shared_pool_start(pool);
    unsetenv("DMKV_IT_MEMNODE_ARGS");
    return shared;
}

void it_dir_pool_remove(const char *dir)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/dmkv-region", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/dmkv-region.wal", dir); /* memnode/mn_region.h */
    unlink(path);
    rmdir(dir);
}

bool it_pool_restart(it_pool_t *pool, const char *extra)
{
    return it_pool_kill(pool) && it_pool_revive(pool, extra);
}

bool it_pool_revive(it_pool_t *pool, const char *extra)
{
    int port = pool->tcp_port;
    const char *size = getenv("DMKV_IT_MEMNODE_SIZE");
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    char *argv[20] = {(char *)getenv("DMKV_MEMNODE"), "--port", ps, "--size",
                      (char *)(size ? size : "512m"), NULL};
    char more[512], rps[16], *save = NULL;
    snprintf(more, sizeof(more), "%s", extra ? extra : "");
    int n = 5;
    if (pool->rdma_port) { /* the same rdma listener: the gateways redial its URI */
        snprintf(rps, sizeof(rps), "%d", pool->rdma_port);
        argv[n++] = "--rdma-port";
        argv[n++] = rps;
        argv[n++] = "--rdma-bind";
        argv[n++] = pool->rdma_addr;
    }
    if (pool->unix_path[0]) { /* the same socket path: a SIGKILLed node left its file there */
        argv[n++] = "--unixsocket";
        argv[n++] = pool->unix_path;
    }
    for (char *w = strtok_r(more, " ", &save); w && n < 19; w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    for (int attempt = 0; attempt < 50; attempt++) { /* the ports may linger a moment */
        if (start_and_wait(&pool->memnode, argv, port) &&
            (!pool->rdma_port || wait_log(&pool->memnode, "rdma listener on", 15000)))
            return true;
        if (pool->memnode.pid) it_proc_stop(&pool->memnode);
        usleep(100000);
    }
    fprintf(stderr, "[procs] cannot restart dmkv-memnode on port %d\n", port);
    abort();
}

void it_gateways_start(const it_pool_t *pool, it_proc_t *gw, int n, int threads_first,
                       int threads_rest, int *ports)
{
    const char *uris[1] = {pool->uri};
    for (int i = 0; i < n; i++) {
        it_gateway_start(&gw[i], uris, 1, i == 0 ? threads_first : threads_rest, NULL);
        if (ports) ports[i] = gw[i].port;
    }
}

void it_expect_refused(const char *bin_env, const char *args, const char *want)
{
    const char *bin = getenv(bin_env);
    CHECKF(bin != NULL, "%s not set", bin_env);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s --port %d 2>&1", bin, args, it_free_port());
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char out[512] = "";
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int st = pclose(p);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) != 0, "%s was not refused: status %d", cmd, st);
    CHECKF(strstr(out, want) != NULL, "%s: '%s' not in: %s", cmd, want, out);
}

int it_scaled(int n)
{
    const char *e = getenv("DMKV_IT_SCALE");
    long pct = e && *e ? strtol(e, NULL, 10) : 100;
    if (pct <= 0) pct = 100;
    long v = (long)n * pct / 100;
    return v < 1 ? 1 : (int)v;
}

void it_tool_path(const char *env, const char *rel, char *out, size_t n)
{
    const char *set = getenv(env);
    const char *gw = getenv("DMKV_GATEWAY");
    out[0] = 0;
    if (set && *set) {
        snprintf(out, n, "%s", set);
    } else if (gw && strrchr(gw, '/')) {
        int dir = (int)(strrchr(gw, '/') - gw);
        snprintf(out, n, "%.*s/../%s", dir, gw, rel);
    }
    if (!out[0] || access(out, X_OK) != 0) {
        fprintf(stderr, "no %s (%s)\n", rel, env);
        abort();
    }
}

int it_log_count(const it_proc_t *p, const char *text)
{
    FILE *f = fopen(p->log, "r");
    CHECK(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

bool it_faketime_installed(void)
{
    if (access(IT_FAKETIME_LIB, R_OK) == 0) return true;
    fprintf(stderr, "SKIP: %s not installed (Debian package faketime)\n", IT_FAKETIME_LIB);
    return false;
}

void it_faketime_on(const char *offset, const char *file)
{
    setenv("LD_PRELOAD", IT_FAKETIME_LIB, 1);
    if (file) {
        setenv("FAKETIME_TIMESTAMP_FILE", file, 1);
        setenv("FAKETIME_NO_CACHE", "1", 1);
    } else {
        setenv("FAKETIME", offset, 1);
    }
    setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
    setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 1); /* preloaded before ASan's runtime */
}

void it_faketime_off(void)
{
    unsetenv("LD_PRELOAD");
    unsetenv("FAKETIME");
    unsetenv("FAKETIME_TIMESTAMP_FILE");
    unsetenv("FAKETIME_NO_CACHE");
    unsetenv("FAKETIME_DONT_FAKE_MONOTONIC");
    unsetenv("ASAN_OPTIONS");
}
