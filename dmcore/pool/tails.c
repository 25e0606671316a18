/* Chunk tails of dead gateways taken over online (tails.h, dmkv/alloc.h dm_alloc_adopt).
 *
 * Why it is safe: a worker never carves at or above its entry's watermark without first
 * raising it by CAS, and a repairer takes a region over by CAS of the entry to 0. Once that
 * CAS succeeds every later CAS of the owner fails (it expects its own last word), so the
 * owner, even one only thought dead, never hands out a byte of what was taken over. */
#include "tails.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/log.h"
#include "dmkv/superblock.h"
#include "alloc_internal.h"
#include "free_log.h"

static dm_gaddr_t record; /* this process's, atomics */
static int next_entry;

typedef struct spare {
    dm_gaddr_t start;
    uint64_t bytes;
} spare_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static spare_t *spares;
static size_t nspares, capspares;
static dm_alloc_tail_stats_t stats; /* mu */

int tails_entry_index(void)
{
    int i = __atomic_fetch_add(&next_entry, 1, __ATOMIC_RELAXED);
    return i < DM_TAIL_ENTRIES ? i : -1;
}

dm_gaddr_t tails_entry_addr(int idx)
{
    dm_gaddr_t rec = __atomic_load_n(&record, __ATOMIC_ACQUIRE);
    return rec && idx >= 0 ? rec + 8u * (1u + (unsigned)idx) : 0;
}

dm_gaddr_t tails_handoff_addr(int idx)
{
    dm_gaddr_t rec = __atomic_load_n(&record, __ATOMIC_ACQUIRE);
    return rec && idx >= 0 ? rec + 8u * (1u + DM_TAIL_ENTRIES + (unsigned)idx) : 0;
}

dm_gaddr_t tails_horizon_addr(int idx)
{
    dm_gaddr_t rec = __atomic_load_n(&record, __ATOMIC_ACQUIRE);
    return rec && idx >= 0 ? rec + 8u * (1u + 2 * DM_TAIL_ENTRIES + (unsigned)idx) : 0;
}

dm_gaddr_t tails_log_addr(int idx)
{
    dm_gaddr_t rec = __atomic_load_n(&record, __ATOMIC_ACQUIRE);
    return rec && idx >= 0 ? rec + 8u * (1u + 3 * DM_TAIL_ENTRIES + (unsigned)idx) : 0;
}

void tails_set_record(dm_gaddr_t rec)
{
    __atomic_store_n(&record, rec, __ATOMIC_RELEASE);
}

dm_gaddr_t dm_alloc_record(void)
{
    return __atomic_load_n(&record, __ATOMIC_ACQUIRE);
}

int tails_pop_spare(dm_gaddr_t *start, uint64_t *bytes)
{
    pthread_mutex_lock(&mu);
    int got = nspares > 0;
    if (got) {
        spare_t s = spares[--nspares];
        *start = s.start;
        *bytes = s.bytes;
        stats.spare_bytes -= s.bytes;
    }
    pthread_mutex_unlock(&mu);
    return got;
}

void tails_push_spare(dm_gaddr_t start, uint64_t bytes)
{
    pthread_mutex_lock(&mu);
    if (nspares == capspares) {
        size_t cap = capspares ? 2 * capspares : 16;
        spare_t *n = realloc(spares, cap * sizeof(*n));
        if (!n) { /* leak rather than fail: the space stays taken, as before repair */
            pthread_mutex_unlock(&mu);
            return;
        }
        spares = n;
        capspares = cap;
    }
    spares[nspares++] = (spare_t){start, bytes};
    stats.spare_bytes += bytes;
    pthread_mutex_unlock(&mu);
}

void dm_alloc_tail_stats(dm_alloc_tail_stats_t *s)
{
    pthread_mutex_lock(&mu);
    *s = stats;
    pthread_mutex_unlock(&mu);
}

/* [addr, addr + len) lies inside a node of this pool, past the superblock. */
static int span_ok(const dm_worker_t *w, dm_gaddr_t addr, uint64_t len)
{
    unsigned node = dm_gaddr_node(addr);
    uint64_t off = dm_gaddr_off(addr);
    return node < w->n_nodes && off >= DM_SB_FIRST_CHUNK && len <= (1ull << 32) &&
           off + len <= w->conns[node]->region_size;
}

