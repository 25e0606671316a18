/* Allocations that may fail (oom.h). */
#include "util/oom.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static size_t cap = SIZE_MAX;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_cap(void)
{
    const char *env = getenv("DMKV_TEST_ALLOC_MAX");
    if (env && *env) cap = (size_t)strtoull(env, NULL, 10);
}

static int over_cap(size_t n)
{
    pthread_once(&once, read_cap);
    return n > cap;
}

void *gw_try_malloc(size_t n)
{
    return over_cap(n) ? NULL : malloc(n);
}

void *gw_try_realloc(void *p, size_t n)
{
    return over_cap(n) ? NULL : realloc(p, n);
}

void *gw_try_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    return over_cap(n * size) ? NULL : calloc(n, size);
}
