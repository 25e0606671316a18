/* SepHash segment merge (SepHash §4.2.2, Figure 7): a full CurSegment and its MainSegment
 * become one new MainSegment written in bulk, installed with the sign flip in one CAS of
 * the meta word; over the bound, the result is split in two instead (split.c directs the
 * directory). This is where dead versions go: only the newest entry of each key survives,
 * tombstones vanish (the MainSegment is the last level: nothing older is left to hide),
 * and the blocks of the dropped versions and the old MainSegment are freed (quarantined
 * for DM_GRACE_US, longer than any reader may hold an address: DM_OP_TIMEOUT_US). */
#include "dmkv/sephash.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/kvblock.h"
#include "sephash_internal.h"

/* An entry of the new MainSegment(s). */
typedef struct mitem {
    uint64_t word; /* as written (sign 0) */
    uint8_t fp2;
    int has_lo; /* lo known: the key's hash suffix (from a block read) */
    uint64_t lo;
} mitem_t;

/* A block to free once the merge is installed. */
typedef struct dead {
    dm_gaddr_t ptr;
    uint64_t bytes;
} dead_t;

typedef struct merge {
    uint64_t cur[SH_CUR_N];
    uint8_t *cbuf[SH_CUR_N]; /* the CurSegment entries' blocks */
    uint64_t clen[SH_CUR_N];
    dm_kv_view_t cv[SH_CUR_N];
    uint64_t clo[SH_CUR_N], chi[SH_CUR_N];
    uint8_t *main; /* the old MainSegment, whole */
    uint32_t n;    /* its entries */
    mitem_t *items;
    uint32_t nitems;
    dead_t *dead;
    uint32_t ndead;
} merge_t;

static void merge_free(merge_t *g)
{
    for (unsigned j = 0; j < SH_CUR_N; j++)
        free(g->cbuf[j]);
    free(g->main);
    free(g->items);
    free(g->dead);
    free(g);
}

/* The blocks of the old MainSegment's entries in idx[0..k): their hash suffixes into
 * lo[], and their sizes into bytes[] (if not NULL); keys compared with the caller's later.
 * 1 RTT per 64. */
static int main_blocks(dm_ctx_t *ctx, const uint64_t *words, unsigned k, uint8_t **bufs,
                       uint64_t *lens, dm_kv_view_t *views)
{
    int rc = sh_read_blocks(ctx, words, k, bufs, lens);
    for (unsigned i = 0; !rc && i < k; i++)
        if (dm_kvblock_parse(bufs[i], lens[i], &views[i])) rc = DM_ECORRUPT;
    return rc;
}

/* Dedup the CurSegment (newest of each key), match it against the MainSegment and gather
 * the survivors and the dead. */
