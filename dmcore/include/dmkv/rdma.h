/* The `rdma` transport (rdma-core: librdmacm + libibverbs), shared by the gateway-side
 * backend (dmcore/transport/rdma.c) and the memory node's listener (memnode/rdma_server.c).
 *
 * Wire contract of the connection's private data (all integers big-endian):
 *   client -> memory node, in the rdma_cm CONNECT request: dm_rdma_hello_t
 *   memory node -> client, in the rdma_cm ACCEPT reply:     dm_rdma_accept_t
 * A memory node rejects a hello whose magic matches and whose version differs; a client
 * refuses an accept whose magic or version differs (DM_EPROTO in the message).
 *
 * The client's view of the memory node's region: remote virtual address `addr`, remote key
 * `rkey`, `size` bytes; verb offset o maps to addr + o. The memory node registers its region
 * with LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC and posts nothing: every
 * verb is one-sided. */
#ifndef DMKV_RDMA_H
#define DMKV_RDMA_H

#include <stdint.h>

#define DM_RDMA_MAGIC 0x444d4b56u  /* "DMKV" */
#define DM_RDMA_PROTO_VERSION 3u   /* 3: the hello names the holder id, the accept says fences */
#define DM_RDMA_ACCEPT_FENCES 0x1u /* accept flags: the node serves the fence mailbox */

/* Client hello, 8 bytes (fits the 56-byte private data of an rdma_cm connect request). */
typedef struct dm_rdma_hello {
    uint32_t magic;   /* DM_RDMA_MAGIC */
    uint16_t version; /* DM_RDMA_PROTO_VERSION */
    uint16_t holder;  /* the client thread's holder id (dm_holder_id), 0 = none: a fence
                         request for it puts this QP in the error state (dmkv/fence.h) */
} dm_rdma_hello_t;

/* Memory node's accept data, 40 bytes (accept private data may hold 196 bytes). */
typedef struct dm_rdma_accept {
    uint32_t magic;   /* DM_RDMA_MAGIC */
    uint16_t version; /* DM_RDMA_PROTO_VERSION */
    uint16_t flags;   /* DM_RDMA_ACCEPT_* */
    uint32_t rkey;    /* remote key of the region's memory registration */
    uint32_t reserved;
    uint64_t addr;        /* virtual address of region byte 0 in the memory node */
    uint64_t size;        /* region bytes */
    uint64_t incarnation; /* the region's incarnation (dm_superblock_t), never 0 */
} dm_rdma_accept_t;

/* Process-wide counters of the rdma backend (all connections), for tests and INFO.
 * Updated with relaxed atomics on the posting/completing thread. */
typedef struct dm_rdma_counters {
    uint64_t post_send_calls; /* ibv_post_send calls (doorbells); one per loop turn that posts */
    uint64_t wrs_posted;      /* work requests posted */
    uint64_t wrs_signaled;    /* of which signaled (one per batch) */
    uint64_t wrs_inline;      /* WRITEs posted with IBV_SEND_INLINE */
    uint64_t batches_queued;  /* batches that waited in software (SQ or staging full) */
    uint64_t large_regs;      /* verbs that needed their own ibv_reg_mr (> staging/4) */
    uint64_t cq_events;       /* completion-channel wake-ups */
    uint64_t busy_polls;      /* ibv_poll_cq calls from the busy-poll idle handler */
    uint64_t conn_failures;   /* connections marked broken (error CQE, disconnect, timeout) */
} dm_rdma_counters_t;

/* Copy the process-wide counters into *out. Source: dmcore/transport/rdma.c. */
void dm_rdma_counters_get(dm_rdma_counters_t *out);

/* Per-connection limits, defaults; the environment can override the last two:
 *   DMKV_RDMA_TIMEOUT_MS   a batch outstanding longer fails the connection (DM_EIO)
 *   DMKV_RDMA_BUSY_POLL_US after a post or a completion, poll the CQ from a libuv idle
 *                          handle for this long before sleeping on the completion channel
 *                          (0 = completion channel only).
 *   DMKV_RDMA_FENCE        1 or 0: IBV_SEND_FENCE on READs that must see an earlier atomic
 *                          of their batch, or not (default: yes, but not on Soft-RoCE;
 *                          dmcore/transport/rdma.c use_fence). */
#define DM_RDMA_SQ_DEPTH 512            /* send queue work requests = max verbs per post */
#define DM_RDMA_STAGING (4u << 20)      /* bytes of registered staging memory per connection */
#define DM_RDMA_INLINE_WANT 256         /* max_inline_data requested (the device may give less) */
#define DM_RDMA_TIMEOUT_MS 10000u       /* default batch timeout */
#define DM_RDMA_BUSY_POLL_US 50u        /* default busy-poll window */
#define DM_RDMA_CONNECT_TIMEOUT_MS 5000 /* address/route resolution + connect */

#endif
