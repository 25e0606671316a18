/* Environment switches read once per process (env.h). */
#include "dmkv/env.h"

#include <stdlib.h>

int dm_env_cached(int *cache, const char *name, int (*parse)(const char *value))
{
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v < 0) {
        v = parse(getenv(name));
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v;
}