static int gather(dm_ctx_t *ctx, dm_sephash_t *h, merge_t *g)
{
    uint64_t *ment = (uint64_t *)(g->main + SH_MAIN_HDR);
    const uint8_t *mfp2 = g->main + SH_MAIN_HDR + 8ull * g->n;
    const uint16_t *start = (const uint16_t *)(g->main + 8);
    int keep[SH_CUR_N];
    for (unsigned j = 0; j < SH_CUR_N; j++) {
        keep[j] = 1;
        for (unsigned k = j + 1; k < SH_CUR_N && keep[j]; k++)
            if (g->clo[k] == g->clo[j] && g->chi[k] == g->chi[j] &&
                g->cv[k].key_len == g->cv[j].key_len &&
                !memcmp(g->cv[k].key, g->cv[j].key, g->cv[j].key_len))
                keep[j] = 0; /* a newer version follows */
    }
    /* MainSegment entries with the same fp and fp2 as a surviving CurSegment entry. One
     * entry can match several keys (fp and fp2 are 16 bits): counted first, there can be
     * more than the MainSegment's entries (a flush's CurSegment, every key in it present). */
    uint32_t ncand = 0, most = 1;
    for (unsigned j = 0; j < SH_CUR_N; j++) {
        uint8_t fp = (uint8_t)g->chi[j], fp2 = (uint8_t)(g->chi[j] >> 8);
        for (unsigned k = start[fp]; keep[j] && k < start[fp + 1] && k < g->n; k++)
            most += mfp2[k] == fp2;
    }
    uint32_t *cm = malloc(4ull * most), *cj = malloc(4ull * most);
    uint64_t *cw = malloc(8ull * most);
    uint8_t *mdead = calloc(g->n + 1, 1);
    g->dead = malloc(sizeof(*g->dead) * (SH_CUR_N + g->n + 1));
    g->items = malloc(sizeof(*g->items) * (SH_CUR_N + g->n + 1));
    int rc = cm && cj && cw && mdead && g->dead && g->items ? 0 : DM_ENOMEM;
    for (unsigned j = 0; !rc && j < SH_CUR_N; j++) {
        if (!keep[j]) continue;
        uint8_t fp = (uint8_t)g->chi[j], fp2 = (uint8_t)(g->chi[j] >> 8);
        for (unsigned k = start[fp]; k < start[fp + 1] && k < g->n; k++)
            if (mfp2[k] == fp2) cm[ncand] = k, cj[ncand] = j, cw[ncand++] = ment[k];
    }
    if (!rc && ncand) {
        uint8_t **bufs = calloc(ncand, sizeof(*bufs));
        uint64_t *lens = calloc(ncand, 8);
        dm_kv_view_t *vs = calloc(ncand, sizeof(*vs));
        rc = bufs && lens && vs ? main_blocks(ctx, cw, ncand, bufs, lens, vs) : DM_ENOMEM;
        h->st.merge_reads += ncand;
        for (unsigned c = 0; !rc && c < ncand; c++) {
            const dm_kv_view_t *a = &vs[c], *b = &g->cv[cj[c]];
            if (a->key_len != b->key_len || memcmp(a->key, b->key, a->key_len)) continue;
            mdead[cm[c]] = 1; /* replaced (or deleted) by the CurSegment's version */
            g->dead[g->ndead++] =
                (dead_t){sh_entry_ptr(cw[c]),
                         dm_sephash_block_bytes(dm_kvblock_size_from_hdr(bufs[c], lens[c]))};
        }
        for (unsigned c = 0; bufs && c < ncand; c++)
            free(bufs[c]);
        free(bufs);
        free(lens);
        free(vs);
    }
    for (uint32_t k = 0; !rc && k < g->n; k++)
        if (!mdead[k]) g->items[g->nitems++] = (mitem_t){.word = ment[k], .fp2 = mfp2[k]};
    for (unsigned j = 0; !rc && j < SH_CUR_N; j++) {
        uint64_t e = g->cur[j];
        if (!keep[j] || !sh_entry_len(e)) { /* an older version, or a tombstone */
            g->dead[g->ndead++] =
                (dead_t){sh_entry_ptr(e),
                         dm_sephash_block_bytes(dm_kvblock_size_from_hdr(g->cbuf[j], g->clen[j]))};
            continue;
        }
        g->items[g->nitems++] =
            (mitem_t){.word = sh_entry(0, sh_entry_len(e), 0, sh_entry_ptr(e), sh_entry_fp(e)),
                      .fp2 = (uint8_t)(g->chi[j] >> 8),
                      .has_lo = 1,
                      .lo = g->clo[j]};
    }
    free(cm);
    free(cj);
    free(cw);
    free(mdead);
    return rc;
}

/* The dep bits ran out (the split ends a round of 4): read the keys of the entries that
 * came from the MainSegment to learn their hash suffixes (SepHash §4.2.2). */
static int learn_suffixes(dm_ctx_t *ctx, dm_sephash_t *h, merge_t *g)
{
    uint32_t *idx = malloc(4ull * (g->nitems + 1));
    uint64_t *w = malloc(8ull * (g->nitems + 1));
    if (!idx || !w) {
        free(idx);
        free(w);
        return DM_ENOMEM;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < g->nitems; i++)
        if (!g->items[i].has_lo) idx[k] = i, w[k++] = g->items[i].word;
    int rc = 0;
    for (uint32_t base = 0; !rc && base < k; base += 1024) {
        unsigned cnt = k - base < 1024 ? k - base : 1024;
        uint8_t *bufs[1024];
        uint64_t lens[1024];
        dm_kv_view_t *vs = malloc(sizeof(*vs) * cnt);
        rc = vs ? main_blocks(ctx, w + base, cnt, bufs, lens, vs) : DM_ENOMEM;
        for (unsigned i = 0; !rc && i < cnt; i++) {
            uint64_t lo, hi;
            sh_hash(vs[i].key, vs[i].key_len, &lo, &hi);
            g->items[idx[base + i]].lo = lo;
            g->items[idx[base + i]].has_lo = 1;
        }
        for (unsigned i = 0; vs && i < cnt; i++)
            free(bufs[i]);
        free(vs);
        h->st.split_reads += cnt;
    }
    free(idx);
    free(w);
    return rc;
}

