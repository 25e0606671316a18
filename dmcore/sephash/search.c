/* SepHash search (SepHash §4.2.1 "Search", §4.4): the filter and the MainSegment run in one
 * round trip, the CurSegment only when the filter says so, then the KV blocks. */
#include "dmkv/sephash.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "sephash_internal.h"

#define SH_MAX_ATTEMPTS 100000

/* Why the directory slot is read too: a split points the moved half's slots at the new
 * segment before its commit CAS deepens the old one's meta, and writers that found the new
 * segment append there meanwhile (for up to a lease when the merger died, split.c). A
 * reader whose cached directory still names the old segment would read the old round
 * there (its meta still says ld: sh_meta_check passes) and miss such an acknowledged
 * append; reading its slot in the same batch shows the move (the slot was written before
 * the writer could find the new segment). One 8-byte READ, no round trip. Not covered: a
 * reader and a writer that reach the key through different slots (their cached GDs
 * differ) while a split of more than 64 slots (several batches) is half written.
 *
 * Why one round is enough. The meta word is read first: m1 names round R (its
 * MainSegment, its sign). The filter byte filter[sign][fp] is read after it: a writer sets
 * it before its entry CAS (same message, in order), and a merge clears a filter only for
 * the round after next, so a clear byte means no entry of fp was appended in round R up
 * to that read (if R had ended by then, up to its end): the key's state then was its
 * MainSegment's. Otherwise the CurSegment is read with the meta again behind it (m2): an
 * unchanged round means no merge in between (sephash_internal.h), and the entries read
 * full below the first one read empty were full when it was read, the later ones not (in
 * order appends): that prefix and the MainSegment are the state at that instant. */
int sh_round_unchanged(dm_ctx_t *ctx, dm_gaddr_t seg, uint64_t m)
{
    uint64_t now = 0;
    return dm_read_span(ctx, seg, &now, 8) == 0 && sh_round(now) == sh_round(m);
}

static void look_free(sh_look_t *o)
{
    free(o->block);
    o->block = NULL;
}

/* Read the blocks of the candidates, newest first, and take the first that holds key. 1:
 * found (out filled), 0: none holds it, DM_ECORRUPT: a block did not parse, DM_E*. */
static int pick(dm_ctx_t *ctx, const void *key, size_t klen, const uint64_t *words,
                const dm_gaddr_t *addrs, unsigned n, sh_look_t *out)
{
    if (!n) return 0;
    uint8_t **bufs = calloc(n, sizeof(*bufs));
    uint64_t *lens = calloc(n, sizeof(*lens));
    int rc = bufs && lens ? sh_read_blocks(ctx, words, n, bufs, lens) : DM_ENOMEM;
    int found = 0;
    for (unsigned i = 0; !rc && i < n && !found; i++) {
        dm_kv_view_t v;
        if (dm_kvblock_parse(bufs[i], lens[i], &v)) {
            rc = DM_ECORRUPT;
            break;
        }
        if (v.key_len != klen || memcmp(v.key, key, klen)) continue;
        found = 1;
        out->newest = words[i];
        out->newest_addr = addrs[i];
        if (sh_entry_len(words[i])) { /* live: hand the block over */
            out->block = bufs[i];
            out->block_len = lens[i];
            out->view = v;
            bufs[i] = NULL;
        }
    }
    for (unsigned i = 0; bufs && i < n; i++)
        free(bufs[i]);
    free(bufs);
    free(lens);
    return rc ? rc : found;
}

/* The reads of one lookup attempt, one batch (sh_lookup_issue). */
struct sh_reads {
    sh_loc_t loc;
    uint64_t round;   /* the cached round (meta, lock bit clear) the run was chosen by */
    uint64_t seen_us; /* ... and when it was last seen current (sh_seg_cache_t) */
    unsigned st, run;
    int full_cur;
    uint64_t de, m1, m2;
    uint8_t filt[2];
    uint64_t cur[SH_CUR_N];
    uint64_t *rw; /* the key's MainSegment run: entries (in the same allocation) */
    uint8_t *r2;  /* ... and their fp2 bytes */
};

void sh_reads_free(sh_reads_t *r)
{
    free(r);
}

int sh_lookup_issue(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, int full_cur,
                    int may_load, dm_batch_t *b, sh_reads_t **out)
{
    *out = NULL;
    sh_loc_t loc;
    sh_locate(h, key, klen, &loc);
    sh_seg_cache_t *c = sh_cache(h, &loc);
    if (!c) return DM_ENOMEM;
    int rc = c->fpt_ok ? 0 : may_load ? sh_cache_load(ctx, c) : DM_EINVAL;
    if (rc) return rc;
    /* Other coroutines of the worker update c while this one waits: keep what the run
     * read was based on. */
    const uint64_t round = c->round;
    unsigned st = c->start[loc.fp], en = c->start[loc.fp + 1];
    if (st > en || en > sh_meta_cnt(round)) return DM_ECORRUPT;
    unsigned run = en - st;
    if (b->n + 4 + 2 * !!full_cur + 2 * !!run > DM_BATCH_MAX) return DM_EINVAL;
    sh_reads_t *r = malloc(sizeof(*r) + 9ull * run);
    if (!r) return DM_ENOMEM;
    r->loc = loc, r->round = round, r->seen_us = c->seen_us, r->st = st, r->run = run;
    r->full_cur = full_cur;
    r->rw = (uint64_t *)(r + 1);
    r->r2 = (uint8_t *)(r->rw + run);
    const dm_gaddr_t main = sh_meta_main(round);
    const uint32_t n = sh_meta_cnt(round);
    dm_batch_read(b, h->root + SH_DIR_OFF + 8 * loc.slot, &r->de, 8);
    dm_batch_read(b, loc.seg, &r->m1, 8);
    dm_batch_read(b, loc.seg + SH_CUR_FILTER_OFF + loc.fp, &r->filt[0], 1);
    dm_batch_read(b, loc.seg + SH_CUR_FILTER_OFF + 256 + loc.fp, &r->filt[1], 1);
    if (full_cur) {
        dm_batch_read(b, loc.seg + SH_CUR_ENTRY_OFF, r->cur, 8 * SH_CUR_N);
        dm_batch_read(b, loc.seg, &r->m2, 8);
    }
    if (run) {
        dm_batch_read(b, main + SH_MAIN_HDR + 8ull * st, r->rw, 8 * r->run);
        dm_batch_read(b, main + SH_MAIN_HDR + 8ull * n + st, r->r2, r->run);
    }
    *out = r;
    return 0;
}

