/* Wire protocol of the `tcp` transport: dmkv-memnode plays the RNIC and executes verbs
 * against its region (docs/DESIGN.md "Memory node"). Shared by the client backend
 * (dmcore/transport/tcp.c) and the server (memnode/tcp_server.c).
 *
 * Every message, either direction, is a dm_tcp_hdr_t (24 bytes) followed by body_len bytes.
 * All integers are little-endian; the structs below are the exact wire layout (no padding,
 * checked by static asserts) and are used as-is on little-endian hosts.
 *
 * Requests (client -> memory node), answered in order with type | DM_TCP_REPLY and the
 * request's seq echoed:
 *   HELLO  body: dm_tcp_hello_t + token_len bytes of auth token (no NUL).
 *          reply status 0: body dm_tcp_hello_reply_t.
 *          reply status DM_EPROTO / DM_EAUTH / DM_EINVAL: body is a text message; the memory
 *          node closes the connection after sending it.
 *          HELLO must be the first request and is accepted once.
 *   VERBS  count = n verbs (<= DM_TCP_MAX_VERBS). body: n dm_tcp_verb_t, then the payload of
 *          every WRITE in verb order (len bytes each).
 *          reply status 0, count = n: n dm_tcp_result_t, then the payload of every READ whose
 *          result status is 0, in verb order (len bytes each). A verb with a chain tag is
 *          skipped (status DM_ESKIPPED) when an earlier chained verb of the same tag and
 *          epoch on this connection failed, in this request or an earlier one
 *          (DM_CAP_CHAIN, dmkv/verbs.h).
 *   STATS  empty body. reply status 0: body dm_tcp_stats_t.
 * A request the memory node cannot parse (bad magic, unknown type, lengths over the limits
 * below, inconsistent body length, VERBS/STATS before HELLO) gets a DM_TCP_ERROR message
 * (status DM_E*, body text) and the connection is closed. Per-verb problems (outside the
 * region, misaligned atomic, unknown op) are reported in that verb's result status only. */
#ifndef DMKV_TCP_PROTO_H
#define DMKV_TCP_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define DM_TCP_MAGIC 0x544b4d44u /* "DMKT" as little-endian bytes */
#define DM_TCP_PROTO_VERSION 3u  /* 3: HELLO names the client's holder id (fencing) */

/* Message types (dm_tcp_hdr_t.type). Replies set DM_TCP_REPLY. */
#define DM_TCP_HELLO 1u
#define DM_TCP_VERBS 2u
#define DM_TCP_STATS 3u
#define DM_TCP_ERROR 0x7fu /* memory node -> client: fatal error, connection closes */
#define DM_TCP_REPLY 0x80u

/* Limits. A client never sends more; a memory node closes connections that do. */
#define DM_TCP_MAX_VERBS 1024u                               /* verbs per VERBS request */
#define DM_TCP_MAX_IO ((512ull << 20) + (64ull << 10))       /* bytes per READ or WRITE */
#define DM_TCP_MAX_BATCH_BYTES ((1ull << 30) + (1ull << 20)) /* WRITE (or READ) bytes per batch */
#define DM_TCP_MAX_TOKEN 256u                                /* auth token bytes */
#define DM_TCP_MAX_TEXT 1024u /* error text bytes in HELLO / ERROR replies */

typedef struct dm_tcp_hdr {
    uint32_t magic;    /* DM_TCP_MAGIC */
    uint8_t type;      /* DM_TCP_* (| DM_TCP_REPLY in replies) */
    uint8_t reserved;  /* 0 */
    int16_t status;    /* requests: 0; replies: 0 or DM_E* for the whole request */
    uint32_t seq;      /* chosen by the client, echoed in the reply */
    uint32_t count;    /* VERBS: number of verbs; otherwise 0 */
    uint64_t body_len; /* bytes after this header */
} dm_tcp_hdr_t;