/* Serialize items (those whose half matches, all when half < 0) as a MainSegment sorted by
 * fp: the FPTable, the entries, their fp2. Local depth ld for dep. *cnt: its entries. */
static uint8_t *build_main(const merge_t *g, const int8_t *halves, int half, unsigned ld,
                           uint32_t *cnt)
{
    uint32_t n = 0, count[256] = {0};
    for (uint32_t i = 0; i < g->nitems; i++)
        if (half < 0 || halves[i] == half) n++, count[sh_entry_fp(g->items[i].word)]++;
    uint8_t *buf = calloc(1, sh_main_bytes(n));
    if (!buf) return NULL;
    uint16_t start[257];
    start[0] = 0;
    for (unsigned f = 0; f < 256; f++)
        start[f + 1] = (uint16_t)(start[f] + count[f]);
    uint64_t nn = n;
    memcpy(buf, &nn, 8);
    memcpy(buf + 8, start, sizeof(start));
    uint64_t *ent = (uint64_t *)(buf + SH_MAIN_HDR);
    uint8_t *fp2 = buf + SH_MAIN_HDR + 8ull * n;
    uint16_t pos[256];
    memcpy(pos, start, sizeof(pos));
    for (uint32_t i = 0; i < g->nitems; i++) {
        if (half >= 0 && halves[i] != half) continue;
        const mitem_t *it = &g->items[i];
        uint64_t e = it->has_lo ? sh_entry_with_dep(it->word, sh_dep(it->lo, ld)) : it->word;
        unsigned p = pos[sh_entry_fp(e)]++;
        ent[p] = e;
        fp2[p] = it->fp2;
    }
    *cnt = n;
    return buf;
}

static int alloc_write(dm_ctx_t *ctx, const void *buf, uint64_t bytes, dm_gaddr_t *out)
{
    int rc = dm_alloc_block(ctx, bytes, out);
    if (!rc && (rc = dm_write_span(ctx, *out, buf, bytes)))
        dm_alloc_unused(ctx->w->alloc, *out, bytes);
    return rc;
}

/* The merge proper, with the segment locked under meta word m and its merge lock held
 * (hd). *moved = 1 once the directory may name the new segment (from then on the meta must
 * stay locked until the commit: a taker finishes the split, split.c). */
