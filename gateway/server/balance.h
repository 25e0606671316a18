/* Client connections spread evenly over the worker threads.
 *
 * Every thread listens on the port with SO_REUSEPORT, and the kernel picks a listener by a
 * hash of the connection's addresses. With few clients that split is uneven: four
 * connections land two and two on two threads only 3 times in 8, so one thread served three
 * or four pipelining clients while the other idled (per-thread CPU of a 1M-key load: 650-870
 * ticks against 0-260). A thread that accepts a connection while another serves fewer passes
 * the socket there: a duplicate of its fd goes on the target's queue, the target's async
 * handle wakes its loop, and the target opens it as its own (net/conn.h gw_conn_adopt).
 * Redis 8 gives a new client to the io-thread with the fewest the same way. Thread-safe
 * unless said otherwise. */
#ifndef GW_SERVER_BALANCE_H
#define GW_SERVER_BALANCE_H

#include "server/thread.h"

/* On th's loop thread, before its listeners accept: initialise its queue and start taking
 * passes. Returns 0 or a libuv error code. */
int gw_balance_open(gw_thread_t *th);

/* On th's loop thread, when it stops: take no more passes and close the sockets still
 * queued (their clients see the connection closed, as when a thread stops with clients).
 * The async handle is closed with th's other handles. */
void gw_balance_close(gw_thread_t *th);

/* The thread that should serve a connection th just accepted: one taking passes that serves
 * fewer clients than th (counting those passed to it and not yet opened), the least loaded;
 * NULL to keep it. */
gw_thread_t *gw_balance_target(gw_thread_t *th);

/* Queue the connected socket fd for thread to and wake it. Returns 0 (to owns fd now) or -1
 * when to takes no passes (stopping, not started): the caller keeps fd. */
int gw_balance_pass(gw_thread_t *to, int fd);

/* Release th's queue (after its thread joined). */
void gw_balance_free(gw_thread_t *th);

#endif
