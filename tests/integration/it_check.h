/* Reply assertions for integration tests (abort with a message, like harness.h's CHECK). */
#ifndef DMKV_IT_CHECK_H
#define DMKV_IT_CHECK_H

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static inline void it_fail_reply(const char *file, int line, const char *what, redisReply *r)
{
    fprintf(stderr, "%s:%d: expected %s, got type %d", file, line, what, r ? r->type : -1);
    if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
              r->type == REDIS_REPLY_ERROR))
        fprintf(stderr, " '%.*s'", (int)(r->len > 200 ? 200 : r->len), r->str);
    if (r && r->type == REDIS_REPLY_INTEGER) fprintf(stderr, " %lld", r->integer);
    fputc('\n', stderr);
    abort();
}

/* Check and free r. */
#define EXPECT_STATUS(r, s)                                                                        \
    it_expect_str(__FILE__, __LINE__, (r), REDIS_REPLY_STATUS, (s), strlen(s))
#define EXPECT_ERR(r, s) it_expect_str(__FILE__, __LINE__, (r), REDIS_REPLY_ERROR, (s), strlen(s))
#define EXPECT_BULK(r, p, n) it_expect_str(__FILE__, __LINE__, (r), REDIS_REPLY_STRING, (p), (n))
#define EXPECT_BULKS(r, s) EXPECT_BULK((r), (s), strlen(s))
#define EXPECT_NIL(r) it_expect_nil(__FILE__, __LINE__, (r))
#define EXPECT_INT(r, v) it_expect_int(__FILE__, __LINE__, (r), (v))

static inline void it_expect_str(const char *file, int line, redisReply *r, int type, const char *s,
                                 size_t n)
{
    if (!r || r->type != type || r->len != n || memcmp(r->str, s, n) != 0) {
        char what[300];
        snprintf(what, sizeof(what), "type %d '%.*s'", type, (int)(n > 200 ? 200 : n), s);
        it_fail_reply(file, line, what, r);
    }
    freeReplyObject(r);
}

static inline void it_expect_nil(const char *file, int line, redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_NIL) it_fail_reply(file, line, "nil", r);
    freeReplyObject(r);
}

static inline void it_expect_int(const char *file, int line, redisReply *r, long long v)
{
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != v) {
        char what[64];
        snprintf(what, sizeof(what), "integer %lld", v);
        it_fail_reply(file, line, what, r);
    }
    freeReplyObject(r);
}

#endif
