/* dmkv-gateway configuration: command-line flags and redis.conf-style files. */
#ifndef GW_CONFIG_CONFIG_H
#define GW_CONFIG_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#define GW_MAX_BIND 16
#define GW_MAX_MEMNODES 256
#define GW_MAX_THREADS 256

typedef struct gw_config {
    int port;                /* TCP port, 1..65535 (default 6379) */
    char *bind[GW_MAX_BIND]; /* addresses to listen on (default 127.0.0.1) */
    int nbind;
    int threads;                     /* worker threads (default: online CPUs) */
    int chime_span, chime_nbhd;      /* CHIME leaf geometry for a pool this gateway creates */
    int busy_poll_us;                /* each worker's loop polls this long after a socket read
                                        brought work, microseconds (dmkv/busy_poll.h; 0 off) */
    char *point_index, *range_index; /* index engines asked for (NULL: race, chime) */
    char *memnodes[GW_MAX_MEMNODES]; /* pool URIs in node order (required) */
    int nmemnodes;
    int loglevel;                /* DM_LOG_* (default notice) */
    int maxclients;              /* connections over this are refused (default 10000) */
    uint64_t query_buffer_limit; /* client-query-buffer-limit: bytes of unexecuted input a
                                    client may hold (default 1gb, as Redis) */
    uint64_t maxmemory_clients;  /* bytes all clients may hold before the biggest are closed
                                    (server/client_evict.h); 0 = no limit (default) */
    char *client_obuf_limit;     /* client-output-buffer-limit as given (Redis's syntax,
                                    checked at parse), NULL for the defaults
                                    (server/client_obuf.h) */
    uint64_t local_size;         /* bytes of the in-process pool for "local"; 0: default */
    int local_delay_us;          /* tests: delay every local-pool completion, microseconds */
    char *config_file;           /* absolute or given path, NULL when none */
} gw_config_t;

/* Fill cfg from argv: "[config-file] [--port N] [--bind A [A ...]] [--threads N]
 * [--memnode URI]... [--loglevel L] [--maxclients N]
 * [--client-query-buffer-limit BYTES] [--maxmemory-clients BYTES]
 * [--client-output-buffer-limit "CLASS HARD SOFT SECONDS ..."] [--local-size BYTES]
 * [--local-delay-us N]". A config file
 * holds the same keys one per line ("port 6379"); command-line flags given after it win
 * (memnode and bind accumulate from both). Returns 0 when the server should start,
 * 1 after printing --help/--version (exit 0), or -1 with a message in err (exit 1). */
int gw_config_parse(gw_config_t *cfg, int argc, char **argv, char *err, size_t errlen);

/* Print the usage text to f. */
void gw_config_usage(FILE *f, const char *prog);

/* Free the strings cfg owns. */
void gw_config_free(gw_config_t *cfg);

#endif
