/* The per-thread generator (dmkv/rand.h). */
#include "dmkv/rand.h"

#include <sys/random.h>
#include <time.h>

uint64_t dm_rand64(void)
{
    static _Thread_local uint64_t x;
    while (!x) {
        if (getrandom(&x, sizeof(x), 0) != sizeof(x)) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        }
    }
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    return x;
}
