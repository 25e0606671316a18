/* Version strings reported by INFO, HELLO and --version. */
#ifndef GW_VERSION_H
#define GW_VERSION_H

#define GW_DMKV_VERSION "0.1.0"  /* dmkv's own version */
#define GW_REDIS_VERSION "7.0.0" /* the Redis version whose protocol and replies we follow */

#endif