static int merge_locked(dm_ctx_t *ctx, dm_sephash_t *h, const sh_loc_t *loc, uint64_t m,
                        const sh_hold_t *hd, int *moved)
{
    merge_t *g = calloc(1, sizeof(*g));
    if (!g) return DM_ENOMEM;
    unsigned ld = sh_meta_ld(m), s = sh_meta_sign(m);
    g->n = sh_meta_cnt(m);
    g->main = malloc(sh_main_bytes(g->n));
    int rc = g->main ? 0 : DM_ENOMEM;
    if (!rc) rc = dm_read_span(ctx, loc->seg + SH_CUR_ENTRY_OFF, g->cur, sizeof(g->cur));
    if (!rc) rc = dm_read_span(ctx, sh_meta_main(m), g->main, sh_main_bytes(g->n));
    for (unsigned j = 0; !rc && j < SH_CUR_N; j++)
        if (sh_entry_sign(g->cur[j]) == s) rc = DM_ECORRUPT; /* merges start only when full */
    if (!rc) rc = sh_read_blocks(ctx, g->cur, SH_CUR_N, g->cbuf, g->clen);
    if (!rc) h->st.merge_reads += SH_CUR_N;
    for (unsigned j = 0; !rc && j < SH_CUR_N; j++) {
        if (dm_kvblock_parse(g->cbuf[j], g->clen[j], &g->cv[j]))
            rc = DM_ECORRUPT;
        else
            sh_hash(g->cv[j].key, g->cv[j].key_len, &g->clo[j], &g->chi[j]);
    }
    if (!rc) rc = gather(ctx, h, g);
    int split = !rc && g->nitems > h->main_max && ld < SH_MAX_DEPTH;
    if (!rc && !split && g->nitems > DM_SH_MAIN_LIMIT) rc = DM_EFULL;
    unsigned nl = split ? ld + 1 : ld;
    int8_t *halves = calloc(g->nitems + 1, 1);
    if (!rc && !halves) rc = DM_ENOMEM;
    if (!rc && split) {
        /* The half: bit ld of the suffix, which dep holds while ld stays in its round. */
        for (uint32_t i = 0; i < g->nitems; i++) {
            const mitem_t *it = &g->items[i];
            halves[i] = (int8_t)(it->has_lo ? (it->lo >> ld) & 1
                                            : (sh_entry_dep(it->word) >> (ld % 4)) & 1);
        }
        if (nl % 4 == 0) rc = learn_suffixes(ctx, h, g);
    }
    uint32_t c0 = 0, c1 = 0;
    uint8_t *b0 = NULL, *b1 = NULL, *seg1buf = NULL;
    dm_gaddr_t main0 = 0, main1 = 0, seg1 = 0, used = 0;
    if (!rc) {
        b0 = build_main(g, halves, split ? 0 : -1, nl, &c0);
        if (split) b1 = build_main(g, halves, 1, nl, &c1);
        if (!b0 || (split && !b1)) rc = DM_ENOMEM;
    }
    /* The new blocks are private until published: their writes need no send-by bound. */
    if (!rc) rc = alloc_write(ctx, b0, sh_main_bytes(c0), &main0);
    if (!rc && split) {
        rc = alloc_write(ctx, b1, sh_main_bytes(c1), &main1);
        seg1buf = calloc(1, SH_CUR_BYTES);
        if (!rc && !seg1buf) rc = DM_ENOMEM;
        if (!rc) {
            uint64_t m1 = sh_meta(0, nl, c1, main1);
            memcpy(seg1buf, &m1, 8);
            rc = alloc_write(ctx, seg1buf, SH_CUR_BYTES, &seg1);
        }
        /* The new segment goes into the directory while this one is still locked: a
         * writer that finds this meta deeper than its cache then finds the other half. */
        if (!rc) *moved = 1;
        if (!rc) rc = sh_dir_split(ctx, h, loc->seg, ld, loc->lo, seg1, hd->until_us, &used);
        if (!rc && used != seg1) { /* a dead merger's split, finished: its seg1 is used */
            dm_alloc_unused(ctx->w->alloc, main1, sh_main_bytes(c1));
            dm_alloc_unused(ctx->w->alloc, seg1, SH_CUR_BYTES);
        }
        if (!rc) h->st.splits++;
    }
    if (!rc && split && sh_die(h, SH_AT_MOVED)) rc = DM_EIO;
    if (!rc && sh_die(h, SH_AT_COMMIT)) rc = DM_EIO;
    if (!rc && dm_now_us() > hd->until_us) rc = DM_ERETRY; /* the hold ended: write nothing */
    int committed = 0, unknown = 0;                        /* unknown: the commit may have landed */
    if (!rc) {
        /* Clear the next round's filter, then flip the sign, install the MainSegment and
         * unlock in one CAS (SepHash §4.2.2 step 4), then free the merge lock: one message,
         * sent by the hold's end or not at all (a late filter clear would wipe the filter
         * of a taker's next round). */
        static const uint8_t zero[256];
        dm_batch_t b;
        dm_batch_init(&b);
        b.send_by_us = hd->until_us;
        dm_batch_write(&b, loc->seg + SH_CUR_FILTER_OFF + 256ull * !s, zero, 256);
        dm_verb_t *v = dm_batch_cas(&b, loc->seg, m | SH_META_LOCK, sh_meta(!s, nl, c0, main0));
        dm_batch_cas(&b, hd->addr, hd->word, 0);
        dm_lease_unlocking(hd);
        rc = dm_batch_exec(ctx, &b);
        unknown = rc && rc != DM_ERETRY; /* DM_ERETRY: refused whole, nothing ran */
        committed = !rc && v->result == (m | SH_META_LOCK);
        /* Another commit: our lease was taken over and the taker merged (our main0 was
         * never published). */
        if (!rc && !committed) rc = DM_ERETRY;
    }
    if (committed) {
        h->st.merges++;
        /* The key count: what this merge changed in the MainSegments (count.c). */
        int64_t delta = (int64_t)c0 + (int64_t)c1 - (int64_t)g->n;
        if (delta) {
            dm_batch_t b;
            dm_batch_init(&b);
            dm_batch_faa(&b, h->root + SH_HDR_COUNT_OFF, (uint64_t)delta);
            dm_batch_post_async(ctx, &b);
        }
        dm_alloc_free(ctx->w->alloc, sh_meta_main(m), sh_main_bytes(g->n));
        for (uint32_t d = 0; d < g->ndead; d++)
            if (g->dead[d].bytes) dm_alloc_free(ctx->w->alloc, g->dead[d].ptr, g->dead[d].bytes);
        h->st.freed_blocks += g->ndead;
    } else if (rc != DM_EIO && !unknown) { /* nothing of ours published but maybe seg1 */
        if (main0) dm_alloc_unused(ctx->w->alloc, main0, sh_main_bytes(c0));
        if (main1 && !*moved) dm_alloc_unused(ctx->w->alloc, main1, sh_main_bytes(c1));
    }
    free(halves);
    free(b0);
    free(b1);
    free(seg1buf);
    merge_free(g);
    return rc;
}

