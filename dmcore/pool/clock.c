/* The clock board (dmkv/clock.h): publish our wall clock, bound our offset to every peer. */
#include "dmkv/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/fault.h"
#include "dmkv/log.h"
#include "dmkv/superblock.h"

#define MS_BITS 48
#define MS_MASK ((1ull << MS_BITS) - 1)
/* clock_delay words: a word's wall ms (low 42 bits) | the most any of our words stamped
 * in the COVER_MS before it (it included) landed late, ms (22 bits). A span, not one word:
 * a reader that ticks slower than we do misses words, and needs the delay of one it saw. */
#define DELAY_BITS 22
#define DELAY_MAX ((1ull << DELAY_BITS) - 1)
#define DELAY_TS_MASK ((1ull << (64 - DELAY_BITS)) - 1)
#define COVER_MS 2000
#define HIST 32 /* our last words (3.2 s of ticks, more than COVER_MS) */
#define PENDING 4
/* Wall minus monotonic moving more than this between two ticks is a step of our wall clock
 * (NTP slews at most 0.5 ms a second; a step, or a VM resumed late, moves it at once). */
#define STEP_MS 50

/* A change of a peer's word, bounded but for how late it landed (in its next delay word). */
typedef struct pending {
    uint64_t word; /* 0 = empty */
    int64_t lo, hi;
} pending_t;

typedef struct peer {
    uint64_t word;    /* last word seen in the slot */
    uint64_t seen_us; /* monotonic time the word last changed (our reads) */
    int64_t lo, hi;   /* (our clock - its clock) in (lo, hi], ms; valid when measured */
    int measured;
    pending_t pending[PENDING]; /* changes waiting for their delay, oldest replaced first */
    unsigned next_pending;
} peer_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static peer_t peers[DM_CLOCK_SLOTS];
static uint32_t bound_ms = DM_CLOCK_BOUND_MS_DEFAULT;
static int my_slot = -1;
static uint16_t my_tag;
static uint64_t prev_issue_us; /* when the previous board read was posted, 0 = none */
static int64_t prev_off_ms;    /* our wall ms - monotonic ms at the previous tick */
static uint64_t step_until_us; /* after a step of our wall clock: no new measurement before */
static uint64_t steps_seen;
static struct {
    uint64_t ts, delay_ms; /* a word of ours: its stamp (42 bits), how late it landed */
} hist[HIST];
static unsigned nhist;          /* words noted since our slot was claimed */
static uint64_t late_logged_us; /* when we last logged a word of ours that landed late */
static unsigned dead_cleared;   /* peers' slots this process found dead and cleared */
static uint64_t dead_records[DM_CLOCK_SLOTS]; /* their allocation records, not yet taken */
static unsigned ndead_records;
static dm_clock_status_t verdict;
/* verdict.skewed and verdict.peers, read without the mutex on every key command */
static int verdict_skewed, verdict_peers;

void dm_clock_set_bound_ms(uint32_t ms)
{
    __atomic_store_n(&bound_ms, ms, __ATOMIC_RELAXED);
}

uint32_t dm_clock_bound_ms(void)
{
    return __atomic_load_n(&bound_ms, __ATOMIC_RELAXED);
}

static dm_gaddr_t slot_addr(int i)
{
    return dm_gaddr_make(0, DM_SB_OFF(clock_board) + 8u * (unsigned)i);
}

static dm_gaddr_t delay_addr(int i)
{
    return dm_gaddr_make(0, DM_SB_OFF(clock_delay) + 8u * (unsigned)i);
}

static uint64_t stamp_of(uint64_t word)
{
    return word & MS_MASK & DELAY_TS_MASK;
}

/* Our word stamped with the wall clock read at taken_us (monotonic) landed by done_us
 * (done_us 0: a failed post, it may land any time) (mu held). */
static void note_landed(uint64_t word, uint64_t taken_us, uint64_t done_us)
{
    unsigned at = nhist++ % HIST;
    hist[at].ts = stamp_of(word);
    /* + 1: both clocks are read in whole ms */
    hist[at].delay_ms = done_us ? (done_us - taken_us + 999) / 1000 + 1 : DELAY_MAX;
}

/* The clock_delay word our next tick writes: our last word's stamp and the most any word
 * of ours stamped in the COVER_MS before it landed late; 0 before our first (mu held). */
