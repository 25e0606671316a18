/* dmkv-gateway: the Redis-compatible RESP server in front of the memory pool.
 *   dmkv-gateway [config-file] [--port 6379] [--bind 127.0.0.1] [--threads N]
 *                --memnode URI [--memnode URI ...]
 * Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 1 on bad usage or start-up failure. */
#include <stdio.h>

#include "config/config.h"
#include "server/server.h"

int main(int argc, char **argv)
{
    gw_config_t cfg;
    char err[1024];
    int rc = gw_config_parse(&cfg, argc, argv, err, sizeof(err));
    if (rc == 1) {
        gw_config_free(&cfg);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "%s\n\n", err);
        gw_config_usage(stderr, argv[0]);
        gw_config_free(&cfg);
        return 1;
    }
    rc = gw_server_run(&cfg);
    gw_config_free(&cfg);
    return rc;
}
