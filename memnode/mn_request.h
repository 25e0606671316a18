/* One connection's stream of tcp-transport requests (dmkv/tcp_proto.h), without any I/O:
 * the incremental parser (header, then body), the checks of every field a client sends, and
 * the execution of HELLO, STATS and VERBS against the region. Replies are handed to a sink.
 * The tcp server (tcp_server.c) feeds it what it reads; the fuzz target (tests/fuzz/
 * fuzz_memnode.c) feeds it arbitrary bytes. Nothing a client sends makes it touch memory
 * outside the region: bad verbs get a per-verb DM_ERANGE / DM_EALIGN / DM_EINVAL, malformed
 * messages a DM_TCP_ERROR reply, after which the stream is failed (the connection must be
 * closed once that reply is written). */
#ifndef MEMNODE_MN_REQUEST_H
#define MEMNODE_MN_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "dmkv/tcp_proto.h"
#include "mn_region.h"

/* A reply: header and body, len bytes (cap allocated after the struct). The sink owns it
 * and gives it back with mn_reply_free. */
typedef struct mn_reply {
    size_t len, cap;
    uint8_t data[]; /* dm_tcp_hdr_t + body */
} mn_reply_t;

/* Free a reply on the thread that made it: one of MN_REPLY_KEEP bytes is kept for the
 * thread's next (a malloc and a free per batch were a fifth of the memory node's
 * instructions in a load). */
void mn_reply_free(mn_reply_t *r);

/* What a server's connections share. */
typedef struct mn_req_env {
    mn_region_t *region;
    const char *auth;      /* the HELLO token required, "" = none */
    dm_tcp_stats_t *stats; /* verbs, batches and bytes are counted here */
    /* STATS: fills the fields only the server knows (uptime, connections); may be NULL. */
    void (*fill_stats)(void *arg, dm_tcp_stats_t *st);
    void *arg;
    int fences;        /* the fence mailbox is served (mn_fence.h): HELLO reports DM_CAP_FENCE */
    int chain_no_skip; /* test only (DMKV_TEST_CHAIN_NO_SKIP=1): chained verbs are never
                          skipped, so a pipeline's commits may land out of order; the
                          ordering test must catch it */
    /* test only (DMKV_TEST_TEAR_WRITE=LEN:N): the N-th WRITE of LEN bytes copies its first
     * line, then the process SIGKILLs itself: a WRITE cut short (it_memnode_tear) */
    uint64_t tear_len, tear_nth;
} mn_req_env_t;

enum { MN_REQ_OK = 0, MN_REQ_FAILED = 1, MN_REQ_CLOSE = 2 };

typedef struct mn_req {
    const mn_req_env_t *env;
    const char *peer;                       /* for log lines */
    void (*send)(void *arg, mn_reply_t *r); /* takes ownership of r */
    void *arg;
    int state;       /* MN_REQ_*: FAILED = error reply sent, close after writing it;
                        CLOSE = close now (out of memory) */
    int hello_done;  /* HELLO accepted */
    uint16_t holder; /* the client's holder id from HELLO (0 = none): fenced by mn_fence */
    /* DM_CAP_CHAIN: per chain tag, 1 + the epoch in which one of its verbs failed (0: none) */
    uint32_t chain_broken[256];
    /* parser */
    uint8_t hbuf[sizeof(dm_tcp_hdr_t)];
    size_t hgot;
    int in_body;
    dm_tcp_hdr_t hdr;
    uint8_t *body;
    uint64_t body_cap, body_got;
} mn_req_t;

/* A stream for one connection (env outlives it). */
void mn_req_init(mn_req_t *q, const mn_req_env_t *env, const char *peer,
                 void (*send)(void *arg, mn_reply_t *r), void *arg);
/* Free its buffers. */
void mn_req_free(mn_req_t *q);

/* Consume bytes from d[0..len) until one request was executed (its reply sent), the bytes
 * run out, or the stream failed (q->state != MN_REQ_OK). Returns the bytes consumed. */
size_t mn_req_feed(mn_req_t *q, const uint8_t *d, size_t len);

/* Body bytes of the current request still to come (0 between requests or after a
 * failure): a caller may read that many straight into place with mn_req_body_room. */
uint64_t mn_req_body_missing(const mn_req_t *q);
/* Room for up to want of the missing body bytes (never past the body's end, *room bytes);
 * NULL when none are missing or on out of memory. */
uint8_t *mn_req_body_room(mn_req_t *q, uint64_t want, uint64_t *room);
/* n bytes were read into the room mn_req_body_room gave: the request runs once its body
 * is complete. */
void mn_req_body_got(mn_req_t *q, uint64_t n);

#endif