static uint64_t delay_word(void)
{
    if (!nhist) return 0;
    uint64_t ts = hist[(nhist - 1) % HIST].ts, ms = 0;
    for (unsigned k = 0; k < HIST && k < nhist; k++)
        if (hist[k].ts <= ts && hist[k].ts + COVER_MS >= ts && hist[k].delay_ms > ms)
            ms = hist[k].delay_ms;
    return ts << DELAY_BITS | (ms > DELAY_MAX ? DELAY_MAX : ms);
}

/* A peer's delay word: the newest pending change it covers becomes a measurement (mu
 * held). Its lower bound loses the delay: the peer read its clock up to that long before
 * the word landed inside our window. Changes it can no longer cover are dropped. */
static void confirm(peer_t *p, uint64_t dw)
{
    if (!dw) return;
    uint64_t last = dw >> DELAY_BITS, best = 0;
    pending_t *pick = NULL;
    for (int k = 0; k < PENDING; k++) {
        pending_t *q = &p->pending[k];
        uint64_t ts = stamp_of(q->word);
        if (!q->word || ts > last) continue;
        if (ts + COVER_MS < last)
            q->word = 0; /* older than any later delay word covers */
        else if (!pick || ts > best)
            pick = q, best = ts;
    }
    if (!pick) return;
    p->lo = pick->lo - (int64_t)(dw & DELAY_MAX);
    p->hi = pick->hi;
    p->measured = 1;
    for (int k = 0; k < PENDING; k++) /* it and older ones are done */
        if (p->pending[k].word && stamp_of(p->pending[k].word) <= best) p->pending[k].word = 0;
}

static dm_gaddr_t record_addr(int i)
{
    return dm_gaddr_make(0, DM_SB_OFF(alloc_board) + 8u * (unsigned)i);
}

/* An allocation record left in a slot we cleared or claimed, to be taken over (mu held). */
static void note_record(uint64_t rec)
{
    if (rec && rec != dm_alloc_record() && ndead_records < DM_CLOCK_SLOTS)
        dead_records[ndead_records++] = rec;
}

/* A cleared dead slot: its repair is ours (mu held). */
static void note_dead(uint64_t rec)
{
    dead_cleared++;
    note_record(rec);
}

static uint64_t my_word(uint64_t wall)
{
    return (uint64_t)my_tag << MS_BITS | (wall & MS_MASK);
}

/* Judge the peers (mu held). */
static void judge(uint64_t now_us)
{
    dm_clock_status_t s = {0};
    int64_t b = (int64_t)dm_clock_bound_ms(), worst = INT64_MIN;
    for (int i = 0; i < DM_CLOCK_SLOTS; i++) {
        peer_t *p = &peers[i];
        if (i == my_slot || !p->measured || now_us - p->seen_us > DM_CLOCK_STALE_MS * 1000ull)
            continue;
        s.peers++;
        int64_t far = p->lo >= 0 ? p->lo : -p->hi; /* how surely far it is */
        if (b && (p->lo >= b || p->hi <= -b)) s.far_peers++;
        if (far > worst) {
            worst = far;
            s.lo_ms = p->lo;
            s.hi_ms = p->hi;
        }
    }
    /* Far from a strict majority (or from the only peer: then both stop, which is safe). */
    s.skewed = b && s.far_peers > 0 && (2 * s.far_peers > s.peers || s.peers == 1);
    verdict = s;
    __atomic_store_n(&verdict_skewed, s.skewed, __ATOMIC_RELAXED);
    __atomic_store_n(&verdict_peers, s.peers, __ATOMIC_RELAXED);
}

