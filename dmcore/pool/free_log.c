/* A worker's free log in the pool and its takeover (free_log.h). */
#include "free_log.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/log.h"
#include "dmkv/superblock.h"
#include "alloc_internal.h"
#include "tails.h"

#define TAKE_READ 2048u /* entries per read when taking a log over: 64 KB */
/* With nothing to write, the horizon is raised this often (FREE_LOG_AHEAD_US covers it). */
#define RAISE_IDLE_US 100000u

static uint64_t open_bytes; /* this process's open log blocks, atomics (INFO) */

uint64_t free_log_open_bytes(void)
{
    return __atomic_load_n(&open_bytes, __ATOMIC_RELAXED);
}

static void set_on(free_log_t *l)
{
    l->state = FREE_LOG_ON;
    __atomic_fetch_add(&open_bytes, l->blk_bytes, __ATOMIC_RELAXED);
}

/* The log stops for good: fenced by a repairer, closed at a stop, or its worker gone. */
void free_log_release(free_log_t *l)
{
    if (l->state == FREE_LOG_ON) __atomic_fetch_sub(&open_bytes, l->blk_bytes, __ATOMIC_RELAXED);
    l->state = FREE_LOG_FENCED;
    l->horizon = UINT64_MAX;
    free(l->staged);
    free(l->spare);
    l->staged = l->spare = NULL;
    l->n = l->cap = l->spare_cap = 0;
    l->staged_bytes = 0;
}

void free_log_init(free_log_t *l)
{
    memset(l, 0, sizeof(*l));
    l->horizon = UINT64_MAX;
}

static uint64_t entry_check(const free_log_entry_t *e, uint64_t pos)
{
    return XXH3_64bits_withSeed(e, offsetof(free_log_entry_t, check), pos ^ FREE_LOG_MAGIC);
}

/* Append an entry to the staged ones: 0, or -1 (log not on, full, or no memory). */
static int stage(free_log_t *l, const free_log_entry_t *e)
{
    if (l->state != FREE_LOG_ON) return -1;
    /* More than a log holds in one tick: not logged, so lost only if we die with it
     * listed (a claim not staged is not made: the block is not used). The entries of the
     * tick on the wire are counted: they stay staged until it succeeds. */
    if (l->n >= FREE_LOG_CAP_OF(l->blk_bytes)) return -1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        free_log_entry_t *s = realloc(l->staged, cap * sizeof(*s));
        if (!s) return -1;
        l->staged = s;
        l->cap = cap;
    }
    l->staged[l->n++] = *e;
    return 0;
}

/* The bytes an entry adds to staged_bytes: a large block's (FREE_LOG_EAGER_BYTES). */
static uint64_t eager_bytes(const free_log_entry_t *e)
{
    return (e->units & FREE_LOG_CLAIM) || e->units <= FREE_LOG_LARGE_UNITS ? 0
                                                                           : e->units * DM_GRAIN;
}

int free_log_stage(free_log_t *l, dm_gaddr_t addr, uint64_t units, uint64_t freed_us)
{
    free_log_entry_t e = {addr, units, freed_us, 0};
    if (stage(l, &e) != 0) return -1;
    uint64_t before = l->staged_bytes;
    l->staged_bytes += eager_bytes(&e);
    return before < FREE_LOG_EAGER_BYTES && l->staged_bytes >= FREE_LOG_EAGER_BYTES;
}

uint64_t free_log_stage_claim(free_log_t *l, dm_gaddr_t addr, uint64_t units)
{
    if (stage(l, &(free_log_entry_t){addr, units | FREE_LOG_CLAIM, dm_now_us(), 0}) != 0) return 0;
    return l->started + 1; /* a tick on the wire took its entries out before this one */
}

uint64_t free_log_top(const free_log_t *l)
{
    uint64_t h = l->horizon;
    if (l->raising > h) h = l->raising;
    return l->unsure > h ? l->unsure : h;
}

uint64_t free_log_window(const free_log_t *l)
{
    uint64_t w = l->window_us;
    if (l->raising && l->raising_window_us < w) w = l->raising_window_us;
    return l->unsure && l->unsure_window_us < w ? l->unsure_window_us : w;
}

