/* The gateway process: worker threads, signals, shutdown, process-wide facts for INFO. */
#ifndef GW_SERVER_SERVER_H
#define GW_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "server/thread.h"
#include "util/buf.h"

typedef struct gw_server {
    const gw_config_t *cfg;
    gw_thread_t *threads; /* nthreads entries */
    int nthreads;
    uint64_t start_ms;     /* wall-clock ms at start-up */
    uint64_t start_us;     /* monotonic us at start-up */
    char run_id[41];       /* 40 random hex chars */
    char executable[1024]; /* absolute path of the binary, "" if unknown */
    uint64_t ops_per_sec;  /* commands per second over the last second (atomic) */
} gw_server_t;

/* The process's server (valid once gw_server_run started). */
extern gw_server_t gw_server;

/* Start the worker threads on cfg, serve until SIGINT/SIGTERM, shut down cleanly.
 * Returns the process exit code (0 after a clean shutdown, 1 when start-up failed). */
int gw_server_run(const gw_config_t *cfg);

/* requirepass (server/auth.c): set by CONFIG SET requirepass, kept per gateway process
 * (each gateway has its own; set it on every gateway). Thread-safe. */
/* True when a password is required. */
bool gw_server_requirepass_set(void);
/* True when (p, len) equals the current password (constant-time compare). */
bool gw_server_check_pass(const char *p, size_t len);
/* Set the password ("" clears it). */
void gw_server_set_requirepass(const char *p, size_t len);
/* Append the current password (may be empty) to b. */
void gw_server_get_requirepass(gw_buf_t *b);

#endif
