/* SepHash's writes as the point role (dmkv: the hybrid protocol, docs/DESIGN.md "SepHash:
 * the core built, the point role planned"). Every write the gateway decides is a
 * conditional append: search the key's newest entry, let decide() see it (a tombstone reads
 * as absent), then append with DM_SH_IF on the token read, so the append lands only while
 * that entry is still the newest; a lost one (DM_ECONFLICT) searches and decides again, as
 * RACE redoes after a failed slot CAS. The entry CAS is the commit point, marked like
 * RACE's slot CAS. The live key counter moves with it: +1 when decide saw the key absent,
 * -1 for a tombstone of a present key (dm_sephash_commit_t.count). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/kvblock.h"
#include "role.h"
#include "sephash_internal.h"

/* Attempts before a write gives up, as many as RACE allows a slot CAS. A lost append is
 * another write of the key that landed between our search and our append (or a merge that
 * dropped the tombstone read), so the key's writes progress meanwhile. */
#define MAX_ATTEMPTS 256
#define MAX_CORRUPT 8

uint64_t sh_role_conflicts;

int sh_role_search(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_item_t *item)
{
    int rc = DM_ECORRUPT;
    for (int i = 0; i < MAX_CORRUPT && (rc == DM_ECORRUPT || rc == DM_ERETRY); i++) {
        ctx->start_us = dm_now_us();
        rc = dm_sephash_search(ctx, ctx->w->sephash->h, key, klen, item);
    }
    return rc;
}

/* The prefetched reads a carry holds (engine word 0), taken out of it. */
static sh_reads_t *take_reads(dm_point_carry_t *carry)
{
    sh_reads_t *r = carry ? (sh_reads_t *)(uintptr_t)carry->engine[0] : NULL;
    if (carry) carry->engine[0] = 0;
    return r;
}

int sh_role_prefetch(dm_ctx_t *ctx, dm_batch_t *b, const void *key, size_t klen,
                     dm_point_carry_t *carry)
{
    carry->prefetched = 0;
    sh_reads_free(take_reads(carry)); /* an earlier lock attempt's */
    sh_reads_t *r;
    if (sh_lookup_issue(ctx, ctx->w->sephash->h, key, klen, 1, 0, b, &r)) return DM_EINVAL;
    carry->engine[0] = (uint64_t)(uintptr_t)r;
    return 0;
}

/* Look key up with its whole CurSegment (what a conditional append CASes from), as a
 * search would: 1 with *item (free item->block), 0 absent (item->version: the tombstone's
 * token or 0), or DM_E*. From the reads the range lock's batch carried when they ran
 * behind the lock (carry->prefetched; once), else reading now. Starts the operation's
 * clock at the reads' posting (the token's age, dm_ctx_check), into *look_us too. */
static int look(dm_ctx_t *ctx, const void *key, size_t klen, sh_look_t *o, dm_point_item_t *item,
                dm_point_carry_t *carry, uint64_t *look_us)
{
    sh_reads_t *r = take_reads(carry);
    int rc = DM_ERETRY;
    if (r && carry->prefetched) {
        ctx->start_us = *look_us = carry->read_us;
        rc = sh_lookup_eval(ctx, ctx->w->sephash->h, key, klen, r, carry->read_us, o);
    }
    sh_reads_free(r);
    if (rc == DM_ERETRY) {
        ctx->start_us = *look_us = dm_now_us();
        rc = sh_lookup(ctx, ctx->w->sephash->h, key, klen, 1, o);
    }
    return rc ? rc : sh_look_item(o, item);
}

/* The commit bound: the range lock's hold when locked (a write past it is not posted), else
 * the operation's age limit (batch.h dm_batch_commit). */
static uint64_t commit_by(const dm_ctx_t *ctx, const dm_point_carry_t *carry)
{
    return carry && carry->locked ? carry->commit_by_us : ctx->start_us + DM_OP_TIMEOUT_US;
}

/* Retry after a lost conditional append or an operation that outlived its bound. */
static int again(int rc)
{
    if (rc == DM_ECONFLICT) __atomic_fetch_add(&sh_role_conflicts, 1, __ATOMIC_RELAXED);
    return rc == DM_ECONFLICT || rc == DM_ERETRY || rc == DM_ECORRUPT;
}