/* The names window of a raise `ahead_us` ahead of the quarantine, as its word carries it. */
static uint64_t window_of(uint64_t ahead_us)
{
    uint64_t w = 2 * ahead_us;
    if (w < FREE_LOG_NAME_MIN_US) w = FREE_LOG_NAME_MIN_US;
    if (w > FREE_LOG_NAME_US) w = FREE_LOG_NAME_US;
    return free_log_word_window(free_log_word(0, w));
}

/* Our horizon word as a repairer would find it after our last raise that won. */
static uint64_t our_word(const free_log_t *l)
{
    return free_log_word(l->horizon, l->window_us);
}

/* Whether w, found in our horizon word, is our raise whose outcome we never learnt. */
static int is_unsure(const free_log_t *l, uint64_t w)
{
    return l->unsure && w == free_log_word(l->unsure, l->unsure_window_us);
}

int free_log_due(const free_log_t *l)
{
    return l->state == FREE_LOG_ON && !l->busy && l->staged_bytes >= FREE_LOG_EAGER_BYTES;
}

/* The horizon raised now: blocks whose quarantine ends within ahead_us. */
static uint64_t next_horizon(uint64_t ahead_us)
{
    uint64_t h = dm_now_us() + ahead_us;
    h = h > DM_GRACE_US ? h - DM_GRACE_US : 0;
    return h > FREE_LOG_TAKEN ? h : FREE_LOG_TAKEN + 1;
}

/* Create the log block and publish it, then the first horizon. Returns 0 (on, or fenced
 * before it began: nothing was logged) or DM_E* (try again next tick). */
static int open_log(dm_ctx_t *ctx, free_log_t *l, int idx)
{
    dm_gaddr_t hword = tails_horizon_addr(idx), lword = tails_log_addr(idx);
    if (!hword) return 0; /* no record (yet), or no entry for this worker */
    int rc = 0;
    if (!l->blk) {
        dm_gaddr_t blk;
        if ((rc = alloc_take_log_block(ctx, FREE_LOG_BYTES, &blk)) != 0) return rc;
        uint64_t hdr[4] = {FREE_LOG_MAGIC, FREE_LOG_CAP, 0, FREE_LOG_WINDOW_MAGIC};
        l->blk_bytes = FREE_LOG_BYTES;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_write(&b, blk, hdr, sizeof(hdr));
        dm_verb_t *v = dm_batch_cas(&b, lword, 0, blk);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc; /* blk leaks: rare, 1 MiB */
        if (v->result != 0) { /* a repairer took our record over: never log */
            free_log_release(l);
            alloc_put_log_block(ctx, blk, FREE_LOG_BYTES);
            return 0;
        }
        l->blk = blk;
    }
    /* Restrict reuse before the CAS: from then on a repairer may take what is freed after
     * the horizon. (Not before the block exists: a pool too full for it would otherwise
     * keep this worker from reusing anything freed since.) */
    uint64_t h = next_horizon(FREE_LOG_AHEAD_US);
    if (h < l->horizon) l->horizon = h;
    l->window_us = window_of(FREE_LOG_AHEAD_US);
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *v = dm_batch_cas(&b, hword, 0, our_word(l));
    uint64_t t0 = dm_now_us();
    if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
    l->confirmed_us = t0;
    if (v->result == our_word(l)) { /* our earlier CAS had landed */
    } else if (v->result != 0) {    /* taken over before anything was logged */
        free_log_release(l);
        return 0;
    }
    set_on(l);
    return 0;
}

/* Add the ring writes of entries[0..n) from position pos to b (one or two verbs), in a ring
 * of cap entries. */
static void add_ring_writes(dm_batch_t *b, dm_gaddr_t blk, uint64_t cap, free_log_entry_t *e,
                            size_t n, uint64_t pos)
{
    for (size_t i = 0; i < n; i++)
        e[i].check = entry_check(&e[i], pos + i);
    uint64_t slot = pos % cap;
    size_t first = n < cap - slot ? n : (size_t)(cap - slot);
    dm_batch_write(b, blk + FREE_LOG_HDR + slot * sizeof(*e), e, (uint32_t)(first * sizeof(*e)));
    if (first < n)
        dm_batch_write(b, blk + FREE_LOG_HDR, e + first, (uint32_t)((n - first) * sizeof(*e)));
}

/* A tick succeeded: its w entries, at the front of staged, are written. */
static void unstage_written(free_log_t *l, size_t w)
{
    if (l->n > w) memmove(l->staged, l->staged + w, (l->n - w) * sizeof(*l->staged));
    l->n -= w;
}

