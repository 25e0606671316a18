/* Client connections: read -> parse -> queue -> one coroutine per connection runs the queue
 * in order -> replies buffered and written. Lifetime: refs counts the libuv handle, the
 * running coroutine, each concurrent command and each write in flight; a coroutine
 * suspended in a memory-node round trip when the peer goes away finds c->closing set when
 * it resumes and stops.
 *
 * Pipelines (issue 11). Two kinds of run execute concurrently, up to GW_SLOTS_MAX
 * commands (GW_SLOTS_MAX_UPDATES for SETs of keys the address cache knows), each on its own
 * coroutine with its own reply buffer (gw_conn_out; slots are reused, and a command with nothing
 * queued after it runs inline as before); replies move to the output in pipeline order as the
 * oldest finish, so a long pipeline streams:
 *  - a run of consecutive read-only fast commands (GET, MGET, EXISTS, STRLEN...);
 *  - a run of consecutive plain SETs (SET key value, no options) with ordered commit
 *    points: each does its reads and writes its KV block concurrently, but its first
 *    change another client can see waits for its turn (turn_wait below):
 *     - any commit (the RACE slot CAS of a present key's update or of a new key's insert)
 *       on a memory-node connection without chains (rdma) waits until every earlier SET
 *       of the run has finished;
 *     - a commit on a connection with chains (tcp) waits until
 *       every earlier SET has finished or has posted its own slot CAS on the same
 *       connection and chain with nothing before it known to have failed
 *       (dm_chain_intact). The memory node runs them in order and skips every later CAS
 *       of the chain once one failed (DM_CAP_CHAIN); the skipped ones go out again after
 *       a new turn (pool/batch.c). So a CAS lands only after every earlier SET's commit
 *       landed.
 *    So the SETs take effect one after another in pipeline order, and a write is never
 *    visible before an earlier one. The per-key queue is entered in pipeline order before
 *    the first round trip, without combining (kv.c), so no SET waits there for a later
 *    one. A new key's CHIME leaf lock is taken before the turn (an early lock, dmkv/coro.h)
 *    and held while its insert waits for its commit turn; a pending entry is invisible
 *    until the slot CAS. The cycle that could form (an earlier SET waiting for a leaf a
 *    later one holds early) is broken: the earlier one wounds the holder, whose turn wait
 *    then returns DM_EYIELD (turn_wait below), and it unlocks and locks again after its
 *    whole turn; a holder on another worker or gateway gives way after EARLY_HOLD_MS.
 * Every other command is a barrier: it starts after all earlier commands finished and
 * nothing later starts before it finishes, and a run of one kind starts after a run of the
 * other finished. Hence, as in Redis, a read sees every earlier write of its connection, a
 * write is never visible before an earlier write, nor before an earlier read ran; what is
 * weaker than Redis is only the order of a run of reads among themselves against other
 * clients' concurrent writes (two GETs of one pipeline may observe another client's two
 * SETs in either order). MULTI/EXEC, WATCH, SCAN, KEYS and admin commands are barriers
 * and behave as before.
 *
 * Replies leave at the end of an event-loop turn (gw_conn_flush_soon), and only once every
 * command that came in the same client read as the oldest waiting reply has finished, or
 * GW_REPLIES_HELD_MAX replies wait (replies_due): Redis too runs all a read brought before
 * it writes, and a client that pipelines waits for the whole batch anyway. */
#include "net/conn.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "commands/commands.h"
#include "server/client_evict.h"
#include "server/balance.h"
#include "server/client_obuf.h"
#include "server/monitor.h"
#include "server/server.h"
#include "resp/reply.h"
#include "server/stats.h"
#include "dmkv/coro.h"
#include "dmkv/env.h"
#include "dmkv/errors.h"
#include "dmkv/log.h"
#include "dmkv/kv.h"
#include "dmkv/transport.h"

typedef struct wreq {
    uv_write_t req;
    gw_conn_t *c;
    char *data;
    size_t len;
} wreq_t;

static void conn_unref(gw_conn_t *c)
{
    if (--c->refs > 0) return;
    if (c->closing) { /* off the closed list (gw_conn_close) */
        if (c->prev)
            c->prev->next = c->next;
        else
            c->th->closed = c->next;
        if (c->next) c->next->prev = c->prev;
    }
    while (c->sfree) {
        gw_slot_t *s = c->sfree;
        c->sfree = s->next;
        gw_buf_free(&s->out);
        free(s);
    }
    gw_conn_reset_multi(c);
    resp_parser_free(&c->parser);
    gw_buf_free(&c->out);
    free(c->name);
    free(c->lib_name);
    free(c->lib_ver);
    free(c);
}

