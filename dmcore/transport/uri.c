#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/transport.h"

dm_conn_t *dm_conn_open(uv_loop_t *loop, const char *uri, unsigned node_id, char *err,
                        size_t errlen)
{
    dm_conn_t *c = NULL;
    if (strcmp(uri, "local") == 0) {
        c = dm_local_open(loop, "default", err, errlen);
    } else if (strncmp(uri, "local:", 6) == 0) {
        c = dm_local_open(loop, uri + 6, err, errlen);
    } else if (strncmp(uri, "tcp://", 6) == 0) {
        char host[256];
        const char *colon = strrchr(uri + 6, ':');
        if (!colon || colon == uri + 6 || (size_t)(colon - uri - 6) >= sizeof(host)) {
            snprintf(err, errlen, "bad memory node address '%s' (want tcp://host:port)", uri);
            return NULL;
        }
        memcpy(host, uri + 6, (size_t)(colon - uri - 6));
        host[colon - uri - 6] = 0;
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port <= 0 || port > 65535) {
            snprintf(err, errlen, "bad port in memory node address '%s'", uri);
            return NULL;
        }
        c = dm_tcp_open(loop, host, (int)port, err, errlen);
    } else if (strncmp(uri, "rdma://", 7) == 0) {
        snprintf(err, errlen, "'%s': the rdma transport is not built yet (use tcp://)", uri);
        return NULL;
    } else {
        snprintf(err, errlen, "unknown memory node URI '%s' (want local, tcp://host:port)", uri);
        return NULL;
    }
    if (c)
        c->node_id = node_id;
    return c;
}
