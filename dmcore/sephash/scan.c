/* SepHash scan and flush (dmkv: not in the paper, whose index has point operations only).
 *
 * A scan walks directory slots in increasing order and reads a segment at its canonical
 * slot, its suffix (j < 2^ld, ld from the meta word read with the segment): one round of
 * the segment (meta, CurSegment, meta again: the same round, as search.c argues), its
 * MainSegment and every entry's KV block; it emits the newest version of each key of that
 * round, tombstones hidden.
 *
 * Why a key present for the whole scan is emitted at least once. Let c(k) be the canonical
 * slot of k's segment: k's hash suffix at the segment's local depth. Local depths only
 * grow (splits), so c(k) never decreases. Claim: when the scan is about to read slot j,
 * k was emitted already or c(k) >= j. When it reads slot j = c(k): slot c(k) names k's
 * segment S (c(k) < 2^ld(S) <= 2^GD is one of S's slots) or, while S's split is half
 * written, S's parent, whose meta is then still locked at the old depth with the round
 * that holds k (the split's commit comes after its directory writes). If the round read
 * holds k, k is emitted; if not, a split committed before the read and k moved to the new
 * half, whose canonical slot c(k) + 2^ld > j is still ahead. The walk ends only at a slot
 * past 2^GD read after the last slot, and c(k) < 2^GD. A key is emitted more than once
 * when a segment the scan passed splits and its new half's slot is still ahead; a key
 * written or deleted during the scan may or may not be. A segment merged between the
 * reads of its round is read again. */
#include "dmkv/sephash.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/kvblock.h"
#include "sephash_internal.h"

#define SH_SCAN_ATTEMPTS 1000

/* Emit the live items of the segment at slot j when j is its canonical slot; *n: how
 * many. Returns 0 or DM_E*. */
static int scan_slot(dm_ctx_t *ctx, dm_sephash_t *h, uint64_t j, dm_sephash_emit_fn emit, void *arg,
                     unsigned *n)
{
    *n = 0;
    for (int attempt = 0; attempt < SH_SCAN_ATTEMPTS; attempt++) {
        if (attempt) h->st.retries++;
        uint64_t t0 = dm_now_us(), e = 0, m1 = 0, m2 = 0, cur[SH_CUR_N];
        int rc = dm_read_span(ctx, h->root + SH_DIR_OFF + 8 * j, &e, 8);
        if (rc) return rc;
        dm_gaddr_t seg = sh_dir_seg(e);
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, seg, &m1, 8);
        dm_batch_read(&b, seg + SH_CUR_ENTRY_OFF, cur, sizeof(cur));
        dm_batch_read(&b, seg, &m2, 8);
        if ((rc = dm_batch_exec(ctx, &b))) return rc;
        if (sh_round(m1) != sh_round(m2)) continue;
        unsigned ld = sh_meta_ld(m1), s = sh_meta_sign(m1), fe = 0;
        if (j >= (1ull << ld)) return 0; /* not its canonical slot */
        uint32_t cnt = sh_meta_cnt(m1);
        while (fe < SH_CUR_N && sh_entry_sign(cur[fe]) != s)
            fe++;
        uint64_t *words = malloc(8ull * (fe + cnt + 1));
        uint8_t **bufs = calloc(fe + cnt + 1, sizeof(*bufs));
        uint64_t *lens = calloc(fe + cnt + 1, 8), *los = calloc(fe + 1, 16);
        rc = words && bufs && lens && los ? 0 : DM_ENOMEM;
        if (!rc) {
            for (unsigned i = 0; i < fe; i++) /* newest first */
                words[i] = cur[fe - 1 - i];
            rc = dm_read_span(ctx, sh_meta_main(m1) + SH_MAIN_HDR, words + fe, 8ull * cnt);
        }
        if (!rc) rc = sh_read_blocks(ctx, words, fe + cnt, bufs, lens);
        /* Blocks freed by a later merge are reused only after DM_GRACE_US; past it the
         * reads stand while the round is unchanged (sh_round_unchanged). */
        int again = !rc && dm_now_us() - t0 > DM_OP_TIMEOUT_US && !sh_round_unchanged(ctx, seg, m1);
        dm_kv_view_t *vs = again || rc ? NULL : calloc(fe + cnt + 1, sizeof(*vs));
        if (!rc && !again && !vs) rc = DM_ENOMEM;
        for (uint32_t i = 0; vs && !rc && i < fe + cnt; i++)
            if (dm_kvblock_parse(bufs[i], lens[i], &vs[i])) rc = DM_ECORRUPT;
        for (uint32_t i = 0; vs && !rc && i < fe + cnt; i++) {
            uint64_t lo, hi;
            sh_hash(vs[i].key, vs[i].key_len, &lo, &hi);
            if ((lo & ((1ull << ld) - 1)) != j) continue; /* not this slot's segment */
            int dup = 0; /* a newer CurSegment entry of the same key */
            for (uint32_t k = 0; k < fe && k < i && !dup; k++)
                dup = los[2 * k] == lo && los[2 * k + 1] == hi && vs[k].key_len == vs[i].key_len &&
                      !memcmp(vs[k].key, vs[i].key, vs[i].key_len);
            if (i < fe) los[2 * i] = lo, los[2 * i + 1] = hi;
            if (dup || !sh_entry_len(words[i])) continue;
            vs[i].version = sh_version(words[i]);
            emit(arg, &vs[i]);
            (*n)++;
        }
        for (uint32_t i = 0; bufs && i < fe + cnt; i++)
            free(bufs[i]);
        free(vs);
        free(words);
        free(bufs);
        free(lens);
        free(los);
        if (rc || !again) return rc;
    }
    return DM_ERETRY;
}

