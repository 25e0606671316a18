/* Region allocation for dmkv-memnode (see mn_region.h). */
#include "mn_region.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "dmkv/transport.h"

#define HUGE_2M (2ull << 20)

int mn_region_create(mn_region_t *r, uint64_t size)
{
    if (size < MN_REGION_MIN || size > MN_REGION_MAX) {
        errno = EINVAL;
        return -1;
    }
    r->size = size;
    r->huge = 0;
    r->base = MAP_FAILED;
#ifdef MAP_HUGETLB
    if (size % HUGE_2M == 0)
        r->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
#endif
    if (r->base != MAP_FAILED) {
        r->huge = 1;
    } else {
        r->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r->base == MAP_FAILED) {
            r->base = NULL;
            return -1;
        }
#ifdef MADV_HUGEPAGE
        (void)madvise(r->base, size, MADV_HUGEPAGE); /* transparent huge pages if enabled */
#endif
    }
    dm_region_format(r->base, size);
    return 0;
}

void mn_region_destroy(mn_region_t *r)
{
    if (r->base) munmap(r->base, r->size);
    r->base = NULL;
}

int mn_parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    switch (tolower((unsigned char)*end)) {
    case 'k':
        shift = 10;
        end++;
        break;
    case 'm':
        shift = 20;
        end++;
        break;
    case 'g':
        shift = 30;
        end++;
        break;
    case 't':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (shift && tolower((unsigned char)*end) == 'b') end++;
    if (*end || (shift && v > (~0ull >> shift))) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}