/* An entry word that describes space inside the pool. */
static int word_ok(const dm_worker_t *w, uint64_t word)
{
    return span_ok(w, tail_wm(word), tail_left(word));
}

static dm_gaddr_t board_addr(int i)
{
    return dm_gaddr_make(0, DM_SB_OFF(spare_board) + 8u * (unsigned)i);
}

/* The spare board's words, 1 RTT. Returns 0 or DM_E*. */
static int board_read(dm_ctx_t *ctx, uint64_t *board)
{
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, board_addr(0), board, DM_SPARE_SLOTS * 8);
    return dm_batch_exec(ctx, &b);
}

/* Put a tail word on the pool's spare board, where any gateway's worker can take it (a
 * survivor that kept it would hoard it while another gateway runs out of memory). Returns
 * 1 (on the board), 0 (board full) or DM_E*. */
static int board_put(dm_ctx_t *ctx, uint64_t word)
{
    uint64_t board[DM_SPARE_SLOTS];
    dm_batch_t b;
    int rc = board_read(ctx, board);
    if (rc) return rc;
    for (int i = 0; i < DM_SPARE_SLOTS; i++) {
        if (board[i]) continue;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, board_addr(i), 0, word);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
        if (v->result == 0) return 1;
    }
    return 0;
}

int tails_board_take(dm_ctx_t *ctx, dm_gaddr_t *start, uint64_t *bytes)
{
    uint64_t board[DM_SPARE_SLOTS];
    dm_batch_t b;
    int rc = board_read(ctx, board);
    if (rc) return rc;
    for (int i = 0; i < DM_SPARE_SLOTS; i++) {
        if (!board[i] || !word_ok(ctx->w, board[i])) continue;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, board_addr(i), board[i], 0);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
        if (v->result != board[i]) continue;
        *start = tail_wm(board[i]);
        *bytes = tail_left(board[i]);
        pthread_mutex_lock(&mu);
        stats.board_taken++;
        pthread_mutex_unlock(&mu);
        return 1;
    }
    return 0;
}

int dm_pool_spare_board_bytes(dm_ctx_t *ctx, uint64_t *bytes)
{
    uint64_t board[DM_SPARE_SLOTS];
    int rc = board_read(ctx, board);
    *bytes = 0;
    for (int i = 0; !rc && i < DM_SPARE_SLOTS; i++)
        *bytes += tail_left(board[i]);
    return rc;
}

#define HANDOFF_READ 4096 /* pairs per read: 64 KB */

/* The free blocks a stopped gateway's worker listed in its handoff block blk (which we
 * now own, by CAS): queued on this worker's lists, quarantined from now (a reader may
 * still hold one it read before the stop), then blk itself. Pairs outside the pool are
 * skipped. Returns 0 or DM_E*. */
static int take_handoff(dm_ctx_t *ctx, dm_gaddr_t blk, uint64_t *pieces, uint64_t *bytes)
{
    uint64_t hdr[2];
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, blk, hdr, sizeof(hdr));
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (hdr[0] != DM_HANDOFF_MAGIC || hdr[1] > (1ull << 26)) return DM_ECORRUPT;
    uint64_t *v = malloc(HANDOFF_READ * 16);
    if (!v) return DM_ENOMEM;
    for (uint64_t done = 0; done < hdr[1] && !rc;) {
        uint64_t n = hdr[1] - done < HANDOFF_READ ? hdr[1] - done : HANDOFF_READ;
        dm_batch_init(&b);
        dm_batch_read(&b, blk + 16 + 16 * done, v, 16 * n);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        for (uint64_t i = 0; i < n; i++) {
            dm_gaddr_t addr = v[2 * i];
            uint64_t len = v[2 * i + 1];
            if (!span_ok(ctx->w, addr, len)) continue;
            alloc_queue_quarantined(ctx->w->alloc, addr, len);
            ++*pieces;
            *bytes += len;
        }
        done += n;
    }
    free(v);
    if (!rc)
        dm_alloc_free(ctx->w->alloc, blk, (16 + 16 * hdr[1] + DM_UNIT - 1) / DM_UNIT * DM_UNIT);
    return rc;
}

