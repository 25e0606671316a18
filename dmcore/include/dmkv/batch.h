/* The batch layer (pool/batch.c): verbs to any memory nodes grouped into one message per
 * node (one doorbell each), awaited together as one round trip and charged to the
 * operation's command class; writes that ride along with an operation's next batch. */
#ifndef DMKV_BATCH_H
#define DMKV_BATCH_H

#include <stdint.h>

#include "dmkv/gaddr.h"
#include "dmkv/transport.h"
#include "dmkv/worker.h"

#define DM_BATCH_MAX 64 /* verbs in one batch, over all nodes */

/* Called with a batch's commit CAS right before each posting of it (its turn taken, its
 * earlier commits posted): may move the CAS to another word of the same node (its offset
 * and compare). */
typedef void (*dm_commit_place_fn)(dm_verb_t *commit, void *arg);

/* A batch: verbs to any nodes, posted with one message per memory node and awaited
 * together = 1 round trip (doorbell batching). Verbs to one node run in posting order. */
struct dm_batch {
    unsigned n;
    uint64_t send_by_us;   /* 0, or the monotonic time (us) after which its messages must not
                              leave this process: refused with DM_ETIMEDOUT instead (writes
                              under a lease, dm_conn_t.send_by_us) */
    unsigned commit;       /* 0, or 1 + the index of the write's commit CAS (dm_batch_commit) */
    unsigned chain_from;   /* 1 + the index its chain starts at: a guard before the commit CAS
                              (dm_batch_commit_guarded), else the commit CAS; 0 with a
                              commit: never chained (a guarded commit without its guard) */
    uint64_t commit_by_us; /* the commit is not posted after this monotonic time (us) */
    /* NULL, or the commit's place callback and its argument (dm_batch_commit_place) */
    dm_commit_place_fn place;
    void *place_arg;
    dm_verb_t v[DM_BATCH_MAX];
    uint8_t node[DM_BATCH_MAX];
};

static inline void dm_batch_init(dm_batch_t *b)
{
    b->n = 0;
    b->send_by_us = 0;
    b->commit = 0;
    b->chain_from = 0;
    b->commit_by_us = 0;
    b->place = NULL;
    b->place_arg = NULL;
}

/* Where a chained commit CAS was posted: the connection (by serial, dm_conn_t) to memory
 * node `node`, the chain's tag and epoch. */
typedef struct dm_chain_pos {
    unsigned node;
    uint64_t conn_serial;
    uint8_t tag;
    uint16_t epoch;
} dm_chain_pos_t;

/* 1 while a commit posted at p may still land and nothing before it on its chain failed
 * that the worker knows of: p's connection is still node's, not failed, and the chain's
 * epoch has not moved on. A later commit posted on the same connection and chain then
 * runs after it, and is skipped if it fails (DM_CAP_CHAIN). */
int dm_chain_intact(const dm_worker_t *w, const dm_chain_pos_t *p);

/* The connection positions on `on`'s connection are checked against: node's connection
 * while it is still that one and not failed, else NULL. For a position p of that node and
 * serial, dm_chain_intact(w, p) is then dm_chain_epoch_current(conn, p) (NULL: 0); a scan
 * of many positions resolves the connection once. */
const dm_conn_t *dm_chain_conn(const dm_worker_t *w, const dm_chain_pos_t *on);

/* p's chain epoch is still its connection's (c from dm_chain_conn for p's node and serial). */
static inline int dm_chain_epoch_current(const dm_conn_t *c, const dm_chain_pos_t *p)
{
    return c->chain_epoch[p->tag] == p->epoch;
}

/* Chained commits posted, and those a memory node skipped (process totals, INFO). */
void dm_chain_stats(uint64_t *posted, uint64_t *skipped);

/* Batches posted again after their connection failed (a fence or a node restart): READs
 * only, or any batch the transport had refused whole (process total, INFO
 * batches_reposted). */
uint64_t dm_post_retries(void);

/* Connections to memory nodes opened again after one failed (a fence, a lost link or a
 * node restarted on its --dir), by all workers (process total, INFO memnode_redials). A
 * write in flight on the failed one may have landed without the key counter's FAA that
 * travels apart from it, so the gateway recounts (server/dead_repair.h). */
uint64_t dm_pool_redials(void);