static void on_close(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void drop_queue(gw_conn_t *c)
{
    while (c->qhead) {
        gw_cmd_t *cmd = c->qhead;
        c->qhead = cmd->next;
        gw_cmd_free(cmd);
    }
    c->qtail = NULL;
    c->qbytes = 0;
}

void gw_conn_close(gw_conn_t *c)
{
    if (c->closing) return;
    gw_monitor_remove(c);
    c->closing = true;
    gw_thread_t *th = c->th;
    uv_mutex_lock(&th->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        th->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = NULL;
    th->nconns--;
    /* Its running commands still take part in the early-lock sweep (gw_conn_early_sweep). */
    c->next = th->closed;
    if (th->closed) th->closed->prev = c;
    th->closed = c;
    bool counted = !c->uncounted;
    uv_mutex_unlock(&th->lock);
    if (counted) GW_STAT_SUB(connected_clients, 1);
    dm_log(DM_LOG_VERBOSE, "Client closed connection id=%llu addr=%s", (unsigned long long)c->id,
           c->addr);
    drop_queue(c);
    gw_buf_free(&c->out);
    if (c->reading) uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    gw_conn_t *c = h->data;
    buf->base = c->th->rbuf;
    buf->len = sizeof(c->th->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Read while there is room: not closing, no protocol error, queues below their marks. */
static void update_reading(gw_conn_t *c)
{
    bool want = !c->closing && !c->close_after_reply && !c->proto_error && !c->th->stopping &&
                c->qbytes < GW_IN_HIGH && c->out.len + c->out_inflight < GW_OUT_HIGH;
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

/* Close a QUIT / protocol-error connection once everything queued for it is written. */
static void maybe_close_after_reply(gw_conn_t *c)
{
    if (!c->closing && c->close_after_reply && !c->coro_running && c->sinflight == 0 &&
        c->out_inflight == 0 && c->out.len == 0)
        gw_conn_close(c);
}

static void on_write(uv_write_t *req, int status)
{
    wreq_t *wr = (wreq_t *)req;
    gw_conn_t *c = wr->c;
    c->out_inflight -= wr->len;
    free(wr->data);
    free(wr);
    if (status < 0 && !c->closing) {
        dm_log(DM_LOG_VERBOSE, "Error writing to client id=%llu: %s", (unsigned long long)c->id,
               uv_strerror(status));
        gw_conn_close(c);
    }
    if (c->write_waiter && (c->closing || c->out_inflight <= GW_OUT_HIGH / 2)) {
        dm_coro_t *co = c->write_waiter;
        c->write_waiter = NULL;
        dm_coro_resume(co); /* our write ref keeps c alive through this */
    }
    if (!c->closing) {
        maybe_close_after_reply(c);
        if (!c->closing) update_reading(c);
    }
    conn_unref(c);
}

void gw_conn_flush(gw_conn_t *c)
{
    if (c->closing) {
        c->out.len = 0;
        return;
    }
    if (c->out.oom) {
        /* A reply did not fit in memory: this client goes, the gateway stays. */
        dm_log(DM_LOG_WARNING, "Out of memory building a reply: closing client id=%llu addr=%s",
               (unsigned long long)c->id, c->addr);
        GW_STAT_ADD(client_oom_disconnections, 1);
        gw_conn_close(c);
        return;
    }
    c->out_replies = 0;
    if (c->out.len == 0) return;
    GW_STAT_ADD(total_writes_processed, 1);
    size_t len = c->out.len;
    if (c->out_inflight == 0) {
        /* Fast path: the kernel usually takes everything; the buffer is then reused. */
        uv_buf_t b = uv_buf_init(c->out.data, (unsigned)(len < (1u << 30) ? len : (1u << 30)));
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n == UV_EAGAIN || n == UV_ENOSYS) {
            n = 0;
        } else if (n < 0) {
            gw_conn_close(c);
            return;
        }
        GW_STAT_ADD(total_net_output_bytes, (uint64_t)n);
        if ((size_t)n == len) {
            c->out.len = 0;
            if (c->out.cap > (1u << 20))
                gw_buf_free(&c->out); /* do not keep a big buffer per idle connection */
            return;
        }
        gw_buf_consume(&c->out, (size_t)n);
        len = c->out.len;
    }
    wreq_t *wr = malloc(sizeof(*wr));
    if (!wr) {
        GW_STAT_ADD(client_oom_disconnections, 1);
        gw_conn_close(c);
        return;
    }
    wr->c = c;
    wr->data = gw_buf_take(&c->out, &wr->len);
    uv_buf_t b = uv_buf_init(wr->data, (unsigned)wr->len);
    c->out_inflight += wr->len;
    c->refs++;
    GW_STAT_ADD(total_net_output_bytes, wr->len);
    int rc = uv_write(&wr->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc != 0) {
        c->out_inflight -= wr->len;
        c->refs--;
        free(wr->data);
        free(wr);
        gw_conn_close(c);
        return;
    }
    gw_obuf_check(c, dm_now_us() / 1000); /* the socket did not take it all: a slow reader? */
}

void gw_conn_flush_soon(gw_conn_t *c)
{
    if (c->closing || c->flush_queued) return;
    c->flush_queued = true;
    c->refs++;
    c->flush_next = c->th->flush_head;
    c->th->flush_head = c;
    dm_flush_hook_arm(&c->th->reply_flush);
}

void gw_conn_flush_pending(gw_thread_t *th)
{
    while (th->flush_head) {
        gw_conn_t *c = th->flush_head;
        th->flush_head = c->flush_next;
        c->flush_next = NULL;
        c->flush_queued = false;
        if (!c->closing) gw_conn_flush(c);
        conn_unref(c);
    }
}

/* Concurrent commands per connection. A run of SETs of keys the address cache knows (most
 * likely updates) goes to 256: a deeper window puts more commits in each memory-node
 * message (redis-benchmark -c 1 -P 1000 SET of present keys, one worker over tcp, four
 * alternating pairs: 145-157k/s at 64, 145-205k/s at 256, 2026-12-01). A SET of a key it does not
 * know (maybe an insert) starts only below 64 in flight: an insert's commit fails more often (a
 * slot taken, a split under way), and each failed commit makes the memory node skip every later one
 * of the connection's chain; at 256 for inserts those skips went up twelvefold and the load lost
 * 20% (stop 44). Reads stay at 64: each holds its value and its reply until its turn to be
 * written (64 MB at 1 MB values), and GET gained nothing from more. */
#define GW_SLOTS_MAX 64
#define GW_SLOTS_MAX_UPDATES 256

/* Test-only: DMKV_TEST_UNORDERED_WRITES=1 lets every key command run concurrently and
 * without commit turns, so writes commit out of order; it_pipeline_order shows that its
 * readers then catch it. */
static int parse_unordered(const char *e)
{
    return e && !strcmp(e, "1");
}

static bool unordered_writes(void)
{
    static int on = -1;
    return dm_env_cached(&on, "DMKV_TEST_UNORDERED_WRITES", parse_unordered);
}

/* How cmd may run: in a run of reads, in a run of plain SETs, or as a barrier (see the
 * header comment). */
static int slot_kind(const gw_conn_t *c, gw_cmd_t *cmd)
{
    if (cmd->proto_err || c->in_multi || !c->authed || c->close_after_reply) return GW_SLOT_BARRIER;
    const gw_command_t *gc = gw_command_of(cmd);
    if (!gc) return GW_SLOT_BARRIER;
    if (unordered_writes() && gc->first > 0) return GW_SLOT_READ; /* no turns */
    if (gw_command_has(gc, GW_CF_READONLY | GW_CF_FAST)) return GW_SLOT_READ;
    if (cmd->argc == 3 && gc->proc == cmd_set) return GW_SLOT_WRITE;
    return GW_SLOT_BARRIER;
}

/* Whether a command that came in client read `gen` has not finished: queued, held by the
 * command loop, or running (slots finish oldest first). */
static bool read_pending(const gw_conn_t *c, uint64_t gen)
{
    return (c->shead && c->shead->rgen == gen) || (c->qhead && c->qhead->rgen == gen) ||
           c->held_gen == gen;
}

#define GW_REPLIES_HELD_MAX 16 /* replies kept back for the rest of their read, at most */

/* Whether the replies in c->out should leave at this turn's end: once every command of
 * the client read of the oldest one has finished, as Redis runs everything one read
 * brought before it writes (a -P 16 batch of SETs, which commit one round trip apart,
 * gets one write, not 16); at least every GW_REPLIES_HELD_MAX replies, so a long pipeline
 * streams and a ready reply waits at most that many commits. */
static bool replies_due(const gw_conn_t *c)
{
    return c->out_replies >= GW_REPLIES_HELD_MAX || !read_pending(c, c->out_gen);
}

/* Move the replies of finished slots to c->out, oldest first, stopping at the first one
 * still running. */
static void emit_slots(gw_conn_t *c)
{
    bool any = false;
    while (c->shead && c->shead->done) {
        gw_slot_t *s = c->shead;
        c->shead = s->next;
        if (!c->shead) c->stail = NULL;
        if (c->pass_upto == s) c->pass_upto = NULL; /* the memo's prefix left with it */
        if (c->out.len == 0) c->out_gen = s->rgen;
        c->out_replies++;
        if (!c->closing && c->out.len == 0) { /* the usual case: hand the buffer over */
            gw_buf_t t = c->out;
            c->out = s->out;
            s->out = t;
        } else if (!c->closing) {
            gw_buf_append(&c->out, s->out.data, s->out.len);
            if (s->out.oom) c->out.oom = 1; /* its reply is incomplete */
        }
        s->out.len = 0;
        if (s->out.cap > GW_FLUSH_AT) gw_buf_free(&s->out); /* keep small buffers only */
        s->next = c->sfree; /* reused by the next slot: no allocation per command */
        c->sfree = s;
        any = true;
    }
    /* The command loop flushes when it runs; while it waits for slots, stream here, once
     * per loop turn: the slots that one memory-node message completes share one write. */
    if (!any || c->closing) return;
    if (c->out.len >= GW_FLUSH_AT)
        gw_conn_flush(c);
    else if (c->drain_waiter && replies_due(c))
        gw_conn_flush_soon(c);
}

static void wake_loop(gw_conn_t *c)
{
    if (!c->drain_waiter) return;
    dm_wake_t *wk = c->drain_waiter;
    c->drain_waiter = NULL;
    dm_worker_wake(c->th->w, wk);
}

/* Whether slot p, earlier than a write waiting for its turn, lets it go on: p finished, or
 * (a chained commit on `on`'s connection) p's own commit is posted on that connection's
 * chain and nothing before it on the chain is known to have failed. */
static bool slot_passed(const gw_slot_t *p, const dm_chain_pos_t *on, const dm_conn_t *cn)
{
    if (p->done) return true;
    return cn && p->chained && p->chain_pos.node == on->node &&
           p->chain_pos.conn_serial == on->conn_serial && dm_chain_epoch_current(cn, &p->chain_pos);
}

/* Whether the memo (gw_conn_t.pass_upto) holds for a waiter posting at on, through cn:
 * the same chain and connection, and no failure moved its epoch since (a chained commit
 * stays passed while its epoch is current; a done slot stays passed for good). */
static bool memo_holds(const gw_conn_t *c, const dm_chain_pos_t *on, const dm_conn_t *cn)
{
    return c->pass_upto && cn && c->pass_node == on->node && c->pass_serial == on->conn_serial &&
           c->pass_tag == on->tag && cn->chain_epoch[on->tag] == c->pass_epoch;
}

/* cn: on's connection, resolved once for the scan (dm_chain_conn; the scan does not yield,
 * so it cannot change meanwhile). A SET in a 1,000-command pipeline had hundreds of earlier
 * slots to check, each time it looked: the scan starts after the prefix an earlier look
 * found passed (the memo), so each slot is checked about once (perf, SET -c 1 -P 1000: the
 * scan and wake_turn's were a fifth of the gateway's samples). */
static bool turn_granted(const gw_slot_t *s, const dm_chain_pos_t *on)
{
    gw_conn_t *c = s->c;
    const dm_conn_t *cn = on ? dm_chain_conn(c->th->w, on) : NULL;
    gw_slot_t *last = NULL, *p = c->shead;
    if (memo_holds(c, on, cn)) {
        if (s->seq <= c->pass_upto->seq) return true; /* everything before s passed */
        last = c->pass_upto;
        p = last->next;
    }
    bool granted = true;
    for (; p && p != s; p = p->next) {
        if (!slot_passed(p, on, cn)) {
            granted = false;
            break;
        }
        last = p;
    }
    if (cn) { /* remember the passed prefix for this chain's next look */
        c->pass_upto = last;
        c->pass_node = on->node;
        c->pass_serial = on->conn_serial;
        c->pass_tag = on->tag;
        c->pass_epoch = cn->chain_epoch[on->tag];
    }
    return granted;
}

/* Resume s, which waits for its turn (now: at once, before this turn's posts; else in a
 * later turn). */
static void turn_resume(gw_slot_t *s, bool now)
{
    gw_conn_t *c = s->c;
    dm_wake_t *wk = s->turn_waiter;
    s->turn_waiter = NULL;
    if (c->first_waiter == s) { /* none waits before s: the next one is after it */
        gw_slot_t *n = s->next;
        while (n && !n->turn_waiter)
            n = n->next;
        c->first_waiter = n;
    }
    if (now)
        dm_worker_wake_now(c->th->w, wk);
    else
        dm_worker_wake(c->th->w, wk);
}

/* After a slot finished or posted its commit: the oldest write waiting for its turn checks
 * again (only the oldest can be let go: a later one waits for it too). */
static void wake_turn(gw_conn_t *c)
{
    if (c->first_waiter) turn_resume(c->first_waiter, true);
}

/* dm_turn_hook_t.wound: resume the slot if it waits for its turn (it then gives way). */
static void turn_wound(void *arg)
{
    gw_slot_t *s = arg;
    if (s->turn_waiter) turn_resume(s, false);
}

/* How long a SET holding an early leaf lock waits for its turn before it gives way
 * (dmkv/coro.h "Early locks"): what breaks a wait cycle through a holder on another worker
 * or gateway, out of dm_coro_early_contend's reach. Checked by the thread's cron tick
 * (gw_conn_early_sweep), so a wait gives way after 100-200 ms. */
#define EARLY_HOLD_MS 100

static void early_sweep_conns(gw_conn_t *conns, uint64_t now)
{
    for (gw_conn_t *c = conns; c; c = c->next)
        for (gw_slot_t *s = c->shead; s; s = s->next)
            if (s->turn_waiter && s->early_since_us &&
                now - s->early_since_us >= (uint64_t)EARLY_HOLD_MS * 1000) {
                s->early_timeout = true;
                turn_wound(s);
            }
}

/* Open connections and closed ones whose commands still run (a client that gave up leaves
 * them holding early locks that others wait for). */
void gw_conn_early_sweep(gw_thread_t *th)
{
    uint64_t now = dm_now_us();
    early_sweep_conns(th->conns, now);
    early_sweep_conns(th->closed, now);
}

/* dm_turn_hook_t.wait of a SET in a run (dmkv/coro.h). */
static int turn_wait(void *arg, const dm_chain_pos_t *on)
{
    gw_slot_t *s = arg;
    int rc = 0;
    s->early_timeout = false;
    s->early_since_us = 0;
    while (!turn_granted(s, on)) {
        if (dm_coro_early_held()) {
            if (dm_coro_early_wounded() || s->early_timeout) {
                rc = DM_EYIELD;
                break;
            }
            if (!s->early_since_us) s->early_since_us = dm_now_us(); /* the cron's sweep */
        }
        dm_wake_t wk = {0};
        s->turn_waiter = &wk;
        if (!s->c->first_waiter || s->seq < s->c->first_waiter->seq) s->c->first_waiter = s;
        dm_worker_park(s->c->th->w, &wk, "its turn: earlier commands of its connection");
    }
    s->early_since_us = 0;
    return rc;
}

/* dm_turn_hook_t.posted: a later write may now post its chained commit behind this one. */
static void turn_posted(void *arg, const dm_chain_pos_t *at)
{
    gw_slot_t *s = arg;
    if (s->chained || !at) s->c->pass_upto = NULL; /* a re-post: it may have left the memo */
    s->chained = at != NULL;
    if (!at) return;
    s->chain_pos = *at;
    wake_turn(s->c);
}

/* dm_turn_hook_t.behind: later commands of the connection are running or queued. */
static int turn_behind(void *arg)
{
    gw_slot_t *s = arg;
    return s->next != NULL || s->c->qhead != NULL;
}

static void slot_coro(void *arg)
{
    gw_slot_t *s = arg;
    gw_conn_t *c = s->c;
    s->started = true;
    dm_coro_set_local(s);
    if (c->skind == GW_SLOT_WRITE) {
        /* Chain tags 1-255; two connections of a worker that share one only make each
         * other's commits retry after a failure, never land out of order. */
        s->hook = (dm_turn_hook_t){.wait = turn_wait,
                                   .posted = turn_posted,
                                   .wound = turn_wound,
                                   .behind = turn_behind,
                                   .arg = s,
                                   .chain_tag = (uint8_t)(1 + c->id % 255)};
        dm_coro_set_turn(&s->hook);
    }
    bool kept = !c->closing && gw_command_exec(c, s->cmd);
    dm_coro_set_turn(NULL);
    dm_coro_set_local(NULL);
    if (!kept) gw_cmd_free(s->cmd);
    s->done = true;
    s->chained = false;
    c->sinflight--;
    emit_slots(c);
    wake_turn(c);
    wake_loop(c);
    conn_unref(c);
}

/* Wait (on the command loop's coroutine) until fewer than `below` slots are running. */
static void wait_slots(gw_conn_t *c, int below)
{
    while (c->sinflight >= below && c->sinflight > 0) {
        dm_wake_t wk = {0};
        c->drain_waiter = &wk;
        dm_worker_park(c->th->w, &wk, "fewer commands in flight on its connection");
    }
}

/* Start cmd on a slot of kind (in pipeline order). False when it cannot start. */
static bool start_slot(gw_conn_t *c, gw_cmd_t *cmd, int kind)
{
    gw_slot_t *s = c->sfree;
    if (s) {
        c->sfree = s->next;
    } else {
        s = calloc(1, sizeof(*s));
        if (!s) return false;
        gw_buf_init(&s->out);
        s->c = c;
    }
    s->cmd = cmd;
    s->rgen = cmd->rgen;
    s->seq = ++c->slot_seq;
    s->done = false;
    s->started = false;
    s->turn_waiter = NULL;
    s->chained = false;
    s->next = NULL;
    gw_slot_t *prev = c->stail;
    if (prev)
        prev->next = s;
    else
        c->shead = s;
    c->stail = s;
    c->sinflight++;
    c->skind = kind;
    c->refs++;
    /* Runs until its first round trip; NULL also when it already finished (s then waits
     * in sfree). Not errno: a command that finished may have left ENOMEM there, and the slot
     * would be unlinked and freed twice. */
    if (!dm_coro_spawn(slot_coro, s) && !s->started) {
        /* No coroutine: it never ran. Unlink it (the tail); cmd then runs as a barrier. */
        if (prev)
            prev->next = NULL;
        else
            c->shead = NULL;
        c->stail = prev;
        c->sinflight--;
        c->refs--;
        s->next = c->sfree;
        c->sfree = s;
        return false;
    }
    return true;
}

/* The next queued command's first key: its address-cache entry is a likely CPU cache miss
 * (32 MiB by default; at 8 MiB, 8% of the gateway's CPU at -P 1000 in perf), loaded while this
 * one runs. */
static void prefetch_next(const gw_conn_t *c)
{
    const gw_cmd_t *n = c->qhead;
    if (n && n->argc >= 2 && !n->proto_err) dm_kv_prefetch(c->th->w, n->argv[1], n->argvlen[1]);
}

/* How many commands of cmd's run may be in flight when cmd starts (see GW_SLOTS_MAX). */
static int slot_window(const gw_conn_t *c, const gw_cmd_t *cmd, int kind)
{
    /* Below GW_SLOTS_MAX both windows let cmd start: no cache lookup (-P 16 never needs one). */
    if (kind != GW_SLOT_WRITE || cmd->argc < 2 || c->sinflight < GW_SLOTS_MAX) return GW_SLOTS_MAX;
    return dm_kv_cache_knows(c->th->w, cmd->argv[1], cmd->argvlen[1]) ? GW_SLOTS_MAX_UPDATES
                                                                      : GW_SLOTS_MAX;
}

/* The connection's command loop: runs queued commands in order on one coroutine, runs of
 * reads and of plain SETs concurrently (see the header comment). */
static void conn_coro(void *arg)
{
    dm_coro_set_name("a connection's command loop");
    gw_conn_t *c = arg;
    c->coro_started = true;
    while (!c->closing && !c->close_after_reply && (c->qhead || c->sinflight)) {
        if (!c->qhead) {
            wait_slots(c, 1); /* the pipeline's last replies (streamed by emit_slots) */
            continue;
        }
        gw_cmd_t *cmd = c->qhead;
        c->qhead = cmd->next;
        if (!c->qhead) c->qtail = NULL;
        c->qbytes -= cmd->bytes;
        c->held_gen = cmd->rgen;
        /* Alone (nothing queued after it, nothing running) a command gains nothing from
         * its own coroutine: it runs inline, as every command did before. */
        int kind = c->qhead || c->sinflight ? slot_kind(c, cmd) : GW_SLOT_BARRIER;
        if (kind != GW_SLOT_BARRIER) {
            prefetch_next(c);
            if (c->sinflight && c->skind != kind) wait_slots(c, 1); /* the other run ends */
            wait_slots(c, slot_window(c, cmd, kind));
            if (!c->closing && start_slot(c, cmd, kind)) {
                c->held_gen = 0;
                if (!c->closing && !c->reading) update_reading(c);
                continue;
            }
            if (c->closing) {
                gw_cmd_free(cmd);
                break;
            }
        }
        wait_slots(c, 1); /* a barrier: every earlier command has finished */
        if (c->closing) {
            gw_cmd_free(cmd);
            break;
        }
        uint64_t t0 = dm_now_us();
        if (c->out.len == 0) c->out_gen = cmd->rgen;
        if (!gw_command_exec(c, cmd)) gw_cmd_free(cmd);
        dm_coro_set_name("a connection's command loop");
        c->held_gen = 0;
        c->out_replies++;
        if (c->closing) break;
        if (c->out.len >= GW_FLUSH_AT) {
            gw_conn_flush(c);
            while (!c->closing && c->out_inflight > GW_OUT_HIGH) {
                c->write_waiter = dm_coro_self();
                dm_coro_yield_on("its client to read replies (output buffer)");
                c->write_waiter = NULL;
            }
        } else if (c->out.len && dm_now_us() - t0 >= 50 && replies_due(c)) {
            /* A command that waited on memory nodes: its reply (and those before) go out
             * at this turn's end, so a long pipeline of writes streams instead of
             * answering at its end. */
            gw_conn_flush_soon(c);
        }
        if (!c->closing && !c->reading) update_reading(c);
    }
    c->coro_running = false;
    if (!c->closing) {
        gw_conn_flush(c);
        maybe_close_after_reply(c);
        if (!c->closing) update_reading(c);
    }
    conn_unref(c);
}

/* Start the command loop when commands wait and none is running. */
static void kick(gw_conn_t *c)
{
    if (c->coro_running || !c->qhead || c->closing) return;
    c->coro_running = true;
    c->coro_started = false;
    c->refs++;
    dm_coro_t *co = dm_coro_spawn(conn_coro, c);
    if (!co && !c->coro_started) {
        c->coro_running = false;
        c->refs--;
        dm_log(DM_LOG_WARNING, "Cannot start a coroutine for client id=%llu: closing it",
               (unsigned long long)c->id);
        gw_conn_close(c);
    }
}

static void enqueue(gw_conn_t *c, gw_cmd_t *cmd)
{
    cmd->next = NULL;
    cmd->rgen = c->read_gen;
    if (c->qtail)
        c->qtail->next = cmd;
    else
        c->qhead = cmd;
    c->qtail = cmd;
    c->qbytes += cmd->bytes;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    gw_conn_t *c = s->data;
    if (nread < 0) {
        gw_conn_close(c);
        return;
    }
    if (nread == 0) return;
    (*dm_conn_activity())++; /* the thread's loop polls on (dmkv/busy_poll.h) */
    c->read_gen++;
    GW_STAT_ADD(total_reads_processed, 1);
    GW_STAT_ADD(total_net_input_bytes, (uint64_t)nread);
    size_t pos = 0, n = (size_t)nread;
    while (pos < n && !c->proto_error) {
        gw_cmd_t *cmd;
        size_t used;
        /* Before AUTH, Redis's small limits on a command's size apply; not once an AUTH or
         * HELLO is queued (it may succeed: what follows it is checked when it runs). */
        c->parser.unauth = !c->authed && !c->auth_queued && gw_server_requirepass_set();
        int rc = resp_parse(&c->parser, buf->base + pos, n - pos, &used, &cmd);
        pos += used;
        c->wire_acc += used;
        if (rc == RESP_CMD) {
            cmd->wire = c->wire_acc;
            c->wire_acc = 0;
            if (c->parser.unauth &&
                (!strcasecmp(cmd->argv[0], "auth") || !strcasecmp(cmd->argv[0], "hello")))
                c->auth_queued = true;
            enqueue(c, cmd);
        } else if (rc == RESP_ERROR) {
            gw_cmd_t *e = calloc(1, sizeof(*e));
            if (!e) {
                GW_STAT_ADD(client_oom_disconnections, 1);
                gw_conn_close(c);
                return;
            }
            e->proto_err = strdup(c->parser.err);
            enqueue(c, e);
            c->proto_error = true;
            if (c->parser.oom) {
                dm_log(DM_LOG_WARNING,
                       "Out of memory reading a command: closing client id=%llu addr=%s",
                       (unsigned long long)c->id, c->addr);
                GW_STAT_ADD(client_oom_disconnections, 1);
            }
            dm_log(DM_LOG_VERBOSE, "Protocol error (%s) from client: id=%llu addr=%s",
                   c->parser.err, (unsigned long long)c->id, c->addr);
        } else {
            break;
        }
    }
    /* Redis's client-query-buffer-limit: a command that never ends (a multibulk count of
     * 2^31 - 1, then endless empty arguments) must not grow until the gateway dies. */
    size_t held = resp_parser_pending_bytes(&c->parser) + c->qbytes;
    if (held > c->th->cfg->query_buffer_limit && !c->closing) {
        dm_log(DM_LOG_WARNING,
               "Closing client that reached max query buffer length: id=%llu addr=%s "
               "qbuf=%zu",
               (unsigned long long)c->id, c->addr, held);
        GW_STAT_ADD(client_query_buffer_limit_disconnections, 1);
        gw_conn_close(c);
        return;
    }
    if (gw_evict_if_over(c)) return; /* maxmemory-clients */
    kick(c);
    if (!c->closing) update_reading(c);
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t outlen)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
        port = ntohs(a->sin6_port);
    }
    snprintf(out, outlen, "%s:%d", ip, port);
}

static void free_on_close(uv_handle_t *h)
{
    free(h->data);
}

static gw_conn_t *conn_new(gw_thread_t *th)
{
    gw_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->th = th;
    c->refs = 1;
    uv_tcp_init(&th->loop, &c->tcp);
    c->tcp.data = c;
    return c;
}

/* c's socket is open on its thread's loop: name it, register it, start reading. */
static void conn_start(gw_conn_t *c)
{
    gw_thread_t *th = c->th;
    uv_tcp_nodelay(&c->tcp, 1);
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0)
        format_addr(&ss, c->addr, sizeof(c->addr));
    sl = sizeof(ss);
    if (uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &sl) == 0)
        format_addr(&ss, c->laddr, sizeof(c->laddr));
    uv_os_fd_t fd = -1;
    uv_fileno((uv_handle_t *)&c->tcp, &fd);
    c->fd = (int)fd;
    c->id = GW_STAT_ADD(next_client_id, 1) + 1;
    c->ctime_ms = dm_wall_ms();
    c->last_ms = dm_now_us() / 1000;
    c->last_cmd = "NULL";
    c->resp = 2;
    c->authed = !gw_server_requirepass_set();
    resp_parser_init(&c->parser);
    gw_buf_init(&c->out);

    uv_mutex_lock(&th->lock);
    c->next = th->conns;
    if (th->conns) th->conns->prev = c;
    th->conns = c;
    th->nconns++;
    uv_mutex_unlock(&th->lock);
    uint64_t connected = GW_STAT_ADD(connected_clients, 1) + 1;
    GW_STAT_ADD(total_connections_received, 1);
    dm_log(DM_LOG_VERBOSE, "Accepted %s (id=%llu, thread %d)", c->addr, (unsigned long long)c->id,
           th->index);

    if (th->stopping) {
        gw_conn_close(c);
        return;
    }
    if (connected > (uint64_t)th->cfg->maxclients) {
        GW_STAT_ADD(rejected_connections, 1);
        reply_error(&c->out, "ERR max number of clients reached");
        c->close_after_reply = true;
        gw_conn_flush(c);
        maybe_close_after_reply(c);
        return;
    }
    update_reading(c);
}

