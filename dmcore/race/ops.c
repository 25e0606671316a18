/* RACE search, upsert and delete (RACE §3.3, Algorithms 1-4), with the traps of
 * docs/NOTES.md §1.9 handled: upsert instead of blind insert, one duplicate rule for
 * readers and writers, batched candidate reads, quarantine against ABA (alloc.h). */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "dmkv/rand.h"
#include "dmkv/superblock.h"
#include "race_internal.h"

_Static_assert(DM_KV_UNIT == DM_GRAIN, "KV blocks are carved in slot length units");

#define MAX_ATTEMPTS 256
#define MAX_CANDS 28 /* slots in two combined buckets */
#define MAX_CORRUPT 8

enum { CAND_NOMATCH = 0, CAND_MATCH = 1, CAND_CORRUPT = 2 };

typedef struct cand {
    race_slotref_t ref;
    int state;
    int known;      /* classified CAND_NOMATCH from an earlier read (carry): not read */
    uint8_t *block; /* CAND_MATCH: whole block (malloc'd) */
    uint64_t block_len;
    dm_kv_view_t view;
} cand_t;

static void cands_free(cand_t *c, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        free(c[i].block);
        c[i].block = NULL;
    }
}

/* Read the KV blocks of candidate slots (one batch, plus one more for blocks over 16 KB
 * whose key length matches) and classify each against key. */
static int fetch_cands(dm_ctx_t *ctx, cand_t *c, unsigned n, const void *key, size_t klen)
{
    dm_batch_t b;
    dm_batch_init(&b);
    for (unsigned i = 0; i < n; i++) {
        c[i].block_len = (uint64_t)race_slot_len(c[i].ref.word) * DM_KV_UNIT;
        c[i].state = CAND_NOMATCH;
        if (c[i].known) continue;
        c[i].block = malloc(c[i].block_len ? c[i].block_len : 64);
        if (!c[i].block) return DM_ENOMEM;
        dm_batch_read(&b, race_slot_ptr(c[i].ref.word), c[i].block, (uint32_t)c[i].block_len);
    }
    int rc = b.n ? dm_batch_exec(ctx, &b) : 0;
    if (rc) return rc;
    dm_batch_init(&b);
    for (unsigned i = 0; i < n; i++) {
        if (c[i].known) continue;
        uint32_t kl, vl;
        if (!dm_kvblock_header(c[i].block, c[i].block_len, &kl, &vl) || kl != klen) continue;
        uint64_t full = dm_kvblock_size_from_hdr(c[i].block, c[i].block_len);
        if (full > c[i].block_len && race_slot_len(c[i].ref.word) == DM_KV_LEN_MAX_UNITS) {
            uint8_t *nb = realloc(c[i].block, full);
            if (!nb) return DM_ENOMEM;
            c[i].block = nb;
            uint64_t have = c[i].block_len;
            c[i].block_len = full;
            /* Large values: the rest of the block, in pieces of at most 1 GiB. */
            dm_batch_read(&b, race_slot_ptr(c[i].ref.word) + have, nb + have,
                          (uint32_t)(full - have));
        }
    }
    rc = b.n ? dm_batch_exec(ctx, &b) : 0;
    if (rc) return rc;
    for (unsigned i = 0; i < n; i++) {
        if (c[i].known || !dm_kvblock_key_equals(c[i].block, c[i].block_len, key, klen)) continue;
        c[i].state = dm_kvblock_parse(c[i].block, c[i].block_len, &c[i].view) == 0 ? CAND_MATCH
                                                                                   : CAND_CORRUPT;
    }
    return 0;
}

dm_verb_t *race_count_with(dm_batch_t *b, int64_t delta)
{
    if (dm_fault_delay_ms(DM_FAULT_UNCOUNTED)) return NULL; /* tests: a lost FAA */
    dm_verb_t *v =
        dm_batch_faa(b, dm_gaddr_make(0, DM_SB_OFF(key_count)), dm_key_count_delta(delta));
    if (v) v->status = DM_EIO;
    return v;
}

int race_counted(const dm_verb_t *v)
{
    return v && v->status == 0;
}

/* A key's view of the table: its home subtable's two combined buckets and, while the
 * home subtable is still receiving keys from the one it split from (MOVING-IN headers),
 * the parent's combined buckets too, read BEFORE the home ones are read again so a key
 * moved in between is seen in one or the other. Candidates from home come first. */
typedef struct lookup {
    race_loc_t loc;
    race_cbs_t cbs;
    race_loc_t ploc;
    race_cbs_t pcbs;
    int moving;
    cand_t c[2 * MAX_CANDS];
    unsigned n, nhome;
    int first;  /* canonical live copy, -1 when absent */
    int frozen; /* a copy of the key carries the MOVING mark */
} lookup_t;

/* RACE's words of a carry (dm_point_carry_t.engine): the key's combined buckets as the
 * lock's batch read them, and candidates found to name other keys. Always reached through
 * race_carry(), never as the words themselves. */
typedef struct race_carry {
    race_loc_t loc;
    race_cbs_t cbs;
    uint64_t nomatch[4][2]; /* {slot address, word} read and found to name another key */
    unsigned n_nomatch;
    uint64_t nomatch_us; /* monotonic µs no later than those reads */
} race_carry_t;

_Static_assert(sizeof(race_carry_t) <= sizeof(((dm_race_carry_t *)0)->engine),
               "dm_point_carry_t.engine is too small for RACE");

static race_carry_t *race_carry(dm_race_carry_t *carry)
{
    return (race_carry_t *)carry->engine;
}

int dm_race_prefetch(dm_ctx_t *ctx, dm_batch_t *b, const void *key, size_t klen,
                     dm_race_carry_t *carry)
{
    if (b->n + 2 > DM_BATCH_MAX) return DM_EINVAL;
    race_carry_t *rc = race_carry(carry);
    race_locate(ctx->w->race, key, klen, &rc->loc);
    carry->prefetched = 0;
    return race_read_cbs(b, &rc->loc, &rc->cbs);
}

/* Did an earlier read of the carry find the slot word ref->word at ref->addr naming a block
 * of another key? Within the grace period a block a word names cannot have been freed and
 * reused (alloc.h), so the same word still names the same bytes: no need to read them. */
static int carry_knows(dm_race_carry_t *carry, const race_slotref_t *ref)
{
    const race_carry_t *pf = race_carry(carry);
    if (!pf->n_nomatch || dm_now_us() - pf->nomatch_us >= DM_OP_TIMEOUT_US) return 0;
    for (unsigned i = 0; i < pf->n_nomatch; i++)
        if (pf->nomatch[i][0] == ref->addr && pf->nomatch[i][1] == ref->word) return 1;
    return 0;
}

