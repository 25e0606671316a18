/* RACE extendible resizing (RACE §3.4.2) with the windows docs/NOTES.md §1.9 points out closed:
 * a subtable split runs under a lease on the subtable's lock word (a dead splitter's lease
 * expires and the next gateway that needs the subtable finishes its work); directory
 * writes (entries, doubling) run under the directory lease. A split freezes the whole
 * subtable (a MOVING mark on every slot, empty ones included) while it copies the moving
 * slots into the new subtable, publishes it, then unfreezes: moved slots emptied, the
 * others given back. Writers wait on frozen slots, so no update lands on a copy that is
 * about to disappear and no insert lands behind the copy. An insert that raced the header
 * change into the old subtable (a stale view) is invisible there and moves itself. */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "dmkv/log.h"
#include "race_internal.h"

static uint64_t splits_done, splits_running, dir_doublings;

void dm_race_split_stats(uint64_t *done, uint64_t *running, uint64_t *doublings)
{
    *done = __atomic_load_n(&splits_done, __ATOMIC_RELAXED);
    *running = __atomic_load_n(&splits_running, __ATOMIC_RELAXED);
    *doublings = __atomic_load_n(&dir_doublings, __ATOMIC_RELAXED);
}

/* Test hook: DMKV_SPLIT_PAUSE_MS holds every split for that long after its copy phase
 * and after publishing, so a test can kill a gateway in the middle of one (read at each
 * split: splits are rare, and unit tests change it in-process). */
static void split_test_pause(dm_ctx_t *ctx)
{
    const char *env = getenv("DMKV_SPLIT_PAUSE_MS");
    int ms = env ? atoi(env) : 0;
    if (ms > 0) race_pause(ctx, (uint32_t)ms * 1000u);
}

#define MOVE_CHUNK 1024 /* buckets per step: a whole subtable of DM_RACE_GROUPS (768) */
#define COPY_PASSES 64  /* reads of a chunk whose slots keep changing under the copy */

void race_pause(dm_ctx_t *ctx, uint32_t us)
{
    dm_ctx_sleep(ctx, us);
}

/* Take a lease word: 0 -> ours, or steal an expired one. Returns 0 (free), 1 (stolen
 * from a holder whose lease expired: its work may be half done), DM_ERETRY (held). */
static int lease_take(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t *mine)
{
    dm_race_t *r = ctx->w->race;
    uint64_t now = dm_wall_ms();
    uint64_t want = race_lease(r->owner, now + RACE_LEASE_MS);
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *v = dm_batch_cas(&b, addr, 0, want);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (v->result == 0) {
        *mine = want;
        return 0;
    }
    uint64_t cur = v->result;
    if (race_lease_expiry(cur) >= now) return DM_ERETRY;
    dm_batch_init(&b);
    v = dm_batch_cas(&b, addr, cur, want);
    rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (v->result != cur) return DM_ERETRY;
    *mine = want;
    return 1;
}

/* Extend our lease; DM_ERETRY if it was taken from us (we were too slow: stop). */
static int lease_renew(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t *mine)
{
    uint64_t want = race_lease(ctx->w->race->owner, dm_wall_ms() + RACE_LEASE_MS);
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *v = dm_batch_cas(&b, addr, *mine, want);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (v->result != *mine) return DM_ERETRY;
    *mine = want;
    return 0;
}

static void lease_release(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t mine)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_cas(&b, addr, mine, 0);
    dm_batch_exec(ctx, &b);
}

static dm_gaddr_t lock_addr(const dm_race_t *r, uint64_t suffix)
{
    return r->root + RACE_LOCK_OFF + 8 * suffix;
}

/* Per-chunk work lists of the copy and unfreeze phases (on the heap: coroutine stacks). */
#define SLOTS_PER_CHUNK (MOVE_CHUNK * 8)
typedef struct slot_work {
    unsigned idx[SLOTS_PER_CHUNK], ci[SLOTS_PER_CHUNK];
    uint64_t words[SLOTS_PER_CHUNK], ce[SLOTS_PER_CHUNK], cw[SLOTS_PER_CHUNK];
    dm_gaddr_t ca[SLOTS_PER_CHUNK];
    uint8_t done[SLOTS_PER_CHUNK], moves[SLOTS_PER_CHUNK], ok[SLOTS_PER_CHUNK];
    uint8_t *bufs[SLOTS_PER_CHUNK]; /* the copy's blocks (race_read_blocks) */
    uint64_t lens[SLOTS_PER_CHUNK];
} slot_work_t;

