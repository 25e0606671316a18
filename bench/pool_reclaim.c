/* Offline reclamation of the ranges gateways left behind (issue 5): a gateway that dies
 * leaks its chunks (the blocks freed into its private free lists, the rest of its current
 * chunk). This tool marks every object the pool's two indexes still reach (each engine's
 * offline walk, index.h objects(): RACE's table, subtables and slots' KV blocks, SepHash's
 * segments and entries' KV blocks, CHIME's nodes and key records), with the engines the
 * pool records — then walks every node's range headers (chunks and extents) and pushes each
 * range holding no live object onto its node's free-range stack (superblock.h DM_FREE_*),
 * where gateways pop it instead of taking fresh memory. Ranges with any live object stay
 * whole (blocks are not moved). It prints, per owner, the ranges and bytes it finds, their
 * live bytes, and what it reclaimed (or, with --dry-run, would reclaim).
 *
 * ONLY RUN IT WHILE NO GATEWAY USES THE POOL: a running gateway's current chunk, or a
 * block it has allocated but not yet published in an index, looks dead here. The tool
 * cannot check this. A run that fails while marking pushes nothing.
 *
 * Usage: dmkv-pool-reclaim [--dry-run] [--list] URI...   (the --memnode list, in order) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/clock.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "dmkv/superblock.h"

#define MAX_RANGES_PER_NODE (1u << 20)

/* ---- growable arrays and an address set ---- */

/* v (n used of *cap elements of elem bytes) with room for one more: realloc'd (doubling,
 * from 256) when full; NULL when out of memory (v and *cap unchanged). */
static void *grow(void *v, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return v;
    size_t c = *cap ? 2 * *cap : 256;
    void *nv = realloc(v, c * elem);
    if (nv) *cap = c;
    return nv;
}

typedef struct span {
    dm_gaddr_t a;
    uint64_t len;
} span_t;

typedef struct spans {
    span_t *v;
    size_t n, cap;
} spans_t;

static int spans_add(spans_t *s, dm_gaddr_t a, uint64_t len)
{
    void *v = grow(s->v, &s->cap, s->n, sizeof(*s->v));
    if (!v) return DM_ENOMEM;
    s->v = v;
    s->v[s->n++] = (span_t){a, len};
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What an index walk found: the live spans, and its own count of objects and bytes. */
typedef struct marking {
    spans_t *live;
    uint64_t objects, bytes;
} marking_t;

static int mark_object(void *arg, dm_gaddr_t a, uint64_t len)
{
    marking_t *m = arg;
    m->objects++;
    m->bytes += len;
    return spans_add(m->live, a, len);
}

/* Every object one index reaches (its engine's walk: index.h objects), into live. */
static int mark_index(dm_ctx_t *ctx, const char *role, const dm_index_engine_t *engine,
                      int (*objects)(dm_ctx_t *, dm_index_object_fn, void *), spans_t *live)
{
    marking_t m = {live, 0, 0};
    int rc = objects(ctx, mark_object, &m);
    if (!rc)
        printf("%s_index %s objects %llu bytes %llu\n", role, engine->name,
               (unsigned long long)m.objects, (unsigned long long)m.bytes);
    return rc;
}

/* ---- ranges ---- */

typedef struct range {
    dm_gaddr_t a; /* header */
    uint64_t bytes, owner, live;
    int on_list; /* owner 0 and on the node's free-range stack */
} range_t;

typedef struct ranges {
    range_t *v;
    size_t n, cap;
} ranges_t;

static int ranges_add(ranges_t *s, range_t r)
{
    void *v = grow(s->v, &s->cap, s->n, sizeof(*s->v));
    if (!v) return DM_ENOMEM;
    s->v = v;
    s->v[s->n++] = r;
    return 0;
}

/* Walk node's range headers from DM_SB_FIRST_CHUNK to its alloc_ptr. A missing header (a
 * gateway died between its FAA and its header write) ends the walk: what lies beyond
 * cannot be told apart from data, so it is left alone. */
static int walk_node(dm_ctx_t *ctx, unsigned node, ranges_t *out)
{
    uint64_t end = 0, off = DM_SB_FIRST_CHUNK;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(node, DM_SB_OFF(alloc_ptr)), &end, 8);
    int rc = dm_batch_exec(ctx, &b);
    uint64_t size = ctx->w->conns[node]->region_size;
    if (end > size) end = size;
    printf("node%u alloc_ptr %llu\n", node, (unsigned long long)end);
    while (!rc && off + sizeof(dm_chunk_hdr_t) <= end) {
        dm_chunk_hdr_t h;
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make(node, off), &h, sizeof(h));
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        if (h.magic != DM_CHUNK_MAGIC || h.bytes < sizeof(h) || h.bytes % DM_UNIT ||
            h.bytes > end - off) {
            printf("node%u: no range header at offset %llu: the rest of the node (%llu bytes) "
                   "is left alone\n",
                   node, (unsigned long long)off, (unsigned long long)(end - off));
            break;
        }
        rc = ranges_add(out, (range_t){dm_gaddr_make(node, off), h.bytes, h.owner, 0, 0});
        off += h.bytes;
    }
    return rc;
}

