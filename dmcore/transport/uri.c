#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "dmkv/transport.h"

/* DMKV_NO_MASKED_CAS=1 (tests): local and tcp connections report no native masked CAS, so
 * the batch layer's CAS fallback, the path every rdma connection takes, runs everywhere. */
static int masked_cas_disabled(void)
{
    const char *e = getenv("DMKV_NO_MASKED_CAS");
    return e && *e && strcmp(e, "0") != 0;
}

/* DMKV_CHAIN=0 (tests, benchmarks): connections report no DM_CAP_CHAIN, so every commit
 * waits for the one before it, the path every rdma connection takes. */
static int chains_disabled(void)
{
    const char *e = getenv("DMKV_CHAIN");
    return e && !strcmp(e, "0");
}

#define STAT_NODES 64
static uint64_t node_messages[STAT_NODES], node_verbs[STAT_NODES];

void dm_conn_count_message(dm_conn_t *c, uint64_t verbs)
{
    c->messages++;
    c->verbs_posted += verbs;
    if (c->node_id >= STAT_NODES) return;
    __atomic_fetch_add(&node_messages[c->node_id], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&node_verbs[c->node_id], verbs, __ATOMIC_RELAXED);
}

static _Thread_local uint64_t activity;

uint64_t *dm_conn_activity(void)
{
    return &activity;
}

uint64_t dm_conn_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint16_t dm_holder_id(void)
{
    static _Thread_local uint16_t id;
    while (!id) {
        uint16_t r = 0;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) r = (uint16_t)dm_conn_now_us();
        id = r & ((1u << DM_HOLDER_BITS) - 1);
    }
    return id;
}

int dm_conn_send_late(const dm_conn_t *c)
{
    int late = c->send_by_us && dm_conn_now_us() > c->send_by_us;
    if (late) dm_conn_count_late(0); /* the caller refuses it */
    return late;
}

static uint64_t late_refused, late_breaks;

void dm_conn_count_late(int chain_break)
{
    __atomic_fetch_add(&late_refused, 1, __ATOMIC_RELAXED);
    if (chain_break) __atomic_fetch_add(&late_breaks, 1, __ATOMIC_RELAXED);
}

void dm_conn_late_stats(uint64_t *refused, uint64_t *chain_breaks)
{
    *refused = __atomic_load_n(&late_refused, __ATOMIC_RELAXED);
    *chain_breaks = __atomic_load_n(&late_breaks, __ATOMIC_RELAXED);
}

void dm_conn_node_stats(unsigned node, uint64_t *messages, uint64_t *verbs)
{
    *messages = node < STAT_NODES ? __atomic_load_n(&node_messages[node], __ATOMIC_RELAXED) : 0;
    *verbs = node < STAT_NODES ? __atomic_load_n(&node_verbs[node], __ATOMIC_RELAXED) : 0;
}

dm_conn_t *dm_conn_open(uv_loop_t *loop, const char *uri, unsigned node_id, char *err,
                        size_t errlen)
{
    dm_conn_t *c = NULL;
    if (strcmp(uri, "local") == 0) {
        c = dm_local_open(loop, "default", err, errlen);
    } else if (strncmp(uri, "local:", 6) == 0) {
        c = dm_local_open(loop, uri + 6, err, errlen);
    } else if (strncmp(uri, "unix://", 7) == 0) {
        if (uri[7] != '/') {
            snprintf(err, errlen, "bad memory node address '%s' (want unix:///absolute/path)", uri);
            return NULL;
        }
        c = dm_tcp_open(loop, uri + 7, 0, err, errlen);
    } else if (strncmp(uri, "tcp://", 6) == 0 || strncmp(uri, "rdma://", 7) == 0) {
        int rdma = uri[0] == 'r';
        const char *hp = uri + (rdma ? 7 : 6);
        char host[256];
        const char *colon = strrchr(hp, ':');
        if (!colon || colon == hp || (size_t)(colon - hp) >= sizeof(host)) {
            snprintf(err, errlen, "bad memory node address '%s' (want %s://host:port)", uri,
                     rdma ? "rdma" : "tcp");
            return NULL;
        }
        memcpy(host, hp, (size_t)(colon - hp));
        host[colon - hp] = 0;
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port <= 0 || port > 65535) {
            snprintf(err, errlen, "bad port in memory node address '%s'", uri);
            return NULL;
        }
        c = rdma ? dm_rdma_open(loop, host, (int)port, err, errlen)
                 : dm_tcp_open(loop, host, (int)port, err, errlen);
    } else {
        snprintf(err, errlen,
                 "unknown memory node URI '%s' (want local, tcp://host:port, "
                 "unix:///path, rdma://host:port)",
                 uri);
        return NULL;
    }
    if (c) {
        static uint64_t serials;
        c->node_id = node_id;
        c->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
        if (masked_cas_disabled()) c->caps &= ~DM_CAP_MASKED_CAS;
        if (chains_disabled()) c->caps &= ~DM_CAP_CHAIN;
    }
    return c;
}