int dm_alloc_adopt(dm_ctx_t *ctx, dm_gaddr_t rec, dm_alloc_tail_stats_t *got)
{
    memset(got, 0, sizeof(*got));
    /* Our own record is taken over like any other (a stale alloc_board word can name it):
     * the CASes fence our workers exactly as they fence a dead gateway's. */
    if (!rec) return 0;
    uint64_t words[DM_TAIL_RECORD_WORDS] = {0};
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, rec, words, DM_TAIL_RECORD_WORDS_V1 * 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (words[0] != DM_TAIL_MAGIC && words[0] != DM_TAIL_MAGIC_V1) return DM_ECORRUPT;
    if (words[0] == DM_TAIL_MAGIC) { /* the horizon and free-log words */
        dm_batch_init(&b);
        dm_batch_read(&b, rec + 8 * DM_TAIL_RECORD_WORDS_V1, words + DM_TAIL_RECORD_WORDS_V1,
                      (DM_TAIL_RECORD_WORDS - DM_TAIL_RECORD_WORDS_V1) * 8);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
    }
    for (int i = 0; i < DM_TAIL_ENTRIES; i++) {
        uint64_t word = words[1 + i];
        if (!word) continue;
        if (!word_ok(ctx->w, word)) {
            dm_log(DM_LOG_WARNING,
                   "dead gateway repair: allocation record entry %d holds "
                   "%#llx, outside the pool: left alone",
                   i, (unsigned long long)word);
            continue;
        }
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, rec + 8u * (1u + (unsigned)i), word, 0);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) return rc;
        if (v->result != word || !tail_left(word)) continue; /* its owner moved on: alive */
        /* On an error the board CAS may have landed: leave the tail (leaked) rather than
         * risk handing it out twice. */
        int put = board_put(ctx, word);
        if (put == 0) tails_push_spare(tail_wm(word), tail_left(word));
        got->regions_adopted++;
        got->bytes_adopted += tail_left(word);
    }
    uint64_t hpieces = 0;
    for (int i = 0; i < DM_TAIL_ENTRIES && !rc; i++) {
        dm_gaddr_t blk = words[1 + DM_TAIL_ENTRIES + i];
        if (!blk) continue;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, rec + 8u * (1u + DM_TAIL_ENTRIES + (unsigned)i), blk, 0);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        if (v->result != blk) continue;
        rc = take_handoff(ctx, blk, &hpieces, &got->handoff_bytes_adopted);
        got->handoffs_adopted += rc == 0;
    }
    /* Free logs: the horizon CAS decides, as the entry CAS does for tails (free_log.h). */
    for (int i = 0; i < DM_TAIL_ENTRIES && !rc; i++) {
        uint64_t h = words[1 + 2 * DM_TAIL_ENTRIES + i];
        dm_gaddr_t log = words[1 + 3 * DM_TAIL_ENTRIES + i];
        if (!log || h == FREE_LOG_TAKEN || !span_ok(ctx->w, log, FREE_LOG_BYTES)) continue;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, rec + 8u * (1u + 2 * DM_TAIL_ENTRIES + (unsigned)i), h,
                                    FREE_LOG_TAKEN);
        if ((rc = dm_batch_exec(ctx, &b)) != 0) break;
        if (v->result != h) continue; /* its owner raised it meanwhile: alive */
        rc = free_log_take(ctx, log, h, &got->free_log_bytes_adopted, &got->free_log_early_bytes);
        got->free_logs_adopted += rc == 0;
    }
    pthread_mutex_lock(&mu);
    stats.regions_adopted += got->regions_adopted;
    stats.bytes_adopted += got->bytes_adopted;
    stats.handoffs_adopted += got->handoffs_adopted;
    stats.handoff_bytes_adopted += got->handoff_bytes_adopted;
    stats.free_logs_adopted += got->free_logs_adopted;
    stats.free_log_bytes_adopted += got->free_log_bytes_adopted;
    stats.free_log_early_bytes += got->free_log_early_bytes;
    pthread_mutex_unlock(&mu);
    return rc;
}