/* The earlier of two send_by_us bounds (0: none). */
static inline uint64_t dm_send_by_earlier(uint64_t a, uint64_t b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}
/* Append verbs; each returns the verb (its result/status are valid after exec) or NULL
 * when the batch is full. */
dm_verb_t *dm_batch_read(dm_batch_t *b, dm_gaddr_t a, void *buf, uint32_t len);
dm_verb_t *dm_batch_write(dm_batch_t *b, dm_gaddr_t a, const void *buf, uint32_t len);

/* Read (write) len bytes at a whole, in verbs of at most 64 KiB, DM_BATCH_MAX of them per
 * round trip: for regions read or built in one piece (a table's directory, a leaf region).
 * Returns 0 or DM_E* (what landed of a failed write is unknown). pool/span.c */
int dm_read_span(dm_ctx_t *ctx, dm_gaddr_t a, void *buf, uint64_t len);
int dm_write_span(dm_ctx_t *ctx, dm_gaddr_t a, const void *buf, uint64_t len);
/* The sizes in bytes (dm_kvblock_size_from_hdr) of the KV blocks at ptrs[0, n) into
 * sizes[], read from their headers, DM_BATCH_MAX per round trip (offline walks).
 * 0 or DM_E*. pool/span.c */
int dm_read_kv_sizes(dm_ctx_t *ctx, const dm_gaddr_t *ptrs, size_t n, uint64_t *sizes);
/* Entry i of an index's n entries for dm_read_kv_blocks: its block's address (0: none),
 * the bytes to read first, and whether the block may be longer than that (a saturated
 * length field, a tombstone: its header then says). */
typedef void (*dm_kv_entry_fn)(unsigned i, const void *arg, dm_gaddr_t *ptr, uint64_t *len,
                               int *may_grow);
/* The KV blocks behind n entries, read in one round trip however many (dm_bulk_t), +1 for
 * blocks longer than their entry says: bufs[i] malloc'd (NULL without a block), lens[i]
 * the bytes read. Unverified: callers parse them. 0 or DM_E*; the caller frees bufs[]
 * either way. pool/span.c */
int dm_read_kv_blocks(dm_ctx_t *ctx, unsigned n, dm_kv_entry_fn entry, const void *arg,
                      uint8_t **bufs, uint64_t *lens);
dm_verb_t *dm_batch_cas(dm_batch_t *b, dm_gaddr_t a, uint64_t expect, uint64_t swap);
dm_verb_t *dm_batch_faa(dm_batch_t *b, dm_gaddr_t a, uint64_t add);
/* MASKED_CAS where the connection has it, else CAS with expect merged into the caller's
 * best guess of the unmasked bits (guess): the caller retries on mismatch. */
dm_verb_t *dm_batch_masked_cas(dm_batch_t *b, dm_gaddr_t a, uint64_t expect, uint64_t cmask,
                               uint64_t swap, uint64_t smask, uint64_t guess);

/* Mark v (a CAS in b, all of b's verbs on v's node) as the write's commit point: the first
 * change another client sees (a RACE slot CAS of a present key). dm_batch_exec then waits
 * for the coroutine's commit turn before posting b (dmkv/coro.h), chains the CAS where the
 * connection has DM_CAP_CHAIN and posts b again when the memory node skipped it, and never
 * posts it after by_us (monotonic us; the verb then fails with DM_ERETRY, as an operation
 * that outlived its bound). */
void dm_batch_commit(dm_batch_t *b, dm_verb_t *v, uint64_t by_us);

/* dm_batch_commit with guard (a CAS in b before v) chained right before the commit CAS: when
 * the guard does not match, the memory node skips v and every later commit of the chain,
 * and dm_batch_exec returns with the guard lost and v DM_ESKIPPED; the caller searches
 * again (race/ops.c header_guard). With guard NULL the commit is never chained: it is
 * posted after the whole turn, as on a connection without chains. */
void dm_batch_commit_guarded(dm_batch_t *b, dm_verb_t *guard, dm_verb_t *v, uint64_t by_us);

/* Give b's commit (dm_batch_commit) a place callback: it picks the commit CAS's word at
 * posting time, when what this worker learned since the batch was built is freshest
 * (SepHash: the first CurSegment entry not yet known full, sephash/append.c). */