/* A second descriptor of a client socket, for the thread it is passed to. Its own function
 * for ThreadSanitizer's suppression (tests/tsan/suppressions.txt): libuv closes sockets with a
 * raw close(2) system call that TSan does not see, so the number dup(2) gets back, freed by
 * another thread's close, looks like a race. The kernel orders them. */
__attribute__((noinline)) static int dup_client_socket(int fd)
{
    return dup(fd);
}

/* Pass c's socket to a thread that serves fewer clients (server/balance.h): 1 when it went
 * (c is closed here, its socket lives on as the duplicate the other thread opens). */
static int pass_to_lighter(gw_conn_t *c)
{
    gw_thread_t *to = gw_balance_target(c->th);
    uv_os_fd_t fd = -1;
    if (!to || uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0) return 0;
    int dup_fd = dup_client_socket((int)fd);
    if (dup_fd < 0) return 0;
    if (gw_balance_pass(to, dup_fd) != 0) {
        close(dup_fd);
        return 0;
    }
    uv_close((uv_handle_t *)&c->tcp, free_on_close);
    return 1;
}

void gw_conn_on_accept(uv_stream_t *server, int status)
{
    gw_thread_t *th = server->data;
    if (status < 0) {
        dm_log(DM_LOG_WARNING, "Accepting client connection: %s", uv_strerror(status));
        return;
    }
    gw_conn_t *c = conn_new(th);
    if (!c) return;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, free_on_close);
        return;
    }
    if (!th->stopping && pass_to_lighter(c)) return;
    conn_start(c);
}

