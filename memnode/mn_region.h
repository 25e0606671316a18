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
/* WRITEs up to this many bytes are logged before they run (mn_region_wal_begin): the
 * in-place writes of the index engines (a ROLEX leaf body is 800 bytes). Larger ones are
 * taken to land in blocks nothing names yet (values, key records), where a write cut short
 * is never read (not checked engine by engine). */
#define MN_WAL_MAX (64u << 10)

/* The write-ahead record of the one WRITE the tcp executor is running (a file of its own
 * beside the region, mapped shared; see mn_region_wal_begin). boot: the kernel's boot id
 * when the record was opened; a record of another boot is never replayed (after a machine
 * crash the file's pages on disk are whatever the kernel last wrote back, older than the
 * region's). */
#define MN_WAL_BOOT 40
typedef struct mn_wal {
    uint64_t magic; /* MN_WAL_MAGIC */
    uint64_t live;  /* 1 while the WRITE below runs: replayed by the next open */
    uint64_t off, len;
    char boot[MN_WAL_BOOT]; /* /proc/sys/kernel/random/boot_id, NUL-padded */
    uint8_t data[MN_WAL_MAX];
} mn_wal_t;

typedef struct mn_region {
    uint8_t *base;
    uint64_t size;       /* bytes, exactly as requested */
    int huge;            /* 1 when backed by MAP_HUGETLB pages */
    int fd;              /* the backing file (mn_region_open_file), -1 when anonymous */
    mn_exec_gate_t gate; /* plain or line-locked copies in the tcp executor (mn_exec_gate.h) */
    mn_wal_t *wal;       /* a file-backed region's write-ahead record, NULL when anonymous */
    uint64_t replayed;   /* bytes of a WRITE cut short by the last stop, completed at open */
    int wal_stale;       /* a record left running by an earlier boot was dropped at open */
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
 * machine is what mn_region_sync wrote back. The WAL (path + ".wal") is opened too, and a
 * WRITE the last process was running when it died is completed (r->replayed: its bytes).
 * Returns 0, or -1 with a message in err. */
int mn_region_open_file(mn_region_t *r, const char *path, uint64_t size, int *reopened, char *err,
                        size_t errlen);

/* A WRITE of len bytes of buf at offset off is about to run (a copy a SIGKILL can cut
 * between any two bytes or lines, leaving a leaf or bucket torn for ever; docs/DESIGN.md,
 * Rules: "A WRITE lands whole or not at all across a kill of the memory node"). For a
 * file-backed region and len <= MN_WAL_MAX, the WRITE is first logged in the region's WAL
 * file, so that the next mn_region_open_file completes it: each WRITE then lands whole or
 * not at all across a kill of the process (not of the machine: the WAL is not synced).
 * Returns 1 when logged (call mn_region_wal_end once the WRITE ran), else 0. One thread
 * only: the tcp executor. */
int mn_region_wal_begin(mn_region_t *r, uint64_t off, const void *buf, uint64_t len);
void mn_region_wal_end(mn_region_t *r);

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
