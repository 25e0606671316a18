/* The one-sided operations every transport executes: an RNIC's verbs, nothing more
 * (docs/DESIGN.md "Remote memory model"). A verb addresses a byte offset in one memory node's
 * region. 8-byte aligned words are read and written atomically; longer reads may be torn
 * by concurrent writers. */
#ifndef DMKV_VERBS_H
#define DMKV_VERBS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DM_OP_READ = 1,       /* copy len bytes from remote offset into buf */
    DM_OP_WRITE = 2,      /* copy len bytes from buf to remote offset */
    DM_OP_CAS = 3,        /* 8 B: if *off == compare then *off = swap; *result = old */
    DM_OP_FAA = 4,        /* 8 B: *result = old; *off += compare (the addend) */
    DM_OP_MASKED_CAS = 5, /* 8 B: if (*off & compare_mask) == (compare & compare_mask) then
                           * *off = (*off & ~swap_mask) | (swap & swap_mask); *result = old */
    DM_OP_BREAK = 6,      /* tcp wire only, no memory touched: fails (DM_ELATE), so the memory
                           * node skips the rest of its chain. Sent in place of a chained
                           * batch the gateway refused to send (transport/tcp.c drop_late) */
} dm_op_t;

typedef struct dm_verb {
    uint8_t op;            /* dm_op_t */
    uint32_t len;          /* READ/WRITE bytes; 8 for atomics */
    uint64_t offset;       /* byte offset inside the memory node's region */
    void *buf;             /* READ: destination; WRITE: source; atomics: unused */
    uint64_t compare;      /* CAS/MASKED_CAS expected value; FAA addend */
    uint64_t swap;         /* CAS/MASKED_CAS new value */
    uint64_t compare_mask; /* MASKED_CAS only */
    uint64_t swap_mask;    /* MASKED_CAS only */
    uint64_t result;       /* atomics: the old value (filled on completion) */
    int status;            /* 0 or DM_E* (filled on completion) */
    uint8_t fence;         /* READ: must see the effect of the batch's earlier atomics (rdma:
                              IBV_SEND_FENCE; tcp and local execute in order anyway) */
    uint8_t chain_tag;     /* 0, or the chain of a commit CAS (DM_CAP_CHAIN; set by the batch
                              layer): skipped (DM_ESKIPPED) when an earlier verb of the same
                              tag and epoch on this connection failed */
    uint16_t chain_epoch;  /* the chain's epoch (dm_conn_t.chain_epoch) */
    uint8_t order_only;    /* READ riding ahead of a batch only so that the batch lands after
                              an earlier one (dmkv/batch.h dm_ctx_ride_start): dropped where
                              the batch's connection orders its messages (DM_CAP_CHAIN) */
} dm_verb_t;

/* Capability bits a connection reports. */
#define DM_CAP_MASKED_CAS 0x1u /* executes MASKED_CAS natively */
/* Serves the fence mailbox (dmkv/fence.h): cuts a lease holder's connections on request. */
#define DM_CAP_FENCE 0x2u
/* Chained verbs (tcp): a verb with chain_tag t and epoch e is skipped (DM_ESKIPPED, no
 * effect) when an earlier chained verb of (t, e) on the same connection failed: a CAS or
 * MASKED_CAS that did not match, or any verb with an error status. The connection executes
 * its messages in order, so a pipeline's commit CASes may travel together and none lands
 * after an earlier one of its chain failed (pool/batch.c, gateway/net/conn.c). An RNIC
 * cannot do this: rdma never reports it. */
#define DM_CAP_CHAIN 0x4u

#endif