/* CAS each of the n slots at addrs from expect[i] to want[i], all in one round trip
 * (dm_bulk_t); ok[i] tells which won. Returns 0 or DM_E*. */
static int cas_slots(dm_ctx_t *ctx, const dm_gaddr_t *addrs, const uint64_t *expect,
                     const uint64_t *want, unsigned n, uint8_t *ok)
{
    dm_bulk_t k;
    dm_bulk_init(&k);
    dm_verb_t **v = malloc(n * sizeof(*v));
    int rc = v ? 0 : DM_ENOMEM;
    for (unsigned i = 0; i < n && !rc; i++) {
        dm_batch_t *b = dm_bulk_for(&k, addrs[i]);
        if (!b)
            rc = DM_ENOMEM;
        else
            v[i] = dm_batch_cas(b, addrs[i], expect[i], want[i]);
    }
    if (!rc) rc = dm_bulk_exec(ctx, &k);
    for (unsigned i = 0; i < n && !rc; i++)
        ok[i] = v[i]->result == expect[i];
    dm_bulk_free(&k);
    free(v);
    return rc;
}

/* Copy phase of a split of X (depth l -> l+1), before N is published. X is frozen whole:
 * every slot gets the MOVING mark (an empty one becomes the word RACE_SLOT_MOVING), so from
 * the moment a chunk is done until the clear phase nothing lands in it, and no insert or
 * delete can slip in behind the copy. Slots whose key has suffix bit l set are also placed
 * at the SAME bucket and slot of N's image. The two subtables share the bucket geometry,
 * so a key always fits where it was: a split can never get stuck. Slots found frozen
 * already (a dead splitter's work) are taken as they are. RACE §3.4.2 lets inserts and
 * deletes run during the move; that leaves an insert visible in a bucket the move has
 * passed (docs/leases.md "Stranded inserts"), so dmkv makes writers to X wait instead. */
static int copy_phase(dm_ctx_t *ctx, dm_gaddr_t X, unsigned l, uint32_t s, uint64_t *image,
                      dm_gaddr_t lock, uint64_t *mine)
{
    dm_race_t *r = ctx->w->race;
    uint64_t nb = r->groups * 3;
    uint64_t *raw = malloc(MOVE_CHUNK * DM_RACE_BUCKET);
    slot_work_t *wk = malloc(sizeof(*wk));
    uint8_t *done = wk ? wk->done : NULL;
    if (!raw || !wk) {
        free(raw);
        free(wk);
        return DM_ENOMEM;
    }
    int rc = 0;
    for (uint64_t c = 0; c < nb && !rc; c += MOVE_CHUNK) {
        uint64_t n = nb - c < MOVE_CHUNK ? nb - c : MOVE_CHUNK;
        dm_gaddr_t base = X + c * DM_RACE_BUCKET;
        memset(done, 0, SLOTS_PER_CHUNK);
        int again = 1;
        for (int pass = 0; pass < COPY_PASSES && again && !rc; pass++) {
            again = 0;
            dm_batch_t b;
            dm_batch_init(&b);
            dm_batch_read(&b, base, raw, (uint32_t)(n * DM_RACE_BUCKET));
            if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
            unsigned *idx = wk->idx, ns = 0; /* slots with a key, not done yet */
            uint64_t *words = wk->words;
            dm_gaddr_t *ca = wk->ca; /* freezing CASes */
            uint64_t *ce = wk->ce, *cw = wk->cw;
            unsigned *ci = wk->ci, nc = 0;
            uint8_t *moves = wk->moves, *ok = wk->ok;
            memset(moves, 0, SLOTS_PER_CHUNK);
            for (unsigned i = 0; i < n * 8; i++) {
                if (i % 8 == 0 || done[i]) continue;
                if (race_slot_ptr(raw[i])) {
                    idx[ns] = i;
                    words[ns++] = raw[i];
                } else if (raw[i] == RACE_SLOT_MOVING) {
                    done[i] = 1;
                } else {
                    ci[nc] = i, ca[nc] = base + i * 8, ce[nc] = raw[i];
                    cw[nc++] = raw[i] | RACE_SLOT_MOVING;
                }
            }
            uint8_t **bufs = wk->bufs;
            uint64_t *lens = wk->lens;
            rc = race_read_blocks(ctx, words, ns, bufs, lens);
            for (unsigned k = 0; k < ns && !rc; k++) {
                unsigned i = idx[k];
                uint64_t w = words[k];
                dm_kv_view_t kv;
                if (dm_kvblock_parse(bufs[k], lens[k], &kv) != 0) {
                    again = 1; /* the slot changed after we read it */
                    continue;
                }
                uint64_t h = race_key_hash(kv.key, kv.key_len, NULL);
                /* A stray (its writer takes it back) or a key that stays: frozen only. */
                moves[i] = (h & ((1ull << l) - 1)) == s && ((h >> l) & 1);
                if (race_slot_moving(w)) {
                    if (moves[i]) image[c * 8 + i] = w & ~RACE_SLOT_MOVING;
                    done[i] = 1;
                    continue;
                }
                ci[nc] = i, ca[nc] = base + i * 8, ce[nc] = w;
                cw[nc++] = w | RACE_SLOT_MOVING;
            }
            for (unsigned k = 0; k < ns; k++) {
                free(bufs[k]);
                bufs[k] = NULL;
            }
            if (!rc && nc) rc = cas_slots(ctx, ca, ce, cw, nc, ok);
            for (unsigned k = 0; !rc && k < nc; k++) {
                if (!ok[k]) {
                    again = 1; /* a writer changed it first: take it on the next pass */
                    continue;
                }
                done[ci[k]] = 1;
                if (moves[ci[k]]) image[c * 8 + ci[k]] = ce[k];
            }
            if (!rc) rc = lease_renew(ctx, lock, mine);
        }
        if (!rc && again) rc = DM_ERETRY; /* X kept changing: give up (the caller thaws) */
    }
    free(raw);
    free(wk);
    return rc;
}

