/* The memory node's rdma listener (see rdma_server.h): rdma_cm on the memory node's libuv
 * loop, one protection domain + memory registration of the whole region per RDMA device,
 * one RC QP per accepted gateway connection that never posts anything. */
#include "rdma_server.h"

#include <endian.h>
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "dmkv/superblock.h"
#include "dmkv/log.h"
#include "dmkv/rdma.h"
#include "mn_fence.h"

#define ACCESS_REGION                                                                              \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |                   \
     IBV_ACCESS_REMOTE_ATOMIC)

/* The region registered on one device. */
typedef struct dev_reg {
    struct dev_reg *next;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_cq *cq; /* shared by every QP on the device; never receives anything */
    struct ibv_device_attr attr;
} dev_reg_t;

typedef struct srv_conn {
    struct srv_conn *next;
    struct rdma_cm_id *id;
    int established;
    uint16_t holder;      /* from the hello: fenced by memnode_rdma_fence */
    uint64_t accepted_ms; /* uv_now at the connect request (fences spare young ones) */
    int fenced;
} srv_conn_t;

struct memnode_rdma {
    uv_loop_t *loop;
    uv_poll_t *poll; /* own allocation: freed by its close callback */
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen;
    uint8_t *region;
    uint64_t size;
    dev_reg_t *devs;
    srv_conn_t *conns;
    unsigned nconns;
    int port;
};

static memnode_rdma_t *instance;

#define rlog(...) dm_log(DM_LOG_WARNING, "rdma: " __VA_ARGS__)

/* "host:port" of the peer of id, for log lines. */
static const char *peer_name(struct rdma_cm_id *id, char *buf, size_t len)
{
    struct sockaddr *sa = rdma_get_peer_addr(id);
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa && sa->sa_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else if (sa && sa->sa_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    snprintf(buf, len, "%s:%d", host, port);
    return buf;
}

/* Find or create the registration of the region on device ctx. */
static dev_reg_t *dev_get(memnode_rdma_t *s, struct ibv_context *ctx, char *err, size_t errlen)
{
    for (dev_reg_t *d = s->devs; d; d = d->next)
        if (d->ctx == ctx) return d;
    dev_reg_t *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->ctx = ctx;
    const char *name = ibv_get_device_name(ctx->device);
    if (ibv_query_device(ctx, &d->attr)) {
        snprintf(err, errlen, "ibv_query_device(%s): %s", name, strerror(errno));
        goto fail;
    }
    d->pd = ibv_alloc_pd(ctx);
    if (!d->pd) {
        snprintf(err, errlen, "ibv_alloc_pd(%s): %s", name, strerror(errno));
        goto fail;
    }
    d->mr = ibv_reg_mr(d->pd, s->region, s->size, ACCESS_REGION);
    if (!d->mr) {
        snprintf(err, errlen,
                 "cannot register %llu bytes on %s: %s (RLIMIT_MEMLOCK too low? try ulimit -l "
                 "unlimited)",
                 (unsigned long long)s->size, name, strerror(errno));
        goto fail;
    }
    d->cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    if (!d->cq) {
        snprintf(err, errlen, "ibv_create_cq(%s): %s", name, strerror(errno));
        goto fail;
    }
    d->next = s->devs;
    s->devs = d;
    return d;
fail:
    if (d->mr) ibv_dereg_mr(d->mr);
    if (d->pd) ibv_dealloc_pd(d->pd);
    free(d);
    return NULL;
}

static void conn_free(memnode_rdma_t *s, srv_conn_t *sc)
{
    for (srv_conn_t **p = &s->conns; *p; p = &(*p)->next)
        if (*p == sc) {
            *p = sc->next;
            break;
        }
    if (sc->established) s->nconns--;
    if (sc->id->qp) rdma_destroy_qp(sc->id);
    rdma_destroy_id(sc->id);
    free(sc);
}

/* A gateway asks to connect: check its hello, give it a QP, accept with the region's
 * address, rkey and size. Returns 0, or -1 when id must be destroyed (after the ack). */
static int on_connect_request(memnode_rdma_t *s, struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    char err[256];
    const uint8_t *pd = ev->param.conn.private_data;
    uint16_t holder = 0;
    if (pd && ev->param.conn.private_data_len >= sizeof(dm_rdma_hello_t)) {
        dm_rdma_hello_t h;
        memcpy(&h, pd, sizeof(h));
        if (be32toh(h.magic) == DM_RDMA_MAGIC) holder = be16toh(h.holder);
        if (be32toh(h.magic) == DM_RDMA_MAGIC && be16toh(h.version) != DM_RDMA_PROTO_VERSION) {
            rlog("rejecting a client of protocol version %u (this node speaks %u)",
                 be16toh(h.version), DM_RDMA_PROTO_VERSION);
            dm_rdma_accept_t rej = {.magic = htobe32(DM_RDMA_MAGIC),
                                    .version = htobe16(DM_RDMA_PROTO_VERSION)};
            rdma_reject(id, &rej, sizeof(rej));
            return -1;
        }
    }
    dev_reg_t *d = dev_get(s, id->verbs, err, sizeof(err));
    if (!d) {
        rlog("rejecting a connection: %s", err);
        rdma_reject(id, NULL, 0);
        return -1;
    }
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = d->cq;
    qa.recv_cq = d->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 1;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, d->pd, &qa)) {
        rlog("rejecting a connection: rdma_create_qp: %s", strerror(errno));
        rdma_reject(id, NULL, 0);
        return -1;
    }
    srv_conn_t *sc = calloc(1, sizeof(*sc));
    if (!sc) {
        rdma_destroy_qp(id);
        rdma_reject(id, NULL, 0);
        return -1;
    }
    sc->id = id;
    sc->holder = holder;
    sc->accepted_ms = uv_now(s->loop);
    id->context = sc;
    sc->next = s->conns;
    s->conns = sc;

    dm_rdma_accept_t acc = {
        .magic = htobe32(DM_RDMA_MAGIC),
        .version = htobe16(DM_RDMA_PROTO_VERSION),
        .flags = htobe16(DM_RDMA_ACCEPT_FENCES),
        .rkey = htobe32(d->mr->rkey),
        .addr = htobe64((uint64_t)(uintptr_t)s->region),
        .size = htobe64(s->size),
        .incarnation = htobe64(((const dm_superblock_t *)s->region)->incarnation),
    };
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = &acc;
    cp.private_data_len = sizeof(acc);
    /* Serve as many outstanding READs/atomics as the client initiates, up to the device. */
    int rr = ev->param.conn.initiator_depth;
    if (rr > d->attr.max_qp_rd_atom) rr = d->attr.max_qp_rd_atom;
    int id_ = ev->param.conn.responder_resources;
    if (id_ > d->attr.max_qp_init_rd_atom) id_ = d->attr.max_qp_init_rd_atom;
    cp.responder_resources = (uint8_t)rr;
    cp.initiator_depth = (uint8_t)id_;
    cp.rnr_retry_count = 7;
    if (rdma_accept(id, &cp)) {
        rlog("rdma_accept: %s", strerror(errno));
        /* The id is destroyed by the caller after the ack. */
        s->conns = sc->next;
        id->context = NULL;
        free(sc);
        rdma_destroy_qp(id);
        return -1;
    }
    return 0;
}