/* Give back a block of ours: quarantined once an append naming it was posted, else at once;
 * leaked when that append's fate is unknown (it may be linked). */
static void drop_block(dm_ctx_t *ctx, dm_gaddr_t addr, uint64_t block_len, int posted, int rc)
{
    uint64_t bytes = dm_sephash_block_bytes(block_len);
    if (posted && (rc == DM_EIO || rc == DM_ETIMEDOUT)) return;
    if (posted)
        dm_alloc_free(ctx->w->alloc, addr, bytes);
    else
        dm_alloc_unused(ctx->w->alloc, addr, bytes);
}

/* Give back the carry's block (not what prefetch kept). */
static void release_block(dm_ctx_t *ctx, dm_point_carry_t *carry)
{
    if (!carry->block) return;
    drop_block(ctx, carry->block, carry->block_len, carry->block_posted, 0);
    carry->block = 0;
}

/* Keep our block in carry for the next attempt (a veto or a yield). */
void sh_role_carry_release(dm_ctx_t *ctx, dm_point_carry_t *carry)
{
    sh_reads_free(take_reads(carry));
    release_block(ctx, carry);
}

/* written: the block's bytes were sent (with a CAS); else the next attempt sends them. */
static void keep_block(dm_point_carry_t *carry, dm_gaddr_t addr, uint64_t block_len, int posted,
                       int written)
{
    carry->block = addr;
    carry->block_len = block_len;
    carry->block_posted = posted;
    carry->block_unwritten = !written;
}

int sh_role_set(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block, uint64_t block_len,
                dm_point_decide_fn decide, void *arg, int keep_ttl, dm_point_item_t *old,
                dm_point_carry_t *carry)
{
    struct dm_sephash_role *r = ctx->w->sephash;
    dm_gaddr_t addr;
    int rc, posted = 0;
    int written = 0; /* block sent by this call or the lock's batch as it is now */
    if (carry && carry->block && carry->block_len == block_len) {
        addr = carry->block; /* an earlier attempt's, or written with the range lock */
        posted = carry->block_posted;
        written = !carry->block_unwritten;
        carry->block = 0;
    } else {
        if (carry) release_block(ctx, carry);
        rc = dm_alloc_kv_block(ctx, dm_sephash_block_bytes(block_len), &addr);
        if (rc) return rc;
    }
    const uint64_t block_expire = dm_kvblock_expire(block); /* as asked for */
    sh_look_t *o = malloc(sizeof(*o));
    rc = o ? DM_ERETRY : DM_ENOMEM;
    for (int attempt = 0; o && attempt < MAX_ATTEMPTS; attempt++) {
        dm_point_item_t cur;
        uint64_t look_us;
        rc = look(ctx, key, klen, o, &cur, carry, &look_us);
        if (rc < 0) {
            if (again(rc)) continue;
            break;
        }
        int present = rc == 1;
        if (decide && !decide(arg, present ? &cur.view : NULL)) {
            if (old && present)
                *old = cur; /* SET ... NX GET still reports the old value */
            else
                free(cur.block);
            if (carry) {
                keep_block(carry, addr, block_len, posted, written);
            } else {
                drop_block(ctx, addr, block_len, posted, 0);
            }
            free(o);
            sh_role_report(r);
            return 0;
        }
        /* KEEPTTL: the current expiry goes into our block (built timed: full layout). */
        uint64_t want = keep_ttl && present ? cur.view.expire_ms : block_expire;
        int same = want == dm_kvblock_expire(block);
        rc = same ? 0 : dm_kvblock_set_expire(block, block_len, want);
        /* The block goes out with the entry CAS (its node's) and is not sent again while
         * unchanged: the append CASes from this lookup, so search, block and CAS take two
         * round trips (SepHash §4.3's insert), one more when the key's block is read. */
        dm_sephash_commit_t cm = {.by_us = commit_by(ctx, carry),
                                  .count = present ? 0 : 1,
                                  .look = o,
                                  .look_us = look_us,
                                  .img = block,
                                  .written = same && written};
        if (!rc) {
            posted = 1; /* from here its fate may be unknown: never reusable at once */
            rc = dm_sephash_append_commit(ctx, r->h, key, klen, addr, block_len, DM_SH_IF,
                                          cur.version, &cm, NULL);
            written = cm.written;
        }
        if (!rc) {
            if (old && present)
                *old = cur;
            else if (old)
                memset(old, 0, sizeof(*old)), free(cur.block);
            else
                free(cur.block);
            free(o);
            sh_role_report(r);
            return 1;
        }
        free(cur.block);
        if (rc == DM_EYIELD && carry) {
            /* An early lock's holder gave way: nothing posted, the block kept. */
            keep_block(carry, addr, block_len, posted, written);
            free(o);
            return rc;
        }
        if (!again(rc)) break;
    }
    free(o);
    drop_block(ctx, addr, block_len, posted, rc);
    sh_role_report(r);
    return rc == DM_ECONFLICT ? DM_ERETRY : rc; /* never WATCH's error: a restart */
}