/* Unfreeze X after a split: each bucket of X first goes to depth d (❶, so a stale reader
 * of a moved key sees case 3), then each frozen slot is emptied when N holds its copy at
 * the same place (moved) or when it was an empty slot, and gets its word back otherwise (a
 * key that stays in X). With N = 0 and d = 0 (a split that gave up before publishing)
 * nothing moved and every slot gets its word back. */
static int unfreeze_phase(dm_ctx_t *ctx, dm_gaddr_t X, dm_gaddr_t N, unsigned d, uint32_t s,
                          dm_gaddr_t lock, uint64_t *mine)
{
    dm_race_t *r = ctx->w->race;
    uint64_t nb = r->groups * 3;
    uint64_t *raw = malloc(MOVE_CHUNK * DM_RACE_BUCKET);
    uint64_t *nraw = N ? malloc(MOVE_CHUNK * DM_RACE_BUCKET) : NULL;
    slot_work_t *wk = malloc(sizeof(*wk));
    if (!raw || (N && !nraw) || !wk) {
        free(raw);
        free(nraw);
        free(wk);
        return DM_ENOMEM;
    }
    int rc = 0;
    for (uint64_t c = 0; c < nb && !rc; c += MOVE_CHUNK) {
        uint64_t n = nb - c < MOVE_CHUNK ? nb - c : MOVE_CHUNK;
        dm_gaddr_t base = X + c * DM_RACE_BUCKET;
        for (int pass = 0; pass < 8 && !rc; pass++) {
            dm_batch_t b;
            dm_batch_init(&b);
            dm_batch_read(&b, base, raw, (uint32_t)(n * DM_RACE_BUCKET));
            if (N) dm_batch_read(&b, N + c * DM_RACE_BUCKET, nraw, (uint32_t)(n * DM_RACE_BUCKET));
            if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
            dm_bulk_t k;
            dm_bulk_init(&k);
            for (uint64_t bk = 0; d && bk < n && !rc; bk++) {
                if (race_hdr_ld(raw[bk * 8]) >= d) continue;
                dm_gaddr_t ha = base + bk * DM_RACE_BUCKET;
                dm_batch_t *hb = dm_bulk_for(&k, ha);
                if (!hb)
                    rc = DM_ENOMEM;
                else
                    dm_batch_cas(hb, ha, raw[bk * 8], race_bucket_hdr(d, s));
            }
            if (rc || k.n) {
                if (!rc) rc = dm_bulk_exec(ctx, &k);
                dm_bulk_free(&k);
                continue; /* headers first, then read the slots again */
            }
            dm_gaddr_t *ca = wk->ca;
            uint64_t *ce = wk->ce, *cw = wk->cw;
            unsigned nc = 0;
            for (uint64_t i = 0; i < n * 8; i++) {
                if (i % 8 == 0 || !race_slot_moving(raw[i])) continue;
                uint64_t w = raw[i] & ~RACE_SLOT_MOVING;
                int moved = N && race_slot_ptr(w) && nraw[i] == w;
                ca[nc] = base + i * 8, ce[nc] = raw[i];
                cw[nc++] = race_slot_ptr(w) && !moved ? w : 0;
            }
            if (nc) rc = cas_slots(ctx, ca, ce, cw, nc, wk->ok);
            if (!rc) rc = lease_renew(ctx, lock, mine);
            break;
        }
    }
    free(raw);
    free(nraw);
    free(wk);
    return rc;
}

