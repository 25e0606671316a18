/* Checking and rebuilding the range index from the point index (dmkv/rebuild.h). */
#include "dmkv/rebuild.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/errors.h"
#include "hybrid.h"
#include "roles.h"

#define SCAN_COUNT 256 /* range entries per scan page */

/* One page of the point index's walk, copied (the views die with the page). */
typedef struct page {
    dm_keylist_t keys;
    int rc;
} page_t;

static void keep_key(void *arg, const dm_kv_view_t *v)
{
    page_t *p = arg;
    if (!p->rc) p->rc = dm_keylist_push(&p->keys, v->key, v->key_len);
}

/* For every live key of the point index, one page (a subtable) at a time: fix = 0 counts
 * the keys without a range entry, fix = 1 gives them one. */
static int walk_point(dm_ctx_t *ctx, int fix, dm_kv_index_report_t *rep)
{
    page_t p = {{0}, 0};
    uint64_t cursor = 0;
    int rc = 0;
    do {
        uint64_t next = 0;
        rc = point_role()->scan(ctx, cursor, 0, keep_key, &p, &next);
        if (!rc) rc = p.rc;
        for (size_t i = 0; !rc && i < p.keys.n; i++) {
            const dm_key_t *k = &p.keys.keys[i];
            int pending = 0;
            int r = fix ? dm_hybrid_reconcile(ctx, k->data, k->len)
                        : range_role()->search(ctx, k->data, k->len, &pending);
            if (r < 0) rc = r;
            rep->point_keys++;
            rep->missing += fix ? r == 1 : r == 0;
        }
        dm_keylist_free(&p.keys);
        cursor = next;
    } while (!rc && cursor);
    return rc;
}

/* Every range entry, leaf page by leaf page, its key probed in the point index (one probe
 * per page: the probe batches by itself). */
static int walk_range(dm_ctx_t *ctx, dm_kv_index_report_t *rep)
{
    dm_range_key_t *keys = NULL;
    const uint8_t **k = NULL;
    size_t *l = NULL, n = 0, cap = 0, kcap = 0;
    uint8_t *present = NULL;
    uint64_t cursor = 0;
    int rc = 0;
    do {
        uint64_t next = 0;
        n = 0;
        rc = range_role()->scan(ctx, cursor, SCAN_COUNT, NULL, 0, &keys, &n, &cap, &next);
        if (!rc && n > kcap) {
            free(k), free(l), free(present);
            k = malloc(n * sizeof(*k)), l = malloc(n * sizeof(*l)), present = malloc(n);
            kcap = k && l && present ? n : 0;
            if (!kcap) rc = DM_ENOMEM;
        }
        for (size_t i = 0; !rc && i < n; i++)
            k[i] = keys[i].data, l[i] = keys[i].len;
        if (!rc && n) rc = point_role()->probe(ctx, k, l, (unsigned)n, present, NULL);
        for (size_t i = 0; !rc && i < n; i++)
            rep->orphans += !present[i];
        rep->range_entries += rc ? 0 : n;
        for (size_t i = 0; i < n; i++)
            free(keys[i].data);
        cursor = next;
    } while (!rc && cursor);
    free(keys), free(k), free(l), free(present);
    return rc;
}

int dm_kv_check_indexes(dm_ctx_t *ctx, dm_kv_index_report_t *rep)
{
    memset(rep, 0, sizeof(*rep));
    int rc = walk_point(ctx, 0, rep);
    return rc ? rc : walk_range(ctx, rep);
}

int dm_kv_rebuild_range(dm_ctx_t *ctx, dm_kv_index_report_t *rep)
{
    memset(rep, 0, sizeof(*rep));
    int rc = walk_point(ctx, 1, rep);
    if (rc) return rc;
    int64_t removed = range_role()->settle_all(ctx);
    if (removed < 0) return (int)removed;
    rep->orphans = (uint64_t)removed;
    return 0;
}

int dm_kv_range_drop(dm_ctx_t *ctx)
{
    return range_role()->reset(ctx);
}
