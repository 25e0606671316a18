/* A held CHIME leaf lock and the leaf functions shared by leaf.c, split.c, settle.c,
 * search.c and scan.c. */
#ifndef DMKV_CHIME_LEAF_LOCK_H
#define DMKV_CHIME_LEAF_LOCK_H

#include "chime_internal.h"

#define CH_MAX_OBJS (CH_MAX_SPAN + CH_MAX_SPAN / 2) /* entries + replicas, nbhd >= 2 */

struct dm_range_lock { /* dm_chime_lock_t: CHIME's range lock (dmkv/index.h) */
    uint8_t *key;
    size_t klen;
    ch_khash_t kh;
    dm_gaddr_t leaf;
    uint64_t word;             /* the lock word as held: locked, our lease time, vacancy */
    uint64_t remote_word;      /* the lock word as it is in the pool now (CAS-unlock expects it) */
    uint64_t locked_us;        /* monotonic time the lock was taken */
    uint8_t *img;              /* leaf image, geo.bytes (same allocation as the handle);
                                  NULL in a shared hold's member */
    uint8_t have[CH_MAX_OBJS]; /* per 32-byte object: read into img */
    uint8_t dirty[CH_MAX_OBJS];
    int idx;                     /* entry of key, -1 when none */
    int spec;                    /* hotspot entry read speculatively while locking, -1 when none */
    dm_gaddr_t rec;              /* key record written for a new long key */
    const dm_batch_t *extra;     /* the caller's READs, sent in each lock batch behind the CAS */
    int extra_fresh;             /* the winning batch carried them, all to the lock's node */
    int took_over;               /* taken from an expired holder */
    int abandoned;               /* a write of unknown outcome went out (a split's): nothing
                                    more may be written under this hold (as if expired) */
    uint64_t async_failures;     /* dm_async_failures() when locked: a posted write of the
                                    hold may have failed once it moves (as if expired) */
    int want_hop;                /* read the hop range the vacancy bitmap guess shows, not only
                                    the neighborhood (an insert may follow) */
    int want_whole;              /* read the whole leaf with the lock (a shared hold: share.c) */
    struct ch_group *grp;        /* a member of this worker's shared hold of the leaf (share.c) */
    struct dm_range_lock *gnext; /* the hold's next member */
    uint64_t order_word;         /* a member's ordering READ lands here (share.c write_now) */
    struct dm_coro *co;          /* a member's coroutine (its early hold moves with a split) */
};

/* ch_lock_key flags. */
#define CH_LOCK_EXISTING 1 /* DEL: speculate on the hotspot entry, no hop range */
#define CH_LOCK_WHOLE 2    /* read the whole leaf behind the lock CAS */

/* Append READs of entries [from, from+n) (circular) plus a replica to b, into img. */
void ch_read_run(const ch_geo_t *g, dm_batch_t *b, dm_gaddr_t leaf, uint8_t *img, uint8_t *have,
                 unsigned from, unsigned n);
/* Bytes of a replica present in img, or NULL. */
const uint8_t *ch_any_replica(const ch_geo_t *g, const uint8_t *img, const uint8_t *have);
/* Index of key's entry among those read (its neighborhood), -1, or DM_E*. */
int ch_find_entry(dm_ctx_t *ctx, const ch_geo_t *g, const uint8_t *img, const uint8_t *have,
                  const ch_khash_t *kh, const void *key, size_t klen);
/* Split lk's leaf (whole image read, locked); afterwards lk holds the leaf that covers its
 * key, with its whole image, and the key is not yet inserted. With rk (a handle from
 * ch_lock_new, a shared hold's split: share.c) both halves stay locked under lk's lease: lk
 * keeps the left one, rk gets the right one (rk->leaf nonzero once both leaves are written,
 * even when the separator's propagation then fails) and sep_out (DM_CHIME_SEP_MAX bytes) /
 * *sl_out the separator. 0 or DM_E* (DM_EFULL: separator too long). */
int ch_split_locked(dm_ctx_t *ctx, dm_chime_lock_t *lk, dm_chime_lock_t *rk, uint8_t *sep_out,
                    uint32_t *sl_out);
/* Read lk's leaf whole and settle its pending entries (all entries when all = 1) against
 * RACE: present keys keep their entry, absent ones lose it; written with a node write, the
 * lock kept. An image left inconsistent by a dead writer (ch_leaf_consistent) is rewritten
 * the same way, bitmaps rebuilt. Returns the number of entries removed or DM_E*. */