/* N has all its keys: drop the MOVING-IN flag from its bucket headers. */
static int clear_moving(dm_ctx_t *ctx, dm_gaddr_t N, unsigned d, uint32_t ns)
{
    dm_race_t *r = ctx->w->race;
    uint64_t hdr = race_bucket_hdr(d, ns);
    uint64_t nb = r->groups * 3;
    int rc = 0;
    dm_bulk_t k;
    dm_bulk_init(&k);
    for (uint64_t bk = 0; bk < nb && !rc; bk++) {
        dm_batch_t *b = dm_bulk_for(&k, N + bk * DM_RACE_BUCKET);
        if (!b)
            rc = DM_ENOMEM;
        else
            dm_batch_write(b, N + bk * DM_RACE_BUCKET, &hdr, 8);
    }
    if (!rc) rc = dm_bulk_exec(ctx, &k);
    dm_bulk_free(&k);
    return rc;
}

/* Point the directory at N for suffix s|2^l and at X for s, both at depth l+1, doubling the
 * directory first when l == GD (RACE §3.4 "directory doubling"). Under the directory lease:
 * the whole used directory is written from a cache read under the same lease. The split's
 * subtable lease (sub_lock, *sub_mine) is renewed while we wait for the directory lease, and
 * both leases are renewed (CAS) just before the directory WRITE: a splitter whose lease was
 * taken over meanwhile stops there instead of writing a stale directory. */
static int publish(dm_ctx_t *ctx, uint32_t s, unsigned l, dm_gaddr_t X, dm_gaddr_t N,
                   dm_gaddr_t sub_lock, uint64_t *sub_mine)
{
    dm_race_t *r = ctx->w->race;
    dm_gaddr_t dlock = r->root + RACE_HDR_DIRLOCK_OFF;
    uint64_t mine;
    int rc;
    uint64_t since = dm_now_us(), renewed = since;
    while ((rc = lease_take(ctx, dlock, &mine)) == DM_ERETRY) {
        if (dm_now_us() - since > 2000ull * RACE_LEASE_MS) return DM_ERETRY;
        if (dm_now_us() - renewed > 250000u * RACE_LEASE_MS / 1000) {
            rc = lease_renew(ctx, sub_lock, sub_mine); /* still ours while we wait */
            if (rc) return rc;
            renewed = dm_now_us();
        }
        race_pause(ctx, 200);
    }
    if (rc < 0) return rc;
    uint64_t *dir = malloc(8ull << DM_RACE_MAX_DEPTH);
    unsigned gd = 0, ngd;
    uint64_t groups;
    rc = dir ? race_read_dir(ctx, r, dir, &gd, &groups) : DM_ENOMEM;
    ngd = gd;
    if (!rc && l == gd) {
        if (gd >= DM_RACE_MAX_DEPTH)
            rc = DM_EFULL;
        else {
            memcpy(dir + (1ull << gd), dir, 8ull << gd);
            ngd = gd + 1;
        }
    }
    if (!rc) rc = lease_renew(ctx, dlock, &mine);
    if (!rc) rc = lease_renew(ctx, sub_lock, sub_mine);
    if (!rc) {
        for (uint64_t i = s; i < (1ull << ngd); i += 1ull << l)
            dir[i] = ((i >> l) & 1) ? race_dir_entry(N, l + 1) : race_dir_entry(X, l + 1);
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, r->root + RACE_DIR_OFF, dir, (uint32_t)(8ull << ngd));
        rc = dm_batch_exec(ctx, &b);
    }
    if (!rc && ngd != gd) {
        /* The new half is written: now make it visible. */
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, r->root + RACE_HDR_GD_OFF, gd, ngd);
        rc = dm_batch_exec(ctx, &b);
        if (!rc && v->result != gd) rc = DM_ERETRY; /* our lease was stolen */
        if (!rc) {
            __atomic_fetch_add(&dir_doublings, 1, __ATOMIC_RELAXED);
            dm_log(DM_LOG_VERBOSE, "RACE directory doubled to global depth %u", ngd);
        }
    }
    if (!rc) { /* install without yielding: other coroutines share the cache */
        memcpy(r->dir, dir, 8ull << ngd);
        r->global_depth = ngd;
        r->installs++;
    }
    free(dir);
    lease_release(ctx, dlock, mine);
    return rc;
}