static int tick(dm_ctx_t *ctx, free_log_t *l, int idx, uint64_t *drop_lo, uint64_t *drop_hi);

int free_log_tick(dm_ctx_t *ctx, free_log_t *l, int idx, uint64_t *drop_lo, uint64_t *drop_hi)
{
    if (l->state == FREE_LOG_FENCED || l->busy) return 0;
    l->busy = 1;
    int rc = l->state == FREE_LOG_OFF ? open_log(ctx, l, idx) : tick(ctx, l, idx, drop_lo, drop_hi);
    l->busy = 0;
    return rc;
}

/* A repairer took the log over (its CAS replaced our horizon `old`): stop logging. Returns 1
 * with the range of free times to drop. */
static int taken(free_log_t *l, uint64_t old, uint64_t *drop_lo, uint64_t *drop_hi)
{
    dm_log(DM_LOG_WARNING, "allocator: another gateway took this worker's free log over "
                           "(it found this gateway dead); its free blocks are not logged "
                           "any more");
    *drop_lo = old;
    *drop_hi = l->flushed_us;
    free_log_release(l);
    l->blk = 0;      /* the repairer frees it */
    l->old_blk = 0;  /* or this one: which, we cannot tell (it is left taken) */
    l->grow_blk = 0; /* named in the log: the repairer may have taken it */
    return 1;
}

/* Before writing into a log block, after a stall (FREE_LOG_CONFIRM_US since our last CAS on
 * the horizon word; else nothing): a CAS of the word to itself, alone. A repairer that took
 * the log over frees the ring block, and 2 s later it may hold someone's values: a worker
 * that woke from a stall of 12 s wrote its staged entries over them and only then found its
 * CAS failing. Returns 0 (still ours), 1 (taken: the caller stops) or DM_E*. */
static int confirm(dm_ctx_t *ctx, free_log_t *l, dm_gaddr_t hword)
{
    uint64_t t0 = dm_now_us(), old = our_word(l);
    if (t0 - l->confirmed_us < FREE_LOG_CONFIRM_US) return 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *cas = dm_batch_cas(&b, hword, old, old);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (cas->result != old && !is_unsure(l, cas->result)) return 1;
    l->confirmed_us = t0;
    return 0;
}