static int read_gd(dm_ctx_t *ctx, dm_sephash_t *h, uint64_t *gd)
{
    int rc = dm_read_span(ctx, h->root + SH_HDR_GD_OFF, gd, 8);
    return !rc && *gd > SH_MAX_DEPTH ? DM_ECORRUPT : rc;
}

int dm_sephash_scan(dm_ctx_t *ctx, dm_sephash_t *h, uint64_t cursor, unsigned count,
                    dm_sephash_emit_fn emit, void *arg, uint64_t *next)
{
    uint64_t gd, j = cursor;
    int rc = read_gd(ctx, h, &gd);
    unsigned emitted = 0;
    while (!rc) {
        if (j >= (1ull << gd)) {
            /* The end: only if the directory did not double meanwhile. */
            uint64_t gd2;
            if ((rc = read_gd(ctx, h, &gd2))) break;
            if (j >= (1ull << gd2)) {
                j = 0;
                break;
            }
            gd = gd2;
        }
        if (emitted >= count && j != cursor) break;
        unsigned n;
        rc = scan_slot(ctx, h, j, emit, arg, &n);
        emitted += n;
        j++;
    }
    if (!rc) *next = j;
    return rc;
}

/* Flush: the keys a scan call returned, each deleted by a tombstone append. */
typedef struct flush_keys {
    uint8_t **keys;
    uint32_t *lens;
    unsigned n, cap;
    int oom;
} flush_keys_t;

static void collect(void *arg, const dm_kv_view_t *v)
{
    flush_keys_t *f = arg;
    if (f->n == f->cap) {
        unsigned cap = f->cap ? 2 * f->cap : 256;
        uint8_t **k = realloc(f->keys, cap * sizeof(*k));
        if (k) f->keys = k;
        uint32_t *l = realloc(f->lens, cap * sizeof(*l));
        if (l) f->lens = l;
        if (!k || !l) {
            f->oom = 1;
            return;
        }
        f->cap = cap;
    }
    uint8_t *key = malloc(v->key_len + 1);
    if (!key) {
        f->oom = 1;
        return;
    }
    memcpy(key, v->key, v->key_len);
    f->keys[f->n] = key;
    f->lens[f->n++] = v->key_len;
}

int dm_sephash_flush(dm_ctx_t *ctx, dm_sephash_t *h, uint64_t *deleted)
{
    flush_keys_t f = {0};
    uint64_t cursor = 0, del = 0;
    int rc;
    do {
        rc = dm_sephash_scan(ctx, h, cursor, 256, collect, &f, &cursor);
        if (!rc && f.oom) rc = DM_ENOMEM;
        for (unsigned i = 0; i < f.n; i++) {
            if (!rc)
                rc =
                    dm_sephash_put(ctx, h, f.keys[i], f.lens[i], NULL, 0, DM_SH_TOMBSTONE, 0, NULL);
            del += !rc;
            free(f.keys[i]);
        }
        f.n = 0;
    } while (!rc && cursor);
    free(f.keys);
    free(f.lens);
    if (deleted) *deleted = del;
    return rc;
}
