/* Configuration parsing (flags and redis.conf-style files). */
#include "config/config.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include "dmkv/clock.h"
#include "dmkv/chime.h"
#include "dmkv/index.h"
#include "dmkv/rolex.h"
#include "dmkv/kv.h"
#include "dmkv/race.h"
#include "dmkv/log.h"
#include "config/obuf_limits.h"
#include "util/buf.h"
#include "util/splitargs.h"
#include "util/strconv.h"

#include "version.h"
#define GW_VERSION_STR GW_DMKV_VERSION

void gw_config_usage(FILE *f, const char *prog)
{
    fprintf(
        f,
        "Usage: %s [/path/to/gateway.conf] [options]\n"
        "  --port <port>          TCP port to listen on (default 6379)\n"
        "  --bind <addr> [...]    addresses to listen on (default 127.0.0.1)\n"
        "  --threads <n>          worker threads, each with its own event loop (default: the\n"
        "                         number of online CPUs)\n"
        "  --memnode <uri>        memory node: local | tcp://host:port (repeat, in node "
        "order; required)\n"
        "  --point-index <name>   point index engine for a pool this gateway creates; a\n"
        "                         pool made with another one is refused (default race)\n"
        "  --range-index <name>   range index engine, likewise: chime (default) or rolex\n"
        "                         (keys of at most 32767 bytes)\n"
        "  --chime-leaf-span <n>  CHIME leaf entries for a pool this gateway creates (default 64)\n"
        "  --chime-neighborhood <n> hopscotch neighborhood H of those leaves (default 8)\n"
        "  --rolex-leaves <n>     ROLEX leaves (16 keys each) of a range index this gateway\n"
        "                         creates; the region does not grow (default 0: an eighth\n"
        "                         of node 0's memory, at least 16384 leaves)\n"
        "  --addr-cache-entries <n> keys whose slot this gateway remembers, so that their\n"
        "                         GET and SET take one round trip (32 bytes each; default\n"
        "                         1048576: 32 MiB, touched as it fills)\n"
        "  --max-clock-skew-ms <ms> refuse key commands while this gateway's clock is surely\n"
        "                         further than this from the other gateways' (default 500, 0 "
        "off)\n"
        "  --busy-poll-us <us>    after a socket read, poll this long before sleeping, while\n"
        "                         no other task waits for a CPU (default 0: off)\n"
        "  --loglevel <level>     debug | verbose | notice | warning (default notice)\n"
        "  --maxclients <n>       maximum number of client connections (default 10000)\n"
        "  --client-query-buffer-limit <bytes> input a client may have sent and not yet\n"
        "                         had run (commands queued and the one being read); a\n"
        "                         client over it is closed (default 1gb, at least 1mb)\n"
        "  --maxmemory-clients <bytes> memory all clients may hold (queries, replies);\n"
        "                         over it the biggest are closed (default 0: no limit)\n"
        "  --client-output-buffer-limit '<class> <hard> <soft> <seconds>' ...  Redis's\n"
        "                         limits on replies a client has not read (class normal,\n"
        "                         replica or pubsub; default 'normal 0 0 0': no limit)\n"
        "  --local-size <bytes>   size of the in-process pool for --memnode local (e.g. "
        "1gb)\n"
        "  --local-delay-us <us>  tests: delay each local-pool round trip (simulated RTT)\n"
        "  -h, --help             show this help\n"
        "  -v, --version          show the version\n"
        "The config file takes the same keys without dashes, one per line: 'port 6379'.\n",
        prog);
}

static void set_defaults(gw_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->port = 6379;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN); /* issue 11: use the machine */
    cfg->threads = cpus < 1 ? 1 : cpus > GW_MAX_THREADS ? GW_MAX_THREADS : (int)cpus;
    cfg->loglevel = DM_LOG_NOTICE;
    cfg->maxclients = 10000;
    cfg->query_buffer_limit = 1ull << 30;
    cfg->chime_span = DM_CHIME_SPAN;
    cfg->chime_nbhd = DM_CHIME_NBHD;
    cfg->busy_poll_us = 0; /* opt-in: it cost -P 1 clients 15-20% (docs/throughput.md) */
}

