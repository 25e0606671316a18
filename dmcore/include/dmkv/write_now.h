/* Writing a stream's buffers at once when the socket takes them (docs/throughput.md,
 * "Writes without a write request").
 *
 * libuv's uv_write ends every write, even one the kernel took whole, by stopping POLLOUT
 * on the stream, and libuv 1.44 then re-arms the unchanged POLLIN with an epoll_ctl on the
 * next poll: one extra system call per message on the gateway's memory-node connection
 * and on the memory node's replies. uv_try_write has no request and no such step. */
#ifndef DMKV_WRITE_NOW_H
#define DMKV_WRITE_NOW_H

#include <uv.h>

/* Write bufs[0, *nbufs) to s with uv_try_write, at most one writev (the kernel's IOV_MAX
 * buffers per call: the rest is left). Returns 1 when every byte was written; 0 when some
 * remain (nothing written or a part: bufs[0, *nbufs) is then rewritten in place to describe
 * exactly the rest, for uv_write); or a negative libuv error (the stream failed). Never
 * writes ahead of a uv_write still queued on s (uv_try_write refuses then: 0). */
int dm_write_now(uv_stream_t *s, uv_buf_t *bufs, unsigned *nbufs);

#endif