/* Flag the owner-0 ranges that are on their node's stack (the others are orphans: a push
 * or pop interrupted between its header write and its CAS). */
static int mark_on_list(dm_ctx_t *ctx, ranges_t *rs)
{
    uint64_t *offs = malloc(MAX_RANGES_PER_NODE * sizeof(uint64_t));
    if (!offs) return DM_ENOMEM;
    int rc = 0;
    for (unsigned node = 0; node < ctx->w->n_nodes && !rc; node++) {
        uint64_t n = 0, bytes = 0;
        rc = dm_pool_free_list(ctx, node, offs, MAX_RANGES_PER_NODE, &n, &bytes);
        qsort(offs, n, 8, cmp_u64);
        for (size_t i = 0; i < rs->n && !rc; i++) {
            uint64_t off = dm_gaddr_off(rs->v[i].a);
            if (dm_gaddr_node(rs->v[i].a) == node && rs->v[i].owner == 0)
                rs->v[i].on_list = bsearch(&off, offs, n, 8, cmp_u64) != NULL;
        }
    }
    free(offs);
    return rc;
}

static int cmp_span(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    return x->a < y->a ? -1 : x->a > y->a;
}

/* Sort live spans and merge overlaps (a block two slots share mid-split counts once). */
static void spans_merge(spans_t *s)
{
    if (!s->n) return;
    qsort(s->v, s->n, sizeof(*s->v), cmp_span);
    size_t k = 0;
    for (size_t i = 1; i < s->n; i++) {
        span_t *last = &s->v[k];
        if (s->v[i].a <= last->a + last->len) {
            uint64_t end = s->v[i].a + s->v[i].len;
            if (end > last->a + last->len) last->len = end - last->a;
        } else {
            s->v[++k] = s->v[i];
        }
    }
    s->n = k + 1;
}

/* Live bytes of every range (spans merged and sorted); returns the live bytes that fall
 * in no walked range (0 unless the pool is damaged or a node's walk stopped early). */
static uint64_t count_live(ranges_t *rs, const spans_t *live)
{
    uint64_t outside = 0;
    size_t r = 0;
    /* Ranges are in walk order: node by node, ascending offsets, as gaddrs sort. */
    for (size_t i = 0; i < live->n; i++) {
        const span_t *s = &live->v[i];
        while (r < rs->n && rs->v[r].a + rs->v[r].bytes <= s->a)
            r++;
        if (r == rs->n || s->a < rs->v[r].a) {
            outside += s->len;
            continue;
        }
        uint64_t end = rs->v[r].a + rs->v[r].bytes;
        rs->v[r].live += (s->a + s->len <= end ? s->a + s->len : end) - s->a;
    }
    return outside;
}

/* ---- report ---- */

