/* The validated address cache (docs/DESIGN.md "Round-trip budget": GET 1 RTT for hot keys).
 * A worker remembers where a key's slot was and what it held; a GET then reads that slot
 * word and the block it pointed to in one batch. The answer stands only when the slot
 * still holds the same word (same block pointer, length and fingerprint, no MOVING mark)
 * and the block holds the key with a good checksum:
 *  - a linked block is immutable and a freed one is quarantined (alloc.h), so the block
 *    read in the same batch as the word is the value the slot linked at that instant;
 *  - a slot left behind by a split is frozen (MOVING) and then emptied before its copy in
 *    the new subtable takes writes, so an unfrozen word is never a stale copy;
 *  - keys become present only under their CHIME leaf lock (kv/hybrid.c), so no duplicate
 *    copy of the key can sit elsewhere with a newer value.
 * Anything else (changed word, other key, torn block) drops the entry and the caller runs
 * the full search (RACE §3.3), which refills it. An update through the cache (ops.c) needs
 * no validation before its slot CAS: the CAS succeeds only if the word is still there. */
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/errors.h"
#include "race_internal.h"

/* 4-way set associative, 2^16 sets: 256 K entries of 32 bytes (8 MiB, touched as it
 * fills) per worker. Direct-mapped with 64 K entries it kept about half of a 100,000-key
 * working set (redis-benchmark -r 100000): every miss costs a SET or a GET one more round
 * trip (the buckets, then the block). With 2 ways, a set that 3 keys of a working set
 * read in turn missed on every read (it_addr_cache: 4% of 40,000 keys). */
#define CACHE_SET_BITS 16
#define CACHE_WAYS 4

typedef struct acache_entry {
    uint64_t tag; /* the key's 128-bit hash folded to 64 bits; 0 = empty */
    dm_gaddr_t slot_addr;
    uint64_t word;
    uint64_t seen_us; /* the slot held word at some time after this (monotonic us) */
} acache_entry_t;

static uint64_t hits, stale, blinds;

void dm_race_addr_cache_stats(uint64_t *hit, uint64_t *dropped, uint64_t *blind_sets)
{
    *hit = __atomic_load_n(&hits, __ATOMIC_RELAXED);
    *dropped = __atomic_load_n(&stale, __ATOMIC_RELAXED);
    *blind_sets = __atomic_load_n(&blinds, __ATOMIC_RELAXED);
}

/* DMKV_ADDR_CACHE=off turns the cache off for the whole process (the benchmark's
 * reference run of the previous design). */
static int cache_enabled(void)
{
    static int enabled = -1; /* every worker thread may be first: atomics */
    int v = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("DMKV_ADDR_CACHE");
        v = !(e && (!strcmp(e, "off") || !strcmp(e, "0")));
        __atomic_store_n(&enabled, v, __ATOMIC_RELAXED);
    }
    return v;
}

static uint64_t key_tag(const void *key, size_t klen)
{
    uint64_t high, low = race_key_hash(key, klen, &high);
    uint64_t t = low ^ (high * 0x9E3779B97F4A7C15ull);
    return t ? t : 1;
}

/* The CACHE_WAYS entries of tag's set, most recently stored first. */
static acache_entry_t *set_of(dm_race_t *r, uint64_t tag)
{
    if (!cache_enabled()) return NULL;
    if (!r->acache) {
        r->acache = calloc((size_t)CACHE_WAYS << CACHE_SET_BITS, sizeof(acache_entry_t));
        if (!r->acache) return NULL;
    }
    return &((acache_entry_t *)r->acache)[(tag & ((1u << CACHE_SET_BITS) - 1)) * CACHE_WAYS];
}

/* tag's entry in its set, or NULL. */
static acache_entry_t *entry_of(dm_race_t *r, uint64_t tag)
{
    acache_entry_t *set = set_of(r, tag);
    for (int i = 0; set && i < CACHE_WAYS; i++)
        if (set[i].tag == tag) return &set[i];
    return NULL;
}

/* Blocks over 16 KB continue past the slot's length: not cached (they need 2 reads). */
static int cacheable(uint64_t word)
{
    return word && !race_slot_moving(word) && race_slot_len(word) < DM_KV_LEN_MAX_UNITS;
}

void race_addr_cache_put(dm_race_t *r, const void *key, size_t klen, dm_gaddr_t slot_addr,
                         uint64_t word, uint64_t seen_us)
{
    uint64_t tag = key_tag(key, klen);
    acache_entry_t *e = entry_of(r, tag);
    if (!cacheable(word)) {
        if (e) e->tag = 0;
        return;
    }
    if (!e) { /* a new key: first in its set, the least recently stored one goes */
        acache_entry_t *set = set_of(r, tag);
        if (!set) return;
        memmove(&set[1], &set[0], (CACHE_WAYS - 1) * sizeof(*set));
        e = &set[0];
    }
    *e = (acache_entry_t){tag, slot_addr, word, seen_us};
}