/* Keep the candidates just read that hold other keys, for the next lookup of the carry. */
static void carry_remember(const dm_ctx_t *ctx, dm_race_carry_t *carry, const cand_t *c, unsigned n)
{
    race_carry_t *pf = race_carry(carry);
    unsigned k = 0, cap = sizeof(pf->nomatch) / sizeof(pf->nomatch[0]);
    for (unsigned i = 0; i < n && k < cap; i++) {
        if (c[i].state != CAND_NOMATCH) continue;
        pf->nomatch[k][0] = c[i].ref.addr;
        pf->nomatch[k++][1] = c[i].ref.word;
    }
    pf->n_nomatch = k;
    pf->nomatch_us = ctx->start_us; /* no later than the reads */
}

/* lookup: b may hold verbs to send with the bucket READs (the block WRITE); pf, when its
 * buckets were prefetched, replaces the first READ (then b's verbs go out alone). */
static int lookup_from(dm_ctx_t *ctx, dm_batch_t *b, lookup_t *lk, const void *key, size_t klen,
                       dm_race_carry_t *pf)
{
    dm_race_t *r = ctx->w->race;
    lk->n = lk->nhome = 0;
    lk->first = -1;
    lk->frozen = 0;
    for (int refreshed = 0;; refreshed++) {
        int rc;
        if (pf && pf->prefetched) {
            pf->prefetched = 0; /* good for one lookup: a retry reads again */
            /* The slot words are as old as the lock batch: so is the operation. */
            if (pf->read_us && pf->read_us < ctx->start_us) ctx->start_us = pf->read_us;
            memcpy(&lk->loc, &race_carry(pf)->loc, sizeof(lk->loc));
            memcpy(&lk->cbs, &race_carry(pf)->cbs, sizeof(lk->cbs));
            rc = b->n ? dm_batch_exec(ctx, b) : 0;
        } else {
            race_locate(r, key, klen, &lk->loc);
            rc = race_read_cbs(b, &lk->loc, &lk->cbs);
            if (!rc) rc = dm_batch_exec(ctx, b);
        }
        dm_batch_init(b);
        if (rc) return rc;
        if (race_check_headers(&lk->loc, &lk->cbs, &lk->moving) == 0) break;
        /* Stale directory cache (RACE §3.4.1 case 3): refresh and read again. */
        if (refreshed >= 8) return DM_ERETRY;
        rc = race_refresh(ctx, r);
        if (rc) return rc;
    }
    if (lk->moving) {
        unsigned ld = race_hdr_ld(lk->cbs.raw[0][0]);
        uint64_t pe = race_dir_get(r, lk->loc.hash & ((1ull << (ld - 1)) - 1));
        lk->ploc = lk->loc;
        race_locate_in(&lk->ploc, race_dir_addr(pe), race_dir_ld(pe));
        int rc = race_read_cbs(b, &lk->ploc, &lk->pcbs);
        if (!rc) rc = dm_batch_exec(ctx, b);
        dm_batch_init(b);
        if (!rc) rc = race_read_cbs(b, &lk->loc, &lk->cbs);
        if (!rc) rc = dm_batch_exec(ctx, b);
        dm_batch_init(b);
        if (rc) return rc;
    }
    race_slotref_t refs[2 * MAX_CANDS];
    lk->nhome = race_fp_slots(&lk->loc, &lk->cbs, lk->loc.fp, refs, MAX_CANDS);
    lk->n = lk->nhome;
    if (lk->moving) {
        /* The parent's copy phase is over: a copy of a moving key there is frozen until
         * cleared, or it is an insert that landed after the unfreeze, invisible until its
         * writer moves it (dedupe_after_insert). */
        unsigned np = race_fp_slots(&lk->ploc, &lk->pcbs, lk->loc.fp, refs + lk->n, MAX_CANDS);
        for (unsigned i = 0; i < np; i++)
            if (race_slot_moving(refs[lk->nhome + i].word)) refs[lk->n++] = refs[lk->nhome + i];
    }
    unsigned known = 0;
    for (unsigned i = 0; i < lk->n; i++) {
        memset(&lk->c[i], 0, sizeof(lk->c[i]));
        lk->c[i].ref = refs[i];
        lk->c[i].known = pf && carry_knows(pf, &refs[i]);
        known += (unsigned)lk->c[i].known;
    }
    if (lk->n == 0) return 0;
    int rc = fetch_cands(ctx, lk->c, lk->n, key, klen);
    if (rc) return rc;
    if (pf && !known) carry_remember(ctx, pf, lk->c, lk->n);
    for (unsigned i = 0; i < lk->n; i++) {
        if (lk->c[i].state == CAND_CORRUPT)
            return DM_ECORRUPT; /* slot changed under us or a torn block: caller retries */
        if (lk->c[i].state != CAND_MATCH) continue;
        if (lk->first < 0) lk->first = (int)i;
        if (race_slot_moving(lk->c[i].ref.word)) lk->frozen = 1;
    }
    return 0;
}

static int lookup(dm_ctx_t *ctx, dm_batch_t *b, lookup_t *lk, const void *key, size_t klen)
{
    return lookup_from(ctx, b, lk, key, klen, NULL);
}

static void take_item(lookup_t *lk, dm_race_item_t *item)
{
    cand_t *c = &lk->c[lk->first];
    item->addr = c->ref.addr;
    item->version = c->ref.word & ~RACE_SLOT_MOVING;
    item->block = c->block;
    item->block_len = c->block_len;
    item->view = c->view;
    c->block = NULL;
}

/* Retry policy shared by all operations. Corrupt reads retry a few times; DM_ERETRY
 * (timeout, stale directory, a split in the way) waits a little and restarts, for at most
 * two leases (a dead splitter's lease expires and someone finishes its split). */
typedef struct retry {
    int corrupt;
    int waits; /* DM_ERETRY waits: bounded by time, not by the attempt count */
    uint64_t since_us;
} retry_t;

static int should_retry(dm_ctx_t *ctx, int rc, retry_t *rt)
{
    if (rc == DM_ECORRUPT) return ++rt->corrupt < MAX_CORRUPT;
    if (rc == DM_ERETRY) {
        if (!rt->since_us) rt->since_us = dm_now_us();
        if (dm_now_us() - rt->since_us > 2000ull * RACE_LEASE_MS) return 0;
        race_pause(ctx, rt->waits < 8 ? 200 : 2000);
        rt->waits++;
        return 1;
    }
    return 0;
}

/* After its second CAS in a row lost to another writer of the slot, a writer waits a random
 * while before it reads again, up to 32 of its recent write round trips: two writers whose
 * read-then-CAS cycles fall into step (each CAS landing between the other's read and CAS)
 * would otherwise lose to each other, or one to the other, until MAX_ATTEMPTS answers
 * "operation restarted too often" (it_redis_cli's redis-benchmark, one key from 20 clients
 * on two gateway threads, twice in clean-clone runs beside the suite). */
