/* Process-wide gateway counters (INFO clients/stats), updated with relaxed atomics from
 * every worker thread. dmcore's per-class verb counters live in dmkv/stats.h. */
#ifndef GW_SERVER_STATS_H
#define GW_SERVER_STATS_H

#include <stdint.h>

typedef struct gw_stats {
    uint64_t connected_clients;                         /* open client connections */
    uint64_t total_connections_received;                /* accepted since start */
    uint64_t rejected_connections;                      /* refused over maxclients */
    uint64_t client_query_buffer_limit_disconnections;  /* closed over the input limit */
    uint64_t client_output_buffer_limit_disconnections; /* closed over an output limit */
    uint64_t evicted_clients;                           /* closed by maxmemory-clients */
    uint64_t client_oom_disconnections; /* closed: their reply or command did not fit in memory */
    uint64_t total_commands_processed;  /* commands executed (incl. ones that replied errors) */
    uint64_t total_error_replies;       /* error replies sent */
    uint64_t total_net_input_bytes;     /* bytes read from clients */
    uint64_t total_net_output_bytes;    /* bytes handed to the kernel for clients */
    uint64_t total_reads_processed;     /* reads from client sockets that brought bytes */
    uint64_t total_writes_processed;    /* writes to client sockets (replies handed over) */
    uint64_t keyspace_hits;             /* GET-like lookups that found the key */
    uint64_t keyspace_misses;           /* ... that did not */
    uint64_t expired_keys;              /* expired keys removed by this gateway's active expiry */
    uint64_t stalled_coroutines;        /* parked past GW_STALL_MS (server/watchdog.h) */
    uint64_t long_running_commands;     /* resumed yet running past GW_STALL_MS (same) */
    uint64_t next_client_id;            /* CLIENT ID source */
} gw_stats_t;

extern gw_stats_t gw_stats;

#define GW_STAT_ADD(field, n) __atomic_fetch_add(&gw_stats.field, (n), __ATOMIC_RELAXED)
#define GW_STAT_SUB(field, n) __atomic_fetch_sub(&gw_stats.field, (n), __ATOMIC_RELAXED)
#define GW_STAT_GET(field) __atomic_load_n(&gw_stats.field, __ATOMIC_RELAXED)
#define GW_STAT_SET(field, v) __atomic_store_n(&gw_stats.field, (v), __ATOMIC_RELAXED)

/* Reset the resettable counters (CONFIG RESETSTAT): everything but connected_clients,
 * next_client_id. */
void gw_stats_reset(void);

#endif
