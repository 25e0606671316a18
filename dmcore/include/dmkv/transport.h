/* Transport API: one connection from one worker thread to one memory node.
 * Backends: local (in-process region), tcp (software RNIC in dmkv-memnode), rdma (verbs).
 * RACE and CHIME never see a concrete backend: they use the batch layer (worker.h).
 *
 * Threading: a dm_conn belongs to the thread that runs its libuv loop; post() and the
 * completion callback run on that thread only. */
#ifndef DMKV_TRANSPORT_H
#define DMKV_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "dmkv/verbs.h"

typedef struct dm_conn dm_conn_t;

/* Called once when every verb of a posted batch has completed (each verb's status and
 * result are filled). conn_status is 0 or DM_EIO/DM_ETIMEDOUT when the whole batch failed. */
typedef void (*dm_post_cb)(void *arg, int conn_status);

typedef struct dm_conn_ops {
    /* Post n verbs as one message (one doorbell). Verbs execute in order. cb runs later on
     * the loop thread (never from inside post for remote backends; the local backend may
     * complete before post returns and calls cb synchronously). Returns 0 or DM_E*. */
    int (*post)(dm_conn_t *c, dm_verb_t *verbs, size_t n, dm_post_cb cb, void *arg);
    /* Close the connection; outstanding batches complete with DM_EIO. Frees c. */
    void (*close)(dm_conn_t *c);
} dm_conn_ops_t;

struct dm_conn {
    const dm_conn_ops_t *ops;
    uint32_t caps;             /* DM_CAP_* */
    uint64_t region_size;      /* bytes in the memory node's region (from HELLO) */
    uint64_t incarnation;      /* the region's incarnation (superblock.h; from HELLO), never 0 */
    unsigned node_id;          /* position of this memory node in the pool */
    int failed;                /* set by the backend once the connection is unusable (lost, timed
                                  out, QP in error): the worker opens a new one (pool/batch.c) */
    uint64_t send_by_us;       /* set by the batch layer around post(), else 0: the message must
                                  leave this process (socket write, doorbell) by this monotonic
                                  time (us), checked again just before it leaves with the turn's
                                  others, or be refused with DM_ELATE, nothing of it run (tcp: a
                                  refused batch with chained verbs leaves as one DM_OP_BREAK of its
                                  chain instead, so later commits of that chain are skipped). A
                                  lease holder's writes carry its hold's end, so a holder stalled
                                  before they left (SIGSTOP, a held batch) never lands them after
                                  a takeover */
    uint64_t messages;         /* messages sent (tcp: one per coalesced write; INFO) */
    uint64_t verbs_posted;     /* verbs in them */
    uint64_t serial;           /* unique in the process (set by dm_conn_open): a chain position
                                  names its connection by it, never by a pointer that a
                                  reconnect may free and reuse */
    uint16_t chain_epoch[256]; /* DM_CAP_CHAIN: per chain tag, the epoch new chained verbs
                                  carry; moved on once a verb of the current one failed
                                  (pool/batch.c) */
};

/* Count messages sent to c's memory node (one write, one doorbell) and the verbs in them:
 * process-wide per node, for INFO (verbs per message shows doorbell batching). */
void dm_conn_count_message(dm_conn_t *c, uint64_t verbs);
/* 1 when the message being posted on c is past its send_by_us bound (CLOCK_MONOTONIC, the
 * clock of dm_now_us): the backend refuses it with DM_ELATE, nothing sent (counted,
 * dm_conn_late_stats). */
int dm_conn_send_late(const dm_conn_t *c);
/* This thread's count of socket reads that brought work: tcp replies from memory nodes
 * and, in the gateway, client requests. Its event loop polls on while it moves
 * (dmkv/busy_poll.h). */
uint64_t *dm_conn_activity(void);
/* CLOCK_MONOTONIC in microseconds (the clock of dm_now_us and of send_by_us). */
uint64_t dm_conn_now_us(void);
/* This thread's holder id: DM_HOLDER_BITS random bits, nonzero, fixed for the thread's
 * life. Every connection the thread opens announces it to its memory node (tcp HELLO, rdma
 * connect request) and every lease token the thread writes carries it (dmkv/lease.h), so
 * a gateway that takes a lease over can have the node cut the holder's connections first
 * (dmkv/fence.h, docs/leases.md "Fencing"). Two threads may draw the same id (1 in 65,535
 * a pair; it was 1 in 1,023 with 10 bits, about 1 run in 16 of a test with a dozen
 * threads): a fence then also cuts the other's connection, which reconnects, and a taker
 * whose own id is the holder's does not fence (docs/leases.md "Limits"). */