static void lost_cas(dm_ctx_t *ctx, unsigned *lost)
{
    if (++*lost < 2) return;
    uint32_t rtt = ctx->w->race->write_rtt_us, base = rtt > 20 ? rtt : 20;
    unsigned shift = *lost - 2 < 5 ? *lost - 2 : 5;
    race_pause(ctx, (uint32_t)(dm_rand64() % ((uint64_t)base << shift)) + 1);
}

/* A writer that found frozen slots waits for the split that froze them (resize.c). After
 * a lease of waiting its splitter may have died or given up: the writer then runs a split
 * of the subtable itself, which takes over or finishes that work (a live splitter's lease
 * refuses it). */
static void help_stuck_split(dm_ctx_t *ctx, const race_loc_t *loc, const retry_t *rt)
{
    if (rt->since_us && dm_now_us() - rt->since_us > 1000ull * RACE_LEASE_MS)
        race_split(ctx, loc, 0);
}

/* Whether a split has frozen any slot of the combined buckets read. */
static int cbs_frozen(const race_cbs_t *cbs)
{
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int s = 0; s < DM_RACE_SLOTS; s++)
                if (race_slot_moving(cbs->raw[i][j * 8 + 1 + s])) return 1;
    return 0;
}

/* A search of a large value (a block over the slot's length field, 8160 bytes) whose
 * reads took longer than DM_OP_TIMEOUT_US retries alone: one such retry at a time per
 * worker. Many large reads started together (a pipeline of GETs of 1 MB values) can each
 * take longer than the limit because they share the thread; retried together they would
 * time out together again until "restarted too often". Small values retry as before (a
 * queue of them would be a convoy on a slow machine). */
static void slow_enter(dm_ctx_t *ctx)
{
    dm_race_t *r = ctx->w->race;
    while (r->slow_held) {
        dm_wake_t wk = {0};
        if (r->slow_tail)
            r->slow_tail->next = &wk;
        else
            r->slow_head = &wk;
        r->slow_tail = &wk;
        dm_worker_park(ctx->w, &wk, "the slow-read turn of large values (race)");
    }
    r->slow_held = 1;
}

static void slow_leave(dm_ctx_t *ctx)
{
    dm_race_t *r = ctx->w->race;
    r->slow_held = 0;
    dm_wake_t *wk = r->slow_head;
    if (!wk) return;
    r->slow_head = wk->next; /* read before the wake: wk lives on the waiter's stack */
    if (!r->slow_head) r->slow_tail = NULL;
    wk->next = NULL;
    dm_worker_wake(ctx->w, wk);
}

/* After a lookup that ran past DM_OP_TIMEOUT_US: re-read every candidate's slot (1 RTT).
 * A block is freed only after its slot stops naming it, so a slot that still holds the word
 * read means the block's bytes were the key's when they were read, however long the
 * transfer took. (Left open: the same key's block freed, reused and put back into the same
 * slot under the very same word while one transfer lasts, which needs two writes of the key
 * and the quarantine, DM_GRACE_US, to pass within it.) Returns 1 when all are unchanged. */
static int cands_still_named(dm_ctx_t *ctx, const lookup_t *lk)
{
    uint64_t now[2 * MAX_CANDS];
    dm_batch_t b;
    dm_batch_init(&b);
    for (unsigned i = 0; i < lk->n; i++)
        dm_batch_read(&b, lk->c[i].ref.addr, &now[i], 8);
    if (dm_batch_exec(ctx, &b) != 0) return 0;
    for (unsigned i = 0; i < lk->n; i++)
        if (now[i] != lk->c[i].ref.word) return 0;
    return 1;
}

int dm_race_search(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_item_t *item)
{
    return race_search(ctx, key, klen, item, NULL);
}

int race_search(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_item_t *item, int *frozen)
{
    retry_t rt = {0};
    int rc = DM_ERETRY, alone = 0; /* alone: this search holds slow_enter */
    for (int attempt = 0; attempt - rt.waits < MAX_ATTEMPTS; attempt++) {
        lookup_t lk;
        dm_batch_t b;
        dm_batch_init(&b);
        ctx->start_us = dm_now_us();
        rc = lookup(ctx, &b, &lk, key, klen);
        /* A block read after the grace period may have been reused: read again, unless
         * every candidate's slot still names the block read (issue 12: a large value
         * whose transfer outlasts the deadline is still answered). */
        int late = !rc && dm_ctx_check(ctx) != 0 && lk.n && !cands_still_named(ctx, &lk), big = 0;
        if (late) rc = DM_ERETRY;
        for (unsigned i = 0; late && i < lk.n; i++)
            big |= lk.c[i].block_len > (uint64_t)DM_KV_LEN_MAX_UNITS * DM_KV_UNIT;
        if (!rc && lk.first >= 0) take_item(&lk, item);
        if (!rc && frozen) *frozen = lk.frozen;
        cands_free(lk.c, lk.n);
        if (!rc) {
            rc = lk.first >= 0;
            break;
        }
        if (!should_retry(ctx, rc, &rt)) break;
        if (big && !alone) {
            slow_enter(ctx);
            alone = 1;
        }
        rc = DM_ERETRY;
    }
    if (alone) slow_leave(ctx);
    return rc;
}

/* The key counter's FAAs (race_internal.h). */
void race_count_keys(dm_ctx_t *ctx, int64_t delta)
{
    dm_batch_t b;
    dm_batch_init(&b);
    race_count_with(&b, delta);
    dm_batch_exec(ctx, &b);
}

void race_count_removed(dm_ctx_t *ctx, const dm_verb_t *fv, int64_t sent, int64_t won)
{
    if (race_counted(fv) ? won < sent : won > 0)
        race_count_keys(ctx, race_counted(fv) ? sent - won : -won);
}

static unsigned free_slots(const race_cbs_t *cbs, int i)
{
    unsigned n = 0;
    for (int j = 0; j < 2; j++)
        for (int s = 0; s < DM_RACE_SLOTS; s++)
            n += race_slot_ptr(cbs->raw[i][j * 8 + 1 + s]) == 0 &&
                 !race_slot_moving(cbs->raw[i][j * 8 + 1 + s]);
    return n;
}

/* The process's slot claims: a direct-mapped table of slot addresses, about twice the
 * inserts a gateway has in flight at a time (64 connections x 64 pipelined). Shared by the
 * workers (relaxed atomics: a stale entry costs one collision or one skipped slot). */
#define CLAIMS 8192
static dm_gaddr_t claims[CLAIMS];

static dm_gaddr_t *claim_entry(dm_gaddr_t slot)
{
    uint64_t h = (slot >> 3) * 0x9e3779b97f4a7c15ull;
    return &claims[h >> 51 & (CLAIMS - 1)];
}

static int claimed(dm_gaddr_t slot)
{
    return __atomic_load_n(claim_entry(slot), __ATOMIC_RELAXED) == slot;
}

void race_claim(dm_gaddr_t slot)
{
    __atomic_store_n(claim_entry(slot), slot, __ATOMIC_RELAXED);
}

