/* The gateway's malloc settings: see util/heap.h. */
#include "util/heap.h"

#include <malloc.h>

#define GW_HEAP_TOP_PAD (64 << 20)   /* bytes an arena grows by at least */
#define GW_HEAP_TRIM_MIN (256 << 20) /* a free top smaller than this stays in the arena */

void gw_heap_tune(void)
{
    /* Failures leave glibc's defaults: slower, never wrong. */
    (void)mallopt(M_TOP_PAD, GW_HEAP_TOP_PAD);
    (void)mallopt(M_TRIM_THRESHOLD, GW_HEAP_TRIM_MIN);
}
