/* RACE extendible resizing (RACE §3.4.2) with the windows NOTES §1.9 points out closed:
 * a subtable split runs under a lease on the subtable's lock word (a dead splitter's lease
 * expires and the next gateway that needs the subtable finishes its work); directory
 * writes (entries, doubling) run under the directory lease; every moved slot is frozen
 * (MOVING mark) before it is copied and cleared after, and writers wait on frozen slots,
 * so no update can land on a copy that is about to disappear. */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/coro.h"
#include "dmkv/errors.h"
#include "race_internal.h"

#define MOVE_CHUNK 64 /* buckets read per step */
#define MOVE_GROUP 16 /* keys moved per batch (2 combined-bucket READs each) */

/* A pause timer lives on the heap: libuv closes handles asynchronously. */
typedef struct pause_wait {
    uv_timer_t timer;
    dm_coro_t *co;
    int *fired;
} pause_wait_t;

static void pause_closed(uv_handle_t *h)
{
    free(h->data);
}

static void pause_fire(uv_timer_t *t)
{
    pause_wait_t *p = t->data;
    *p->fired = 1;
    dm_coro_t *co = p->co;
    uv_close((uv_handle_t *)t, pause_closed);
    if (co)
        dm_coro_resume(co);
}

void race_pause(dm_ctx_t *ctx, uint32_t us)
{
    int fired = 0;
    pause_wait_t *p = malloc(sizeof(*p));
    if (!p)
        return;
    p->co = dm_coro_self();
    p->fired = &fired;
    uv_timer_init(ctx->w->loop, &p->timer);
    p->timer.data = p;
    uv_timer_start(&p->timer, pause_fire, (us + 999) / 1000, 0);
    if (p->co)
        dm_coro_yield();
    else
        while (!fired)
            uv_run(ctx->w->loop, UV_RUN_ONCE);
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
    if (rc)
        return rc;
    if (v->result == 0) {
        *mine = want;
        return 0;
    }
    uint64_t cur = v->result;
    if (race_lease_expiry(cur) >= now)
        return DM_ERETRY;
    dm_batch_init(&b);
    v = dm_batch_cas(&b, addr, cur, want);
    rc = dm_batch_exec(ctx, &b);
    if (rc)
        return rc;
    if (v->result != cur)
        return DM_ERETRY;
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
    if (rc)
        return rc;
    if (v->result != *mine)
        return DM_ERETRY;
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

/* One key being moved from parent P to new subtable N. */
typedef struct mover {
    dm_gaddr_t from; /* slot in P */
    uint64_t word;   /* slot word, without the MOVING mark */
    race_loc_t loc;  /* the key's buckets in N */
    race_cbs_t cbs;
    uint8_t *block; /* the key's block (for the existence check) */
    uint64_t block_len;
    int frozen, exists, copied;
    dm_gaddr_t to;
} mover_t;

/* Is the mover's key already in N? (a stale-cache insert may have put it there) */
static int check_exists(dm_ctx_t *ctx, mover_t *m, unsigned n)
{
    dm_batch_t b;
    dm_batch_init(&b);
    uint8_t *bufs[DM_BATCH_MAX] = {0};
    unsigned owner[DM_BATCH_MAX];
    unsigned k = 0;
    int rc = 0;
    for (unsigned i = 0; i < n && !rc; i++) {
        if (!m[i].frozen)
            continue;
        race_slotref_t refs[28];
        unsigned nr = race_fp_slots(&m[i].loc, &m[i].cbs, m[i].loc.fp, refs, 28);
        for (unsigned j = 0; j < nr && k < DM_BATCH_MAX; j++) {
            uint32_t len = (uint32_t)race_slot_len(refs[j].word) * DM_UNIT;
            bufs[k] = malloc(len);
            if (!bufs[k]) {
                rc = DM_ENOMEM;
                break;
            }
            dm_batch_read(&b, race_slot_ptr(refs[j].word), bufs[k], len);
            owner[k++] = i;
        }
    }
    if (!rc)
        rc = dm_batch_exec(ctx, &b);
    for (unsigned j = 0; j < k; j++) {
        mover_t *mv = &m[owner[j]];
        uint32_t kl;
        memcpy(&kl, mv->block, 4);
        if (!rc && dm_kvblock_key_equals(bufs[j], b.v[j].len, mv->block + DM_KV_HDR, kl))
            mv->exists = 1;
        free(bufs[j]);
    }
    return rc;
}

/* Freeze, copy and clear a group of slots (NOTES §1.9's safe order). Adds to *stuck the
 * keys that found no room in N (they stay in P, unfrozen; N keeps its MOVING-IN flag so
 * readers keep looking in P). Sets *again when a slot changed under us. */
static int move_group(dm_ctx_t *ctx, mover_t *m, unsigned n, dm_gaddr_t N, unsigned d,
                      int *stuck, int *again)
{
    dm_race_t *r = ctx->w->race;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *v[MOVE_GROUP];
    for (unsigned i = 0; i < n; i++) {
        uint8_t *key = m[i].block + DM_KV_HDR;
        uint32_t kl;
        memcpy(&kl, m[i].block, 4);
        race_locate(r, key, kl, &m[i].loc);
        race_locate_in(&m[i].loc, N, d);
        m[i].exists = m[i].copied = 0;
        v[i] = m[i].frozen ? NULL
                           : dm_batch_cas(&b, m[i].from, m[i].word, m[i].word | RACE_SLOT_MOVING);
    }
    int rc = dm_batch_exec(ctx, &b);
    if (rc)
        return rc;
    for (unsigned i = 0; i < n; i++) {
        if (v[i] && v[i]->result != m[i].word) {
            *again = 1; /* a writer changed it first: take it on the next pass */
            continue;
        }
        m[i].frozen = 1;
    }
    for (int tries = 0; tries < 8; tries++) {
        dm_batch_init(&b);
        int pending = 0;
        for (unsigned i = 0; i < n; i++)
            if (m[i].frozen && !m[i].copied && !m[i].exists) {
                race_read_cbs(&b, &m[i].loc, &m[i].cbs);
                pending = 1;
            }
        if (!pending)
            break;
        if ((rc = dm_batch_exec(ctx, &b)) != 0)
            return rc;
        if ((rc = check_exists(ctx, m, n)) != 0)
            return rc;
        dm_gaddr_t claimed[MOVE_GROUP];
        unsigned nclaimed = 0;
        dm_batch_init(&b);
        for (unsigned i = 0; i < n; i++) {
            v[i] = NULL;
            if (!m[i].frozen || m[i].copied || m[i].exists)
                continue;
            m[i].to = race_pick_empty(&m[i].loc, &m[i].cbs, claimed, nclaimed);
            if (!m[i].to)
                continue;
            claimed[nclaimed++] = m[i].to;
            v[i] = dm_batch_cas(&b, m[i].to, 0, m[i].word);
        }
        if ((rc = dm_batch_exec(ctx, &b)) != 0)
            return rc;
        for (unsigned i = 0; i < n; i++)
            if (v[i] && v[i]->result == 0)
                m[i].copied = 1;
    }
    /* Clear the moved slots in P; unfreeze the ones that found no room. */
    dm_batch_init(&b);
    for (unsigned i = 0; i < n; i++) {
        if (!m[i].frozen)
            continue;
        if (m[i].copied || m[i].exists) {
            dm_batch_cas(&b, m[i].from, m[i].word | RACE_SLOT_MOVING, 0);
        } else {
            dm_batch_cas(&b, m[i].from, m[i].word | RACE_SLOT_MOVING, m[i].word);
            (*stuck)++;
        }
    }
    return dm_batch_exec(ctx, &b);
}

/* Read the blocks of up to 64 slots; returns per slot a malloc'd whole block or NULL. */
static int read_blocks(dm_ctx_t *ctx, const uint64_t *words, unsigned n, uint8_t **bufs,
                       uint64_t *lens)
{
    dm_batch_t b;
    dm_batch_init(&b);
    for (unsigned i = 0; i < n; i++) {
        lens[i] = (uint64_t)race_slot_len(words[i]) * DM_UNIT;
        bufs[i] = malloc(lens[i]);
        if (!bufs[i])
            return DM_ENOMEM;
        dm_batch_read(&b, race_slot_ptr(words[i]), bufs[i], (uint32_t)lens[i]);
    }
    int rc = dm_batch_exec(ctx, &b);
    if (rc)
        return rc;
    dm_batch_init(&b);
    for (unsigned i = 0; i < n; i++) {
        uint64_t full = dm_kvblock_size_from_hdr(bufs[i], lens[i]);
        if (full > lens[i] && race_slot_len(words[i]) == DM_KV_LEN_MAX_UNITS) {
            uint8_t *nb = realloc(bufs[i], full);
            if (!nb)
                return DM_ENOMEM;
            bufs[i] = nb;
            dm_batch_read(&b, race_slot_ptr(words[i]) + lens[i], nb + lens[i],
                          (uint32_t)(full - lens[i]));
            lens[i] = full;
        }
    }
    return dm_batch_exec(ctx, &b);
}

/* Move every key of P whose suffix bit d-1 is set into N; P's bucket headers go to depth d
 * first (❶, one bucket at a time, so a stale reader of a moved key sees case 3). */
static int move_keys(dm_ctx_t *ctx, dm_gaddr_t P, dm_gaddr_t N, unsigned d, uint32_t ps,
                     dm_gaddr_t lock, uint64_t *mine, int *stuck)
{
    dm_race_t *r = ctx->w->race;
    uint64_t nb = r->groups * 3;
    uint64_t *raw = malloc(MOVE_CHUNK * DM_RACE_BUCKET);
    mover_t *m = calloc(MOVE_GROUP, sizeof(*m));
    if (!raw || !m) {
        free(raw);
        free(m);
        return DM_ENOMEM;
    }
    int rc = 0;
    for (uint64_t c = 0; c < nb && !rc; c += MOVE_CHUNK) {
        uint64_t n = nb - c < MOVE_CHUNK ? nb - c : MOVE_CHUNK;
        dm_gaddr_t base = P + c * DM_RACE_BUCKET;
        for (int pass = 0; pass < 64 && !rc; pass++) {
            dm_batch_t b;
            dm_batch_init(&b);
            dm_batch_read(&b, base, raw, (uint32_t)(n * DM_RACE_BUCKET));
            if ((rc = dm_batch_exec(ctx, &b)) != 0)
                break;
            dm_batch_init(&b);
            for (uint64_t bk = 0; bk < n; bk++)
                if (race_hdr_ld(raw[bk * 8]) < d)
                    dm_batch_cas(&b, base + bk * DM_RACE_BUCKET, raw[bk * 8],
                                 race_bucket_hdr(d, ps));
            if (b.n) {
                if ((rc = dm_batch_exec(ctx, &b)) != 0)
                    break;
                continue; /* read the buckets again, now that their headers say depth d */
            }
            /* Slots to look at: every occupied one (frozen ones are resumed). */
            dm_gaddr_t addrs[MOVE_CHUNK * DM_RACE_SLOTS];
            uint64_t words[MOVE_CHUNK * DM_RACE_SLOTS];
            unsigned ns = 0;
            for (uint64_t bk = 0; bk < n; bk++)
                for (int s = 0; s < DM_RACE_SLOTS; s++) {
                    uint64_t w = raw[bk * 8 + 1 + s];
                    if (!race_slot_ptr(w))
                        continue;
                    addrs[ns] = base + bk * DM_RACE_BUCKET + 8 + 8 * (uint64_t)s;
                    words[ns++] = w;
                }
            int again = 0;
            for (unsigned i0 = 0; i0 < ns && !rc; i0 += DM_BATCH_MAX) {
                unsigned cnt = ns - i0 < DM_BATCH_MAX ? ns - i0 : DM_BATCH_MAX;
                uint8_t *bufs[DM_BATCH_MAX] = {0};
                uint64_t lens[DM_BATCH_MAX];
                rc = read_blocks(ctx, words + i0, cnt, bufs, lens);
                unsigned nm = 0;
                for (unsigned i = 0; i < cnt && !rc; i++) {
                    dm_kv_view_t kv;
                    if (dm_kvblock_parse(bufs[i], lens[i], &kv) != 0) {
                        again = 1; /* the slot changed after we read it */
                        continue;
                    }
                    uint64_t h = race_key_hash(kv.key, kv.key_len, NULL);
                    if (!((h >> (d - 1)) & 1))
                        continue; /* stays in P */
                    mover_t *mv = &m[nm++];
                    mv->from = addrs[i0 + i];
                    mv->word = words[i0 + i] & ~RACE_SLOT_MOVING;
                    mv->frozen = race_slot_moving(words[i0 + i]);
                    mv->block = bufs[i];
                    mv->block_len = lens[i];
                    if (nm == MOVE_GROUP) {
                        rc = move_group(ctx, m, nm, N, d, stuck, &again);
                        nm = 0;
                    }
                }
                if (!rc && nm)
                    rc = move_group(ctx, m, nm, N, d, stuck, &again);
                for (unsigned i = 0; i < cnt; i++)
                    free(bufs[i]);
            }
            if (!rc)
                rc = lease_renew(ctx, lock, mine);
            if (!again)
                break;
        }
    }
    free(raw);
    free(m);
    return rc;
}

/* N has all its keys: drop the MOVING-IN flag from its bucket headers. */
static int clear_moving(dm_ctx_t *ctx, dm_gaddr_t N, unsigned d, uint32_t ns)
{
    dm_race_t *r = ctx->w->race;
    uint64_t hdr = race_bucket_hdr(d, ns);
    uint64_t nb = r->groups * 3;
    int rc = 0;
    for (uint64_t c = 0; c < nb && !rc; c += DM_BATCH_MAX) {
        dm_batch_t b;
        dm_batch_init(&b);
        for (uint64_t bk = c; bk < nb && bk < c + DM_BATCH_MAX; bk++)
            dm_batch_write(&b, N + bk * DM_RACE_BUCKET, &hdr, 8);
        rc = dm_batch_exec(ctx, &b);
    }
    return rc;
}

/* Point the directory at N for suffix s|2^l and at X for s, both at depth l+1, doubling the
 * directory first when l == GD (RACE §3.4 "directory doubling"). Under the directory lease:
 * the whole used directory is written from a cache read under the same lease. */
static int publish(dm_ctx_t *ctx, uint32_t s, unsigned l, dm_gaddr_t X, dm_gaddr_t N)
{
    dm_race_t *r = ctx->w->race;
    dm_gaddr_t dlock = r->root + RACE_HDR_DIRLOCK_OFF;
    uint64_t mine;
    int rc;
    uint64_t since = dm_now_us();
    while ((rc = lease_take(ctx, dlock, &mine)) == DM_ERETRY) {
        if (dm_now_us() - since > 2000ull * RACE_LEASE_MS)
            return DM_ERETRY;
        race_pause(ctx, 200);
    }
    if (rc < 0)
        return rc;
    rc = race_refresh(ctx, r);
    unsigned gd = r->global_depth, ngd = gd;
    if (!rc && l == gd) {
        if (gd >= DM_RACE_MAX_DEPTH)
            rc = DM_EFULL;
        else {
            memcpy(r->dir + (1ull << gd), r->dir, 8ull << gd);
            ngd = gd + 1;
        }
    }
    if (!rc) {
        for (uint64_t i = s; i < (1ull << ngd); i += 1ull << l)
            r->dir[i] = ((i >> l) & 1) ? race_dir_entry(N, l + 1) : race_dir_entry(X, l + 1);
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, r->root + RACE_DIR_OFF, r->dir, (uint32_t)(8ull << ngd));
        rc = dm_batch_exec(ctx, &b);
    }
    if (!rc && ngd != gd) {
        /* The new half is written: now make it visible. */
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, r->root + RACE_HDR_GD_OFF, gd, ngd);
        rc = dm_batch_exec(ctx, &b);
        if (!rc && v->result != gd)
            rc = DM_ERETRY; /* our lease was stolen */
        if (!rc)
            r->global_depth = ngd;
    }
    lease_release(ctx, dlock, mine);
    return rc;
}

