/* SepHash as the point role (dmkv: the hybrid protocol; docs/DESIGN.md "SepHash: the core
 * built, the point role planned"): shared by index_ops.c (the table, attach, walks,
 * statistics) and role_write.c (set and del: conditional appends). */
#ifndef DMKV_SEPHASH_ROLE_H
#define DMKV_SEPHASH_ROLE_H

#include "dmkv/index.h"
#include "dmkv/sephash.h"

/* A worker's role state (dm_worker_t.sephash). */
struct dm_sephash_role {
    dm_sephash_t *h;
    dm_sephash_stats_t reported; /* h's counters already added to the process totals */
};

/* Process totals the role adds (INFO "sephash_*"). */
extern uint64_t sh_role_conflicts; /* conditional appends that lost and decided again */

/* Add h's counters since the last call to the process totals (after each operation). */
void sh_role_report(struct dm_sephash_role *r);

/* Key's item (1, *item filled), absent (0, item->version = the tombstone's token or 0), or
 * DM_E*: dm_sephash_search, a damaged read retried a few times. */
int sh_role_search(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_item_t *item);

/* The point role's set, del and carry_release (dmkv/index.h dm_point_role_t) on SepHash:
 * conditional appends to the key's CurSegment (SepHash §4.2.2), role_write.c. Same
 * arguments and returns as the role's. */
int sh_role_set(dm_ctx_t *ctx, const void *key, size_t klen, uint8_t *block, uint64_t block_len,
                dm_point_decide_fn decide, void *arg, int keep_ttl, dm_point_item_t *old,
                dm_point_carry_t *carry);
int sh_role_del(dm_ctx_t *ctx, const void *key, size_t klen, dm_point_decide_fn decide, void *arg,
                dm_point_carry_t *carry);
void sh_role_carry_release(dm_ctx_t *ctx, dm_point_carry_t *carry);
/* The point role's prefetch: the reads of a lookup with the whole CurSegment appended to b
 * (the range lock's batch), kept in carry->engine[0] until set or del uses them (when they
 * ran behind the lock: carry->prefetched) or carry_release frees them. DM_EINVAL (nothing
 * appended) when the segment's FPTable is not cached or b has no room. */
int sh_role_prefetch(dm_ctx_t *ctx, dm_batch_t *b, const void *key, size_t klen,
                     dm_point_carry_t *carry);

#endif
