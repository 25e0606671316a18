/* Integration-test process control: start real dmkv-memnode / dmkv-gateway processes on
 * free 127.0.0.1 ports, wait until they accept connections, and make sure they die with
 * the test (normal exit, CHECK abort, time-out alarm, or a crash of the test itself). */
#ifndef DMKV_IT_PROCS_H
#define DMKV_IT_PROCS_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <sys/types.h>

typedef struct it_proc {
    pid_t pid;     /* 0 when not running */
    int port;      /* TCP port it listens on */
    char log[256]; /* file receiving its stdout/stderr */
} it_proc_t;

/* A pool for the test: a memory node (or the in-process "local" pool when no dmkv-memnode
 * binary is available or DMKV_IT_LOCAL=1 is set). */
typedef struct it_pool {
    it_proc_t memnode;
    char uri[160]; /* "tcp://127.0.0.1:<port>", "unix:///tmp/...", "rdma://ADDR:<port>", "local" */
    bool shared;   /* true when several gateways can share it (a real memory node) */
    int tcp_port, rdma_port; /* the memory node's ports (rdma_port 0: no rdma listener) */
    char rdma_addr[64];
    char unix_path[108]; /* DMKV_IT_MEMNODE_UNIX=1: the memory node's --unixsocket, else "" */
} it_pool_t;

/* Start the test: installs handlers so that child processes are killed on exit/abort, and
 * an alarm that fails the test after timeout_s seconds. name labels log files. */
void it_begin(const char *name, unsigned timeout_s);

/* A currently free TCP port on 127.0.0.1. */
int it_free_port(void);

/* Poll until 127.0.0.1:port accepts a TCP connection; false after timeout_ms. */
bool it_wait_port(int port, int timeout_ms);

/* Start a pool (memory node when possible). Aborts the test on failure. */
void it_pool_start(it_pool_t *pool);

/* it_pool_start, then false (after a SKIP line on stderr) when the pool is the in-process
 * "local" one: tests with several gateway processes need a real memory node. */
bool it_shared_pool_start(it_pool_t *pool);

/* Kill a pool's memory node with SIGKILL and start a new one on the same ports (tcp, and
 * rdma when it had a listener) with the same --size and extra flags (NULL: none, so a new, empty
 * region: a new incarnation;
 * "--dir D": the region kept in D). False (after a SKIP line) for other pools. */
bool it_pool_restart(it_pool_t *pool, const char *extra);
/* it_pool_restart in two halves, for a test that acts while the node is down: the kill
 * (false, after a SKIP line, for other pools), then the start on the same ports. */
bool it_pool_kill(it_pool_t *pool);
bool it_pool_revive(it_pool_t *pool, const char *extra);
/* it_shared_pool_start with the region kept in a new folder: dir (a buffer of at least 64
 * bytes) gets its path, args (at least 128) the memory node's "--dir PATH" for
 * it_pool_restart/it_pool_revive. False (after a SKIP line) when the pool is not shared.
 * it_dir_pool_remove deletes the folder and its region file once the node is stopped. */
bool it_dir_pool_start(it_pool_t *pool, char *dir, char *args);
void it_dir_pool_remove(const char *dir);

/* n gateways on pool's URI: gw[0] with threads_first workers, the others with threads_rest;
 * ports[i] = gw[i].port when ports is not NULL. Aborts the test on failure. */
void it_gateways_start(const it_pool_t *pool, it_proc_t *gw, int n, int threads_first,
                       int threads_rest, int *ports);

/* Start dmkv-gateway on a free port with the given memory-node URIs and threads, plus
 * extra arguments (NULL-terminated list, may be NULL), and --point-index $DMKV_IT_POINT_INDEX
 * and --range-index $DMKV_IT_RANGE_INDEX when those are set. Aborts the test on failure. */
void it_gateway_start(it_proc_t *gw, const char *const *uris, int nuris, int threads,
                      const char *const *extra);

/* it_gateway_start with the environment variable name set to value for that gateway only
 * (a test-only knob: DMKV_FAULT_STALL, DMKV_SPLIT_PAUSE_MS). */
void it_gateway_start_env(it_proc_t *gw, const char *const *uris, int nuris, int threads,
                          const char *const *extra, const char *name, const char *value);

/* Wait up to timeout_ms for p to exit by itself (SHUTDOWN). Returns its exit status, -1
 * when a signal ended it, -2 when it is still running. */
int it_proc_wait(it_proc_t *p, int timeout_ms);

/* SIGTERM, wait up to 10 s (then SIGKILL). Returns the exit status as from waitpid's
 * WEXITSTATUS, or -1 when it had to be killed or died of a signal. */
int it_proc_stop(it_proc_t *p);

/* Print the last lines of p's log to stderr (on failures). */
void it_proc_dump_log(const it_proc_t *p);

/* Print every line of p's log that contains needle, prefixed by the log's path (to stderr).
 * Used before long dumps: CI keeps only the head and tail of a failing test's output. */
void it_proc_grep_log(const it_proc_t *p, const char *needle);

/* Lines of p's log that contain text (aborts when the log cannot be read). */
int it_log_count(const it_proc_t *p, const char *text);

/* hiredis connection to 127.0.0.1:port with a 30 s timeout; aborts on failure. */
redisContext *it_connect(int port);
/* The same with a timeout_ms connect and command timeout; NULL on failure (a gateway that
 * is down or restarting). */
redisContext *it_try_connect(int port, int timeout_ms);

/* Run one command (redisCommandArgv-style with lengths) and return the reply (caller
 * frees); aborts when the connection failed. */
redisReply *it_cmd(redisContext *c, const char *fmt, ...);
/* Keys a full SCAN MATCH match returns (aborts on a malformed reply). */
long long it_scan_count(redisContext *c, const char *match);

/* Read n pipelined replies on c; aborts on an error reply or a lost connection. */
void it_pipeline_ok(redisContext *c, int n);

/* Milliseconds on the monotonic clock. */
long long it_now_ms(void);

/* The number after "name:" in INFO section's reply on c. Aborts when the field is absent. */
double it_info_field(redisContext *c, const char *section, const char *name);

/* Path of a dmkv tool binary: $env when set, else rel (e.g. "tools/dmkv-index-rebuild")
 * in the build directory that holds DMKV_GATEWAY. Aborts when it is not an executable. */
void it_tool_path(const char *env, const char *rel, char *out, size_t n);

/* The binary named by env var `bin_env` (DMKV_GATEWAY, DMKV_MEMNODE), started with `args`
 * and a free --port, refuses to start: a nonzero exit status and `want` in its first 511
 * bytes of output. Checks it (CHECK). */
void it_expect_refused(const char *bin_env, const char *args, const char *want);

/* n scaled by DMKV_IT_SCALE (percent, default 100; the rxe guest runs with less), at
 * least 1: the size of a workload whose count a test's checks do not depend on. */
int it_scaled(int n);

/* Exit status to use when a test is skipped (ctest treats 0 as pass; we print SKIP). */
#define IT_SKIP 0

/* libfaketime (Debian package faketime): the wall clock of the processes started between
 * it_faketime_on and it_faketime_off is shifted by `offset` ("+2s"), or, when file is not
 * NULL, by the offset written in file, read again at every clock call (offset unused);
 * their monotonic clock stays real. it_faketime_installed prints a SKIP line when it is
 * missing. */
#define IT_FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
bool it_faketime_installed(void);
void it_faketime_on(const char *offset, const char *file);
void it_faketime_off(void);

#endif