void race_unclaim(dm_gaddr_t slot)
{
    dm_gaddr_t want = slot;
    __atomic_compare_exchange_n(claim_entry(slot), &want, DM_GADDR_NULL, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}

/* The first empty slot in order_i's combined buckets (main bucket first), skipping claimed
 * ones if skip_claimed; 0 if none. */
static dm_gaddr_t first_empty(const race_loc_t *loc, const race_cbs_t *cbs, const int order_i[2],
                              int skip_claimed)
{
    for (int oi = 0; oi < 2; oi++) {
        int i = order_i[oi];
        int main_j = (loc->first_bucket[i] % 3 == 0) ? 0 : 1;
        for (int j = main_j, o = 0; o < 2; o++, j = 1 - j)
            for (int s = 0; s < DM_RACE_SLOTS; s++) {
                if (cbs->raw[i][j * 8 + 1 + s] != 0) continue;
                dm_gaddr_t a =
                    race_bucket_addr(loc, loc->first_bucket[i] + (uint64_t)j) + 8 + 8 * (uint64_t)s;
                if (!skip_claimed || !claimed(a)) return a;
            }
    }
    return DM_GADDR_NULL;
}

/* Two inserts of one gateway that read the same empty slot would both CAS it: one loses,
 * and on a chaining connection every commit posted behind the loser is skipped and posted
 * again (pool/batch.c exec_commit): one lost slot skipped ~16 commits in an ordered load.
 * So the first pass skips claimed slots; the second takes any empty slot, as RACE §3.3
 * does, rather than split a subtable whose free slots are all in flight. */
dm_gaddr_t race_pick_empty(const race_loc_t *loc, const race_cbs_t *cbs)
{
    unsigned f[2] = {free_slots(cbs, 0), free_slots(cbs, 1)};
    /* Less-loaded combined bucket first, its main bucket before its overflow bucket. */
    int order_i[2] = {f[0] >= f[1] ? 0 : 1, f[0] >= f[1] ? 1 : 0};
    dm_gaddr_t a = first_empty(loc, cbs, order_i, 1);
    return a ? a : first_empty(loc, cbs, order_i, 0);
}

/* The header word of slot's bucket as the lookup read it, NULL when it read another bucket. */
static const uint64_t *bucket_hdr_of(const lookup_t *lk, dm_gaddr_t slot)
{
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (race_bucket_addr(&lk->loc, lk->loc.first_bucket[i] + (uint64_t)j) ==
                (slot & ~63ull))
                return &lk->cbs.raw[i][j * 8];
    return NULL;
}

/* Local depth in the header (as read before our CAS) of the bucket holding slot. */
static unsigned bucket_ld_of(const lookup_t *lk, dm_gaddr_t slot)
{
    const uint64_t *h = bucket_hdr_of(lk, slot);
    return h ? race_hdr_ld(*h) : lk->loc.ld;
}

/* An insert's commit guard (2026-11-27): a CAS of the header of slot's bucket from the word
 * the lookup read to the same word, chained right before the slot CAS. A split that went
 * over the bucket since the lookup changed the header (RACE §3.4.2: local depth, MOVING
 * marks), so the guard fails, and on a memory node that chains commits (tcp) the slot CAS
 * and every later commit of the connection's chain are skipped. Without it, such a CAS
 * landed in a slot the split had thawed: the key invisible until its redo (the stranded
 * path below), while the next SET of the pipeline, already chained behind it, was visible:
 * `it_pipeline_order` saw flag:i before data:i. Only a commit that will chain gets one
 * (dm_batch_commit_chains): elsewhere (rdma, local, a command run alone) every earlier
 * commit finished before this one is posted. NULL without a guard; the commit is then
 * never chained (dm_batch_commit_guarded). */
static dm_verb_t *header_guard(dm_ctx_t *ctx, dm_batch_t *b, const lookup_t *lk, dm_gaddr_t slot)
{
    const uint64_t *h = bucket_hdr_of(lk, slot);
    if (!h || !dm_batch_commit_chains(ctx, (unsigned)dm_gaddr_node(slot))) return NULL;
    return dm_batch_cas(b, slot & ~63ull, *h, *h);
}

/* After inserting our slot: re-read both combined buckets (‖ the key counter FAA ‖ the
 * header of the bucket we used) and keep exactly one copy of the key, the one with the
 * smallest (bucket, slot) (RACE §3.3 "duplicate keys"). If a split moved past our bucket
 * before our CAS landed (its header no longer covers the key), take our slot back and
 * report DM_ERETRY so the insert is redone in the right subtable (RACE §3.4.2). */
/* Take a stranded insert's slot back (RACE §3.4.2): it landed in the old subtable after
 * a split changed the bucket's header, where no reader or writer looks for the key (they
 * follow the header, and a parent's copies count only while frozen). Returns DM_ERETRY
 * with *adopt = 0 (redo our insert), DM_ERETRY with *adopt = a newer word (insert that
 * word instead: a guard kept from when a stranded copy could be updated by others), 1
 * when the slot no longer holds our key (FLUSHALL emptied it), or DM_ETIMEDOUT when a
 * later split of the old subtable kept the slot frozen past two leases. */
static uint64_t stranded_taken_back, stranded_adopted;

void dm_race_stranded_stats(uint64_t *taken_back, uint64_t *adopted)
{
    *taken_back = __atomic_load_n(&stranded_taken_back, __ATOMIC_RELAXED);
    *adopted = __atomic_load_n(&stranded_adopted, __ATOMIC_RELAXED);
}

static int take_back_stranded(dm_ctx_t *ctx, const void *key, size_t klen, dm_gaddr_t mine,
                              uint64_t my_word, uint64_t *adopt)
{
    uint64_t cur = my_word;
    retry_t rt = {0};
    *adopt = 0;
    for (int tries = 0; tries - rt.waits < 16; tries++) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, mine, cur, 0);
        dm_verb_t *fv = race_count_with(&b, -1);
        if (dm_batch_exec(ctx, &b) != 0) {
            race_count_removed(ctx, fv, 1, 0);
            return DM_ETIMEDOUT; /* fate unknown */
        }
        uint64_t got = v->result;
        race_count_removed(ctx, fv, 1, got == cur);
        if (got == cur) {
            *adopt = cur == my_word ? 0 : cur;
            __atomic_fetch_add(&stranded_taken_back, 1, __ATOMIC_RELAXED);
            if (*adopt) __atomic_fetch_add(&stranded_adopted, 1, __ATOMIC_RELAXED);
            dm_fault_point(ctx, DM_FAULT_TAKEN_BACK);
            return DM_ERETRY;
        }
        if (got == (cur | RACE_SLOT_MOVING)) {
            /* A split of the old subtable froze it (it stays there): wait for the thaw. */
            if (!should_retry(ctx, DM_ERETRY, &rt)) return DM_ETIMEDOUT;
            continue;
        }
        if (!got || race_slot_moving(got) || race_slot_fp(got) != race_slot_fp(my_word))
            return 1; /* emptied (FLUSHALL), and maybe another key's since */
        /* Same fingerprint: is it our key, updated in place? 1 RTT, rare. */
        uint32_t len = (uint32_t)race_slot_len(got) * DM_KV_UNIT;
        uint8_t *blk = malloc(len);
        if (!blk) return 1;
        dm_batch_init(&b);
        dm_batch_read(&b, race_slot_ptr(got), blk, len);
        int ours = dm_batch_exec(ctx, &b) == 0 && dm_kvblock_key_equals(blk, len, key, klen);
        free(blk);
        if (!ours) return 1;
        cur = got;
    }
    return 1;
}