void gw_config_free(gw_config_t *cfg)
{
    for (int i = 0; i < cfg->nbind; i++)
        free(cfg->bind[i]);
    for (int i = 0; i < cfg->nmemnodes; i++)
        free(cfg->memnodes[i]);
    free(cfg->config_file);
    free(cfg->client_obuf_limit);
    free(cfg->point_index);
    free(cfg->range_index);
    cfg->nbind = cfg->nmemnodes = 0;
    cfg->config_file = NULL;
    cfg->client_obuf_limit = NULL;
    cfg->point_index = cfg->range_index = NULL;
}

static bool parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

/* Apply one directive: name and its values (argc >= 1). Returns 0 or -1 with err set. */
static int apply(gw_config_t *cfg, bool from_cli, const char *name, int argc, char **argv,
                 char *err, size_t errlen)
{
    if (!strcasecmp(name, "port") && argc == 1) {
        if (!parse_int(argv[0], 1, 65535, &cfg->port)) {
            snprintf(err, errlen, "Invalid port '%s'", argv[0]);
            return -1;
        }
    } else if (!strcasecmp(name, "bind") && argc >= 1) {
        /* A config line replaces the list (as in Redis); the first --bind replaces too. */
        for (int i = 0; i < cfg->nbind; i++)
            free(cfg->bind[i]);
        cfg->nbind = 0;
        for (int i = 0; i < argc; i++) {
            if (cfg->nbind == GW_MAX_BIND) {
                snprintf(err, errlen, "Too many bind addresses specified (max %d)", GW_MAX_BIND);
                return -1;
            }
            cfg->bind[cfg->nbind++] = strdup(argv[i]);
        }
    } else if ((!strcasecmp(name, "threads") || !strcasecmp(name, "io-threads")) && argc == 1) {
        if (!parse_int(argv[0], 1, GW_MAX_THREADS, &cfg->threads)) {
            snprintf(err, errlen, "Invalid number of threads '%s' (1..%d)", argv[0],
                     GW_MAX_THREADS);
            return -1;
        }
    } else if ((!strcasecmp(name, "point-index") || !strcasecmp(name, "range-index")) &&
               argc == 1) {
        char **slot = !strcasecmp(name, "point-index") ? &cfg->point_index : &cfg->range_index;
        free(*slot);
        *slot = strdup(argv[0]);
    } else if ((!strcasecmp(name, "chime-leaf-span") || !strcasecmp(name, "chime-neighborhood")) &&
               argc == 1) {
        int v;
        int span = !strcasecmp(name, "chime-leaf-span");
        if (!parse_int(argv[0], span ? 4 : 2, span ? 128 : 16, &v)) {
            snprintf(err, errlen, "Invalid %s '%s' (%s)", name, argv[0], span ? "4..128" : "2..16");
            return -1;
        }
        if (span)
            cfg->chime_span = v;
        else
            cfg->chime_nbhd = v;
    } else if (!strcasecmp(name, "rolex-leaves") && argc == 1) {
        int v; /* the room's rule is ROLEX's own (dm_rolex_set_create_leaves) */
        if (!parse_int(argv[0], 0, INT_MAX, &v) || dm_rolex_set_create_leaves((uint64_t)v)) {
            snprintf(err, errlen,
                     "Invalid rolex-leaves '%s' (2..67108863, 0 = an eighth of node 0)", argv[0]);
            return -1;
        }
    } else if (!strcasecmp(name, "addr-cache-entries") && argc == 1) {
        int v;
        if (!parse_int(argv[0], 1024, 1 << 30, &v) || dm_race_addr_cache_set_entries((uint64_t)v)) {
            snprintf(err, errlen, "Invalid addr-cache-entries '%s' (1024..1073741824)", argv[0]);
            return -1;
        }
    } else if (!strcasecmp(name, "busy-poll-us") && argc == 1) {
        if (!parse_int(argv[0], 0, 1000000, &cfg->busy_poll_us)) {
            snprintf(err, errlen, "Invalid busy-poll-us '%s' (0..1000000, 0 = off)", argv[0]);
            return -1;
        }
    } else if (!strcasecmp(name, "max-clock-skew-ms") && argc == 1) {
        int v;
        if (!parse_int(argv[0], 0, 60000, &v)) {
            snprintf(err, errlen, "Invalid max-clock-skew-ms '%s' (0..60000, 0 = off)", argv[0]);
            return -1;
        }
        dm_clock_set_bound_ms((uint32_t)v);
    } else if (!strcasecmp(name, "memnode") && argc >= 1) {
        for (int i = 0; i < argc; i++) {
            if (cfg->nmemnodes == GW_MAX_MEMNODES) {
                snprintf(err, errlen, "Too many memory nodes (max %d)", GW_MAX_MEMNODES);
                return -1;
            }
            cfg->memnodes[cfg->nmemnodes++] = strdup(argv[i]);
        }
    } else if (!strcasecmp(name, "loglevel") && argc == 1) {
        int l = dm_log_level_from_name(argv[0]);
        if (l < 0) {
            snprintf(err, errlen, "Invalid loglevel '%s'", argv[0]);
            return -1;
        }
        cfg->loglevel = l;
    } else if (!strcasecmp(name, "maxclients") && argc == 1) {
        if (!parse_int(argv[0], 1, 1000000, &cfg->maxclients)) {
            snprintf(err, errlen, "Invalid maxclients '%s'", argv[0]);
            return -1;
        }
    } else if (!strcasecmp(name, "client-query-buffer-limit") && argc == 1) {
        if (!gw_str2mem(argv[0], &cfg->query_buffer_limit) ||
            cfg->query_buffer_limit < (1ull << 20)) {
            snprintf(err, errlen, "Invalid client-query-buffer-limit '%s' (at least 1mb)", argv[0]);
            return -1;
        }
    } else if (!strcasecmp(name, "client-output-buffer-limit") && argc >= 1) {
        gw_obuf_limit_t lim[GW_OBUF_CLASSES];
        const char *why = NULL;
        gw_obuf_defaults(lim);
        if (gw_obuf_parse(argc, argv, lim, &why) != 0) {
            snprintf(err, errlen, "Invalid client-output-buffer-limit: %s", why);
            return -1;
        }
        gw_buf_t v; /* kept as one line: a file's and the command line's add up */
        gw_buf_init(&v);
        if (cfg->client_obuf_limit) gw_buf_printf(&v, "%s ", cfg->client_obuf_limit);
        for (int i = 0; i < argc; i++)
            gw_buf_printf(&v, "%s%s", i ? " " : "", argv[i]);
        free(cfg->client_obuf_limit);
        cfg->client_obuf_limit = strndup(v.data ? v.data : "", v.len);
        gw_buf_free(&v);
    } else if (!strcasecmp(name, "maxmemory-clients") && argc == 1) {
        if (!gw_str2mem(argv[0], &cfg->maxmemory_clients)) {
            snprintf(err, errlen, "Invalid maxmemory-clients '%s' (bytes, 0 = no limit)", argv[0]);
            return -1;
        }
    } else if (!strcasecmp(name, "local-size") && argc == 1) {
        if (!gw_str2mem(argv[0], &cfg->local_size) || cfg->local_size == 0) {
            snprintf(err, errlen, "Invalid local-size '%s'", argv[0]);
            return -1;
        }
    } else if (!strcasecmp(name, "local-delay-us") && argc == 1) {
        if (!parse_int(argv[0], 0, 10000000, &cfg->local_delay_us)) {
            snprintf(err, errlen, "Invalid local-delay-us '%s'", argv[0]);
            return -1;
        }
    } else {
        snprintf(err, errlen, "%s '%s'",
                 from_cli ? "Unknown option or wrong number of arguments for"
                          : "Bad directive or wrong number of arguments:",
                 name);
        return -1;
    }
    return 0;
}

