/* Region allocation for dmkv-memnode (see mn_region.h). */
#include "mn_region.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmkv/superblock.h"
#include "dmkv/transport.h"

#define HUGE_2M (2ull << 20)
#define MN_WAL_MAGIC 0x324c41574b4d44ull /* "DMKWAL2" (1: without the boot id) */

/* The kernel's boot id into out (NUL-padded); -1 when it cannot be read. */
static int boot_id(char out[MN_WAL_BOOT])
{
    memset(out, 0, MN_WAL_BOOT);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return -1;
    int ok = fgets(out, MN_WAL_BOOT, f) != NULL;
    fclose(f);
    return ok && out[0] ? 0 : -1;
}

/* Map the WAL file beside the region (created when missing) and, with replay (a region
 * reopened: not one just formatted, which a WAL left behind does not belong to), complete the
 * WRITE it records as running, if any, when the record is of this boot: a killed process
 * leaves its pages in the page cache, whole and in program order, but after a machine crash
 * the file holds whatever the kernel last wrote back, which may be a record the region's
 * later synced writes overtook (it is then dropped: r->wal_stale). 0, or -1 with a message
 * in err. */
static int wal_open(mn_region_t *r, const char *path, int replay, char *err, size_t errlen)
{
    char wpath[4200];
    snprintf(wpath, sizeof(wpath), "%s.wal", path);
    int fd = open(wpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)sizeof(mn_wal_t)) != 0) {
        snprintf(err, errlen, "cannot open the write-ahead file %s: %s", wpath, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    void *m = mmap(NULL, sizeof(mn_wal_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the write-ahead file %s: %s", wpath, strerror(errno));
        return -1;
    }
    mn_wal_t *w = m;
    char boot[MN_WAL_BOOT];
    int boot_ok = boot_id(boot) == 0;
    if (replay && w->magic == MN_WAL_MAGIC && __atomic_load_n(&w->live, __ATOMIC_ACQUIRE)) {
        if (boot_ok && !memcmp(w->boot, boot, MN_WAL_BOOT) && w->len <= MN_WAL_MAX &&
            w->off <= r->size && w->len <= r->size - w->off) {
            memcpy(r->base + w->off, w->data, w->len); /* again if this process dies: the same */
            r->replayed = w->len;
        } else {
            r->wal_stale = 1;
        }
    }
    __atomic_store_n(&w->live, 0, __ATOMIC_RELEASE);
    memcpy(w->boot, boot, MN_WAL_BOOT); /* all zero when unknown: never matches */
    w->magic = MN_WAL_MAGIC;
    r->wal = w;
    return 0;
}

int mn_region_wal_begin(mn_region_t *r, uint64_t off, const void *buf, uint64_t len)
{
    mn_wal_t *w = r->wal;
    if (!w || len > MN_WAL_MAX) return 0;
    w->off = off, w->len = len;
    memcpy(w->data, buf, len);
    __atomic_store_n(&w->live, 1, __ATOMIC_RELEASE); /* after the record, */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);         /* before the WRITE (program order is
                                                        what a kill of the process sees) */
    return 1;
}

void mn_region_wal_end(mn_region_t *r)
{
    __atomic_store_n(&r->wal->live, 0, __ATOMIC_RELEASE); /* after the WRITE */
}

/* A region of size bytes with nothing mapped or opened yet (both ways of making one). */
static void region_init(mn_region_t *r, uint64_t size)
{
    *r = (mn_region_t){.size = size, .fd = -1};
}

int mn_region_create(mn_region_t *r, uint64_t size)
{
    if (size < MN_REGION_MIN || size > MN_REGION_MAX) {
        errno = EINVAL;
        return -1;
    }
    region_init(r, size);
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

int mn_region_open_file(mn_region_t *r, const char *path, uint64_t size, int *reopened, char *err,
                        size_t errlen)
{
    region_init(r, size);
    r->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (r->fd < 0) {
        snprintf(err, errlen, "cannot open region file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(r->fd, &st) != 0) {
        snprintf(err, errlen, "cannot stat region file %s: %s", path, strerror(errno));
        goto fail;
    }
    *reopened = st.st_size != 0;
    if (*reopened && (uint64_t)st.st_size != size) {
        snprintf(err, errlen,
                 "region file %s holds %llu bytes but --size asks for %llu: give the size it "
                 "was created with",
                 path, (unsigned long long)st.st_size, (unsigned long long)size);
        goto fail;
    }
    if (!*reopened && ftruncate(r->fd, (off_t)size) != 0) {
        snprintf(err, errlen, "cannot size region file %s to %llu bytes: %s", path,
                 (unsigned long long)size, strerror(errno));
        goto fail;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map region file %s: %s", path, strerror(errno));
        goto fail;
    }
    r->base = m;
    if (!*reopened) {
        dm_region_format(r->base, size);
        if (wal_open(r, path, 0, err, errlen)) goto unmap;
        return 0;
    }
    const dm_superblock_t *sb = (const dm_superblock_t *)r->base;
    if (sb->magic != DM_SB_MAGIC || sb->version != DM_SB_VERSION || sb->region_size != size) {
        snprintf(err, errlen,
                 "region file %s is not a dmkv region of this version (magic %llx, version "
                 "%llu): move it away to start empty",
                 path, (unsigned long long)sb->magic, (unsigned long long)sb->version);
        goto unmap;
    }
    if (wal_open(r, path, 1, err, errlen)) goto unmap;
    return 0;
unmap:
    munmap(r->base, size);
    r->base = NULL;
fail:
    close(r->fd);
    r->fd = -1;
    return -1;
}

int mn_region_sync(mn_region_t *r)
{
    if (r->fd < 0 || !r->base) return 0;
    return msync(r->base, r->size, MS_SYNC);
}

void mn_region_destroy(mn_region_t *r)
{
    if (r->base) {
        mn_region_sync(r);
        munmap(r->base, r->size);
    }
    if (r->wal) {
        /* Its record is not live now: on disk too, so a machine crash after this clean stop
         * finds nothing to replay (the region was just written back). */
        if (r->fd >= 0) msync(r->wal, sizeof(*r->wal), MS_SYNC);
        munmap(r->wal, sizeof(*r->wal));
    }
    r->wal = NULL;
    r->base = NULL;
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
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
