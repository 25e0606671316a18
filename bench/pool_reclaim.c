/* Offline reclamation of the ranges gateways left behind (issue 5): a gateway that dies
 * leaks its chunks (the blocks freed into its private free lists, the rest of its current
 * chunk). This tool marks every object the pool's indexes still reach — RACE: the table,
 * every subtable, every slot's KV block; CHIME: every inner node, every leaf (descending
 * from the root and following sibling pointers), every long key's record and every leaf's
 * fence record — then walks every node's range headers (chunks and extents) and pushes each
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
#include "../dmcore/chime/chime_internal.h"
#include "../dmcore/race/race_internal.h"

#define MAX_RANGES_PER_NODE (1u << 20)
#define LEAF_BATCH 32 /* leaves read per round trip */

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

typedef struct addrs {
    dm_gaddr_t *v;
    size_t n, cap;
} addrs_t;

static int addrs_add(addrs_t *s, dm_gaddr_t a)
{
    void *v = grow(s->v, &s->cap, s->n, sizeof(*s->v));
    if (!v) return DM_ENOMEM;
    s->v = v;
    s->v[s->n++] = a;
    return 0;
}

/* Open-addressing set of nonzero addresses (nodes already queued by the CHIME walk). */
typedef struct aset {
    dm_gaddr_t *slot;
    size_t cap, n;
} aset_t;

static size_t aset_pos(const aset_t *s, dm_gaddr_t a)
{
    size_t i = (size_t)((a * 0x9E3779B97F4A7C15ull) >> 20) & (s->cap - 1);
    while (s->slot[i] && s->slot[i] != a)
        i = (i + 1) & (s->cap - 1);
    return i;
}

/* Insert a; returns 1 when new, 0 when present, DM_ENOMEM. */
static int aset_insert(aset_t *s, dm_gaddr_t a)
{
    if (2 * (s->n + 1) > s->cap) {
        aset_t g = {calloc(s->cap ? 2 * s->cap : 1024, sizeof(dm_gaddr_t)),
                    s->cap ? 2 * s->cap : 1024, 0};
        if (!g.slot) return DM_ENOMEM;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i]) g.slot[aset_pos(&g, s->slot[i])] = s->slot[i], g.n++;
        free(s->slot);
        *s = g;
    }
    size_t i = aset_pos(s, a);
    if (s->slot[i]) return 0;
    s->slot[i] = a;
    s->n++;
    return 1;
}

/* ---- RACE ---- */

/* Slots whose block is 255+ units long: the block header tells the real size. */
static int mark_long_blocks(dm_ctx_t *ctx, const addrs_t *ptrs, spans_t *live)
{
    for (size_t i = 0; i < ptrs->n; i += DM_BATCH_MAX) {
        size_t n = ptrs->n - i < DM_BATCH_MAX ? ptrs->n - i : DM_BATCH_MAX;
        uint8_t hdr[DM_BATCH_MAX][DM_KV_HDR];
        dm_batch_t b;
        dm_batch_init(&b);
        for (size_t k = 0; k < n; k++)
            dm_batch_read(&b, ptrs->v[i + k], hdr[k], DM_KV_HDR);
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        for (size_t k = 0; k < n; k++) {
            /* The block as allocated: a large one is rounded to its size class. */
            uint64_t full = dm_alloc_kv_block_bytes(dm_kvblock_size_from_hdr(hdr[k], DM_KV_HDR));
            uint64_t min = (uint64_t)DM_KV_LEN_MAX_UNITS * DM_UNIT;
            if ((rc = spans_add(live, ptrs->v[i + k], full > min ? full : min)) != 0) return rc;
        }
    }
    return 0;
}

/* Every occupied slot of one subtable: its block (frozen MOVING slots too). */
static int mark_subtable(dm_ctx_t *ctx, dm_gaddr_t st, uint64_t groups, spans_t *live,
                         addrs_t *longs)
{
    enum { STEP = 1024 }; /* buckets per READ (64 KiB) */
    uint64_t nb = groups * 3;
    uint64_t *raw = malloc(STEP * DM_RACE_BUCKET);
    if (!raw) return DM_ENOMEM;
    int rc = spans_add(live, st, nb * DM_RACE_BUCKET);
    for (uint64_t c = 0; c < nb && !rc; c += STEP) {
        uint64_t n = nb - c < STEP ? nb - c : STEP;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, st + c * DM_RACE_BUCKET, raw, (uint32_t)(n * DM_RACE_BUCKET));
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        for (uint64_t k = 0; k < n * 8 && !rc; k++) {
            uint64_t w = raw[k];
            if (k % 8 == 0 || !race_slot_ptr(w)) continue; /* bucket header, empty slot */
            if (race_slot_len(w) == DM_KV_LEN_MAX_UNITS)
                rc = addrs_add(longs, race_slot_ptr(w));
            else
                rc = spans_add(live, race_slot_ptr(w), (uint64_t)race_slot_len(w) * DM_KV_UNIT);
        }
    }
    free(raw);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Directory entries past 2^gd are zero unless a doubling died between writing the new
 * half and bumping GD: a subtable named only there is kept (conservatively; its slots are
 * frozen copies of slots the used half still reaches). */