typedef struct dm_tcp_hello {
    uint32_t version;   /* DM_TCP_PROTO_VERSION */
    uint16_t token_len; /* <= DM_TCP_MAX_TOKEN; the token bytes follow */
    uint16_t holder;    /* the client thread's holder id (dm_holder_id), 0 = none: a fence
                           request for it closes this connection (dmkv/fence.h) */
} dm_tcp_hello_t;

typedef struct dm_tcp_hello_reply {
    uint32_t version;     /* DM_TCP_PROTO_VERSION */
    uint32_t caps;        /* DM_CAP_* the memory node executes */
    uint64_t region_size; /* bytes */
    uint64_t incarnation; /* the region's incarnation (dm_superblock_t), never 0 */
} dm_tcp_hello_reply_t;

typedef struct dm_tcp_verb {
    uint8_t op;            /* dm_op_t */
    uint8_t chain_tag;     /* 0, or the verb's chain (DM_CAP_CHAIN, dmkv/verbs.h) */
    uint16_t chain_epoch;  /* the chain's epoch */
    uint32_t len;          /* READ/WRITE bytes (<= DM_TCP_MAX_IO); 8 for atomics */
    uint64_t offset;       /* byte offset in the region */
    uint64_t compare;      /* CAS/MASKED_CAS expected value; FAA addend */
    uint64_t swap;         /* CAS/MASKED_CAS new value */
    uint64_t compare_mask; /* MASKED_CAS */
    uint64_t swap_mask;    /* MASKED_CAS */
} dm_tcp_verb_t;

typedef struct dm_tcp_result {
    int32_t status;    /* 0 or DM_E* */
    uint32_t reserved; /* 0 */
    uint64_t result;   /* atomics: old value */
} dm_tcp_result_t;

typedef struct dm_tcp_stats {
    uint64_t verbs;         /* verbs executed since start */
    uint64_t batches;       /* VERBS requests served */
    uint64_t bytes_read;    /* READ payload bytes sent */
    uint64_t bytes_written; /* WRITE payload bytes received */
    uint64_t region_size;   /* bytes */
    uint64_t alloc_ptr;     /* superblock alloc_ptr (next free offset) */
    uint64_t connections;   /* clients connected now */
    uint64_t uptime_ms;     /* since the memory node started */
    uint64_t reads;         /* socket reads that carried requests */
    uint64_t reply_writes;  /* reply writes (one per read's worth of replies) */
} dm_tcp_stats_t;

_Static_assert(sizeof(dm_tcp_hdr_t) == 24, "dm_tcp_hdr_t wire size");
_Static_assert(sizeof(dm_tcp_hello_t) == 8, "dm_tcp_hello_t wire size");
_Static_assert(sizeof(dm_tcp_hello_reply_t) == 24, "dm_tcp_hello_reply_t wire size");
_Static_assert(sizeof(dm_tcp_verb_t) == 48, "dm_tcp_verb_t wire size");
_Static_assert(sizeof(dm_tcp_result_t) == 16, "dm_tcp_result_t wire size");
_Static_assert(sizeof(dm_tcp_stats_t) == 80, "dm_tcp_stats_t wire size");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the tcp transport's wire structs assume a little-endian host"
#endif

/* Auth token sent in HELLO by every later dm_tcp_open (NULL or "" = none). The string is
 * copied (at most DM_TCP_MAX_TOKEN bytes). Not thread-safe: call before opening. */
void dm_tcp_set_auth(const char *token);

/* Blocking one-shot STATS query (tests, tools): connects to host:port, sends HELLO with the
 * token set by dm_tcp_set_auth, then STATS, and closes. Timeout 5 s per step.
 * Returns 0 and fills *out, or DM_EIO / DM_ETIMEDOUT / DM_EPROTO / DM_EAUTH with a message
 * in err (errlen bytes). */
int dm_tcp_query_stats(const char *host, int port, dm_tcp_stats_t *out, char *err, size_t errlen);

#endif
