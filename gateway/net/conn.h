/* A client connection: reads RESP, queues parsed commands, runs them in order on a
 * coroutine (runs of reads, and of plain SETs with ordered commit points, concurrently:
 * conn.c), so a pipeline's commands see each other's effects as in Redis, and writes
 * the replies. Many connections' coroutines overlap their memory-node round trips on
 * one worker thread. */
#ifndef GW_NET_CONN_H
#define GW_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "resp/parser.h"
#include "server/thread.h"
#include "util/buf.h"

#define GW_FLUSH_AT (64u * 1024)        /* flush the output buffer past this, bytes */
#define GW_OUT_HIGH (64u * 1024 * 1024) /* pause the command loop and reading above, bytes */
#define GW_IN_HIGH (64u * 1024 * 1024)  /* stop reading with this much queued input, bytes */

struct gw_conn {
    uv_tcp_t tcp;
    gw_thread_t *th;
    uint64_t id;            /* CLIENT ID */
    int refs;               /* 1 handle + 1 running coroutine + 1 per write in flight */
    bool closing;           /* uv_close was called: the coroutine must stop touching I/O */
    bool close_after_reply; /* QUIT / protocol error: close once replies are written */
    bool reading;
    bool coro_running; /* a coroutine owns the command queue */
    bool coro_started;
    bool proto_error;        /* the parser failed: read no more */
    dm_coro_t *write_waiter; /* coroutine paused until output drains below GW_OUT_HIGH */

    resp_parser_t parser;
    gw_cmd_t *qhead, *qtail; /* parsed commands not yet run */
    size_t qbytes;           /* argument bytes queued */
    size_t wire_acc;         /* request bytes of the command being parsed */

    gw_buf_t out;         /* replies not yet handed to uv_write */
    size_t out_inflight;  /* bytes in uv_write requests not yet completed */
    bool flush_queued;    /* on th->flush_head: written at the end of this loop turn */
    uint64_t read_gen;    /* client reads so far: stamps each parsed command (gw_cmd_t.rgen) */
    uint64_t out_gen;     /* the read of the oldest reply in out */
    uint64_t held_gen;    /* the read of the command the loop holds between queue and run */
    unsigned out_replies; /* replies in out since the last flush */
    gw_conn_t *flush_next;

    /* Commands running concurrently (conn.c: a run of reads, or a run of plain SETs with
     * ordered commit points): oldest first; their replies are moved to out in this order
     * as the oldest ones finish. */
    struct gw_slot *shead, *stail;
    struct gw_slot *sfree;        /* finished slots, reused */
    uint64_t slot_seq;            /* numbers the slots in pipeline order (gw_slot_t.seq) */
    struct gw_slot *first_waiter; /* the oldest slot with turn_waiter set, NULL = none */
    /* turn_granted's memo: every slot from shead to pass_upto (NULL: none) has passed, done
     * or its commit chained at pass_node / pass_serial under epoch pass_epoch of its chain
     * (conn.c turn_granted) */
    struct gw_slot *pass_upto;
    unsigned pass_node;
    uint64_t pass_serial;
    uint16_t pass_epoch;
    uint8_t pass_tag;
    int sinflight;
    int skind;               /* what runs (GW_SLOT_READ / GW_SLOT_WRITE) while sinflight > 0 */
    dm_wake_t *drain_waiter; /* the command loop, waiting for slots to finish */

    gw_conn_t *prev, *next; /* th->conns list (under th->lock), th->closed once closed */
    char addr[64];          /* peer "ip:port" */
    char laddr[64];         /* local "ip:port" */
    int fd;
    uint64_t ctime_ms;        /* connect time, wall ms */
    uint64_t last_ms;         /* last command time, monotonic ms (dm_now_us / 1000) */
    const char *last_cmd;     /* static name of the last command */
    const char *last_sub;     /* its subcommand's static name or NULL */
    size_t running_bytes;     /* request bytes of the command running now (CLIENT LIST qbuf) */
    char *name;               /* CLIENT SETNAME (under th->lock), NULL when unset */
    char *lib_name, *lib_ver; /* CLIENT SETINFO (under th->lock) */