static int mark_dir_tail(dm_ctx_t *ctx, dm_gaddr_t root, unsigned gd, uint64_t groups,
                         uint64_t *dir, spans_t *live)
{
    uint64_t from = 1ull << gd, to = 1ull << DM_RACE_MAX_DEPTH;
    int rc = 0;
    for (uint64_t off = from; off < to && !rc; off += 8192) {
        uint64_t cnt = to - off < 8192 ? to - off : 8192;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, root + RACE_DIR_OFF + off * 8, dir + off, (uint32_t)(cnt * 8));
        rc = dm_batch_exec(ctx, &b);
        for (uint64_t i = off; i < off + cnt && !rc; i++)
            if (race_dir_addr(dir[i]))
                rc = spans_add(live, race_dir_addr(dir[i]), groups * 3 * DM_RACE_BUCKET);
    }
    return rc;
}

/* The RACE table at the worker's attached root: header + directory + locks, every
 * subtable the directory names, every block a slot points to. */
static int mark_race(dm_ctx_t *ctx, spans_t *live)
{
    dm_race_t *r = ctx->w->race;
    uint64_t *dir = malloc(8ull << DM_RACE_MAX_DEPTH);
    addrs_t longs = {0};
    if (!dir) return DM_ENOMEM;
    unsigned gd = 0;
    uint64_t groups = 0;
    int rc = race_read_dir(ctx, r, dir, &gd, &groups);
    if (!rc) rc = spans_add(live, r->root, RACE_TABLE_BYTES);
    if (!rc) rc = mark_dir_tail(ctx, r->root, gd, groups, dir, live);
    uint64_t n = 1ull << gd;
    for (uint64_t i = 0; i < n && !rc; i++)
        dir[i] = race_dir_addr(dir[i]);
    if (!rc) qsort(dir, n, 8, cmp_u64);
    for (uint64_t i = 0; i < n && !rc; i++)
        if (dir[i] && (i == 0 || dir[i] != dir[i - 1]))
            rc = mark_subtable(ctx, dir[i], groups, live, &longs);
    if (!rc) rc = mark_long_blocks(ctx, &longs, live);
    free(longs.v);
    free(dir);
    return rc;
}

/* ---- CHIME ---- */

typedef struct chime_walk {
    ch_geo_t geo;
    aset_t seen;    /* inner nodes, leaves and records queued */
    addrs_t inner;  /* inner nodes to read */
    addrs_t leaves; /* leaves to read */
    addrs_t recs;   /* key and fence records to size */
} chime_walk_t;

static int queue_node(chime_walk_t *cw, addrs_t *q, dm_gaddr_t a)
{
    if (!a) return 0;
    int rc = aset_insert(&cw->seen, a);
    return rc == 1 ? addrs_add(q, a) : rc;
}

/* One inner node: mark it, queue its children (leaves below level 1) and its sibling. */
static int walk_inner(dm_ctx_t *ctx, chime_walk_t *cw, dm_gaddr_t a, spans_t *live)
{
    uint8_t *img = malloc(CH_INNER_BYTES);
    if (!img) return DM_ENOMEM;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, a, img, CH_INNER_BYTES);
    int rc = dm_batch_exec(ctx, &b);
    ch_inner_t *n = rc ? NULL : ch_inner_decode(a, img);
    free(img);
    if (rc) return rc;
    if (!n) {
        fprintf(stderr, "CHIME inner node at %#llx does not decode\n", (unsigned long long)a);
        return DM_ECORRUPT;
    }
    rc = spans_add(live, a, CH_INNER_BYTES + CH_LINE);
    addrs_t *below = n->level == 1 ? &cw->leaves : &cw->inner;
    for (unsigned i = 0; i < n->count && !rc; i++)
        rc = queue_node(cw, below, n->child[i]);
    if (!rc) rc = queue_node(cw, &cw->inner, n->sibling);
    ch_inner_free(n);
    return rc;
}

/* One leaf image: queue its sibling, its fence record and its long keys' records. */
static int scan_leaf(chime_walk_t *cw, const uint8_t *img)
{
    const ch_geo_t *g = &cw->geo;
    int rc = 0;
    for (unsigned grp = 0; grp < g->groups && !rc; grp++) {
        const uint8_t *rep = img + ch_replica_off(g, grp);
        rc = queue_node(cw, &cw->leaves, ch_u64(rep + 8));
        if (!rc) rc = queue_node(cw, &cw->recs, ch_u64(rep + 16)); /* replicas share it */
    }
    for (unsigned i = 0; i < g->span && !rc; i++) {
        const uint8_t *e = img + ch_entry_off(g, i);
        if (ch_e_used(e) && e[7] == CH_KLEN_RECORD) rc = queue_node(cw, &cw->recs, ch_u64(e + 8));
    }
    return rc;
}