int race_addr_cache_get(dm_race_t *r, const void *key, size_t klen, dm_gaddr_t *slot_addr,
                        uint64_t *word, uint64_t *seen_us)
{
    uint64_t tag = key_tag(key, klen);
    acache_entry_t *e = entry_of(r, tag);
    if (!e) return 0;
    *slot_addr = e->slot_addr;
    *word = e->word;
    if (seen_us) *seen_us = e->seen_us;
    return 1;
}

void race_addr_cache_stale(dm_race_t *r, const void *key, size_t klen)
{
    race_addr_cache_put(r, key, klen, 0, 0, 0);
    __atomic_fetch_add(&stale, 1, __ATOMIC_RELAXED);
}

void race_addr_cache_hit(void)
{
    __atomic_fetch_add(&hits, 1, __ATOMIC_RELAXED);
}

void race_addr_cache_blind_set(void)
{
    __atomic_fetch_add(&hits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&blinds, 1, __ATOMIC_RELAXED);
}

int race_read_slot_then_block(dm_ctx_t *ctx, dm_batch_t *b, dm_gaddr_t sa, uint64_t *word,
                              dm_gaddr_t blk, void *buf, uint32_t len)
{
    dm_batch_read(b, sa, word, 8);
    if (dm_gaddr_node(sa) == dm_gaddr_node(blk)) {
        dm_verb_t *v = dm_batch_read(b, blk, buf, len);
        if (v) v->fence = 1; /* rdma: after the slot read on the same QP */
        return dm_batch_exec(ctx, b);
    }
    int rc = dm_batch_exec(ctx, b);
    if (rc) return rc;
    dm_batch_t b2;
    dm_batch_init(&b2);
    dm_batch_read(&b2, blk, buf, len);
    return dm_batch_exec(ctx, &b2);
}

/* 1 and *item filled when the cached slot still holds the key; 0 when there is no usable
 * entry (the caller searches); DM_E* when the batch failed. */
static int cached_get(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_item_t *item)
{
    uint64_t tag = key_tag(key, klen);
    acache_entry_t *e = entry_of(ctx->w->race, tag);
    if (!e) return 0;
    acache_entry_t want = *e;
    uint64_t len = (uint64_t)race_slot_len(want.word) * DM_KV_UNIT;
    uint8_t *block = malloc(len);
    if (!block) return DM_ENOMEM;
    uint64_t now = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    ctx->start_us = dm_now_us();
    int rc = race_read_slot_then_block(ctx, &b, want.slot_addr, &now, race_slot_ptr(want.word),
                                       block, (uint32_t)len);
    if (!rc) rc = dm_ctx_check(ctx);
    dm_kv_view_t view;
    if (!rc && now == want.word && dm_kvblock_key_equals(block, len, key, klen) &&
        dm_kvblock_parse(block, len, &view) == 0) {
        *item = (dm_race_item_t){want.slot_addr, want.word, block, len, view};
        item->view.slot = want.word;
        /* Read after start_us: seen valid again (e may hold another key by now: the batch
         * yielded, and other coroutines of this worker stored keys in its set). */
        e = entry_of(ctx->w->race, tag);
        if (e && e->slot_addr == want.slot_addr && e->word == want.word &&
            e->seen_us < ctx->start_us)
            e->seen_us = ctx->start_us;
        race_addr_cache_hit();
        return 1;
    }
    free(block);
    if (rc && rc != DM_ERETRY) return rc;
    race_addr_cache_stale(ctx->w->race, key, klen);
    return 0;
}

int dm_race_search_hot(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_item_t *item)
{
    int rc = cached_get(ctx, key, klen, item);
    if (rc == DM_EIO) rc = 0; /* a read is safe to redo: the search reconnects (worker.c) */
    if (rc) return rc;
    int frozen = 0;
    rc = race_search(ctx, key, klen, item, &frozen);
    if (rc == DM_EIO) rc = race_search(ctx, key, klen, item, &frozen); /* once, as above */
    /* Not while a split holds a frozen copy: an update through the cache would change the
     * new subtable's copy behind the frozen one (writers must wait for the split). */
    if (rc == 1 && !frozen)
        race_addr_cache_put(ctx->w->race, key, klen, item->slot_addr, item->slot, ctx->start_us);
    return rc;
}