int ch_settle_locked(dm_ctx_t *ctx, dm_chime_lock_t *lk, int all);
/* Whether a settle's rc means this holder's hold ended before its write left (the
 * transport refused it: nothing written). The caller gives the lock back unchanged and
 * locks (or reads) again, as a waiter would, instead of failing its command. */
int ch_settle_lapsed(int rc, const dm_chime_lock_t *lk);
/* Keys of the used entries in img (whole leaf): inline copies or records read; DM_ERETRY
 * when a record no longer matches its entry (freed and reused since img was read),
 * DM_EINVAL when an entry's inline length exceeds DM_CHIME_INLINE (no leaf: a forged
 * cursor). idx[] gets entry indices; keys[i] malloc'd. Returns the count or DM_E*. */
int ch_leaf_keys(dm_ctx_t *ctx, const ch_geo_t *g, const uint8_t *img, unsigned *idx,
                 uint8_t **keys, uint32_t *lens);
/* Rebuild every hop bitmap of a whole leaf image from the entries' homes. */
void ch_rebuild_bitmaps(const ch_geo_t *g, uint8_t *img);
/* Set the NV of every object of a whole leaf image to nv. */
void ch_set_nv(const ch_geo_t *g, uint8_t *img, unsigned nv);
void dm_chime_lock_free(dm_chime_lock_t *lk);
/* dm_chime_lock_key / dm_chime_lock_existing; flags CH_LOCK_*. */
int ch_lock_key(dm_ctx_t *ctx, const void *key, size_t klen, int flags, const dm_batch_t *extra,
                int *extra_fresh, dm_chime_lock_t **out);
/* leaf.c's steps, shared with share.c: */
/* This worker found leaf's lock busy within the last CONTENDED_US. */
int ch_leaf_contended(const dm_chime_t *c, dm_gaddr_t leaf);
void ch_touch(dm_chime_lock_t *lk, const ch_geo_t *g, unsigned i); /* entry i changed */
/* Insert lk's key (lk->kh/key/klen/rec) with flags by hopping; the image must hold
 * [home, first empty]. 1 placed (lk->idx), 0 no room (moves made stay valid), DM_E*. */
int ch_hop_insert(dm_chime_lock_t *lk, const ch_geo_t *g, unsigned flags);
/* WRITE the dirty entries; unlock: and the lock word by CAS; wait: ride with the caller's
 * next batch or wait for the write, else post it without waiting. 0 or DM_E*. */
int ch_write_dirty(dm_ctx_t *ctx, dm_chime_lock_t *lk, int unlock, int wait);
/* Give the lock up without changes: CAS the word back (in case the lease was taken over
 * meanwhile), posted; the running coroutine's early hold is released. */
void ch_unlock_unchanged(dm_ctx_t *ctx, dm_chime_lock_t *lk);
/* ... the CAS alone, for a lock no coroutine registered (a shared hold's: share.c). */
void ch_unlock_word(dm_ctx_t *ctx, const dm_chime_lock_t *lk);
int ch_hold_expired(const dm_chime_lock_t *lk); /* held past CH_HOLD_MAX_MS, or abandoned */
/* Settle entry lk->idx in the image: present 1 clears its pending flag, 0 removes it, -1
 * leaves it (marked dirty, not written). */
void ch_settle_entry(dm_ctx_t *ctx, dm_chime_lock_t *lk, int present);
/* dm_chime_mark_pending of a lock held alone. */
int ch_mark_pending_own(dm_ctx_t *ctx, dm_chime_lock_t *lk);
/* share.c: dm_chime_mark_pending / dm_chime_unlock of a shared hold's member. */
int ch_share_mark_pending(dm_ctx_t *ctx, dm_chime_lock_t *m);
int ch_share_unlock(dm_ctx_t *ctx, dm_chime_lock_t *m, int present);
/* A lock handle for key (not yet locked). with_image 0: no leaf image (img NULL), for a
 * shared hold's member, which works on the hold's (share.c): a calloc of the leaf's ~3.3 KB
 * less for most inserts of a load. NULL when out of memory. */
dm_chime_lock_t *ch_lock_new(const ch_geo_t *g, const void *key, size_t klen, int with_image);
/* Lock leaf, reading the key's neighborhood in the same batch; *took_over when an expired
 * lease was taken over (the caller settles). Returns 0 or DM_E*. */
int ch_lock_leaf(dm_ctx_t *ctx, dm_chime_lock_t *lk, dm_gaddr_t leaf, int *took_over);

#endif
