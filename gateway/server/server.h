/* The gateway process: worker threads, signals, shutdown, process-wide facts for INFO. */
#ifndef GW_SERVER_SERVER_H
#define GW_SERVER_SERVER_H

#include <stdint.h>

#include "config/config.h"
#include "server/thread.h"

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

#endif