static int dedupe_after_insert(dm_ctx_t *ctx, const void *key, size_t klen, dm_gaddr_t mine,
                               uint64_t my_word, uint64_t hash, unsigned ld, int counted,
                               uint64_t *lease, uint64_t *adopt)
{
    lookup_t lk;
    dm_batch_t b;
    uint64_t hdr = 0;
    dm_race_t *r = ctx->w->race;
    dm_batch_init(&b);
    if (!counted) race_count_with(&b, 1);
    dm_batch_read(&b, mine & ~63ull, &hdr, 8);
    /* The split lease of the subtable we inserted into: if we landed behind a split whose
     * splitter died, we finish its work before redoing the insert. */
    dm_batch_read(&b, r->root + RACE_LOCK_OFF + 8 * (hash & ((1ull << ld) - 1)), lease, 8);
    int rc = lookup(ctx, &b, &lk, key, klen);
    /* hdr was read by the first batch even if the lookup failed later; if that batch failed
     * too it is 0, which never looks stranded. A split freezes every slot of the subtable
     * until its headers have changed, so a slot CAS that won under an unchanged header was
     * seen by the copy phase, and one that won under a changed header is the only case. */
    uint64_t mask = (1ull << race_hdr_ld(hdr)) - 1;
    int stranded = hdr && (hash & mask) != race_hdr_suffix(hdr);
    *adopt = 0;
    if (stranded) {
        cands_free(lk.c, lk.n);
        return take_back_stranded(ctx, key, klen, mine, my_word, adopt);
    }
    if (rc) {
        /* Our key is in place; the duplicate check could not run (another copy is
         * mid-change, or the directory kept moving): its writer or a later delete that
         * sees several copies resolves them. Never report the insert as failed. */
        cands_free(lk.c, lk.n);
        return 1;
    }
    if (lk.first < 0 || lk.c[lk.first].ref.addr == mine) {
        /* We are the canonical copy: remove the others (rare). */
        dm_batch_init(&b);
        int64_t removed = 0, sent = 0;
        dm_verb_t *v[2 * MAX_CANDS] = {0};
        for (unsigned i = 0; i < lk.n; i++)
            if (lk.c[i].state == CAND_MATCH && lk.c[i].ref.addr != mine &&
                !race_slot_moving(lk.c[i].ref.word)) {
                v[i] = dm_batch_cas(&b, lk.c[i].ref.addr, lk.c[i].ref.word, 0);
                sent++;
            }
        dm_verb_t *fv = sent ? race_count_with(&b, -sent) : NULL;
        if (sent && dm_batch_exec(ctx, &b) == 0)
            for (unsigned i = 0; i < lk.n; i++)
                if (v[i] && v[i]->result == lk.c[i].ref.word) {
                    removed++;
                    dm_alloc_free(ctx->w->alloc, race_slot_ptr(lk.c[i].ref.word),
                                  lk.c[i].block_len);
                }
        race_count_removed(ctx, fv, sent, removed);
    } else {
        /* Another copy wins: ours is removed (our SET is ordered just before it). */
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, mine, my_word, 0);
        dm_verb_t *fv = race_count_with(&b, -1);
        int won = dm_batch_exec(ctx, &b) == 0 && v->result == my_word;
        race_count_removed(ctx, fv, 1, won);
    }
    cands_free(lk.c, lk.n);
    return 1;
}

/* KEEPTTL: give the written block at addr the expiry want_ms (rewriting it, 1 RTT) before
 * any slot links it. Returns 0 or DM_E*. */
static int keep_expiry(dm_ctx_t *ctx, uint8_t *block, uint64_t block_len, dm_gaddr_t addr,
                       uint64_t want_ms)
{
    if (want_ms == dm_kvblock_expire(block)) return 0;
    int rc = dm_kvblock_set_expire(block, block_len, want_ms); /* built timed: full layout */
    if (rc) return rc;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, addr, block, (uint32_t)block_len);
    return dm_batch_exec(ctx, &b);
}

/* Fold one write's round trip (post to completion, microseconds) into r's average
 * (exponential, weight 1/8). */
static void note_write_rtt(dm_race_t *r, uint64_t us)
{
    if (us > DM_OP_TIMEOUT_US) us = DM_OP_TIMEOUT_US;
    r->write_rtt_us = r->write_rtt_us - r->write_rtt_us / 8 + (uint32_t)us / 8;
}

/* An update through the validated address cache (addr_cache.c): WRITE the new block ‖
 * READ the remembered slot word ‖ READ the block it pointed to (1 RTT), then CAS the slot
 * from that word (1 RTT): 2 RTTs instead of 3. The CAS succeeds only if the word is still
 * there, which also proves the block read was the key's current value (decide saw the
 * truth). Returns 1 done, 0 vetoed by decide, 2 when the caller must run the full path
 * (no entry, a changed word, a lost CAS; *written tells whether the block went out), or
 * DM_E* (*posted_cas set when a CAS was posted). */
