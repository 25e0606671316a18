/* dmkv-memnode's region: one large anonymous mapping (huge pages when available),
 * formatted with the node header at offset 0 (dmkv/superblock.h). */
#ifndef MEMNODE_MN_REGION_H
#define MEMNODE_MN_REGION_H

#include <stddef.h>
#include <stdint.h>

#define MN_REGION_MIN (1ull << 20) /* smallest region: 1 MiB */
#define MN_REGION_MAX (1ull << 40) /* largest: what a 40-bit global-address offset reaches */

typedef struct mn_region {
    uint8_t *base;
    uint64_t size; /* bytes, exactly as requested */
    int huge;      /* 1 when backed by MAP_HUGETLB pages */
} mn_region_t;

/* Map size bytes (MN_REGION_MIN..MN_REGION_MAX), zeroed, and format the node header.
 * Tries MAP_HUGETLB first (only when size is a multiple of 2 MiB), then normal pages with
 * MAP_NORESERVE (pages are committed when first touched). Returns 0, or -1 with errno set
 * (EINVAL for a size out of range). */
int mn_region_create(mn_region_t *r, uint64_t size);

/* Unmap the region. */
void mn_region_destroy(mn_region_t *r);

/* Parse a size: decimal bytes with an optional k/m/g/t suffix (powers of 1024, either case,
 * an optional trailing 'b'), e.g. "1g", "512M", "65536". Returns 0, or -1 on bad input or
 * overflow. */
int mn_parse_size(const char *s, uint64_t *out);

#endif
