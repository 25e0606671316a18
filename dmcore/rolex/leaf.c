/* ROLEX leaves (§3.3): addresses, and the reads of predicted
 * leaves (a window of LT positions) and synonym chains. */
#include "dmkv/rolex.h"

#include "dmkv/errors.h"
#include "dmkv/key_record.h"
#include "dmkv/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "rolex_internal.h"

#define RX_TORN_TRIES 1000 /* re-reads of a leaf whose checksum fails before DM_ECORRUPT */

static uint64_t rx_corrupt_lines;

int rx_corrupt_at(const char *file, int line, const char *fmt, ...)
{
    uint64_t n = __atomic_fetch_add(&rx_corrupt_lines, 1, __ATOMIC_RELAXED);
    if (n >= 64 && n % 1024) return DM_ECORRUPT;
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    dm_log(DM_LOG_WARNING, "ROLEX: DM_ECORRUPT at rolex/%s:%d: %s (%llu so far)",
           base ? base + 1 : file, line, what, (unsigned long long)n + 1);
    return DM_ECORRUPT;
}

/* Why leaf l fails rx_leaf_ok, for the log. */
static const char *torn_why(const rx_leaf_t *l)
{
    if (l->sum != rx_leaf_sum(l)) return l->sum ? "checksum" : "checksum (sum word 0)";
    return l->count > DM_ROLEX_SLOTS ? "count" : "a long entry's record";
}

dm_gaddr_t rx_leaf_addr(const dm_rolex_t *r, uint64_t i)
{
    return r->hdr.region + i * RX_LEAF_BYTES;
}

int rx_read_leaves(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t a, uint64_t b, rx_leaf_t *out)
{
    if (b < a || b - a >= DM_BATCH_MAX) return DM_EINVAL;
    for (int t = 0; t < RX_TORN_TRIES; t++) {
        dm_batch_t bt;
        dm_batch_init(&bt);
        for (uint64_t i = a; i <= b; i++)
            dm_batch_read(&bt, rx_leaf_addr(r, i), &out[i - a], RX_LEAF_BYTES);
        int rc = dm_batch_exec(ctx, &bt);
        if (rc) return rc;
        int torn = 0;
        for (uint64_t i = a; i <= b; i++)
            torn |= !rx_leaf_ok(&out[i - a]);
        if (!torn) return 0;
    }
    for (uint64_t i = a; i <= b; i++)
        if (!rx_leaf_ok(&out[i - a]))
            return RX_CORRUPT("leaf %llu (of %llu..%llu) torn after %d reads: %s",
                              (unsigned long long)i, (unsigned long long)a, (unsigned long long)b,
                              RX_TORN_TRIES, torn_why(&out[i - a]));
    return DM_ECORRUPT;
}

int rx_read_leaf(dm_ctx_t *ctx, dm_gaddr_t at, rx_leaf_t *out)
{
    for (int t = 0; t < RX_TORN_TRIES; t++) {
        int rc = dm_read_span(ctx, at, out, RX_LEAF_BYTES);
        if (rc) return rc;
        if (rx_leaf_ok(out)) return 0;
    }
    return RX_CORRUPT("leaf at %#llx torn after %d reads: %s", (unsigned long long)at,
                      RX_TORN_TRIES, torn_why(out));
}

