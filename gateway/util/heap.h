/* The gateway's malloc settings (issue 11; docs/throughput.md "A heap that stays grown").
 * A worker allocates and frees per command (batch records, lock handles, leaf images), and
 * glibc's arena of a worker thread gave its top back to the kernel and took it again
 * hundreds of times a second under a pipelined load (mprotect and madvise, then page faults
 * on the same pages): 3-8% of the gateway's CPU per insert. */
#ifndef GW_UTIL_HEAP_H
#define GW_UTIL_HEAP_H

/* Keep freed heap memory: each arena grows by at least 64 MiB and gives back only a free
 * top of 256 MiB or more (mallopt M_TOP_PAD, M_TRIM_THRESHOLD). Call before the worker
 * threads start. Pages grown but never touched take no memory; the cost is up to that
 * much freed memory kept resident per arena after a burst. No-op under sanitizers, whose
 * allocators ignore mallopt. */
void gw_heap_tune(void);

#endif