    int resp;         /* reply protocol: 2 (default) or 3 (HELLO 3) */
    bool authed;      /* AUTH passed (or no requirepass when the connection started) */
    bool auth_queued; /* an AUTH or HELLO was parsed and has not run yet: the limits
                         before AUTH are off (resp/parser.h) */
    bool no_evict;    /* CLIENT NO-EVICT: never closed by maxmemory-clients */
    bool kill;        /* CLIENT KILL from another thread: closed by this thread's timer */
    uint64_t omem;    /* gw_obuf_bytes at the last cron tick (relaxed atomic: CLIENT LIST) */
    uint64_t obuf_soft_since_ms; /* output first seen at or over the soft limit (monotonic
                                    ms), 0 under it (server/client_obuf.h) */
    bool uncounted;        /* already left connected_clients (flagged by CLIENT KILL; th->lock) */
    bool reply_off;        /* CLIENT REPLY OFF: replies dropped until CLIENT REPLY ON */
    bool monitor;          /* MONITOR (server/monitor.h) */
    gw_buf_t monitor_feed; /* its lines not yet in out (th->lock) */
    uint8_t reply_skip;    /* CLIENT REPLY SKIP: replies still to drop (its own + the next) */

    /* MULTI/EXEC state (commands/multi.c). */
    bool in_multi;               /* between MULTI and EXEC/DISCARD */
    bool multi_dirty;            /* a command was rejected while queueing: EXECABORT */
    gw_cmd_t *mq_head, *mq_tail; /* queued commands */
    int mq_n;
    struct gw_watch *watches; /* WATCHed keys with their slot words */
    size_t nwatches, capwatches;
};

enum { GW_SLOT_BARRIER, GW_SLOT_READ, GW_SLOT_WRITE };

/* One command of a pipeline running on its own coroutine, with its own reply buffer. */
typedef struct gw_slot {
    gw_conn_t *c;
    gw_cmd_t *cmd;
    gw_buf_t out;
    bool done;
    bool started;            /* its coroutine ran (start_slot: a NULL spawn is not enough) */
    uint64_t rgen;           /* its command's client read (gw_cmd_t.rgen) */
    uint64_t seq;            /* its place in the pipeline (gw_conn_t.slot_seq) */
    dm_wake_t *turn_waiter;  /* a write waiting for its commit turn */
    bool early_timeout;      /* its early lock was held EARLY_HOLD_MS waiting (conn.c) */
    uint64_t early_since_us; /* monotonic µs it began waiting for its turn holding one */
    bool chained;            /* its commit CAS is posted at chain_pos (dmkv/coro.h) */
    dm_chain_pos_t chain_pos;
    dm_turn_hook_t hook; /* its turn hook (set on its coroutine) */
    struct gw_slot *next;
} gw_slot_t;

/* Where the running command writes its reply: its slot's buffer when it is one of the
 * connection's concurrent commands, else c->out. */
static inline gw_buf_t *gw_conn_out(gw_conn_t *c)
{
    gw_slot_t *s = dm_coro_get_local();
    return s && s->c == c ? &s->out : &c->out;
}

/* Cron tick: a write that has waited EARLY_HOLD_MS for its turn holding an early leaf lock
 * (or waiting for one, dm_coro_wait_turn_or) gives way (its wait returns DM_EYIELD). */
void gw_conn_early_sweep(gw_thread_t *th);

/* uv_connection_cb for the thread's listeners (server->data is the gw_thread_t). */
void gw_conn_on_accept(uv_stream_t *server, int status);

/* Serve the client socket fd (connected, accepted by another thread: server/balance.h) on
 * th, th's loop thread only. Takes fd: closed on failure. */
void gw_conn_adopt(gw_thread_t *th, int fd);

/* Hand the pending output to the kernel (uv_write). No-op when closing or empty. */
void gw_conn_flush(gw_conn_t *c);

/* Hand it over at the end of this event-loop turn instead (the thread's reply hook), so
 * that the replies of one connection that become ready in one turn (the completions of
 * one memory-node message) leave in one write, as Redis writes a client's replies once
 * per event-loop iteration (beforeSleep). Holds a reference until then. */
void gw_conn_flush_soon(gw_conn_t *c);

/* Flush every connection of th queued by gw_conn_flush_soon (the reply hook's function;
 * also called at shutdown before the loop's handles close). */
void gw_conn_flush_pending(gw_thread_t *th);

/* Close the connection now (idempotent): stop reading, drop queued commands, release the
 * handle. Memory is freed once the running coroutine and pending writes let go. */
void gw_conn_close(gw_conn_t *c);

/* Free the MULTI queue and the WATCH list (connection teardown, RESET). */
void gw_conn_reset_multi(gw_conn_t *c);

/* Append one line describing c to b, in CLIENT LIST format (caller holds c->th->lock). */
void gw_conn_describe(gw_conn_t *c, gw_buf_t *b);

#endif