int dm_clock_tick(dm_ctx_t *ctx)
{
    uint64_t board[DM_CLOCK_SLOTS], recs[DM_CLOCK_SLOTS], delays[DM_CLOCK_SLOTS];
    pthread_mutex_lock(&mu);
    while (!my_tag)
        if (getrandom(&my_tag, sizeof(my_tag), 0) != sizeof(my_tag)) my_tag = 1;
    int slot = my_slot;
    uint64_t prev_delay = delay_word();
    pthread_mutex_unlock(&mu);

    dm_batch_t b;
    dm_batch_init(&b);
    uint64_t taken_us = dm_now_us();
    uint64_t mine = my_word(dm_wall_ms());
    if (slot >= 0) {
        dm_batch_write(&b, slot_addr(slot), &mine, 8);
        if (prev_delay) dm_batch_write(&b, delay_addr(slot), &prev_delay, 8);
    }
    dm_batch_read(&b, slot_addr(0), board, sizeof(board));
    dm_batch_read(&b, delay_addr(0), delays, sizeof(delays));
    dm_batch_read(&b, record_addr(0), recs, sizeof(recs)); /* read with the board: a slot's
        record is its dead owner's only while the word is unchanged (the clearing CAS) */
    dm_fault_point(ctx, DM_FAULT_CLOCK);
    uint64_t issue_us = dm_now_us();
    int rc = dm_batch_exec(ctx, &b);
    if (rc) {
        pthread_mutex_lock(&mu);
        if (slot >= 0 && slot == my_slot) note_landed(mine, taken_us, 0);
        pthread_mutex_unlock(&mu);
        return rc;
    }
    uint64_t done_us = dm_now_us();
    int64_t wall = (int64_t)(dm_wall_ms() & MS_MASK);

    pthread_mutex_lock(&mu);
    if (slot >= 0 && slot == my_slot) note_landed(mine, taken_us, done_us);
    if (dm_clock_bound_ms() && done_us - taken_us > 1000ull * dm_clock_bound_ms() &&
        done_us - late_logged_us > 10000000ull) { /* peers see us that much vaguer */
        late_logged_us = done_us;
        dm_log(DM_LOG_NOTICE,
               "clock board: our word landed %llu ms after we read the clock (a long event-loop "
               "turn, a loaded host or a slow memory node)",
               (unsigned long long)((done_us - taken_us) / 1000));
    }
    int64_t window = prev_issue_us ? (int64_t)((done_us - prev_issue_us + 999) / 1000) : -1;
    /* A step of our wall clock (NTP, a VM resumed late) lands between a peer's stamp and our
     * reading: on one machine both clocks stepped, yet d grows by the step for every word
     * stamped before it. Changes seen for COVER_MS after the step are not measured (a word
     * stamped before it may land that late), pending ones are dropped; the measurements
     * from before the step stand meanwhile. */
    int64_t off = wall - (int64_t)(done_us / 1000);
    if (prev_issue_us && llabs(off - prev_off_ms) > STEP_MS) {
        dm_log(DM_LOG_NOTICE,
               "clock board: this machine's wall clock jumped by %lld ms (NTP step?): "
               "skew measurements pause for %d ms",
               (long long)(off - prev_off_ms), COVER_MS);
        step_until_us = done_us + 1000ull * COVER_MS;
        steps_seen++;
        for (int i = 0; i < DM_CLOCK_SLOTS; i++)
            memset(peers[i].pending, 0, sizeof(peers[i].pending));
    }
    prev_off_ms = off;
    int measure = window >= 0 && done_us >= step_until_us;
    int claim = -1;
    for (int i = 0; i < DM_CLOCK_SLOTS; i++) {
        peer_t *p = &peers[i];
        uint64_t w = board[i];
        if (i == my_slot) {
            if (w >> MS_BITS != my_tag) my_slot = -1; /* taken from us while we stood still */
            continue;
        }
        if (w != p->word || !p->seen_us) {
            int changed = p->seen_us && w != p->word;
            if (w >> MS_BITS != p->word >> MS_BITS) { /* another gateway (or none) */
                memset(p->pending, 0, sizeof(p->pending));
                p->measured = 0;
            }
            p->word = w;
            p->seen_us = done_us;
            if (changed && w && measure) {
                /* Landed inside our window, but read from the peer's clock before it was
                 * posted: bounded once the peer says how late it landed. */
                int64_t d = wall - (int64_t)(w & MS_MASK);
                p->pending[p->next_pending++ % PENDING] = (pending_t){w, d - window, d};
            }
        }
        confirm(p, delays[i]);
        int stale = done_us - p->seen_us > 2ull * DM_CLOCK_STALE_MS * 1000;
        if (claim < 0 && (!w || stale)) claim = i;
    }
    prev_issue_us = issue_us;
    judge(done_us);
    int need_claim = my_slot < 0, dead = -1, now_slot = my_slot;
    for (int i = 0; i < DM_CLOCK_SLOTS && dead < 0; i++)
        if (i != my_slot && !(need_claim && i == claim) && board[i] && peers[i].seen_us &&
            done_us - peers[i].seen_us > 2ull * DM_CLOCK_STALE_MS * 1000)
            dead = i;
    pthread_mutex_unlock(&mu);
    if (dead >= 0) {
        /* A gateway that stopped writing its word for 2 * DM_CLOCK_STALE_MS died (or was
         * frozen that long): whoever clears its slot repairs what it may have left. */
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, slot_addr(dead), board[dead], 0);
        if (dm_batch_exec(ctx, &b) == 0 && v->result == board[dead]) {
            pthread_mutex_lock(&mu);
            note_dead(recs[dead]);
            memset(&peers[dead], 0, sizeof(peers[dead]));
            pthread_mutex_unlock(&mu);
        }
    }
    if (!need_claim) {
        /* Publish our allocation record in our slot's alloc_board word (once it exists). */
        uint64_t rec = dm_alloc_record();
        if (rec && now_slot >= 0 && recs[now_slot] != rec) {
            dm_batch_init(&b);
            dm_batch_write(&b, record_addr(now_slot), &rec, 8);
            return dm_batch_exec(ctx, &b);
        }
        return 0;
    }
    if (claim < 0) return DM_EFULL;
    dm_batch_init(&b);
    taken_us = dm_now_us();
    mine = my_word(dm_wall_ms());
    dm_verb_t *v = dm_batch_cas(&b, slot_addr(claim), board[claim], mine);
    rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (v->result != board[claim]) return 0;
    done_us = dm_now_us();
    pthread_mutex_lock(&mu);
    nhist = 0; /* a new slot: its words start here */
    note_landed(mine, taken_us, done_us);
    if (board[claim])
        note_dead(recs[claim]); /* a dead gateway's slot: its repair is ours */
    else
        note_record(recs[claim]); /* left by a gateway that stopped cleanly: its tails too */
    my_slot = claim;
    memset(&peers[claim], 0, sizeof(peers[claim]));
    pthread_mutex_unlock(&mu);
    uint64_t rec = dm_alloc_record();
    if (!rec) return 0; /* published by a later tick once it exists */
    dm_batch_init(&b);
    dm_batch_write(&b, record_addr(claim), &rec, 8);
    return dm_batch_exec(ctx, &b);
}

