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

int sh_lookup(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen, int full_cur,
              sh_look_t *out)
{
    for (int attempt = 0; attempt < SH_MAX_ATTEMPTS; attempt++) {
        if (attempt) h->st.retries++;
        memset(out, 0, sizeof(*out));
        uint64_t t0 = dm_now_us();
        sh_loc_t *loc = &out->loc;
        sh_locate(h, key, klen, loc);
        sh_seg_cache_t *c = sh_cache(h, loc);
        if (!c) return DM_ENOMEM;
        int rc = c->fpt_ok ? 0 : sh_cache_load(ctx, c);
        if (rc) return rc;
        /* Other coroutines of the worker update c while this one waits: keep what the run
         * read was based on. */
        uint64_t round = c->round;
        dm_gaddr_t main = sh_meta_main(round);
        uint32_t n = sh_meta_cnt(round);
        unsigned st = c->start[loc->fp], en = c->start[loc->fp + 1];
        if (st > en || en > n) return DM_ECORRUPT;
        unsigned run = en - st;
        uint64_t *rw = malloc(8ull * run + 8);
        uint8_t *r2 = malloc(run + 1);
        uint64_t *words = malloc(8ull * (SH_CUR_N + run));
        dm_gaddr_t *addrs = malloc(8ull * (SH_CUR_N + run));
        uint64_t m1 = 0, m2 = 0, de = 0;
        uint8_t filt[2] = {0, 0};
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, h->root + SH_DIR_OFF + 8 * loc->slot, &de, 8);
        dm_batch_read(&b, loc->seg, &m1, 8);
        dm_batch_read(&b, loc->seg + SH_CUR_FILTER_OFF + loc->fp, &filt[0], 1);
        dm_batch_read(&b, loc->seg + SH_CUR_FILTER_OFF + 256 + loc->fp, &filt[1], 1);
        if (full_cur) {
            dm_batch_read(&b, loc->seg + SH_CUR_ENTRY_OFF, out->cur, 8 * SH_CUR_N);
            dm_batch_read(&b, loc->seg, &m2, 8);
        }
        if (run) {
            dm_batch_read(&b, main + SH_MAIN_HDR + 8ull * st, rw, 8 * run);
            dm_batch_read(&b, main + SH_MAIN_HDR + 8ull * n + st, r2, run);
        }
        rc = rw && r2 && words && addrs ? dm_batch_exec(ctx, &b) : DM_ENOMEM;
        int again = 0;
        if (!rc && (sh_meta_check(loc, m1) || de != sh_dir_entry(loc->seg, loc->ld))) {
            rc = sh_refresh(ctx, h);
            again = 1;
        } else if (!rc && sh_round(m1) != round) {
            if (c->round == round) c->fpt_ok = 0; /* merged since: another MainSegment */
            again = 1;
        }
        unsigned s = sh_meta_sign(m1), nw = 0;
        if (!rc && !again && !full_cur && filt[s]) {
            dm_batch_init(&b);
            dm_batch_read(&b, loc->seg + SH_CUR_ENTRY_OFF, out->cur, 8 * SH_CUR_N);
            dm_batch_read(&b, loc->seg, &m2, 8);
            rc = dm_batch_exec(ctx, &b);
            out->cur_read = 1;
        }
        out->cur_read |= full_cur;
        if (!rc && !again && out->cur_read && sh_round(m2) != sh_round(m1)) again = 1;
        if (!rc && !again) {
            out->round = sh_round(m1);
            unsigned fe = 0;
            while (out->cur_read && fe < SH_CUR_N && sh_entry_sign(out->cur[fe]) != s)
                fe++;
            out->first_empty = fe;
            for (unsigned j = fe; j-- > 0;)
                if (sh_entry_fp(out->cur[j]) == loc->fp) {
                    words[nw] = out->cur[j];
                    addrs[nw++] = loc->seg + SH_CUR_ENTRY_OFF + 8ull * j;
                }
            for (unsigned k = 0; k < run; k++)
                if (r2[k] == loc->fp2) {
                    words[nw] = rw[k];
                    addrs[nw++] = main + SH_MAIN_HDR + 8ull * (st + k);
                }
            rc = pick(ctx, key, klen, words, addrs, nw, out);
            /* A block freed by a merge is reused only after DM_GRACE_US: reads younger
             * than DM_OP_TIMEOUT_US cannot have seen a reused one. */
            int old = dm_now_us() - t0 > DM_OP_TIMEOUT_US;
            if (rc == 1 || rc == 0 || (rc == DM_ECORRUPT && old)) rc = 0;
            if (old) again = 1;
            if (again) look_free(out);
        }
        free(rw);
        free(r2);
        free(words);
        free(addrs);
        if (rc) {
            look_free(out);
            return rc;
        }
        if (!again) return 0;
    }
    return DM_ERETRY;
}

int dm_sephash_search(dm_ctx_t *ctx, dm_sephash_t *h, const void *key, size_t klen,
                      dm_point_item_t *item)
{
    sh_look_t *o = malloc(sizeof(*o));
    if (!o) return DM_ENOMEM;
    int rc = sh_lookup(ctx, h, key, klen, 0, o);
    if (!rc) {
        memset(item, 0, sizeof(*item));
        item->version = sh_version(o->newest);
        item->addr = o->newest_addr;
        if (o->block) {
            item->block = o->block;
            item->block_len = o->block_len;
            item->view = o->view;
            item->view.version = item->version;
            rc = 1;
        }
    }
    free(o);
    return rc;
}