#define DM_HOLDER_BITS 16 /* the rest of a lease token stays random (dmkv/lease.h) */
uint16_t dm_holder_id(void);

/* Count a batch refused for lateness (dm_conn_t.send_by_us): chain_break 1 when it left as
 * a DM_OP_BREAK stand-in (tcp). For backends. */
void dm_conn_count_late(int chain_break);
/* Batches refused for lateness and how many of them broke their chain, process-wide (INFO
 * lease_batches_refused, lease_chain_breaks). Thread-safe. */
void dm_conn_late_stats(uint64_t *refused, uint64_t *chain_breaks);

/* Totals for memory node `node` (0 for nodes never used). Thread-safe. */
void dm_conn_node_stats(unsigned node, uint64_t *messages, uint64_t *verbs);

/* Open a connection to a memory node given by URI:
 *   "local"          in-process region (created on first use, size from dm_local_set_size)
 *   "tcp://host:port" dmkv-memnode's tcp transport
 *   "unix:///path"    the same protocol on dmkv-memnode's unix socket (--unixsocket): a memory
 *                     node on the gateway's host without the loopback TCP stack
 *   "rdma://host:port" dmkv-memnode's rdma listener (rdma_cm + one-sided verbs, dmkv/rdma.h)
 * Blocks until the HELLO handshake is done (connect timeout 5 s). loop is the caller's
 * libuv loop. On error returns NULL and writes a message into err (errlen bytes). */
dm_conn_t *dm_conn_open(uv_loop_t *loop, const char *uri, unsigned node_id, char *err,
                        size_t errlen);

/* Backend constructors used by dm_conn_open. */
dm_conn_t *dm_local_open(uv_loop_t *loop, const char *name, char *err, size_t errlen);
/* host:port over TCP, or port 0 and host the absolute path of a unix socket. */
dm_conn_t *dm_tcp_open(uv_loop_t *loop, const char *host, int port, char *err, size_t errlen);
/* rdma://host:port: librdmacm connect (5 s timeout) to a memory node's rdma listener, one RC
 * QP; region address/rkey/size from the accept private data (dmkv/rdma.h). Blocks while
 * connecting. NULL with a message in err (errlen bytes) on failure. dmcore/transport/rdma.c */
dm_conn_t *dm_rdma_open(uv_loop_t *loop, const char *host, int port, char *err, size_t errlen);

/* Size in bytes of in-process regions created after this call (default 256 MiB). */
void dm_local_set_size(uint64_t bytes);

/* Local backend fault injection (tests). Applies to every local connection in the process.
 * delay_us > 0: completions are delivered from a libuv timer after delay_us microseconds.
 * fail_every > 0: every fail_every-th batch fails with DM_EIO.
 * hook: called before each verb executes, on the posting thread (NULL to clear). */
typedef void (*dm_local_hook_fn)(const dm_verb_t *v, void *arg);
void dm_local_inject(uint32_t delay_us, uint32_t fail_every, dm_local_hook_fn hook, void *arg);

/* Lost completions (tests): the next n batches run whole and then fail with DM_EIO, as when
 * a connection is lost after an RNIC executed a batch and before its completion arrived
 * (the caller cannot tell whether a CAS landed). */
void dm_local_inject_lost(uint32_t n);

/* Partial execution (tests): every cut_every-th batch that carries two or more WRITEs runs
 * only its first half of verbs and fails with DM_EIO, as when a connection is lost after
 * an RNIC executed a prefix of a posted chain. 0 turns it off. Returns batches cut so far. */
uint64_t dm_local_inject_cut(uint32_t cut_every);

/* Make size bytes at base, already mapped and formatted (a node header at offset 0,
 * dm_region_format), the local region `name`, so that "local:name" connections run their
 * verbs on it (dm_region_exec: memcpy and CPU atomics under line locks). For a memory node
 * that runs pool code on its own region (memnode/mn_retrainer.c): verbs from its other
 * executors (tcp, an RNIC) are not under those locks. The caller keeps the memory mapped
 * for as long as any connection to it is open; the name stays taken for the process's
 * life. Returns 0 (also when name already names this very range), DM_EINVAL (no node
 * header, size below DM_SB_SIZE, or name taken by another range, or longer than 63 bytes)
 * or DM_ENOMEM. */
int dm_local_region_adopt(const char *name, uint8_t *base, uint64_t size);

/* Pointer to byte 0 of a local region (tests only; NULL if not created). */
uint8_t *dm_local_region_base(const char *name, uint64_t *size);

/* Format a freshly zeroed region: write the node header at offset 0 (used by dmkv-memnode and the
 * local backend). */
void dm_region_format(uint8_t *base, uint64_t size);

#endif