int rx_read_positions(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t a, uint64_t b, rx_leaf_t *out,
                      uint64_t *model)
{
    if (b < a || b - a >= DM_BATCH_MAX - !!model || b >= r->hdr.entries) return DM_EINVAL;
    /* The leaves of the positions now: a torn leaf's retry reads the same leaves, whatever
     * model another coroutine of the worker loads meanwhile (its LT may be shorter). */
    dm_gaddr_t at[DM_BATCH_MAX];
    for (uint64_t p = a; p <= b; p++)
        at[p - a] = rx_leaf_addr(r, r->lt[p].leaf);
    for (int t = 0; t < RX_TORN_TRIES; t++) {
        dm_batch_t bt;
        dm_batch_init(&bt);
        if (model) /* 8 bytes more, no round trip more: a new model is noticed (sync.c) */
            dm_batch_read(&bt, r->root + RX_OFF_MODEL, model, 8);
        for (uint64_t p = a; p <= b; p++) /* ascending: chain order in time */
            dm_batch_read(&bt, at[p - a], &out[p - a], RX_LEAF_BYTES);
        int rc = dm_batch_exec(ctx, &bt);
        if (rc) return rc;
        int torn = 0;
        for (uint64_t p = a; p <= b; p++)
            torn |= !rx_leaf_ok(&out[p - a]);
        if (!torn) return 0;
    }
    for (uint64_t p = a; p <= b; p++)
        if (!rx_leaf_ok(&out[p - a]))
            return RX_CORRUPT("leaf %u (LT position %llu) torn after %d reads: %s",
                              (unsigned)r->lt[p].leaf, (unsigned long long)p, RX_TORN_TRIES,
                              torn_why(&out[p - a]));
    return DM_ECORRUPT;
}

int rx_win_read(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t x, uint64_t extra, rx_win_t *w)
{
    for (unsigned t = 0; t < RX_LOAD_TRIES; t++) {
        w->gen = r->model;
        rx_window(r, x, &w->a, &w->b);
        uint64_t last = r->hdr.entries - 1, e = w->b + extra;
        e = e > last ? last : e;
        w->e = e - w->a >= DM_BATCH_MAX - 1 ? w->a + DM_BATCH_MAX - 2 : e; /* + the model word */
        w->model = 0;
        w->buf = malloc((w->e - w->a + 1) * sizeof(*w->buf)); /* coroutine stacks are small */
        if (!w->buf) return DM_ENOMEM;
        int rc = rx_read_positions(ctx, r, w->a, w->e, w->buf, r->pinned ? NULL : &w->model);
        /* Another coroutine of this worker loaded a new model meanwhile: the positions read
         * are the old one's, its LT freed. */
        if (!rc && w->gen != r->model) {
            free(w->buf);
            continue;
        }
        /* The last position of the window whose low is <= x covers x, by rx_window's bound;
         * the cached LT tells when the bound failed. */
        if (!rc) rc = rx_cover(r, x, &w->j);
        if (rc) free(w->buf);
        return rc;
    }
    return DM_ERETRY;
}

const rx_leaf_t *rx_win_next(const dm_rolex_t *r, const rx_win_t *w, uint64_t *p)
{
    if (w->gen != r->model || *p >= w->e || r->lt[*p + 1].head != r->lt[*p].head ||
        w->buf[*p - w->a].next != rx_leaf_addr(r, r->lt[*p + 1].leaf))
        return NULL;
    ++*p;
    return &w->buf[*p - w->a];
}