/* Why a lease keeps the merge atomic. The merge's one commit is the meta CAS from m|LOCK
 * (which sets the new MainSegment, flips the sign and unlocks); everything before it writes
 * private blocks or, for a split, the directory (split.c: idempotent, finished by a
 * taker). A merger that dies before the commit leaves the meta locked and its new blocks
 * unreachable: they leak (a MainSegment of up to 74 KB, plus for a split whose directory
 * was not written yet its seg1 and main1) until an offline reclaim that knows SepHash
 * frees them; nothing else changes (the old MainSegment and dead versions are freed only
 * after the commit, by its winner). A taker that has seen the merge lock unchanged for the
 * lease fences the holder and CASes the lock word to its own token; it finds the meta
 * still m|LOCK and redoes the whole merge from the same inputs: the CurSegment is full
 * and no append changes it, and the MainSegment is immutable; so the result is the same,
 * and its commit CAS from m|LOCK is the one that lands. The old holder's late writes
 * cannot land: its batches under the lock carry send_by_us = its hold's end (refused after
 * it), the taker came later than that (lease > hold), and the fence drops what was on the
 * wire; its commit CAS, if sent in time but after the taker's, fails (meta words never
 * recur within an operation's life), and its lock release CAS names its own token. */
int sh_merge(dm_ctx_t *ctx, dm_sephash_t *h, const sh_loc_t *loc, uint64_t m)
{
    sh_hold_t hd;
    int took = 0;
    int rc = sh_lease_try(ctx, loc->seg + SH_CUR_LOCK_OFF, &hd, &took);
    if (rc <= 0) return rc; /* someone else merges it (or a live holder's lease runs) */
    h->st.takeovers += took;
    /* Charged apart from the append that ran into it, as RACE's splits are. */
    dm_cls_t cls = ctx->cls;
    ctx->cls = DM_CLS_SPLIT;
    uint64_t mm = 0;
    rc = dm_read_span(ctx, loc->seg, &mm, 8);
    int mine = !rc && sh_round(mm) == sh_round(m); /* not merged since */
    if (mine && !(mm & SH_META_LOCK)) {
        dm_batch_t b;
        dm_batch_init(&b);
        b.send_by_us = hd.until_us;
        dm_verb_t *v = dm_batch_cas(&b, loc->seg, mm, mm | SH_META_LOCK);
        rc = dm_batch_exec(ctx, &b);
        mine = !rc && v->result == mm;
    }
    int moved = 0;
    if (mine && sh_die(h, SH_AT_LOCKED)) rc = DM_EIO;
    /* mm locked already: a holder presumed dead locked it; its merge is redone here. */
    if (mine && !rc) rc = merge_locked(ctx, h, loc, sh_round(mm), &hd, &moved);
    if (h->died) {
        ctx->cls = cls;
        return DM_EIO;
    }
    if (!mine || rc) {
        /* Not merged by us: the meta goes back unlocked when nothing may name the new
         * segment and the pool looked sane (else it stays locked and the next holder of
         * the merge lock redoes the merge); the merge lock is freed either way. */
        dm_batch_t b;
        dm_batch_init(&b);
        b.send_by_us = hd.until_us;
        if (mine && rc != DM_ECORRUPT && !moved)
            dm_batch_cas(&b, loc->seg, sh_round(mm) | SH_META_LOCK, sh_round(mm));
        dm_batch_cas(&b, hd.addr, hd.word, 0);
        if (b.n > 1) dm_lease_unlocking(&hd);
        if (b.n == 1 || dm_batch_exec(ctx, &b)) sh_lease_release(ctx, &hd);
    }
    ctx->cls = cls;
    if (rc == DM_ERETRY) h->st.hold_ends++;
    if (rc == DM_ERETRY || (!rc && !mine)) return 0;
    return rc ? rc : 1;
}