static int tick(dm_ctx_t *ctx, free_log_t *l, int idx, uint64_t *drop_lo, uint64_t *drop_hi)
{
    /* Nothing new and the horizon fresh enough: no round trip (an idle worker). */
    if (!l->n && dm_now_us() - l->raised_us < RAISE_IDLE_US) return 0;
    dm_gaddr_t hword = tails_horizon_addr(idx);
    if (l->n) {
        int rc = confirm(ctx, l, hword);
        if (rc == 1) return taken(l, l->horizon, drop_lo, drop_hi);
        if (rc) return rc;
    }
    /* The tick writes a copy of what is staged now (the first n entries):
     * entries staged meanwhile (other coroutines of this worker) go behind them, and the
     * array may move. The written ones leave the front once the tick succeeded; after a
     * failure they are still there, in order, and nothing staged was dropped (a claim's
     * holder was told the next tick's number: it must carry the claim). */
    size_t n = l->n;
    if (n > l->spare_cap) {
        free_log_entry_t *s = realloc(l->spare, n * sizeof(*s));
        if (!s) return DM_ENOMEM; /* nothing sent: tried again next tick */
        l->spare = s;
        l->spare_cap = n;
    }
    free_log_entry_t *out = l->spare;
    if (n) memcpy(out, l->staged, n * sizeof(*out));
    /* staged_bytes counts what is staged behind the wire (an early tick is asked for when
     * that reaches FREE_LOG_EAGER_BYTES); given back if this tick fails. */
    uint64_t wire_bytes = l->staged_bytes;
    l->staged_bytes = 0;
    for (size_t i = 0; i < n; i++) /* staged at the log's opening: not in time order */
        if (!(out[i].units & FREE_LOG_CLAIM) && out[i].freed_us > l->flushed_us)
            l->flushed_us = out[i].freed_us;
    uint64_t id = ++l->started;
    /* Three times the time since the last raise ahead: the next raise comes in time unless
     * three ticks are late, and a busy worker's lead (what a repairer cannot take) stays
     * short. The horizon never moves back: after an idle spell it waits for the clock. */
    uint64_t ahead = 3 * (dm_now_us() - l->raised_us);
    if (ahead > FREE_LOG_AHEAD_US) ahead = FREE_LOG_AHEAD_US;
    if (ahead < FREE_LOG_AHEAD_MIN_US) ahead = FREE_LOG_AHEAD_MIN_US;
    uint64_t want = next_horizon(ahead), old = l->horizon, window = window_of(ahead);
    if (want < old) want = old;
    /* After a raise whose outcome we never learnt: no lower horizon and no wider window than
     * it asked for. That raise may be the word a repairer replaces, and unsure keeps only
     * the latest, so our judgement (free_log_top, free_log_window) must still cover it. */
    if (l->unsure && want < l->unsure) want = l->unsure;
    if (l->unsure && window > l->unsure_window_us) window = l->unsure_window_us;
    /* After a growth the word must change for the old block to go (a repairer that read it
     * before the switch must lose its CAS): a raise of 1 µs while the lead shrinks. */
    if (l->old_blk && want == old) want = old + 1;
    /* From now on, reuses unnamed by this tick are judged by want and its window too. */
    l->raising = want;
    l->raising_window_us = window;
    uint64_t old_word = our_word(l), want_word = free_log_word(want, window);
    uint64_t count = l->count + n;
    size_t claims = 0;
    for (size_t i = 0; i < n; i++)
        claims += (out[i].units & FREE_LOG_CLAIM) != 0;
    dm_batch_t b;
    dm_batch_init(&b);
    /* The ring's writes leave within FREE_LOG_SEND_BY_US of our last CAS that found the
     * word ours, or not at all (DM_ERETRY: still staged, and the next tick confirms first):
     * a repairer's CAS comes after that one, and the ring it frees is reused 2 s later at
     * the earliest. (A raise alone needs no bound: it writes nothing a repairer frees.) */
    if (n) b.send_by_us = l->confirmed_us + FREE_LOG_SEND_BY_US;
    uint64_t t0 = dm_now_us();
    /* With claims, the entries are written first, a round trip before the CAS: a repairer
     * whose CAS comes after ours then reads every claim this tick makes good (the verbs of
     * one batch may run in any order, on different nodes at least). */
    int rc = 0;
    if (n) {
        add_ring_writes(&b, l->blk, FREE_LOG_CAP_OF(l->blk_bytes), out, n, l->count);
        dm_batch_write(&b, l->blk + 16, &count, 8); /* after the entries it covers */
        if (claims) {
            rc = dm_batch_exec(ctx, &b);
            dm_batch_init(&b);
            t0 = dm_now_us();
        }
    }
    dm_verb_t *cas = dm_batch_cas(&b, hword, old_word, want_word);
    if (!rc) rc = dm_batch_exec(ctx, &b);
    l->raising = 0;
    if (rc) { /* still staged: written again next tick, at the same positions */
        l->staged_bytes += wire_bytes;
        l->unsure = want;
        l->unsure_window_us = window;
        return rc;
    }
    unstage_written(l, n);
    /* Our own raise of a tick that failed had landed: the horizon is ours at that value. */
    if (cas->result != old_word && is_unsure(l, cas->result)) {
        want = l->unsure;
        window = l->unsure_window_us;
    } else if (cas->result != old_word) {
        return taken(l, old, drop_lo, drop_hi);
    }
    l->done = id;
    l->confirmed_us = t0;
    l->count = count;
    l->horizon = want;
    l->window_us = window;
    l->unsure = 0;
    l->raised_us = dm_now_us();
    if (l->raised_us - l->mark_us >= DM_GRACE_US / 2) {
        l->prev_count = l->mark_count;
        l->mark_count = count;
        l->mark_us = l->raised_us;
    }
    /* Two raises after a growth: a repairer that read the record (horizon and log word)
     * before the switch has lost its CAS; the old block is nobody's but ours. */
    if (l->old_blk && want > old && ++l->old_raises >= 2) {
        dm_alloc_free(ctx->w->alloc, l->old_blk, l->old_bytes);
        l->old_blk = 0;
    }
    return 0;
}

/* Entries the worker wrote in the last quarantine: those since the mark before last (a
 * window of one to two half quarantines, reset at a growth). Not a rate scaled up from a
 * shorter window: a burst (a stopped gateway's 3,000 blocks handed over at once) looked
 * like 40k a quarantine and took a 4 MiB ring for 3,000 entries (it_pool_memory). */