int sh_lookup_eval(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, sh_reads_t *r,
                   uint64_t t0, sh_look_t *out)
{
    memset(out, 0, sizeof(*out));
    out->loc = r->loc;
    const sh_loc_t *loc = &r->loc;
    sh_seg_cache_t *c = sh_cache(h, loc);
    if (!c) return DM_ENOMEM;
    if (sh_meta_check(loc, r->m1) || r->de != sh_dir_entry(loc->seg, loc->ld)) {
        int rc = sh_refresh(ctx, h);
        return rc ? rc : DM_ERETRY;
    }
    /* Posted too long after the round was last seen current (a range lock's batch that
     * waited): the meta word may name a reused MainSegment (sh_seg_cache_t). */
    if (sh_round(r->m1) != r->round || sh_cache_stale(r->seen_us, t0)) {
        if (c->round == r->round) c->fpt_ok = 0; /* merged since: another MainSegment */
        return DM_ERETRY;
    }
    sh_cache_seen(c, r->round, t0);
    unsigned s = sh_meta_sign(r->m1), nw = 0;
    if (r->full_cur) {
        memcpy(out->cur, r->cur, sizeof(out->cur));
        out->cur_read = 1;
    } else if (r->filt[s]) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, loc->seg + SH_CUR_ENTRY_OFF, out->cur, 8 * SH_CUR_N);
        dm_batch_read(&b, loc->seg, &r->m2, 8);
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        out->cur_read = 1;
    }
    if (out->cur_read && sh_round(r->m2) != sh_round(r->m1)) return DM_ERETRY;
    out->round = sh_round(r->m1);
    uint64_t *words = malloc(8ull * (SH_CUR_N + r->run));
    dm_gaddr_t *addrs = malloc(8ull * (SH_CUR_N + r->run));
    if (!words || !addrs) {
        free(words), free(addrs);
        return DM_ENOMEM;
    }
    unsigned fe = 0;
    while (out->cur_read && fe < SH_CUR_N && sh_entry_sign(out->cur[fe]) != s)
        fe++;
    out->first_empty = fe;
    for (unsigned j = fe; j-- > 0;)
        if (sh_entry_fp(out->cur[j]) == loc->fp) {
            words[nw] = out->cur[j];
            addrs[nw++] = loc->seg + SH_CUR_ENTRY_OFF + 8ull * j;
        }
    dm_gaddr_t main = sh_meta_main(r->round);
    for (unsigned k = 0; k < r->run; k++)
        if (r->r2[k] == loc->fp2) {
            words[nw] = r->rw[k];
            addrs[nw++] = main + SH_MAIN_HDR + 8ull * (r->st + k);
        }
    int rc = pick(ctx, key, klen, words, addrs, nw, out);
    free(words);
    free(addrs);
    /* A block freed by a merge is reused only after DM_GRACE_US: reads younger than
     * DM_OP_TIMEOUT_US cannot have seen a reused one. An older one (a large value's
     * transfer on a slow link) stands when the round is still the one read: blocks are freed
     * only by a merge, after its commit changed the round (issue 12, item 7). */
    int old = dm_now_us() - t0 > DM_OP_TIMEOUT_US;
    if (old && rc != DM_ENOMEM && sh_round_unchanged(ctx, loc->seg, r->m1)) old = 0;
    if (rc == 1 || rc == 0 || (rc == DM_ECORRUPT && old)) rc = 0;
    if (!rc && old) rc = DM_ERETRY;
    if (rc) look_free(out);
    return rc;
}

int sh_lookup(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, int full_cur,
              sh_look_t *out)
{
    for (int attempt = 0; attempt < SH_MAX_ATTEMPTS; attempt++) {
        if (attempt) h->st.retries++;
        uint64_t t0 = dm_now_us();
        dm_batch_t b;
        dm_batch_init(&b);
        sh_reads_t *r;
        int rc = sh_lookup_issue(ctx, h, key, klen, full_cur, 1, &b, &r);
        if (!rc) rc = dm_batch_exec(ctx, &b);
        if (!rc) rc = sh_lookup_eval(ctx, h, key, klen, r, t0, out);
        sh_reads_free(r);
        if (rc != DM_ERETRY) return rc;
    }
    return DM_ERETRY;
}

int sh_look_item(sh_look_t *o, dm_point_item_t *item)
{
    memset(item, 0, sizeof(*item));
    item->version = sh_version(o->newest);
    item->addr = o->newest_addr;
    if (!o->block) return 0;
    item->block = o->block;
    item->block_len = o->block_len;
    item->view = o->view;
    item->view.version = item->version;
    o->block = NULL; /* the item's now */
    return 1;
}

int dm_sephash_search(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen,
                      dm_point_item_t *item)
{
    sh_look_t *o = malloc(sizeof(*o));
    if (!o) return DM_ENOMEM;
    int rc = sh_lookup(ctx, h, key, klen, 0, o);
    if (!rc) rc = sh_look_item(o, item);
    free(o);
    return rc;
}