/* Read the queued leaves from position *done on, LEAF_BATCH per round trip. */
static int walk_leaves(dm_ctx_t *ctx, chime_walk_t *cw, size_t *done, spans_t *live)
{
    uint32_t lb = cw->geo.bytes;
    uint8_t *img = malloc((size_t)LEAF_BATCH * lb);
    if (!img) return DM_ENOMEM;
    int rc = 0;
    while (*done < cw->leaves.n && !rc) {
        size_t n = cw->leaves.n - *done < LEAF_BATCH ? cw->leaves.n - *done : LEAF_BATCH;
        dm_batch_t b;
        dm_batch_init(&b);
        for (size_t k = 0; k < n; k++)
            dm_batch_read(&b, cw->leaves.v[*done + k], img + k * lb, lb);
        rc = dm_batch_exec(ctx, &b);
        for (size_t k = 0; k < n && !rc; k++) {
            rc = spans_add(live, cw->leaves.v[*done + k], lb);
            if (!rc) rc = scan_leaf(cw, img + k * lb);
        }
        *done += n;
    }
    free(img);
    return rc;
}

/* Key records (long keys, fences): size each from its header. An unreadable record keeps
 * one unit live (its range stays), so a damaged record never frees memory. */
static int mark_records(dm_ctx_t *ctx, const addrs_t *recs, spans_t *live)
{
    for (size_t i = 0; i < recs->n; i += DM_BATCH_MAX) {
        size_t n = recs->n - i < DM_BATCH_MAX ? recs->n - i : DM_BATCH_MAX;
        uint32_t hdr[DM_BATCH_MAX][CH_REC_HDR / 4];
        dm_batch_t b;
        dm_batch_init(&b);
        for (size_t k = 0; k < n; k++)
            dm_batch_read(&b, recs->v[i + k], hdr[k], CH_REC_HDR);
        int rc = dm_batch_exec(ctx, &b);
        for (size_t k = 0; k < n && !rc; k++) {
            uint64_t len = DM_UNIT;
            if (hdr[k][0] == CH_REC_MAGIC && hdr[k][1] <= DM_KV_MAX_KEY)
                len = ch_record_bytes(hdr[k][1]);
            rc = spans_add(live, recs->v[i + k], len);
        }
        if (rc) return rc;
    }
    return 0;
}

/* The CHIME tree from the superblock's root word and geometry. */
static int mark_chime(dm_ctx_t *ctx, uint64_t root, uint64_t geo, spans_t *live)
{
    if (!root) return 0;
    chime_walk_t cw;
    memset(&cw, 0, sizeof(cw));
    ch_geo_init(&cw.geo, geo & 0xffff, (geo >> 16) & 0xffff);
    if (cw.geo.nbhd < 2 || cw.geo.span % cw.geo.nbhd || cw.geo.span > CH_MAX_SPAN) {
        fprintf(stderr, "bad CHIME geometry word %#llx\n", (unsigned long long)geo);
        return DM_ECORRUPT;
    }
    int rc = queue_node(&cw, ch_root_level(root) ? &cw.inner : &cw.leaves, ch_root_addr(root));
    for (size_t i = 0; i < cw.inner.n && !rc; i++)
        rc = walk_inner(ctx, &cw, cw.inner.v[i], live);
    size_t done = 0;
    if (!rc) rc = walk_leaves(ctx, &cw, &done, live);
    if (!rc) rc = mark_records(ctx, &cw.recs, live);
    if (!rc)
        printf("chime inner_nodes %zu leaves %zu records %zu\n", cw.inner.n, cw.leaves.n,
               cw.recs.n);
    free(cw.seen.slot);
    free(cw.inner.v);
    free(cw.leaves.v);
    free(cw.recs.v);
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
        uint64_t zero[DM_CLOCK_SLOTS] = {0};
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(alloc_board)), zero, sizeof(zero));
        dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(spare_board)), zero,
                       sizeof(((dm_superblock_t *)0)->spare_board));
        for (unsigned n = 0; n < ctx->w->n_nodes; n++) {
            dm_batch_write(&b, dm_gaddr_make(n, DM_SB_OFF(block_free)), zero, 8);
            dm_batch_write(&b, dm_gaddr_make(n, DM_SB_OFF(log_free)), zero, 8);
        }
        dm_batch_write(&b, dm_gaddr_make(0, DM_SB_OFF(returned_bytes)), zero, 8);
        rc = dm_batch_exec(ctx, &b);
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
    dm_superblock_t sb;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, 0), &sb, sizeof(sb));
    int rc = dm_batch_exec(ctx, &b);
    spans_t live = {0};
    ranges_t rs = {0};
    if (!rc) rc = mark_race(ctx, &live);
    if (!rc) rc = mark_chime(ctx, sb.chime_root, sb.chime_geo, &live);
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