static uint64_t entries_per_quarantine(const free_log_t *l)
{
    return l->count + l->n - l->prev_count;
}

uint64_t free_log_wants_room(const free_log_t *l)
{
    if (l->state != FREE_LOG_ON || l->busy || l->old_blk || l->grow_blk ||
        dm_now_us() < l->grow_after_us)
        return 0;
    uint64_t need = entries_per_quarantine(l), bytes = l->blk_bytes;
    while (bytes < FREE_LOG_MAX_BYTES && need > FREE_LOG_CAP_OF(bytes) / 2)
        bytes *= 4;
    return bytes > l->blk_bytes ? bytes : 0;
}

int free_log_grow_begin(dm_ctx_t *ctx, free_log_t *l, uint64_t bytes)
{
    l->grow_after_us = dm_now_us() + 1000000u;
    if (l->state != FREE_LOG_ON || l->grow_blk || bytes <= l->blk_bytes) return DM_EINVAL;
    dm_gaddr_t blk;
    int rc = alloc_take_log_block(ctx, bytes, &blk);
    if (rc) return rc;
    /* Named as freed now, so a repairer takes it (freed after the horizon it replaces)
     * whether we die before the switch or after it with a repairer that read the record
     * before it. */
    if (stage(l, &(free_log_entry_t){blk, bytes / DM_GRAIN, dm_now_us(), 0}) != 0) {
        alloc_put_log_block(ctx, blk, bytes); /* named nowhere: still anyone's */
        return DM_EINVAL;                     /* a ring's worth staged: a second later */
    }
    l->grow_blk = blk;
    l->grow_bytes = bytes;
    l->grow_ticket = l->started + 1; /* a tick on the wire took its entries out before */
    return 0;
}

int free_log_grow_ready(const free_log_t *l)
{
    return l->grow_blk && l->state == FREE_LOG_ON && !l->busy && l->done >= l->grow_ticket;
}

int free_log_grow(dm_ctx_t *ctx, free_log_t *l, int idx, free_log_entry_t *keep, size_t n)
{
    dm_gaddr_t blk = l->grow_blk, lword = tails_log_addr(idx);
    uint64_t bytes = l->grow_bytes, cap = FREE_LOG_CAP_OF(bytes);
    l->grow_blk = 0;
    l->grow_after_us = dm_now_us() + 1000000u;
    if (!blk) return DM_EINVAL;
    if (!keep || n + 1 >= cap || !lword) { /* would not hold them, or no memory */
        dm_alloc_free(ctx->w->alloc, blk, bytes);
        return DM_EINVAL;
    }
    /* The present block, named as freed now: a repairer that takes the new log takes it
     * (we free it ourselves only after two raises). */
    keep[n++] = (free_log_entry_t){l->blk, l->blk_bytes / DM_GRAIN, dm_now_us(), 0};
    uint64_t hdr[4] = {FREE_LOG_MAGIC, cap, n, FREE_LOG_WINDOW_MAGIC};
    for (size_t i = 0; i < n; i++)
        keep[i].check = entry_check(&keep[i], i);
    /* Each batch carries the ring's send-by bound (tick), confirmed again when it is near:
     * past it the batch is not posted (DM_ERETRY, batch.c refused_as_retry). A log taken
     * over meanwhile may have given blk to its repairer: blk is left alone then. */
    dm_batch_t b;
    int rc = 0;
    /* The entries first, then the header that counts them, a MiB per batch. */
    for (size_t i = 0;; i += FREE_LOG_CAP) {
        int header = i >= n;
        if ((rc = confirm(ctx, l, tails_horizon_addr(idx))) == 1)
            return DM_ERETRY; /* the next tick finds the log taken */
        if (rc) break;
        dm_batch_init(&b);
        b.send_by_us = l->confirmed_us + FREE_LOG_SEND_BY_US;
        if (header)
            dm_batch_write(&b, blk, hdr, sizeof(hdr));
        else
            dm_batch_write(
                &b, blk + FREE_LOG_HDR + i * sizeof(*keep), keep + i,
                (uint32_t)((n - i < FREE_LOG_CAP ? n - i : FREE_LOG_CAP) * sizeof(*keep)));
        if ((rc = dm_batch_exec(ctx, &b)) != 0 || header) break;
    }
    if (rc) { /* not switched: blk is a free block named in our log, like any other */
        dm_alloc_free(ctx->w->alloc, blk, bytes);
        return rc;
    }
    /* The CAS a round trip after the header (rare: no ordering of a WRITE and a later
     * atomic on the wire is assumed), so a repairer that reads the new word finds it. */
    dm_batch_init(&b);
    b.send_by_us = l->confirmed_us + FREE_LOG_SEND_BY_US;
    dm_verb_t *v = dm_batch_cas(&b, lword, l->blk, blk);
    rc = dm_batch_exec(ctx, &b);
    if (rc == DM_ERETRY || (!rc && v->result != l->blk)) { /* not switched */
        dm_alloc_free(ctx->w->alloc, blk, bytes);
        return rc ? rc : DM_ERETRY;
    }
    if (rc) return rc; /* the CAS's fate unknown: blk stays taken */
    __atomic_fetch_add(&open_bytes, bytes - l->blk_bytes, __ATOMIC_RELAXED);
    l->old_blk = l->blk;
    l->old_bytes = l->blk_bytes;
    l->old_raises = 0;
    l->blk = blk;
    l->blk_bytes = bytes;
    l->count = n;
    l->mark_count = l->prev_count = n; /* the old ring's laps do not count for this one */
    l->mark_us = dm_now_us();
    l->grow_after_us = 0; /* a burst still rising may call for the next size at once */
    dm_log(DM_LOG_NOTICE,
           "allocator: free log moved to a block of %llu MiB (%zu blocks listed; a repairer "
           "needs the last %u ms of frees and the ring held less)",
           (unsigned long long)(bytes >> 20), n - 1, (unsigned)(DM_GRACE_US / 1000));
    return 0;
}