void gw_conn_adopt(gw_thread_t *th, int fd)
{
    gw_conn_t *c = conn_new(th);
    if (!c) {
        close(fd);
        return;
    }
    if (uv_tcp_open(&c->tcp, (uv_os_sock_t)fd) != 0) {
        close(fd);
        uv_close((uv_handle_t *)&c->tcp, free_on_close);
        return;
    }
    conn_start(c);
}

void gw_conn_describe(gw_conn_t *c, gw_buf_t *b)
{
    uint64_t now = dm_wall_ms(), now_mono = dm_now_us() / 1000;
    uint64_t last = __atomic_load_n(&c->last_ms, __ATOMIC_RELAXED);
    const char *cmd = __atomic_load_n(&c->last_cmd, __ATOMIC_RELAXED);
    const char *sub = __atomic_load_n(&c->last_sub, __ATOMIC_RELAXED);
    /* flags: O a monitor, x in MULTI, N none. */
    const char *flags = __atomic_load_n(&c->monitor, __ATOMIC_RELAXED) ? "O"
                        : c->in_multi                                  ? "x"
                                                                       : "N";
    /* qbuf: the request bytes queued and running (Redis counts the running command's). */
    size_t qbuf = __atomic_load_n(&c->qbytes, __ATOMIC_RELAXED) +
                  __atomic_load_n(&c->running_bytes, __ATOMIC_RELAXED);
    unsigned long long omem = __atomic_load_n(&c->omem, __ATOMIC_RELAXED);
    gw_buf_printf(b,
                  "id=%llu addr=%s laddr=%s fd=%d name=%s age=%llu idle=%llu flags=%s db=0 "
                  "sub=0 psub=0 ssub=0 multi=%d qbuf=%zu qbuf-free=0 argv-mem=0 multi-mem=0 "
                  "rbs=0 rbp=0 obl=0 oll=0 omem=%llu tot-mem=%llu events=r cmd=%s%s%s "
                  "user=default redir=-1 resp=%d lib-name=%s lib-ver=%s io-thread=%d\n",
                  (unsigned long long)c->id, c->addr, c->laddr, c->fd, c->name ? c->name : "",
                  (unsigned long long)((now - c->ctime_ms) / 1000),
                  (unsigned long long)(now_mono > last ? (now_mono - last) / 1000 : 0), flags,
                  c->in_multi ? c->mq_n : -1, qbuf, omem, omem + (unsigned long long)qbuf,
                  cmd ? cmd : "NULL", sub ? "|" : "", sub ? sub : "", c->resp,
                  c->lib_name ? c->lib_name : "", c->lib_ver ? c->lib_ver : "", c->th->index);
}