typedef struct owner_row {
    uint64_t owner, ranges, bytes, live, partial, rec_ranges, rec_bytes;
} owner_row_t;

static owner_row_t *row_of(owner_row_t *rows, size_t *n, uint64_t owner)
{
    for (size_t i = 0; i < *n; i++)
        if (rows[i].owner == owner) return &rows[i];
    memset(&rows[*n], 0, sizeof(rows[*n]));
    rows[*n].owner = owner;
    return &rows[(*n)++];
}

/* Push every dead range (unless dry) and print the per-owner table. Returns 0 or DM_E*. */
static int reclaim(dm_ctx_t *ctx, ranges_t *rs, int dry, int list)
{
    owner_row_t *rows = calloc(rs->n + 1, sizeof(*rows));
    if (!rows) return DM_ENOMEM;
    size_t nrows = 0;
    uint64_t tot_r = 0, tot_b = 0, partial = 0;
    int rc = 0;
    if (!dry) {
        /* The gateways' allocation records and the chunk tails on the spare board lie in
         * ranges without live objects, pushed below: nothing may keep naming them (their
         * ranges may come back as anything). Returned blocks may lie in such ranges too:
         * the stacks are emptied (blocks in ranges that stay are lost until their range
         * is reclaimed). */
        static const uint64_t zero[sizeof(((dm_superblock_t *)0)->block_free_class) / 8] = {0};
        _Static_assert(sizeof(zero) >= sizeof(((dm_superblock_t *)0)->alloc_board), "zeroes");
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(alloc_board)), zero,
                       sizeof(((dm_superblock_t *)0)->alloc_board));
        dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(spare_board)), zero,
                       sizeof(((dm_superblock_t *)0)->spare_board));
        dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(returned_bytes)), zero, 8);
        rc = dm_batch_exec(ctx, &b);
        for (unsigned n = 0; n < ctx->w->n_nodes && !rc; n++) {
            dm_batch_init(&b);
            dm_batch_write(&b, dm_gaddr_make(n, DM_SB_OFF(block_free)), zero, 8);
            dm_batch_write(&b, dm_gaddr_make(n, DM_SB_OFF(block_free_class)), zero,
                           sizeof(((dm_superblock_t *)0)->block_free_class));
            dm_batch_write(&b, dm_gaddr_make(n, DM_SB_OFF(log_free)), zero, 8);
            rc = dm_batch_exec(ctx, &b);
        }
    }
    for (size_t i = 0; i < rs->n && !rc; i++) {
        range_t *r = &rs->v[i];
        owner_row_t *row = row_of(rows, &nrows, r->owner);
        if (list)
            printf("range node%u offset %llu bytes %llu owner %016llx live %llu\n",
                   dm_gaddr_node(r->a), (unsigned long long)dm_gaddr_off(r->a),
                   (unsigned long long)r->bytes, (unsigned long long)r->owner,
                   (unsigned long long)r->live);
        row->ranges++;
        row->bytes += r->bytes;
        row->live += r->live;
        if (r->live) {
            row->partial++;
            partial++;
            if (r->owner == 0)
                printf("WARNING: free range at %#llx holds live objects\n",
                       (unsigned long long)r->a);
            continue;
        }
        if (r->owner == 0 && r->on_list) continue;
        if (!dry) rc = dm_pool_push_free(ctx, r->a, r->bytes);
        if (rc) break;
        row->rec_ranges++;
        row->rec_bytes += r->bytes;
        tot_r++;
        tot_b += r->bytes;
    }
    printf("%-18s %8s %14s %14s %8s %10s %14s%s\n", "owner", "ranges", "bytes", "live_bytes",
           "partial", "reclaimed", "reclaimed_bytes", dry ? "  (dry run: nothing pushed)" : "");
    for (size_t i = 0; i < nrows; i++)
        printf("%016llx%s %8llu %14llu %14llu %8llu %10llu %14llu\n",
               (unsigned long long)rows[i].owner, rows[i].owner ? "  " : " *",
               (unsigned long long)rows[i].ranges, (unsigned long long)rows[i].bytes,
               (unsigned long long)rows[i].live, (unsigned long long)rows[i].partial,
               (unsigned long long)rows[i].rec_ranges, (unsigned long long)rows[i].rec_bytes);
    printf("(* owner 0 = free ranges; partially live ranges are kept whole)\n");
    printf("%s_ranges %llu\n%s_bytes %llu\nkept_partially_live_ranges %llu\n",
           dry ? "reclaimable" : "reclaimed", (unsigned long long)tot_r,
           dry ? "reclaimable" : "reclaimed", (unsigned long long)tot_b,
           (unsigned long long)partial);
    free(rows);
    return rc;
}