int free_log_close(dm_ctx_t *ctx, free_log_t *l, int idx, uint64_t *drop_lo, uint64_t *drop_hi)
{
    *drop_lo = 1;
    *drop_hi = 0;
    if (l->state != FREE_LOG_ON) return 0;
    *drop_lo = l->horizon;
    *drop_hi = l->flushed_us;
    uint64_t word = our_word(l);
    dm_batch_t b;
    dm_batch_init(&b);
    dm_verb_t *cas = dm_batch_cas(&b, tails_horizon_addr(idx), word, FREE_LOG_TAKEN);
    int rc = dm_batch_exec(ctx, &b);
    free_log_release(l);
    if (rc || cas->result != word) {
        l->blk = 0; /* the repairer may free it */
        return rc ? rc : 1;
    }
    *drop_lo = 1; /* closed: nothing to drop, and the block is ours again */
    *drop_hi = 0;
    return 0;
}

/* An entry names a block inside one of the pool's nodes, past the superblock. */
static int entry_ok(const dm_worker_t *w, const free_log_entry_t *e, uint64_t pos)
{
    unsigned node = dm_gaddr_node(e->addr);
    uint64_t units = e->units & ~FREE_LOG_CLAIM;
    uint64_t off = dm_gaddr_off(e->addr), len = units * DM_GRAIN;
    return e->check == entry_check(e, pos) && node < w->n_nodes && off >= DM_SB_FIRST_CHUNK &&
           units && units <= (1ull << 30) / DM_GRAIN && off + len <= w->conns[node]->region_size &&
           off % DM_GRAIN == 0;
}

/* Addresses an entry newer than the one at hand named (open addressing, 0 = empty). */
typedef struct addr_set {
    uint64_t *v;
    size_t mask;
} addr_set_t;

/* Insert a; returns 1 when it was there already. */
static int set_add(addr_set_t *s, uint64_t a)
{
    size_t i = (size_t)((a * 0x9E3779B97F4A7C15ull) >> 20) & s->mask;
    for (; s->v[i]; i = (i + 1) & s->mask)
        if (s->v[i] == a) return 1;
    s->v[i] = a;
    return 0;
}