static int cached_update(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block,
                         uint64_t block_len, dm_gaddr_t addr, dm_race_decide_fn decide, void *arg,
                         int keep_ttl, dm_race_item_t *old, int *written, int *posted_cas)
{
    dm_race_t *r = ctx->w->race;
    dm_gaddr_t sa;
    uint64_t w;
    if (!race_addr_cache_get(r, key, klen, &sa, &w, NULL, NULL)) return 2;
    uint64_t olen = (uint64_t)race_slot_len(w) * DM_KV_UNIT, now = 0;
    uint8_t *ob = malloc(olen);
    if (!ob) return 2;
    dm_batch_t b;
    dm_batch_init(&b);
    ctx->start_us = dm_now_us();
    dm_batch_write(&b, addr, block, (uint32_t)block_len);
    int rc = race_read_slot_then_block(ctx, &b, sa, &now, race_slot_ptr(w), ob, (uint32_t)olen);
    if (rc) {
        free(ob);
        return rc;
    }
    note_write_rtt(r, dm_now_us() - ctx->start_us);
    *written = 1;
    dm_kv_view_t view;
    if (now != w || !dm_kvblock_key_equals(ob, olen, key, klen) ||
        dm_kvblock_parse(ob, olen, &view) != 0) {
        free(ob);
        race_addr_cache_stale(r, key, klen);
        return 2;
    }
    view.version = w;
    dm_race_item_t cur = {sa, w, ob, olen, view};
    if (decide && !decide(arg, &view)) {
        if (old)
            *old = cur; /* SET ... NX GET still reports the old value */
        else
            free(ob);
        dm_alloc_unused(ctx->w->alloc, addr, block_len); /* never in a slot */
        return 0;
    }
    if (keep_ttl) rc = keep_expiry(ctx, block, block_len, addr, view.expire_ms);
    if (!rc) rc = dm_ctx_check(ctx);
    uint64_t word = race_slot(race_slot_fp(w), dm_kvblock_len_units(block_len), addr);
    dm_verb_t *v = NULL;
    if (!rc) {
        dm_batch_init(&b);
        v = dm_batch_cas(&b, sa, w, word);
        dm_batch_commit(&b, v, ctx->start_us + DM_OP_TIMEOUT_US); /* dm_ctx_check's bound */
        *posted_cas = 1;
        rc = dm_batch_exec(ctx, &b);
    }
    if (!rc && v->result == w) {
        race_addr_cache_put(r, key, klen, sa, word, ctx->start_us);
        race_addr_cache_hit();
        dm_alloc_free(ctx->w->alloc, race_slot_ptr(w), olen);
        if (old)
            *old = cur;
        else
            free(ob);
        return 1;
    }
    free(ob);
    /* Too late to trust the word (the operation outlived its bound, or its commit turn came
     * after it: not posted): the entry is not known to be stale, so it stays. Dropping it
     * made a pipeline that waits long for its turns lose its cache (it_addr_cache under
     * TSan: 247 of 1,000 entries dropped). */
    if (rc == DM_ERETRY) return 2;
    if (rc) return rc;
    race_addr_cache_stale(r, key, klen);
    return 2;
}

/* A key seen less than BLIND_MIN_AGE_US, or HOT_RTTS of this worker's recent write round
 * trips, ago is written the validated way (read, then CAS). A worker writing one hot key
 * back to back with one-round-trip CASes changes its slot every round trip, and another
 * writer's read-then-CAS of that key then failed every time: `it_redis_cli`'s
 * redis-benchmark (20 clients, one key, two threads) ended one run in three with
 * "operation restarted too often" (256 attempts). The bound follows the round trip because
 * "back to back" is a matter of round trips: under ThreadSanitizer (round trips of about a
 * millisecond) a fixed 1 ms let the threads of test_chime's concurrent writers, which share
 * one address cache, starve an operation 1 run in 3. */
#define BLIND_MIN_AGE_US 1000u
#define HOT_RTTS 8u

/* key's cache entry when a blind update may use it: stored or last seen by this worker,
 * long enough ago not to be a hot key (above), and at most DM_OP_TIMEOUT_US ago, the bound
 * dm_ctx_check puts on every CAS after a read (the word is as old as the verb that last
 * saw it). *now_us: the monotonic time it was judged at. */
static int blind_entry(dm_ctx_t *ctx, const void *key, size_t klen, dm_gaddr_t *sa, uint64_t *w,
                       uint64_t *now_us, uint64_t *seen_us)
{
    int mine;
    dm_race_t *r = ctx->w->race;
    if (!race_addr_cache_get(r, key, klen, sa, w, seen_us, &mine) || !mine) return 0;
    *now_us = dm_now_us();
    uint64_t age = *now_us - *seen_us, hot = (uint64_t)HOT_RTTS * r->write_rtt_us;
    return age >= BLIND_MIN_AGE_US && age >= hot && age <= DM_OP_TIMEOUT_US;
}

int dm_race_update_blind(dm_ctx_t *ctx, const void *key, size_t klen, const uint8_t *block,
                         uint64_t block_len)
{
    dm_race_t *r = ctx->w->race;
    dm_gaddr_t sa, addr;
    uint64_t w, seen, posted_us; /* before the post: the new word is in the slot some time after */
    if (!blind_entry(ctx, key, klen, &sa, &w, &posted_us, &seen)) return 2;
    int rc = dm_alloc_kv_block(ctx, block_len, &addr);
    if (rc) return rc;
    if (dm_gaddr_node(addr) != dm_gaddr_node(sa)) {
        /* Two nodes' messages have no order: the CAS could land before the block. */
        dm_alloc_unused(ctx->w->alloc, addr, block_len);
        return 2;
    }
    uint64_t word = race_slot(race_slot_fp(w), dm_kvblock_len_units(block_len), addr);
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_write(&b, addr, block, (uint32_t)block_len);
    dm_verb_t *v = dm_batch_cas(&b, sa, w, word); /* executes after the WRITE: one message */
    /* Its commit turn may come later (an earlier SET of the pipeline still running): never
     * after the word's age passed the bound. */
    dm_batch_commit(&b, v, seen + DM_OP_TIMEOUT_US);
    rc = dm_batch_exec(ctx, &b);
    uint64_t done_us = dm_now_us(); /* after the CAS: dates the old block's quarantine too */
    note_write_rtt(r, done_us - posted_us);
    if (!rc && v->result == w) {
        race_addr_cache_put(r, key, klen, sa, word, posted_us);
        race_addr_cache_blind_set();
        dm_alloc_free_at(ctx->w->alloc, race_slot_ptr(w), (uint64_t)race_slot_len(w) * DM_KV_UNIT,
                         done_us);
        return 1;
    }
    if (rc == DM_EIO || rc == DM_ETIMEDOUT) return rc; /* linked or not: unknown, keep it */
    dm_alloc_free(ctx->w->alloc, addr, block_len);
    if (rc == DM_ERETRY) return 2; /* its turn came too late to trust the word: not posted */
    if (rc) return rc;
    race_addr_cache_stale(r, key, klen); /* the slot changed: the full path finds out why */
    return 2;
}

/* After an insert under the leaf lock whose CAS batch read the bucket's header (hdr)
 * behind the CAS and counted the key: only the stranded case is left to check (RACE §3.4.2). A
 * duplicate needs two overlapping inserts of the key, which its leaf lock excludes
 * (dm_race_carry_t). Returns 1, or what take_back_stranded returns (with *lease read for the
 * caller). */
static int check_locked_insert(dm_ctx_t *ctx, const void *key, size_t klen, dm_gaddr_t mine,
                               uint64_t my_word, uint64_t hash, unsigned ld, uint64_t hdr,
                               uint64_t *lease, uint64_t *adopt)
{
    uint64_t mask = (1ull << race_hdr_ld(hdr)) - 1;
    *adopt = 0;
    *lease = 0;
    if ((hash & mask) == race_hdr_suffix(hdr)) return 1;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_race_t *r = ctx->w->race;
    dm_batch_read(&b, r->root + RACE_LOCK_OFF + 8 * (hash & ((1ull << ld) - 1)), lease, 8);
    if (dm_batch_exec(ctx, &b) != 0) *lease = 0;
    return take_back_stranded(ctx, key, klen, mine, my_word, adopt);
}