static int load_file(gw_config_t *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "Fatal error, can't open config file '%s': %s", path,
                 strerror(errno));
        return -1;
    }
    char line[4096];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#' || *p == 0) continue;
        gw_args_t a;
        if (gw_splitargs(p, strlen(p), &a) != 0) {
            snprintf(err, errlen, "config file %s, line %d: unbalanced quotes in '%s'", path,
                     lineno, line);
            rc = -1;
            break;
        }
        if (a.argc == 0) {
            gw_args_free(&a);
            continue;
        }
        char msg[256];
        if (apply(cfg, false, a.argv[0], a.argc - 1, a.argv + 1, msg, sizeof(msg)) != 0) {
            snprintf(err, errlen,
                     "\n*** FATAL CONFIG FILE ERROR ***\nReading the configuration file, at "
                     "line %d\n>>> '%s'\n%s",
                     lineno, line, msg);
            rc = -1;
        }
        gw_args_free(&a);
        if (rc) break;
    }
    fclose(f);
    return rc;
}

int gw_config_parse(gw_config_t *cfg, int argc, char **argv, char *err, size_t errlen)
{
    set_defaults(cfg);
    int i = 1;
    if (argc > 1) {
        if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
            gw_config_usage(stdout, argv[0]);
            return 1;
        }
        if (!strcmp(argv[1], "-v") || !strcmp(argv[1], "--version")) {
            printf("dmkv-gateway v=%s redis_version=7.0.0\n", GW_VERSION_STR);
            return 1;
        }
        if (argv[1][0] != '-') {
            cfg->config_file = strdup(argv[1]);
            if (load_file(cfg, argv[1], err, errlen) != 0) return -1;
            i = 2;
        }
    }
    bool cli_bind_seen = false;
    while (i < argc) {
        const char *opt = argv[i];
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            gw_config_usage(stdout, argv[0]);
            return 1;
        }
        if (strncmp(opt, "--", 2) != 0 || !opt[2]) {
            snprintf(err, errlen, "Invalid argument '%s'", opt);
            return -1;
        }
        const char *name = opt + 2;
        int j = i + 1;
        while (j < argc && strncmp(argv[j], "--", 2) != 0)
            j++;
        int nvals = j - i - 1;
        static const char *known[] = {"port",
                                      "bind",
                                      "threads",
                                      "io-threads",
                                      "memnode",
                                      "loglevel",
                                      "maxclients",
                                      "client-query-buffer-limit",
                                      "maxmemory-clients",
                                      "client-output-buffer-limit",
                                      "local-size",
                                      "local-delay-us",
                                      "point-index",
                                      "range-index",
                                      "chime-leaf-span",
                                      "chime-neighborhood",
                                      "rolex-leaves",
                                      "addr-cache-entries",
                                      "max-clock-skew-ms",
                                      "busy-poll-us"};
        bool is_known = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            if (!strcasecmp(name, known[k])) is_known = true;
        if (!is_known) {
            snprintf(err, errlen, "Unknown option '%s'", opt);
            return -1;
        }
        if (nvals == 0) {
            snprintf(err, errlen, "Option '%s' needs a value", opt);
            return -1;
        }
        int rc;
        if (!strcasecmp(name, "bind") && !cli_bind_seen) {
            cli_bind_seen = true;
            rc = apply(cfg, true, name, nvals, argv + i + 1, err, errlen);
        } else if (!strcasecmp(name, "bind")) {
            /* further --bind flags add to the list */
            char **vals = argv + i + 1;
            rc = 0;
            for (int k = 0; k < nvals && rc == 0; k++) {
                if (cfg->nbind == GW_MAX_BIND) {
                    snprintf(err, errlen, "Too many bind addresses specified");
                    rc = -1;
                } else {
                    cfg->bind[cfg->nbind++] = strdup(vals[k]);
                }
            }
        } else {
            rc = apply(cfg, true, name, nvals, argv + i + 1, err, errlen);
        }
        if (rc) return -1;
        i = j;
    }
    if (cfg->nbind == 0) cfg->bind[cfg->nbind++] = strdup("127.0.0.1");
    if (cfg->nmemnodes == 0) {
        snprintf(err, errlen,
                 "At least one --memnode URI is required (e.g. --memnode local "
                 "or --memnode tcp://127.0.0.1:7000)");
        return -1;
    }
    if (dm_kv_choose_engines(cfg->point_index, cfg->range_index, err, errlen)) return -1;
    if (dm_chime_set_create_geometry((unsigned)cfg->chime_span, (unsigned)cfg->chime_nbhd)) {
        snprintf(err, errlen,
                 "chime-leaf-span must be a multiple of chime-neighborhood and at least twice it");
        return -1;
    }
    return 0;
}
