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

static void test_replay(void)
{
    mn_region_t r;
    open_region(&r, 1);
    uint8_t buf[LEN];
    fill(buf, LEN, 1);
    CHECK(mn_region_wal_begin(&r, OFF, buf, LEN) == 1);
    memcpy(r.base + OFF, buf, 64 - OFF % 64); /* the first line lands, then the "kill" */
    mn_region_destroy(&r);                    /* no mn_region_wal_end */
    open_region(&r, 1);
    CHECK(r.replayed == LEN);
    CHECK(!memcmp(r.base + OFF, buf, LEN));
    mn_region_destroy(&r);
    open_region(&r, 1);
    CHECK(r.replayed == 0);
    mn_region_destroy(&r);
}

static void test_finished(void)
{
    mn_region_t r;
    open_region(&r, 1);
    uint8_t buf[LEN], later[LEN];
    fill(buf, LEN, 2), fill(later, LEN, 3);
    CHECK(mn_region_wal_begin(&r, OFF, buf, LEN) == 1);
    memcpy(r.base + OFF, buf, LEN);
    mn_region_wal_end(&r);
    memcpy(r.base + OFF, later, LEN); /* not through the executor: no record */
    mn_region_destroy(&r);
    open_region(&r, 1);
    CHECK(r.replayed == 0);
    CHECK(!memcmp(r.base + OFF, later, LEN));
    mn_region_destroy(&r);
}

static void test_new_region(void)
{
    mn_region_t r;
    open_region(&r, 1);
    uint8_t buf[LEN], zero[LEN] = {0};
    fill(buf, LEN, 4);
    CHECK(mn_region_wal_begin(&r, OFF, buf, LEN) == 1);
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
    open_region(&r, 1);
    uint8_t buf[LEN], later[LEN];
    fill(buf, LEN, 5), fill(later, LEN, 6);
    CHECK(mn_region_wal_begin(&r, OFF, buf, LEN) == 1);
    memcpy(r.base + OFF, later, LEN); /* what a later, synced write left there */
    r.wal->boot[0] ^= 1;              /* the record's boot is not this one */
    mn_region_destroy(&r);
    open_region(&r, 1);
    CHECKF(r.replayed == 0 && r.wal_stale == 1, "replayed %llu bytes, stale %d (want 0, 1)",
           (unsigned long long)r.replayed, r.wal_stale);
    CHECK(!memcmp(r.base + OFF, later, LEN));
    mn_region_destroy(&r);
    open_region(&r, 1); /* dropped for good */
    CHECK(r.replayed == 0 && r.wal_stale == 0);
    mn_region_destroy(&r);
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
