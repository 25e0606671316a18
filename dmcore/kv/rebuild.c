/* Checking and rebuilding the range index from the point index (dmkv/rebuild.h). */
#include "dmkv/rebuild.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/errors.h"
#include "hybrid.h"
#include "roles.h"

#define PROBE_KEYS 32  /* keys per probe of the point index */
#define SCAN_COUNT 256 /* range entries per scan page */

/* The keys of one page of the point index's walk (copies: the views die with the page). */
typedef struct page_keys {
    uint8_t **key;
    size_t *len;
    size_t n, cap;
    int oom;
} page_keys_t;

static void keep_key(void *arg, const dm_kv_view_t *v)
{
    page_keys_t *p = arg;
    if (p->oom) return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        uint8_t **k = realloc(p->key, cap * sizeof(*k));
        if (k) p->key = k;
        size_t *l = k ? realloc(p->len, cap * sizeof(*l)) : NULL;
        if (l) p->len = l;
        if (!k || !l) {
            p->oom = 1;
            return;
        }
        p->cap = cap;
    }
    uint8_t *copy = malloc(v->key_len ? v->key_len : 1);
    if (!copy) {
        p->oom = 1;
        return;
    }
    memcpy(copy, v->key, v->key_len);
    p->key[p->n] = copy;
    p->len[p->n++] = v->key_len;
}

static void page_clear(page_keys_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->key[i]);
    p->n = 0;
    p->oom = 0;
}

/* For every live key of the point index, one page (a subtable) at a time: fix = 0 counts
 * the keys without a range entry, fix = 1 gives them one. */
static int walk_point(dm_ctx_t *ctx, int fix, dm_kv_index_report_t *rep)
{
    page_keys_t p = {0};
    uint64_t cursor = 0;
    int rc = 0;
    do {
        uint64_t next = 0;
        rc = point_role()->scan(ctx, cursor, 0, keep_key, &p, &next);
        if (!rc && p.oom) rc = DM_ENOMEM;
        for (size_t i = 0; !rc && i < p.n; i++) {
            rep->point_keys++;
            if (fix) {
                int r = dm_hybrid_reconcile(ctx, p.key[i], p.len[i]);
                if (r < 0) rc = r;
                rep->missing += r == 1;
            } else {
                int pending = 0;
                int r = range_role()->search(ctx, p.key[i], p.len[i], &pending);
                if (r < 0) rc = r;
                rep->missing += r == 0;
            }
        }
        page_clear(&p);
        cursor = next;
    } while (!rc && cursor);
    free(p.key);
    free(p.len);
    return rc;
}

/* Probe keys[0..n) in the point index; count the absent ones as orphans. */
static int count_orphans(dm_ctx_t *ctx, const dm_range_key_t *keys, size_t n,
                         dm_kv_index_report_t *rep)
{
    for (size_t at = 0; at < n; at += PROBE_KEYS) {
        unsigned m = (unsigned)(n - at < PROBE_KEYS ? n - at : PROBE_KEYS);
        const uint8_t *k[PROBE_KEYS];
        size_t l[PROBE_KEYS];
        uint8_t present[PROBE_KEYS];
        for (unsigned i = 0; i < m; i++)
            k[i] = keys[at + i].data, l[i] = keys[at + i].len;
        int rc = point_role()->probe(ctx, k, l, m, present, NULL);
        if (rc) return rc;
        for (unsigned i = 0; i < m; i++)
            rep->orphans += !present[i];
    }
    return 0;
}

/* Every range entry, leaf page by leaf page, its key probed in the point index. */
static int walk_range(dm_ctx_t *ctx, dm_kv_index_report_t *rep)
{
    dm_range_key_t *keys = NULL;
    size_t n = 0, cap = 0;
    uint64_t cursor = 0;
    int rc = 0;
    do {
        uint64_t next = 0;
        n = 0;
        rc = range_role()->scan(ctx, cursor, SCAN_COUNT, NULL, 0, &keys, &n, &cap, &next);
        if (!rc) {
            rep->range_entries += n;
            rc = count_orphans(ctx, keys, n, rep);
        }
        for (size_t i = 0; i < n; i++)
            free(keys[i].data);
        cursor = next;
    } while (!rc && cursor);
    free(keys);
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
