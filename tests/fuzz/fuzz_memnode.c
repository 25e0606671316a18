/* libFuzzer target (issue 12, hostile input): the memory node's request stream
 * (memnode/mn_request.c: the tcp transport's parser, its checks and the execution of HELLO,
 * STATS and VERBS against a region) fed the input in pieces whose sizes come from the
 * input itself, as a client's bytes arrive; sometimes a large body is read straight into
 * place as the server's on_alloc does. The region is a 16 KiB heap buffer, so a verb that
 * reached outside it is an AddressSanitizer report. Checked: every reply is well formed
 * (magic, reply type, body length = what follows, a VERBS reply's count = the request's),
 * the stream always makes progress, stops after an error reply, and nothing leaks.
 *
 * Input: byte 0 = piece size (1..32) and flags (bit 5: a valid HELLO is sent first so
 * that the rest reaches VERBS; bit 6: an auth token is required; bit 7: large bodies go
 * through mn_req_body_room), then the bytes of the stream. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/log.h"
#include "dmkv/superblock.h"
#include "dmkv/transport.h"
#include "mn_request.h"

#define REGION_BYTES (16u << 10)

static uint64_t region_mem[REGION_BYTES / 8];
static dm_tcp_stats_t stats;
static int replies;

static void sink(void *arg, mn_reply_t *r)
{
    (void)arg;
    dm_tcp_hdr_t h;
    if (r->len < sizeof(h)) abort();
    memcpy(&h, r->data, sizeof(h));
    if (h.magic != DM_TCP_MAGIC || !(h.type & DM_TCP_REPLY) || h.body_len != r->len - sizeof(h))
        abort();
    if ((h.type & ~DM_TCP_REPLY) == DM_TCP_VERBS && h.status == 0 &&
        h.body_len < (uint64_t)h.count * sizeof(dm_tcp_result_t))
        abort();
    replies++;
    mn_reply_free(r);
}

/* Feed d[0..n) in pieces of step bytes. Returns 0 once the stream failed. */
static int feed(mn_req_t *q, const uint8_t *d, size_t n, unsigned step, int direct)
{
    size_t pos = 0;
    while (pos < n && q->state == MN_REQ_OK) {
        uint64_t room;
        uint8_t *at =
            direct && mn_req_body_missing(q) >= 64 ? mn_req_body_room(q, step * 8u, &room) : NULL;
        if (at) {
            size_t k = n - pos < room ? n - pos : (size_t)room;
            memcpy(at, d + pos, k);
            mn_req_body_got(q, k);
            pos += k;
            continue;
        }
        size_t piece = n - pos < step ? n - pos : step;
        size_t used = mn_req_feed(q, d + pos, piece);
        if (used > piece || (used == 0 && q->state == MN_REQ_OK)) abort(); /* no progress */
        pos += used;
    }
    return q->state == MN_REQ_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    dm_log_set_level(DM_LOG_WARNING); /* each failed stream logs a notice */
    unsigned step = data[0] % 32 + 1;
    int hello = data[0] & 0x20, auth = data[0] & 0x40, direct = data[0] & 0x80;
    data++, size--;
    memset(region_mem, 0, sizeof(region_mem));
    dm_region_format((uint8_t *)region_mem, REGION_BYTES);
    mn_region_t rg = {.base = (uint8_t *)region_mem, .size = REGION_BYTES, .fd = -1};
    mn_req_env_t env = {.region = &rg, .auth = auth ? "tok" : "", .stats = &stats};
    mn_req_t q;
    mn_req_init(&q, &env, "fuzz", sink, NULL);
    replies = 0;
    if (hello) {
        struct {
            dm_tcp_hdr_t h;
            dm_tcp_hello_t b;
            char tok[3];
        } __attribute__((packed))
        m = {.h = {.magic = DM_TCP_MAGIC,
                   .type = DM_TCP_HELLO,
                   .seq = 1,
                   .body_len = sizeof(dm_tcp_hello_t) + (auth ? 3 : 0)},
             .b = {.version = DM_TCP_PROTO_VERSION, .token_len = auth ? 3 : 0},
             .tok = {'t', 'o', 'k'}};
        size_t len = sizeof(m.h) + sizeof(m.b) + (auth ? 3 : 0);
        if (!feed(&q, (const uint8_t *)&m, len, 64, 0) || replies != 1 || !q.hello_done) abort();
    }
    feed(&q, data, size, step, direct);
    mn_req_free(&q);
    return 0;
}