static void on_cm(uv_poll_t *p, int status, int events)
{
    (void)events;
    memnode_rdma_t *s = p->data;
    if (status < 0) return;
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(s->ch, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        srv_conn_t *sc = id != s->listen ? id->context : NULL;
        enum rdma_cm_event_type type = ev->event;
        int destroy_new = 0, free_conn = 0;
        switch (type) {
        case RDMA_CM_EVENT_CONNECT_REQUEST:
            destroy_new = on_connect_request(s, ev) != 0;
            break;
        case RDMA_CM_EVENT_ESTABLISHED:
            if (sc && !sc->established) {
                char peer[80];
                sc->established = 1;
                s->nconns++;
                dm_log(DM_LOG_VERBOSE, "rdma: accepted gateway %s (%u connected)",
                       peer_name(id, peer, sizeof(peer)), s->nconns);
            }
            break;
        case RDMA_CM_EVENT_DISCONNECTED:
            if (sc) {
                char peer[80];
                dm_log(DM_LOG_VERBOSE, "rdma: gateway %s disconnected",
                       peer_name(id, peer, sizeof(peer)));
                rdma_disconnect(id);
                free_conn = 1;
            }
            break;
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
            free_conn = sc != NULL;
            break;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            rlog("RDMA device removed (%s)", id == s->listen ? "listener" : "connection");
            free_conn = sc != NULL;
            break;
        default:
            break;
        }
        rdma_ack_cm_event(ev);
        if (destroy_new) rdma_destroy_id(id);
        if (free_conn) conn_free(s, sc);
    }
}

static void poll_closed(uv_handle_t *h)
{
    free(h);
}