int rx_leaf_no(const dm_rolex_t *r, dm_gaddr_t at, uint64_t *leaf)
{
    uint64_t off = at - r->hdr.region;
    if (at < r->hdr.region || off % RX_LEAF_BYTES || off / RX_LEAF_BYTES >= r->hdr.capacity)
        return RX_CORRUPT("gaddr %#llx is no leaf of the region", (unsigned long long)at);
    *leaf = off / RX_LEAF_BYTES;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int rx_pos_build(dm_rolex_t *r)
{
    free(r->pos_of);
    r->pos_of = malloc((r->hdr.entries + 1) * sizeof(*r->pos_of));
    if (!r->pos_of) return DM_ENOMEM;
    for (uint64_t p = 0; p < r->hdr.entries; p++)
        r->pos_of[p] = (uint64_t)r->lt[p].leaf << 32 | p;
    qsort(r->pos_of, r->hdr.entries, sizeof(*r->pos_of), cmp_u64);
    return 0;
}

int64_t rx_leaf_pos(const dm_rolex_t *r, uint64_t leaf)
{
    if (!r->pos_of) return -1;
    uint64_t a = 0, b = r->hdr.entries;
    while (a < b) { /* the first entry whose leaf is >= leaf */
        uint64_t m = a + (b - a) / 2;
        if (r->pos_of[m] >> 32 < leaf)
            a = m + 1;
        else
            b = m;
    }
    return a < r->hdr.entries && r->pos_of[a] >> 32 == leaf ? (int64_t)(r->pos_of[a] & 0xffffffffu)
                                                            : -1;
}

int rx_cover(const dm_rolex_t *r, uint64_t x, uint64_t *j)
{
    uint64_t a, b, last = r->hdr.entries - 1;
    rx_window(r, x, &a, &b);
    *j = a;
    for (uint64_t p = a; p <= b; p++)
        if (r->lt[p].lo <= x) *j = p;
    if (r->lt[*j].lo > x || (*j < last && r->lt[*j + 1].lo <= x))
        return RX_CORRUPT("model version %llu: the window of image %#llx misses its entry",
                          (unsigned long long)r->hdr.version, (unsigned long long)x);
    return 0;
}

int rx_locate(dm_ctx_t *ctx, const dm_rolex_t *r, uint64_t x, uint64_t *leaf, rx_leaf_t *out)
{
    rx_win_t w;
    int rc = rx_win_read(ctx, r, x, 0, &w);
    if (rc) return rc;
    *leaf = r->lt[w.j].leaf;
    *out = w.buf[w.j - w.a];
    free(w.buf);
    return 0;
}

/* The chains of k leaves (k <= DM_BATCH_MAX) read level by level: one batch per hop for
 * all of them, so a scan pays 1 RTT per level, not per synonym leaf. out[i] is malloc'd
 * (n[i] leaves, heads[i] first); on error none is left allocated. */
int rx_read_chains(dm_ctx_t *ctx, const rx_leaf_t *heads, unsigned k, rx_leaf_t **out, unsigned *n)
{
    unsigned cap[DM_BATCH_MAX];
    int rc = k > DM_BATCH_MAX ? DM_EINVAL : 0;
    for (unsigned i = 0; i < k && i < DM_BATCH_MAX; i++)
        out[i] = NULL;
    for (unsigned i = 0; !rc && i < k; i++) {
        cap[i] = 2, n[i] = 1;
        out[i] = malloc(cap[i] * sizeof(rx_leaf_t));
        if (out[i])
            out[i][0] = heads[i];
        else
            rc = DM_ENOMEM;
    }
    for (unsigned hop = 0; !rc; hop++) {
        dm_batch_t b;
        dm_batch_init(&b);
        unsigned who[DM_BATCH_MAX];
        for (unsigned i = 0; !rc && i < k; i++) {
            dm_gaddr_t next = out[i][n[i] - 1].next;
            if (!next) continue;
            if (n[i] == cap[i]) {
                rx_leaf_t *nv = realloc(out[i], 2 * cap[i] * sizeof(rx_leaf_t));
                if (!nv) {
                    rc = DM_ENOMEM;
                    break;
                }
                out[i] = nv, cap[i] *= 2;
            }
            who[b.n] = i;
            dm_batch_read(&b, next, &out[i][n[i]], RX_LEAF_BYTES);
        }
        if (rc || !b.n) break;
        if (hop >= RX_CHAIN_MAX) rc = RX_CORRUPT("a chain of over %u hops", RX_CHAIN_MAX);
        if (!rc) rc = dm_batch_exec(ctx, &b);
        for (unsigned v = 0; !rc && v < b.n; v++) {
            unsigned i = who[v];
            if (!rx_leaf_ok(&out[i][n[i]])) /* torn: re-read this one */
                rc = rx_read_leaf(ctx, out[i][n[i] - 1].next, &out[i][n[i]]);
            n[i]++;
        }
    }
    if (rc)
        for (unsigned i = 0; i < k && i < DM_BATCH_MAX; i++) {
            free(out[i]);
            out[i] = NULL;
        }
    return rc;
}

/* A record read for entry e is e's key: its length, first RX_PREFIX bytes and hash agree
 * (a block freed and reused under a reader holds another key, or none). */
static int rec_matches(const rx_entry_t *e, const uint8_t *key, uint32_t len)
{
    return len == rx_elen(e) && !memcmp(key, e->key, RX_PREFIX) &&
           rx_key_hash(key, len) == rx_ehash(e);
}

int rx_entries_read(dm_ctx_t *ctx, const rx_entry_t *const *e, unsigned n, uint8_t **keys)
{
    unsigned longs = 0;
    for (unsigned i = 0; i < n; i++) {
        keys[i] = NULL;
        longs += rx_elong(e[i]);
    }
    if (!longs) return 0; /* short keys only (the common case): nothing to read or allocate */
    dm_gaddr_t *recs = malloc((n ? n : 1) * sizeof(*recs));
    uint32_t *lens = malloc((n ? n : 1) * sizeof(*lens));
    uint8_t **got = malloc((n ? n : 1) * sizeof(*got));
    unsigned *who = malloc((n ? n : 1) * sizeof(*who));
    uint32_t *want = malloc((n ? n : 1) * sizeof(*want));
    int rc = recs && lens && got && who && want ? 0 : DM_ENOMEM;
    unsigned m = 0;
    for (unsigned i = 0; i < n; i++) {
        keys[i] = NULL;
        if (!rc && rx_elong(e[i])) who[m] = i, want[m] = rx_elen(e[i]), recs[m++] = rx_erec(e[i]);
    }
    /* The entries know the lengths: one read of each whole record, none past its block. */
    if (!rc && m) rc = dm_keyrec_read(ctx, recs, m, DM_ROLEX_KEY_MAX, want, got, lens);
    if (rc && got) /* nothing of dm_keyrec_read's is left */
        for (unsigned j = 0; j < m; j++)
            got[j] = NULL;
    for (unsigned j = 0; !rc && j < m; j++)
        if (!rec_matches(e[who[j]], got[j], lens[j]))
            rc = RX_CORRUPT("the record at %#llx is not its entry's key",
                            (unsigned long long)recs[j]);
    for (unsigned j = 0; j < m && got; j++) { /* dm_keyrec_read left none on its error */
        if (rc)
            free(got[j]);
        else
            keys[who[j]] = got[j];
    }
    free(recs), free(lens), free(got), free(who), free(want);
    return rc;
}

/* Resolve the ties tie[0..m) of p (their records: 1 RTT). */
static int resolve(dm_ctx_t *ctx, rx_probe_t *p, const rx_entry_t *const *tie, unsigned m)
{
    uint8_t *keys[DM_BATCH_MAX];
    int rc = rx_entries_read(ctx, tie, m, keys);
    for (unsigned j = 0; j < m && !rc; j++) /* the same length: memcmp is the last step */
        rc = rx_probe_set(p, rx_erec(tie[j]), rx_key_cmp(keys[j], p->len, p->key, p->len));
    for (unsigned j = 0; j < m; j++)
        if (!rc || keys[j]) free(keys[j]);
    return rc;
}

int rx_probe_prepare(dm_ctx_t *ctx, rx_probe_t *p, const rx_leaf_t *l, unsigned n)
{
    if (p->len <= DM_ROLEX_INLINE) return 0; /* only long keys tie */
    const rx_entry_t *tie[DM_BATCH_MAX];
    unsigned m = 0;
    int rc = 0;
    for (unsigned k = 0; !rc && k < n; k++)
        for (unsigned i = 0; !rc && i < l[k].count; i++) {
            const rx_entry_t *e = &l[k].e[i];
            int dup = !rx_probe_needs(p, e);
            for (unsigned j = 0; j < m && !dup; j++)
                dup = rx_erec(tie[j]) == rx_erec(e);
            if (dup) continue;
            tie[m++] = e;
            if (m == DM_BATCH_MAX) { /* a batch full of collisions (a forced hash tie) */
                rc = resolve(ctx, p, tie, m);
                m = 0;
            }
        }
    return rc || !m ? rc : resolve(ctx, p, tie, m);
}