static void print_free_lists(dm_ctx_t *ctx)
{
    for (unsigned node = 0; node < ctx->w->n_nodes; node++) {
        uint64_t n = 0, bytes = 0;
        int rc = dm_pool_free_list(ctx, node, NULL, MAX_RANGES_PER_NODE, &n, &bytes);
        if (rc)
            printf("node%u free list unreadable: %s\n", node, dm_strerror(rc));
        else
            printf("node%u_free_ranges %llu\nnode%u_free_bytes %llu\n", node, (unsigned long long)n,
                   node, (unsigned long long)bytes);
    }
}

/* Mark, walk, reclaim. Returns 0 or DM_E*; nothing is pushed unless marking succeeded. */
static int run(dm_ctx_t *ctx, int dry, int list)
{
    const dm_point_index_ops_t *point = dm_kv_point_index();
    const dm_range_index_ops_t *range = dm_kv_range_index();
    spans_t live = {0};
    ranges_t rs = {0};
    int rc = mark_index(ctx, "point", &point->engine, point->objects, &live);
    if (!rc) rc = mark_index(ctx, "range", &range->engine, range->objects, &live);
    for (unsigned node = 0; node < ctx->w->n_nodes && !rc; node++)
        rc = walk_node(ctx, node, &rs);
    if (!rc) rc = mark_on_list(ctx, &rs);
    if (!rc) {
        spans_merge(&live);
        uint64_t outside = count_live(&rs, &live);
        uint64_t live_bytes = 0;
        for (size_t i = 0; i < live.n; i++)
            live_bytes += live.v[i].len;
        printf("live_spans %zu\nlive_bytes %llu\n", live.n, /* merged: counted once */
               (unsigned long long)live_bytes);
        if (outside)
            printf("live bytes outside every walked range: %llu\n", (unsigned long long)outside);
        rc = reclaim(ctx, &rs, dry, list);
        print_free_lists(ctx);
    }
    free(live.v);
    free(rs.v);
    return rc;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--dry-run] [--list] URI [URI...]\n"
            "  URIs: the pool's memory nodes, in the gateways' --memnode order.\n"
            "  Returns every range (chunk or extent) that no index reaches to its node's free\n"
            "  list. Run it ONLY while no gateway uses the pool (it cannot check): a running\n"
            "  gateway's current chunk would be taken from under it.\n"
            "  --dry-run: change nothing, report what would be reclaimed.\n"
            "  --list: print every range (node, offset, bytes, owner, live bytes).\n",
            argv0);
}

typedef struct opts {
    int dry, list;
} opts_t;

static int run_opts(dm_ctx_t *ctx, void *arg)
{
    const opts_t *o = arg;
    int rc = run(ctx, o->dry, o->list);
    if (rc) fprintf(stderr, "dmkv-pool-reclaim: %s\n", dm_strerror(rc));
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o = {0, 0};
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (strcmp(argv[first], "--dry-run") == 0)
            o.dry = 1;
        else if (strcmp(argv[first], "--list") == 0)
            o.list = 1;
        else
            break;
    }
    if (first >= argc || argv[first][0] == '-') {
        usage(argv[0]);
        return 2;
    }
    int rc = dm_kv_run_offline((const char *const *)argv + first, (unsigned)(argc - first),
                               run_opts, &o);
    return rc ? 1 : 0;
}
