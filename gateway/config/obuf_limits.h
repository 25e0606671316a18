/* client-output-buffer-limit values (Redis's syntax and defaults), parsed and printed;
 * enforced by server/client_obuf.h. */
#ifndef GW_CONFIG_OBUF_LIMITS_H
#define GW_CONFIG_OBUF_LIMITS_H

#include <stdint.h>

#include "util/buf.h"

enum { GW_OBUF_NORMAL, GW_OBUF_REPLICA, GW_OBUF_PUBSUB, GW_OBUF_CLASSES };

typedef struct gw_obuf_limit {
    uint64_t hard, soft; /* bytes, 0 = none */
    uint64_t soft_secs;  /* seconds over soft before the client is closed */
} gw_obuf_limit_t;

/* Redis's defaults: normal 0 0 0 (none), replica 256mb 64mb 60, pubsub 32mb 8mb 60. */
void gw_obuf_defaults(gw_obuf_limit_t lim[GW_OBUF_CLASSES]);

/* Parse Redis's syntax, "<class> <hard> <soft> <soft-seconds>" repeated (class normal,
 * replica or slave, pubsub; values as words in argv, or one string of them when argc is
 * 1), over lim: classes not named keep theirs. Returns 0, or -1 with *why set to Redis's
 * text ("Wrong number of arguments in buffer limit configuration." and the like) and lim
 * unchanged. */
int gw_obuf_parse(int argc, char **argv, gw_obuf_limit_t lim[GW_OBUF_CLASSES], const char **why);

/* Append lim as CONFIG GET prints it: "normal 0 0 0 slave 268435456 67108864 60 pubsub
 * 33554432 8388608 60" (bytes). */
void gw_obuf_format(const gw_obuf_limit_t lim[GW_OBUF_CLASSES], gw_buf_t *b);

#endif
