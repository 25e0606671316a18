/* The memory node's rdma listener: registers the region for one-sided access and accepts
 * rdma_cm connections from gateways (the `rdma` transport, docs/DESIGN.md "Memory node").
 * The memory node's CPU only sets up connections: it posts no work requests, every verb is
 * executed by the RDMA device against the registered region.
 *
 * Wire contract: dmcore/include/dmkv/rdma.h (dm_rdma_hello_t in the connect request,
 * dm_rdma_accept_t {magic, version, rkey, addr, size} in the accept reply).
 * Threading: everything runs on the libuv loop given at start (the rdma_cm event channel fd
 * is watched with uv_poll). Source: memnode/rdma_server.c. */
#ifndef DMKV_MEMNODE_RDMA_SERVER_H
#define DMKV_MEMNODE_RDMA_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct memnode_rdma memnode_rdma_t;

/* Register region [region, region + size) (8-byte aligned; size bytes; pinned by the
 * registration) with LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC and listen with
 * librdmacm on bind:port. bind is a numeric or resolvable address that belongs to an RDMA
 * device (for rxe: the address of the netdev the rxe device sits on), or NULL / "" / "*" /
 * "0.0.0.0" for every device; port 0 picks a free port (see memnode_rdma_port).
 * With a specific bind address the region is registered now, so registration errors
 * (RLIMIT_MEMLOCK, no device) are reported here; with a wildcard it is registered per
 * device on the first connection from it.
 * Returns the listener, or NULL with a message in err (errlen bytes). */
memnode_rdma_t *memnode_rdma_open(uv_loop_t *loop, uint8_t *region, uint64_t size, const char *bind,
                                  int port, char *err, size_t errlen);

/* The port the listener is bound to (host order). */
int memnode_rdma_port(const memnode_rdma_t *s);

/* Fence (mn_fence.h): move the QP of every connection whose hello named holder and that was
 * accepted at least MN_FENCE_FRESH_MS ago to the error state and disconnect it: requests
 * the device receives for it afterwards are not executed. Returns how many were cut. */
unsigned memnode_rdma_fence(memnode_rdma_t *s, uint16_t holder);

/* memnode_rdma_fence on the instance of memnode_rdma_start (0 when none). */
unsigned memnode_rdma_fence_instance(uint16_t holder);

/* Number of currently connected gateways' queue pairs. */
unsigned memnode_rdma_connections(const memnode_rdma_t *s);

/* Disconnect every client, deregister the region, stop listening, free s. Must run on the
 * loop's thread; the loop must run once more to release the poll handle. */
void memnode_rdma_close(memnode_rdma_t *s);

/* Process-wide convenience for dmkv-memnode's main: memnode_rdma_open into a static
 * instance. Returns 0, or -1 with a message in err (also -1 if already started). */
int memnode_rdma_start(uv_loop_t *loop, uint8_t *region, uint64_t size, const char *bind, int port,
                       char *err, size_t errlen);

/* Close the instance made by memnode_rdma_start (no-op if none). */
void memnode_rdma_stop(void);

#endif