int free_log_take(dm_ctx_t *ctx, dm_gaddr_t blk, uint64_t word, uint64_t *bytes,
                  uint64_t *early_bytes)
{
    uint64_t hdr[4];
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, blk, hdr, sizeof(hdr));
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    uint64_t lbytes = FREE_LOG_BYTES; /* a grown log's: FREE_LOG_BYTES times a power of 4 */
    while (lbytes < FREE_LOG_MAX_BYTES && FREE_LOG_CAP_OF(lbytes) != hdr[1])
        lbytes *= 4;
    uint64_t cap = FREE_LOG_CAP_OF(lbytes);
    if (hdr[0] != FREE_LOG_MAGIC || hdr[1] != cap) return DM_ECORRUPT;
    unsigned node = dm_gaddr_node(blk);
    if (node >= ctx->w->n_nodes || dm_gaddr_off(blk) + lbytes > ctx->w->conns[node]->region_size)
        return DM_ECORRUPT;
    /* A log with names windows per raise reads its horizon and window from the word; an
     * older one has a plain horizon and a fixed window. */
    int windows = hdr[3] == FREE_LOG_WINDOW_MAGIC;
    int names = windows || hdr[3] == FREE_LOG_NAMES_MAGIC;
    int claims = names || hdr[3] == FREE_LOG_CLAIMS_MAGIC;
    uint64_t horizon = windows ? free_log_word_horizon(word) : word;
    uint64_t window_us = windows ? free_log_word_window(word) : FREE_LOG_NAME_US;
    uint64_t count = hdr[2], first = count > cap ? count - cap : 0;
    free_log_entry_t *v = malloc((size_t)(count - first) * sizeof(*v) + 1);
    size_t setcap = 1; /* a power of two, at least twice the entries */
    while (setcap < 2u * (count - first) + 2)
        setcap <<= 1;
    addr_set_t seen = {calloc(setcap, sizeof(uint64_t)), setcap - 1};
    if (!v || !seen.v) {
        free(v);
        free(seen.v);
        return DM_ENOMEM;
    }
    for (uint64_t pos = first; pos < count && !rc;) {
        /* A run of positions that does not wrap around the ring's end. */
        uint64_t slot = pos % cap, n = count - pos;
        if (n > TAKE_READ) n = TAKE_READ;
        if (n > cap - slot) n = cap - slot;
        dm_batch_init(&b);
        dm_batch_read(&b, blk + FREE_LOG_HDR + slot * sizeof(*v), v + (pos - first),
                      (uint32_t)(n * sizeof(*v)));
        rc = dm_batch_exec(ctx, &b);
        pos += n;
    }
    /* Newest first: an entry is taken only if no newer one names its address (a claim: the
     * owner took the block back or reused it; a free: the newer one decides). Before the
     * horizon: large blocks, and small ones freed the window before it (every reuse of those
     * was named before a raise past them won). */
    uint64_t named_before = horizon > window_us ? horizon - window_us : 0;
    /* What is left behind, for the log line below (docs/leases.md "Open: a fast death"). */
    uint64_t bad = 0, named = 0, window = 0, window_bytes = 0, newest = 0;
    for (uint64_t k = count; k > first && !rc; k--) {
        const free_log_entry_t *e = &v[k - 1 - first];
        if (!entry_ok(ctx->w, e, k - 1)) {
            bad++;
            continue;
        }
        if (set_add(&seen, e->addr)) {
            named++;
            continue;
        }
        if (e->freed_us > newest) newest = e->freed_us;
        if (e->units & FREE_LOG_CLAIM) continue;
        int late = e->freed_us >= horizon;
        int large = e->units > FREE_LOG_LARGE_UNITS;
        if (!late && !(claims && large) && !(names && !large && e->freed_us < named_before)) {
            if (!large && e->freed_us >= named_before)
                window++, window_bytes += e->units * DM_GRAIN;
            continue;
        }
        alloc_queue_quarantined(ctx->w->alloc, e->addr, e->units * DM_GRAIN);
        *bytes += e->units * DM_GRAIN;
        if (!late) *early_bytes += e->units * DM_GRAIN;
    }
    free(v);
    free(seen.v);
    uint64_t now = dm_now_us();
    dm_log(DM_LOG_NOTICE,
           "free log taken over: %llu entries, horizon %lld ms before now, newest entry %lld ms "
           "before now; left: %llu small blocks (%llu bytes) freed within %u ms before the "
           "horizon, %llu entries named again later, %llu unreadable",
           (unsigned long long)(count - first), (long long)(now - horizon) / 1000,
           newest ? (long long)(now - newest) / 1000 : -1, (unsigned long long)window,
           (unsigned long long)window_bytes, (unsigned)(window_us / 1000),
           (unsigned long long)named, (unsigned long long)bad);
    if (!rc) dm_alloc_free(ctx->w->alloc, blk, lbytes);
    return rc;
}