/* Finish the split of parent suffix ps (now at depth d) into its sibling, if a dead
 * splitter left it half done. Called with the parent's lease held. */
static int finish_pending(dm_ctx_t *ctx, uint32_t ps, unsigned d, dm_gaddr_t lock,
                          uint64_t *mine)
{
    dm_race_t *r = ctx->w->race;
    uint32_t ns = ps | (1u << (d - 1));
    dm_gaddr_t P = race_dir_addr(race_dir_get(r, ps));
    uint64_t ne = race_dir_get(r, ns);
    if (race_dir_ld(ne) != d || race_dir_ld(race_dir_get(r, ps)) != d)
        return 0;
    uint64_t hdr = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, race_dir_addr(ne), &hdr, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc || !(hdr & RACE_HDR_MOVING))
        return rc;
    int stuck = 0;
    rc = move_keys(ctx, P, race_dir_addr(ne), d, ps, lock, mine, &stuck);
    if (!rc && stuck)
        return DM_EFULL;
    if (!rc)
        rc = clear_moving(ctx, race_dir_addr(ne), d, ns);
    return rc;
}

int race_split(dm_ctx_t *ctx, const race_loc_t *loc, int help_only)
{
    dm_race_t *r = ctx->w->race;
    int rc = race_refresh(ctx, r);
    if (rc)
        return rc;
    uint64_t e = race_dir_get(r, loc->hash);
    dm_gaddr_t X = race_dir_addr(e);
    unsigned l = race_dir_ld(e);
    uint32_t s = (uint32_t)(loc->hash & ((1ull << l) - 1));
    uint64_t hdr = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, X, &hdr, 8);
    if ((rc = dm_batch_exec(ctx, &b)) != 0)
        return rc;
    if ((hdr & RACE_HDR_MOVING) && l > 0) {
        /* X is still receiving keys from its parent: that split must finish first. If its
         * splitter died, its lease has expired and we finish the move ourselves. */
        uint32_t ps = s & ((1u << (l - 1)) - 1);
        uint64_t mine;
        dm_gaddr_t plock = lock_addr(r, ps);
        rc = lease_take(ctx, plock, &mine);
        if (rc < 0)
            return rc;
        rc = race_refresh(ctx, r);
        if (!rc)
            rc = finish_pending(ctx, ps, l, plock, &mine);
        lease_release(ctx, plock, mine);
        return rc;
    }
    if (help_only)
        return 0;
    if (l >= DM_RACE_MAX_DEPTH)
        return DM_EFULL;
    dm_gaddr_t lock = lock_addr(r, s);
    uint64_t mine;
    rc = lease_take(ctx, lock, &mine);
    if (rc < 0)
        return rc;
    rc = race_refresh(ctx, r);
    e = race_dir_get(r, s);
    if (!rc && (race_dir_addr(e) != X || race_dir_ld(e) != l)) {
        lease_release(ctx, lock, mine);
        return 0; /* someone split it while we waited */
    }
    /* A lease taken over from a dead splitter of X's previous split: finish it first. */
    if (!rc && l > 0 && !((s >> (l - 1)) & 1))
        rc = finish_pending(ctx, s, l, lock, &mine);
    dm_gaddr_t N = 0;
    if (!rc)
        rc = race_new_subtable(ctx, r->groups, l + 1, s | (1u << l), 1, &N);
    if (!rc)
        rc = publish(ctx, s, l, X, N);
    int stuck = 0;
    if (!rc)
        rc = move_keys(ctx, X, N, l + 1, s, lock, &mine, &stuck);
    if (!rc && !stuck)
        rc = clear_moving(ctx, N, l + 1, s | (1u << l));
    if (!rc && stuck)
        rc = DM_EFULL;
    lease_release(ctx, lock, mine);
    return rc;
}
