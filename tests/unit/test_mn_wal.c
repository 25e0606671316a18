/* The memory node's write-ahead record (memnode/mn_region.h mn_region_wal_begin): a WRITE
 * cut short by the end of the process is completed when the region is opened again.
 *  - test_replay: a WRITE logged, half copied, the mappings dropped as a SIGKILL leaves them:
 *    the next open completes it (and says so), the one after finds nothing to do;
 *  - test_finished: a WRITE logged and ended is not replayed (a later write stays);
 *  - test_new_region: a WAL left beside a region file that was removed is not replayed
 *    into the new region;
 *  - test_other_boot: a record left running in an earlier boot (a machine crash: the file
 *    holds whatever the kernel last wrote back) is dropped, not replayed;
 *  - test_not_logged: an anonymous region, and WRITEs over MN_WAL_MAX, are not logged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "mn_region.h"

#define SIZE (4ull << 20)
#define OFF 123456ull /* not line-aligned */
#define LEN 800u      /* a ROLEX leaf body */

static char dir[64], path[128];

static void open_region(mn_region_t *r, int want_reopened)
{
    char err[256];
    int reopened = -1;
    CHECKF(mn_region_open_file(r, path, SIZE, &reopened, err, sizeof(err)) == 0, "%s", err);
    CHECK(reopened == want_reopened);
    CHECK(r->wal);
}

static void fill(uint8_t *b, unsigned n, int seed)
{
    for (unsigned i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 31 + seed);
}

/* Open the region and log a WRITE of LEN bytes (buf, filled from seed) at OFF, not run yet;
 * later (if not NULL) is filled with other bytes. */
static void open_and_log(mn_region_t *r, uint8_t *buf, uint8_t *later, int seed)
{
    open_region(r, 1);
    fill(buf, LEN, seed);
    if (later) fill(later, LEN, seed + 100);
    CHECK(mn_region_wal_begin(r, OFF, buf, LEN) == 1);
}

/* Close r (its record live or not, as a kill leaves it), open it again: the open replayed
 * `replayed` bytes, dropped a stale record or not, and the LEN bytes at OFF are want; then
 * a further open finds nothing to do. */
static void reopen_holds(mn_region_t *r, uint64_t replayed, int stale, const uint8_t *want)
{
    mn_region_destroy(r);
    open_region(r, 1);
    CHECKF(r->replayed == replayed && r->wal_stale == stale,
           "replayed %llu bytes, stale %d (want %llu, %d)", (unsigned long long)r->replayed,
           r->wal_stale, (unsigned long long)replayed, stale);
    CHECK(!memcmp(r->base + OFF, want, LEN));
    mn_region_destroy(r);
    open_region(r, 1);
    CHECK(r->replayed == 0 && r->wal_stale == 0);
    mn_region_destroy(r);
}

static void test_replay(void)
{
    mn_region_t r;
    uint8_t buf[LEN];
    open_and_log(&r, buf, NULL, 1);
    memcpy(r.base + OFF, buf, 64 - OFF % 64); /* the first line lands, then the "kill" */
    reopen_holds(&r, LEN, 0, buf);            /* no mn_region_wal_end */
}

static void test_finished(void)
{
    mn_region_t r;
    uint8_t buf[LEN], later[LEN];
    open_and_log(&r, buf, later, 2);
    memcpy(r.base + OFF, buf, LEN);
    mn_region_wal_end(&r);
    memcpy(r.base + OFF, later, LEN); /* not through the executor: no record */
    reopen_holds(&r, 0, 0, later);
}

static void test_new_region(void)
{
    mn_region_t r;
    uint8_t buf[LEN], zero[LEN] = {0};
    open_and_log(&r, buf, NULL, 4);
    mn_region_destroy(&r);
    CHECK(unlink(path) == 0); /* the region goes, its WAL stays */
    open_region(&r, 0);
    CHECK(r.replayed == 0);
    CHECK(!memcmp(r.base + OFF, zero, LEN));
    mn_region_destroy(&r);
    open_region(&r, 1); /* and the record was dropped for good */
    CHECK(r.replayed == 0);
    mn_region_destroy(&r);
}

static void test_other_boot(void)
{
    mn_region_t r;
    uint8_t buf[LEN], later[LEN];
    open_and_log(&r, buf, later, 5);
    memcpy(r.base + OFF, later, LEN); /* what a later, synced write left there */
    r.wal->boot[0] ^= 1;              /* the record's boot is not this one */
    reopen_holds(&r, 0, 1, later);    /* dropped, and for good */
}

static void test_not_logged(void)
{
    mn_region_t r;
    open_region(&r, 1);
    uint8_t *big = calloc(1, MN_WAL_MAX + 1);
    CHECK(big);
    CHECK(mn_region_wal_begin(&r, 0, big, MN_WAL_MAX + 1) == 0);
    CHECK(mn_region_wal_begin(&r, 0, big, MN_WAL_MAX) == 1);
    mn_region_wal_end(&r);
    mn_region_destroy(&r);
    mn_region_t a;
    CHECK(mn_region_create(&a, 1ull << 20) == 0);
    CHECK(mn_region_wal_begin(&a, 0, big, 8) == 0);
    mn_region_destroy(&a);
    free(big);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/dmkv-test-mn-wal-XXXXXX");
    CHECK(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/dmkv-region", dir);
    mn_region_t r;
    open_region(&r, 0);
    mn_region_destroy(&r);
    RUN(test_replay);
    RUN(test_finished);
    RUN(test_new_region);
    RUN(test_other_boot);
    RUN(test_not_logged);
    char wal[160];
    snprintf(wal, sizeof(wal), "%s.wal", path);
    unlink(path), unlink(wal), rmdir(dir);
    fprintf(stderr, "test_mn_wal: OK\n");
    return 0;
}