/* A private, consistent copy of the directory (the worker's cache is shared by all its
 * coroutines and may mix snapshots): what splits decide on. */
typedef struct dir_snap {
    uint64_t *dir;
    unsigned gd;
} dir_snap_t;

static int snap_read(dm_ctx_t *ctx, dir_snap_t *sn)
{
    uint64_t groups;
    if (!sn->dir) sn->dir = malloc(8ull << DM_RACE_MAX_DEPTH);
    if (!sn->dir) return DM_ENOMEM;
    return race_read_dir(ctx, ctx->w->race, sn->dir, &sn->gd, &groups);
}

static uint64_t snap_get(const dir_snap_t *sn, uint64_t suffix)
{
    return sn->dir[suffix & ((1ull << sn->gd) - 1)];
}

/* Finish the split of parent suffix ps (now at depth d) into its sibling when a dead
 * splitter left it published but not cleared. Called with the parent's lease held. */
static int finish_pending(dm_ctx_t *ctx, const dir_snap_t *sn, uint32_t ps, unsigned d,
                          dm_gaddr_t lock, uint64_t *mine)
{
    uint32_t ns = ps | (1u << (d - 1));
    uint64_t pe = snap_get(sn, ps), ne = snap_get(sn, ns);
    if (race_dir_ld(ne) != d || race_dir_ld(pe) != d) return 0;
    uint64_t hdr = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, race_dir_addr(ne), &hdr, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc || !(hdr & RACE_HDR_MOVING)) return rc;
    rc = unfreeze_phase(ctx, race_dir_addr(pe), race_dir_addr(ne), d, ps, lock, mine);
    if (!rc) rc = clear_moving(ctx, race_dir_addr(ne), d, ns);
    return rc;
}

/* Split X = the subtable of suffix s at depth l, with its lease held. */
static int split_locked(dm_ctx_t *ctx, dm_gaddr_t X, unsigned l, uint32_t s, dm_gaddr_t lock,
                        uint64_t *mine)
{
    dm_race_t *r = ctx->w->race;
    uint64_t nb = r->groups * 3;
    uint64_t *image = calloc(nb, DM_RACE_BUCKET);
    if (!image) return DM_ENOMEM;
    uint32_t ns = s | (1u << l);
    dm_log(DM_LOG_VERBOSE, "RACE split of subtable %u/%u started", s, l);
    __atomic_fetch_add(&splits_running, 1, __ATOMIC_RELAXED);
    int rc = copy_phase(ctx, X, l, s, image, lock, mine);
    dm_gaddr_t N = 0;
    if (!rc) {
        for (uint64_t bk = 0; bk < nb; bk++)
            image[bk * 8] = race_bucket_hdr(l + 1, ns) | RACE_HDR_MOVING;
        rc = dm_alloc_block(ctx, nb * DM_RACE_BUCKET, &N);
    }
    if (!rc) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, N, image, (uint32_t)(nb * DM_RACE_BUCKET));
        rc = dm_batch_exec(ctx, &b);
    }
    free(image);
    if (rc && rc != DM_EIO && rc != DM_ETIMEDOUT && lease_renew(ctx, lock, mine) == 0) {
        /* Gave up before publishing, still holding the lease: X takes writes again. */
        unfreeze_phase(ctx, X, 0, 0, s, lock, mine);
        if (N) dm_alloc_unused(ctx->w->alloc, N, nb * DM_RACE_BUCKET); /* never published */
    }
    if (!rc) split_test_pause(ctx);
    if (!rc) rc = publish(ctx, s, l, X, N, lock, mine);
    if (!rc) split_test_pause(ctx);
    if (!rc) rc = unfreeze_phase(ctx, X, N, l + 1, s, lock, mine);
    if (!rc) rc = clear_moving(ctx, N, l + 1, ns);
    __atomic_fetch_sub(&splits_running, 1, __ATOMIC_RELAXED);
    if (!rc) __atomic_fetch_add(&splits_done, 1, __ATOMIC_RELAXED);
    dm_log(DM_LOG_VERBOSE, "RACE split of subtable %u/%u %s", s, l, rc ? dm_strerror(rc) : "done");
    return rc;
}