void dm_race_carry_release(dm_ctx_t *ctx, dm_race_carry_t *carry)
{
    if (!carry->block) return;
    if (carry->block_posted)
        dm_alloc_free(ctx->w->alloc, carry->block, carry->block_len);
    else
        dm_alloc_unused(ctx->w->alloc, carry->block, carry->block_len);
    carry->block = 0;
}

int dm_race_set(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block, uint64_t block_len,
                dm_race_decide_fn decide, void *arg, int keep_ttl, dm_race_item_t *old)
{
    return dm_race_set_carry(ctx, key, klen, block, block_len, decide, arg, keep_ttl, old, NULL);
}

int dm_race_set_carry(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block,
                      uint64_t block_len, dm_race_decide_fn decide, void *arg, int keep_ttl,
                      dm_race_item_t *old, dm_race_carry_t *carry)
{
    dm_gaddr_t addr;
    int rc, written = 0, posted_cas = 0;
    if (carry && carry->block && carry->block_len == block_len) {
        addr = carry->block; /* written by the attempt before: ours again */
        written = !carry->block_unwritten;
        carry->block_unwritten = 0;
        posted_cas = carry->block_posted;
        carry->block = 0;
    } else {
        if (carry) dm_race_carry_release(ctx, carry);
        rc = dm_alloc_kv_block(ctx, block_len, &addr);
        if (rc) return rc;
    }
    uint64_t word = 0, adopted = 0; /* adopted: a newer word taken back from a stranded slot */
    unsigned lost = 0;              /* CASes lost in a row (lost_cas) */
    retry_t rt = {0};
    /* as asked for: a KEEPTTL rewrite below may change block's */
    uint64_t block_expire = dm_kvblock_expire(block);
    /* A locked attempt follows an unlocked one that tried the address cache already. */
    rc = carry && carry->locked ? 2
                                : cached_update(ctx, key, klen, block, block_len, addr, decide, arg,
                                                keep_ttl, old, &written, &posted_cas);
    if (rc == 0 || rc == 1) return rc;
    if (rc < 0) {
        if (!(posted_cas && (rc == DM_EIO || rc == DM_ETIMEDOUT)))
            dm_alloc_free(ctx->w->alloc, addr, block_len);
        return rc;
    }
    for (int attempt = 0; attempt - rt.waits < MAX_ATTEMPTS; attempt++) {
        lookup_t lk;
        dm_batch_t b;
        dm_batch_init(&b);
        ctx->start_us = dm_now_us();
        if (!written) /* 1st RTT: WRITE the block ‖ READ both combined buckets */
            dm_batch_write(&b, addr, block, (uint32_t)block_len);
        rc = lookup_from(ctx, &b, &lk, key, klen, carry);
        if (!rc) written = 1;
        if (!rc && (lk.frozen || (lk.first < 0 && lk.moving))) {
            /* A split froze this key, or (an insert) the key's subtable is still receiving
             * keys from its parent: its parent's headers do not say so yet, so a gateway
             * with the old directory would read the parent and miss a key inserted here.
             * Wait for the split (RACE §3.4.2; docs/testing-concurrency.md). */
            rc = DM_ERETRY;
            help_stuck_split(ctx, &lk.loc, &rt);
        }
        if (!rc && adopted && lk.first >= 0) {
            cands_free(lk.c, lk.n); /* someone wrote it where it lives now: after us */
            return 1;
        }
        if (!rc && adopted) {
            word = adopted; /* re-insert the newer value where the key lives now */
        } else if (!rc) {
            word = race_slot(lk.loc.fp, dm_kvblock_len_units(block_len), addr);
            dm_kv_view_t *cur = lk.first >= 0 ? &lk.c[lk.first].view : NULL;
            if (cur) cur->version = lk.c[lk.first].ref.word & ~RACE_SLOT_MOVING;
            if (decide && !decide(arg, cur)) {
                if (old && lk.first >= 0)
                    take_item(&lk, old); /* SET ... NX GET still reports the old value */
                cands_free(lk.c, lk.n);
                if (carry) {
                    carry->block = addr; /* written, and kept for the next attempt */
                    carry->block_len = block_len;
                    carry->block_posted = posted_cas;
                    return 0;
                }
                /* Never in a slot, so no reader can hold it: reusable at once. */
                if (posted_cas)
                    dm_alloc_free(ctx->w->alloc, addr, block_len);
                else
                    dm_alloc_unused(ctx->w->alloc, addr, block_len);
                return 0;
            }
            rc = keep_expiry(ctx, block, block_len, addr,
                             keep_ttl && cur ? cur->expire_ms : block_expire);
        }
        if (!rc) rc = dm_ctx_check(ctx);
        if (!rc && lk.first >= 0) {
            /* Update: CAS the canonical copy old -> new. */
            cand_t *c = &lk.c[lk.first];
            dm_batch_init(&b);
            dm_verb_t *v = dm_batch_cas(&b, c->ref.addr, c->ref.word, word);
            dm_batch_commit(&b, v, ctx->start_us + DM_OP_TIMEOUT_US);
            posted_cas = 1;
            rc = dm_batch_exec(ctx, &b);
            if (!rc && v->result == c->ref.word) {
                race_addr_cache_put(ctx->w->race, key, klen, c->ref.addr, word, ctx->start_us);
                dm_alloc_free(ctx->w->alloc, race_slot_ptr(c->ref.word), c->block_len);
                if (old) take_item(&lk, old);
                cands_free(lk.c, lk.n);
                return 1;
            }
        } else if (!rc) {
            /* Insert: CAS an empty slot 0 -> new, then the duplicate check. */
            dm_gaddr_t slot = race_pick_empty(&lk.loc, &lk.cbs);
            if (!slot) {
                /* Both combined buckets full: split the subtable (RACE §3.4.2), retry. Frozen
                 * slots mean a split is running: wait for it instead. */
                cands_free(lk.c, lk.n);
                if (cbs_frozen(&lk.cbs)) {
                    rc = DM_ERETRY;
                    help_stuck_split(ctx, &lk.loc, &rt);
                } else {
                    rc = race_split(ctx, &lk.loc, 0);
                }
                if (rc == 0) continue;
                if (rc == DM_ERETRY && should_retry(ctx, rc, &rt)) continue;
                if (!adopted) dm_alloc_free(ctx->w->alloc, addr, block_len);
                return rc;
            }
            /* Under the leaf lock the header READ rides behind the CAS (fenced: it sees
             * the bucket as the CAS left it) and the duplicate re-read is skipped. */
            int light = carry && carry->locked;
            uint64_t hdr = 0;
            dm_batch_init(&b);
            /* The key's first visible state: its commit, in its connection's order (coro.h).
             * A re-insert of an adopted word moves a key already committed. The slot CAS
             * is the commit, a header guard chained right before it. */
            dm_verb_t *gv = adopted ? NULL : header_guard(ctx, &b, &lk, slot);
            dm_verb_t *v = dm_batch_cas(&b, slot, 0, word);
            if (!adopted)
                dm_batch_commit_guarded(
                    &b, gv, v, light ? carry->commit_by_us : ctx->start_us + DM_OP_TIMEOUT_US);
            if (light) dm_batch_read(&b, slot & ~63ull, &hdr, 8)->fence = 1;
            /* Counted with the CAS, taken back if the CAS lost (another key took the
             * slot): the count is right before the insert answers. */
            dm_verb_t *fv = light ? race_count_with(&b, 1) : NULL;
            posted_cas = 1;
            race_claim(slot);
            rc = dm_ctx_ride_before(ctx, &b);
            if (!rc) rc = dm_batch_exec(ctx, &b);
            race_unclaim(slot);
            if (race_counted(fv) && (rc || v->result != 0))
                race_count_keys(ctx, -1); /* on rc, the CAS's fate is unknown: as if lost */
            if (!rc && v->status == DM_ESKIPPED && gv && gv->result != gv->compare) {
                /* A split changed the bucket since the lookup: the CAS was not run (nor
                 * anything chained behind it). Search again (after the split). */
                cands_free(lk.c, lk.n);
                continue;
            }
            if (!rc && v->status == 0 && v->result == 0) {
                cands_free(lk.c, lk.n);
                if (old) memset(old, 0, sizeof(*old));
                uint64_t lease = 0, adopt = 0;
                dm_fault_point(ctx, DM_FAULT_INSERTED);
                if (race_counted(fv) && dm_now_us() <= carry->sure_until_us)
                    rc = check_locked_insert(ctx, key, klen, slot, word, lk.loc.hash,
                                             bucket_ld_of(&lk, slot), hdr, &lease, &adopt);
                else
                    rc = dedupe_after_insert(ctx, key, klen, slot, word, lk.loc.hash,
                                             bucket_ld_of(&lk, slot), race_counted(fv), &lease,
                                             &adopt);
                if (adopt) adopted = adopt;
                if (rc == 1 && !adopt) /* in its slot: the next GET or SET of it takes 1 RTT */
                    race_addr_cache_put(ctx->w->race, key, klen, slot, word, ctx->start_us);
                if (rc == DM_ERETRY) {
                    /* Inserted behind a split: wait for it (or finish it, if its splitter
                     * died) and redo the insert where the key belongs. */
                    if (race_lease_expiry(lease) < dm_wall_ms()) race_split(ctx, &lk.loc, 1);
                    if (should_retry(ctx, rc, &rt)) continue;
                    return rc;
                }
                return rc;
            }
        }
        cands_free(lk.c, lk.n);
        if (rc == DM_EYIELD && carry && !adopted) {
            /* An early lock's holder gave way (coro.h): nothing posted; the block is kept
             * for the attempt after its turn. */
            carry->block = addr;
            carry->block_len = block_len;
            carry->block_posted = posted_cas;
            return rc;
        }
        if (rc && !should_retry(ctx, rc, &rt)) {
            /* After a CAS whose fate is unknown (connection lost) the block may be
             * published: leak it rather than free it. */
            if (!adopted && !(posted_cas && (rc == DM_EIO || rc == DM_ETIMEDOUT)))
                dm_alloc_free(ctx->w->alloc, addr, block_len); /* adopted: the update freed it */
            return rc;
        }
        /* Failed CAS: someone changed a slot; search again and redo (RACE §3.3). */
        if (!rc) lost_cas(ctx, &lost);
    }
    return DM_ERETRY;
}