memnode_rdma_t *memnode_rdma_open(uv_loop_t *loop, uint8_t *region, uint64_t size, const char *bind,
                                  int port, char *err, size_t errlen)
{
    if (!region || size == 0 || ((uintptr_t)region & 7)) {
        snprintf(err, errlen, "rdma: the region must be non-empty and 8-byte aligned");
        return NULL;
    }
    memnode_rdma_t *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->region = region;
    s->size = size;
    struct addrinfo *ai = NULL;
    const char *host = bind;
    if (!host || !*host || strcmp(host, "*") == 0) host = "0.0.0.0";
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);

    s->ch = rdma_create_event_channel();
    if (!s->ch) {
        snprintf(err, errlen,
                 "rdma: rdma_create_event_channel: %s (no RDMA device or rdma_ucm module?)",
                 strerror(errno));
        goto fail;
    }
    if (rdma_create_id(s->ch, &s->listen, s, RDMA_PS_TCP)) {
        snprintf(err, errlen, "rdma: rdma_create_id: %s", strerror(errno));
        goto fail;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai) {
        snprintf(err, errlen, "rdma: cannot resolve bind address '%s': %s", host,
                 gai_strerror(gai));
        goto fail;
    }
    if (rdma_bind_addr(s->listen, ai->ai_addr)) {
        snprintf(err, errlen,
                 "rdma: cannot bind %s:%d: %s (the address must belong to an RDMA device)", host,
                 port, strerror(errno));
        goto fail;
    }
    if (rdma_listen(s->listen, 128)) {
        snprintf(err, errlen, "rdma: rdma_listen on %s:%d: %s", host, port, strerror(errno));
        goto fail;
    }
    s->port = be16toh(rdma_get_src_port(s->listen));
    if (s->listen->verbs && !dev_get(s, s->listen->verbs, err, errlen)) goto fail;
    int fl = fcntl(s->ch->fd, F_GETFL);
    if (fl < 0 || fcntl(s->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "rdma: fcntl: %s", strerror(errno));
        goto fail;
    }
    s->poll = calloc(1, sizeof(*s->poll));
    if (!s->poll || uv_poll_init(loop, s->poll, s->ch->fd)) {
        free(s->poll);
        s->poll = NULL;
        snprintf(err, errlen, "rdma: cannot watch the rdma_cm channel");
        goto fail;
    }
    s->poll->data = s;
    uv_poll_start(s->poll, UV_READABLE, on_cm);
    freeaddrinfo(ai);
    return s;
fail:
    if (ai) freeaddrinfo(ai);
    memnode_rdma_close(s);
    return NULL;
}

int memnode_rdma_port(const memnode_rdma_t *s)
{
    return s->port;
}

unsigned memnode_rdma_fence(memnode_rdma_t *s, uint16_t holder)
{
    unsigned n = 0;
    for (srv_conn_t *sc = s->conns; sc; sc = sc->next) {
        if (sc->holder != holder || sc->fenced || !sc->id->qp ||
            !mn_fence_cuts(uv_now(s->loop), sc->accepted_ms))
            continue;
        /* The error state first: from then on the device executes nothing for this QP.
         * rdma_disconnect tells the gateway (and does the same); its DISCONNECTED event
         * frees the connection. */
        struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
        if (ibv_modify_qp(sc->id->qp, &qa, IBV_QP_STATE))
            rlog("fence: ibv_modify_qp: %s", strerror(errno));
        rdma_disconnect(sc->id);
        sc->fenced = 1;
        n++;
    }
    return n;
}

unsigned memnode_rdma_fence_instance(uint16_t holder)
{
    return instance ? memnode_rdma_fence(instance, holder) : 0;
}

unsigned memnode_rdma_connections(const memnode_rdma_t *s)
{
    return s->nconns;
}

void memnode_rdma_close(memnode_rdma_t *s)
{
    if (!s) return;
    if (s->poll) {
        s->poll->data = NULL;
        uv_close((uv_handle_t *)s->poll, poll_closed);
    }
    while (s->conns) {
        srv_conn_t *sc = s->conns;
        rdma_disconnect(sc->id);
        conn_free(s, sc);
    }
    if (s->listen) rdma_destroy_id(s->listen);
    while (s->devs) {
        dev_reg_t *d = s->devs;
        s->devs = d->next;
        ibv_destroy_cq(d->cq);
        ibv_dereg_mr(d->mr);
        ibv_dealloc_pd(d->pd);
        free(d);
    }
    if (s->ch) rdma_destroy_event_channel(s->ch);
    free(s);
}

int memnode_rdma_start(uv_loop_t *loop, uint8_t *region, uint64_t size, const char *bind, int port,
                       char *err, size_t errlen)
{
    if (instance) {
        snprintf(err, errlen, "rdma: listener already started");
        return -1;
    }
    instance = memnode_rdma_open(loop, region, size, bind, port, err, errlen);
    return instance ? 0 : -1;
}

void memnode_rdma_stop(void)
{
    memnode_rdma_close(instance);
    instance = NULL;
}
