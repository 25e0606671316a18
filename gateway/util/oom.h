/* Allocations whose size a client chooses (argument and reply buffers, per-command arrays)
 * go through these: NULL on failure instead of abort(), so the gateway closes the client or
 * fails the command, never the whole process with every client and lease (issue 12). For
 * tests, DMKV_TEST_ALLOC_MAX (bytes) makes each such allocation above it fail. */
#ifndef GW_UTIL_OOM_H
#define GW_UTIL_OOM_H

#include <stddef.h>

/* malloc / realloc / calloc, NULL when out of memory (or over the test cap). */
void *gw_try_malloc(size_t n);
void *gw_try_realloc(void *p, size_t n);
void *gw_try_calloc(size_t n, size_t size);

#endif