int dm_race_delete(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_decide_fn decide, void *arg)
{
    return dm_race_delete_carry(ctx, key, klen, decide, arg, NULL);
}

int dm_race_delete_carry(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_decide_fn decide,
                         void *arg, dm_race_carry_t *carry)
{
    int deleted = 0;
    unsigned lost = 0; /* CASes lost in a row (lost_cas) */
    retry_t rt = {0};
    for (int attempt = 0; attempt - rt.waits < MAX_ATTEMPTS; attempt++) {
        lookup_t lk;
        dm_batch_t b;
        dm_batch_init(&b);
        ctx->start_us = dm_now_us();
        int rc = lookup_from(ctx, &b, &lk, key, klen, carry);
        if (!rc && lk.first < 0) {
            cands_free(lk.c, lk.n);
            return deleted;
        }
        if (!rc && lk.frozen) {
            rc = DM_ERETRY; /* a split froze this key: wait for it */
            help_stuck_split(ctx, &lk.loc, &rt);
        }
        if (!rc && !deleted && lk.first >= 0)
            lk.c[lk.first].view.version = lk.c[lk.first].ref.word & ~RACE_SLOT_MOVING;
        if (!rc && !deleted && decide && !decide(arg, &lk.c[lk.first].view)) {
            cands_free(lk.c, lk.n);
            return 0;
        }
        if (!rc) rc = dm_ctx_check(ctx);
        if (!rc) {
            /* Remove every copy (a delete that sees duplicates removes all of them). */
            dm_batch_init(&b);
            dm_verb_t *v[2 * MAX_CANDS] = {0};
            int64_t sent = 0;
            for (unsigned i = 0; i < lk.n; i++)
                if (lk.c[i].state == CAND_MATCH) {
                    v[i] = dm_batch_cas(&b, lk.c[i].ref.addr, lk.c[i].ref.word, 0);
                    sent++;
                }
            /* Counted with the CASes, the lost ones given back below. */
            dm_verb_t *fv = race_count_with(&b, -sent);
            rc = dm_ctx_ride_before(ctx, &b);
            if (!rc) rc = dm_batch_exec(ctx, &b);
            int64_t removed = 0;
            int all = 1;
            for (unsigned i = 0; !rc && i < lk.n; i++) {
                if (!v[i]) continue;
                if (v[i]->result == lk.c[i].ref.word) {
                    removed++;
                    dm_alloc_free(ctx->w->alloc, race_slot_ptr(lk.c[i].ref.word),
                                  lk.c[i].block_len);
                } else {
                    all = 0;
                }
            }
            race_count_removed(ctx, fv, sent, removed);
            if (removed) {
                race_addr_cache_put(ctx->w->race, key, klen, 0, 0, 0); /* forget it */
                deleted = 1;
            }
            cands_free(lk.c, lk.n);
            if (!rc && all) return 1;
            if (!rc) { /* a copy changed under us: look again until none is left */
                lost_cas(ctx, &lost);
                continue;
            }
        } else {
            cands_free(lk.c, lk.n);
        }
        if (!should_retry(ctx, rc, &rt)) return rc;
    }
    return DM_ERETRY;
}
