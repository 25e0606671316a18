/* A per-thread pseudo-random generator (xorshift64 seeded from getrandom): lease tokens
 * (pool/lease.c) and test fault draws (util/fault.c). Not for secrets. */
#ifndef DMKV_RAND_H
#define DMKV_RAND_H

#include <stdint.h>

/* The next 64 bits of this thread's generator. Thread-safe (one state per thread). */
uint64_t dm_rand64(void);

#endif