/* A tombstone block naming key (64 bytes or so), allocated: 0 with *addr, *len and *img
 * (malloc'd, not written yet), or DM_E*. */
static int tombstone_block(dm_ctx_t *ctx, const void *key, size_t klen, dm_gaddr_t *addr,
                           uint64_t *len, uint8_t **img)
{
    uint64_t bytes = dm_kvblock_size(klen, 0, 0);
    uint8_t *buf = malloc(bytes);
    if (!buf) return DM_ENOMEM;
    dm_kvblock_build(buf, key, klen, NULL, 0, 0, 0);
    int rc = dm_alloc_kv_block(ctx, dm_sephash_block_bytes(bytes), addr);
    if (rc) {
        free(buf);
        return rc;
    }
    *len = bytes;
    *img = buf;
    return 0;
}

int sh_role_del(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_decide_fn decide, void *arg,
                dm_point_carry_t *carry)
{
    struct dm_sephash_role *r = ctx->w->sephash;
    dm_gaddr_t addr = 0;
    uint64_t len = 0;
    uint8_t *img = NULL;
    int rc = DM_ERETRY, posted = 0, written = 0;
    sh_look_t *o = malloc(sizeof(*o));
    if (!o) rc = DM_ENOMEM;
    for (int attempt = 0; o && attempt < MAX_ATTEMPTS; attempt++) {
        dm_point_item_t cur;
        uint64_t look_us;
        rc = look(ctx, key, klen, o, &cur, carry, &look_us);
        if (rc < 0) {
            if (again(rc)) continue;
            break;
        }
        if (rc == 0) break; /* absent (or a tombstone): nothing to delete */
        int go = !decide || decide(arg, &cur.view);
        free(cur.block);
        if (!go) {
            rc = 0;
            break;
        }
        if (!addr) rc = tombstone_block(ctx, key, klen, &addr, &len, &img);
        if (rc < 0) break;
        /* A commit too (its turn is taken before the lock: kv/hybrid.c), bounded like
         * set's: a DEL takes a key out only within the range lock's hold, and the gate's
         * lock check runs a few round trips before this CAS. The tombstone goes out with
         * the CAS, as set's block does. */
        dm_sephash_commit_t cm = {.by_us = commit_by(ctx, carry),
                                  .count = -1,
                                  .look = o,
                                  .look_us = look_us,
                                  .img = img,
                                  .written = written};
        posted = 1;
        rc = dm_sephash_append_commit(ctx, r->h, key, klen, addr, len, DM_SH_IF | DM_SH_TOMBSTONE,
                                      cur.version, &cm, NULL);
        written = cm.written;
        if (!rc) {
            addr = 0; /* published */
            rc = 1;
            break;
        }
        if (!again(rc)) break;
    }
    free(o);
    free(img);
    if (addr) drop_block(ctx, addr, len, posted, rc);
    (void)carry;
    sh_role_report(r);
    return rc == DM_ECONFLICT ? DM_ERETRY : rc;
}