int dm_clock_leave(dm_ctx_t *ctx)
{
    pthread_mutex_lock(&mu);
    int slot = my_slot;
    my_slot = -1;
    pthread_mutex_unlock(&mu);
    if (slot < 0) return 0;
    uint64_t w = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, slot_addr(slot), &w, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc || w >> MS_BITS != my_tag) return rc; /* already taken over */
    dm_batch_init(&b);
    dm_batch_cas(&b, slot_addr(slot), w, 0);
    return dm_batch_exec(ctx, &b);
}

unsigned dm_clock_records_pending(void)
{
    pthread_mutex_lock(&mu);
    unsigned n = ndead_records;
    pthread_mutex_unlock(&mu);
    return n;
}

unsigned dm_clock_take_dead_records(uint64_t *out, unsigned max)
{
    pthread_mutex_lock(&mu);
    unsigned n = ndead_records < max ? ndead_records : max;
    memcpy(out, dead_records, n * sizeof(*out));
    memmove(dead_records, dead_records + n, (ndead_records - n) * sizeof(*out));
    ndead_records -= n;
    pthread_mutex_unlock(&mu);
    return n;
}

unsigned dm_clock_take_dead(void)
{
    pthread_mutex_lock(&mu);
    unsigned n = dead_cleared;
    dead_cleared = 0;
    pthread_mutex_unlock(&mu);
    return n;
}

void dm_clock_status(dm_clock_status_t *s)
{
    pthread_mutex_lock(&mu);
    *s = verdict;
    s->steps = steps_seen;
    pthread_mutex_unlock(&mu);
}

int dm_clock_skewed(void)
{
    return __atomic_load_n(&verdict_skewed, __ATOMIC_RELAXED);
}

uint32_t dm_clock_margin_ms(void)
{
    return __atomic_load_n(&verdict_peers, __ATOMIC_RELAXED) ? dm_clock_bound_ms() : 0;
}
