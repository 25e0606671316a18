/* dmkv-index-rebuild: check a pool's two indexes against each other, or rebuild the range
 * index from the point index (dmkv/rebuild.h; issue 14 item 5, HStore's recovery idea).
 *
 * ONLY RUN IT WHILE NO GATEWAY USES THE POOL (as dmkv-pool-reclaim): running gateways'
 * writes would show as mismatches, and they keep the old range index cached.
 *
 * Usage: dmkv-index-rebuild [check|rebuild-range|drop-range] URI...   (the --memnode list,
 * in order). Exit status: 0 done (check: the indexes agree), 3 check found mismatches,
 * 1 an error, 2 bad usage. */
#include <stdio.h>
#include <string.h>

#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "dmkv/log.h"
#include "dmkv/rebuild.h"

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [check|rebuild-range|drop-range] URI...\n"
            "  check          count point keys without a range entry and range entries\n"
            "                 without a point key; change nothing (exit 3 when any)\n"
            "  rebuild-range  give every point key its range entry, remove the others\n"
            "  drop-range     replace the range index by an empty one (SCAN returns\n"
            "                 nothing until rebuild-range; what a lost index looks like)\n"
            "Run only while no gateway uses the pool.\n",
            argv0);
}

static void print_check(const char *when, const dm_kv_index_report_t *r)
{
    printf("%s: point index %llu keys, range index %llu entries; %llu keys without an entry, "
           "%llu entries without a key\n",
           when, (unsigned long long)r->point_keys, (unsigned long long)r->range_entries,
           (unsigned long long)r->missing, (unsigned long long)r->orphans);
}

static int run(dm_ctx_t *ctx, void *arg)
{
    const char *mode = arg;
    dm_kv_index_report_t r;
    int rc;
    if (!strcmp(mode, "drop-range")) {
        rc = dm_kv_range_drop(ctx);
        if (rc == DM_ERETRY)
            fprintf(stderr, "the range index changed meanwhile: is a gateway running?\n");
        if (!rc) printf("range index replaced by an empty one: run rebuild-range\n");
        return rc ? 1 : 0;
    }
    if (!strcmp(mode, "rebuild-range")) {
        dm_log_set_level(DM_LOG_WARNING + 1); /* one repair line per key: the counts say it */
        rc = dm_kv_rebuild_range(ctx, &r);
        dm_log_set_level(DM_LOG_NOTICE);
        if (rc) return fprintf(stderr, "rebuild: %s\n", dm_strerror(rc)), 1;
        printf("rebuilt: %llu point keys walked, %llu entries added, %llu entries removed\n",
               (unsigned long long)r.point_keys, (unsigned long long)r.missing,
               (unsigned long long)r.orphans);
    }
    rc = dm_kv_check_indexes(ctx, &r);
    if (rc) return fprintf(stderr, "check: %s\n", dm_strerror(rc)), 1;
    print_check(strcmp(mode, "check") ? "after" : "check", &r);
    return r.missing || r.orphans ? 3 : 0;
}

int main(int argc, char **argv)
{
    int first = 1;
    const char *mode = "check";
    if (first < argc && (!strcmp(argv[first], "check") || !strcmp(argv[first], "rebuild-range") ||
                         !strcmp(argv[first], "drop-range")))
        mode = argv[first++];
    if (first >= argc || argv[first][0] == '-') {
        usage(argv[0]);
        return 2;
    }
    int rc = dm_kv_run_offline((const char *const *)argv + first, (unsigned)(argc - first), run,
                               (void *)mode);
    return rc < 0 ? 1 : rc;
}