static int split(dm_ctx_t *ctx, dir_snap_t *sn, uint64_t hash, int help_only)
{
    dm_race_t *r = ctx->w->race;
    int rc = snap_read(ctx, sn);
    if (rc) return rc;
    uint64_t e = snap_get(sn, hash);
    dm_gaddr_t X = race_dir_addr(e);
    unsigned l = race_dir_ld(e);
    uint32_t s = (uint32_t)(hash & ((1ull << l) - 1));
    uint64_t hdr = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, X, &hdr, 8);
    if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
    if ((hdr & RACE_HDR_MOVING) && l > 0) {
        /* X is still receiving keys from its parent: that split must finish first. If its
         * splitter died, its lease has expired and we finish the move ourselves. */
        uint32_t ps = s & ((1u << (l - 1)) - 1);
        uint64_t mine;
        dm_gaddr_t plock = lock_addr(r, ps);
        rc = lease_take(ctx, plock, &mine);
        if (rc < 0) return rc;
        if (rc == 1)
            dm_log(DM_LOG_NOTICE,
                   "RACE: lease of subtable %u/%u expired (its gateway died?): "
                   "finishing its split",
                   ps, l - 1);
        rc = snap_read(ctx, sn);
        if (!rc) rc = finish_pending(ctx, sn, ps, l, plock, &mine);
        lease_release(ctx, plock, mine);
        return rc;
    }
    if (l >= DM_RACE_MAX_DEPTH) return DM_EFULL;
    dm_gaddr_t lock = lock_addr(r, s);
    uint64_t mine;
    rc = lease_take(ctx, lock, &mine);
    if (rc < 0) return rc;
    if (help_only && rc == 0) {
        /* Nobody was splitting X: nothing to help with. */
        lease_release(ctx, lock, mine);
        return 0;
    }
    int stolen = rc == 1;
    if (stolen)
        dm_log(DM_LOG_NOTICE,
               "RACE: lease of subtable %u/%u expired (its gateway died?): "
               "taking over its split",
               s, l);
    rc = snap_read(ctx, sn);
    e = snap_get(sn, s);
    if (!rc && (race_dir_addr(e) != X || race_dir_ld(e) != l)) {
        lease_release(ctx, lock, mine);
        return 0; /* someone split it while we waited */
    }
    /* A lease taken over from a dead splitter of X's previous split: finish that first. */
    if (!rc && stolen && l > 0 && !((s >> (l - 1)) & 1))
        rc = finish_pending(ctx, sn, s, l, lock, &mine);
    if (!rc) {
        /* X's own headers must agree with the directory before anything moves. */
        dm_batch_init(&b);
        dm_batch_read(&b, X, &hdr, 8);
        rc = dm_batch_exec(ctx, &b);
        if (!rc && (race_hdr_ld(hdr) != l || race_hdr_suffix(hdr) != s)) {
            lease_release(ctx, lock, mine);
            return 0;
        }
    }
    if (!rc) rc = split_locked(ctx, X, l, s, lock, &mine);
    lease_release(ctx, lock, mine);
    return rc;
}

int race_split(dm_ctx_t *ctx, const race_loc_t *loc, int help_only)
{
    dir_snap_t sn = {0};
    dm_cls_t cls = ctx->cls; /* charged to splits, not to the command */
    ctx->cls = DM_CLS_SPLIT;
    int rc = split(ctx, &sn, loc->hash, help_only);
    free(sn.dir);
    if (!rc) rc = race_refresh(ctx, ctx->w->race);
    ctx->cls = cls;
    return rc;
}
