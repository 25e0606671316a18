/* dmkv-memnode's region: one large anonymous mapping (huge pages when available), or a
 * file mapped shared (--dir: the region outlives the process), formatted with the node
 * header at offset 0 (dmkv/superblock.h). */
#ifndef MEMNODE_MN_REGION_H
#define MEMNODE_MN_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "mn_exec_gate.h"

#define MN_REGION_MIN (1ull << 20) /* smallest region: 1 MiB */
#define MN_REGION_MAX (1ull << 40) /* largest: what a 40-bit global-address offset reaches */

typedef struct mn_region {
    uint8_t *base;
    uint64_t size;       /* bytes, exactly as requested */
    int huge;            /* 1 when backed by MAP_HUGETLB pages */
    int fd;              /* the backing file (mn_region_open_file), -1 when anonymous */
    mn_exec_gate_t gate; /* plain or line-locked copies in the tcp executor (mn_exec_gate.h) */
} mn_region_t;

/* Map size bytes (MN_REGION_MIN..MN_REGION_MAX), zeroed, and format the node header.
 * Tries MAP_HUGETLB first (only when size is a multiple of 2 MiB), then normal pages with
 * MAP_NORESERVE (pages are committed when first touched). Returns 0, or -1 with errno set
 * (EINVAL for a size out of range). */
int mn_region_create(mn_region_t *r, uint64_t size);

/* Map the region kept in the file at path, shared with the file, so every byte a verb
 * writes is in the page cache and survives the process (SIGKILL, restart). A missing or
 * empty file is created at size bytes and formatted (a new incarnation); an existing one
 * must be size bytes with a formatted node header, and is used as it is (same data, same
 * incarnation: gateways carry on). *reopened tells which. What survives a crash of the
 * machine is what mn_region_sync wrote back. Returns 0, or -1 with a message in err. */
int mn_region_open_file(mn_region_t *r, const char *path, uint64_t size, int *reopened, char *err,
                        size_t errlen);

/* Write a file-backed region's dirty pages to the file and wait (msync MS_SYNC); 0 for an
 * anonymous region. Returns 0 or -1 with errno. Safe from any thread. */
int mn_region_sync(mn_region_t *r);

/* Unmap the region (a file-backed one is synced first). */
void mn_region_destroy(mn_region_t *r);

/* Parse a size: decimal bytes with an optional k/m/g/t suffix (powers of 1024, either case,
 * an optional trailing 'b'), e.g. "1g", "512M", "65536". Returns 0, or -1 on bad input or
 * overflow. */
int mn_parse_size(const char *s, uint64_t *out);

#endif