static inline void dm_batch_commit_place(dm_batch_t *b, dm_commit_place_fn fn, void *arg)
{
    b->place = fn;
    b->place_arg = arg;
}

/* 1 when a commit posted now to node would be chained: the node's connection has
 * DM_CAP_CHAIN and the running coroutine a chain tag (dm_coro_chain_tag). Only then does a
 * commit guard matter (elsewhere every earlier commit has finished before it is posted). */
int dm_batch_commit_chains(const dm_ctx_t *ctx, unsigned node);

/* Post the batch and wait for all of it: yields the current coroutine, or runs the
 * worker's loop when called outside one. Charges 1 RTT, the verbs and bytes to ctx->cls.
 * Returns 0 when every verb succeeded, else the first error (verb statuses tell which). */
int dm_batch_exec(dm_ctx_t *ctx, dm_batch_t *b);

/* Any number of independent verbs, as batches of one node each, posted in one loop turn
 * (the transport sends a turn's batches to one node as one message) and awaited together:
 * one round trip where dm_batch_exec of each batch would take one apiece. For bulk work: a
 * RACE split's thousands of slot CASes, the KV blocks of many entries (dm_read_kv_blocks).
 * The first batch lives in the struct, so a bulk of at most DM_BATCH_MAX verbs to one node
 * allocates nothing and runs as dm_batch_exec. No commit CAS in a bulk. Verb pointers stay
 * valid until dm_bulk_free; a dm_bulk_t is used in place (it points into itself). */
typedef struct dm_bulk {
    dm_batch_t **b;
    unsigned n, cap;
    dm_batch_t first;
    dm_batch_t *inline_b[1];
} dm_bulk_t;
void dm_bulk_init(dm_bulk_t *k);
/* A batch of k with room for one more verb to a's node (add it with dm_batch_read etc.).
 * NULL when out of memory. */
dm_batch_t *dm_bulk_for(dm_bulk_t *k, dm_gaddr_t a);
/* Post k's batches and wait for all: ctx's ride, if any, goes with the first batch, run
 * alone first. Charges 1 RTT (2 with a ride and more than one batch) and every verb and
 * byte to ctx->cls. Returns 0 or the first error, as dm_batch_exec. */
int dm_bulk_exec(dm_ctx_t *ctx, dm_bulk_t *k);
/* Free k's batches; k is empty (initialized) again. */
void dm_bulk_free(dm_bulk_t *k);

/* Post without waiting (fire and forget: background zeroing, counters). Charged like exec.
 * Returns 0 or a posting error. The verbs' buffers must stay valid until completion:
 * WRITE data is copied, so only READs need care (use exec for READs). */
int dm_batch_post_async(dm_ctx_t *ctx, dm_batch_t *b);
/* Free the fire-and-forget batches of w that the 'posted' fault point still holds back
 * (tests): they are never sent (dm_worker_destroy). */
void dm_batch_drop_held(dm_worker_t *w);
/* How many posted batches (any worker of the process) failed or were refused so far: a
 * holder that posted writes without waiting compares it with the count when it began, and
 * writes nothing more once it moved (which of its writes landed is unknown). */
uint64_t dm_async_failures(void);

/* Let ride's verbs go out with ctx's next batch (one round trip saved); no deadline until
 * the verbs' owner sets ctx->ride_until_us. ctx->ride_failed says afterwards whether any of
 * them may not have landed (the owner's image of what it wrote is then not the pool's). */
void dm_ctx_ride_start(dm_ctx_t *ctx, dm_batch_t *ride);
/* End the ride: verbs of ride not posted yet (the operation posted nothing after the
 * start) go out now on their own. Returns 0, DM_E* of that batch, or DM_ERETRY when
 * ride_until_us had passed: nothing was posted (the holder of the lease must not write any
 * more; the caller's lease check then fails too). */
int dm_ctx_ride_end(dm_ctx_t *ctx, dm_batch_t *ride);

/* Before b, whose verbs must execute after the ride's (a slot CAS after the pending
 * entry it relies on): when the ride and b touch more than one memory node, their
 * messages could run in either order, so the ride goes out alone first (1 RTT); on one
 * node they share b's message, the ride first. Returns 0 or what dm_ctx_ride_end returns. */
int dm_ctx_ride_before(dm_ctx_t *ctx, const dm_batch_t *b);

#endif
