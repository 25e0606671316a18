/* The validated address cache (docs/DESIGN.md "Round-trip budget": GET 1 RTT for hot keys).
 * A gateway remembers where a key's slot was and what it held; a GET then reads that slot
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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "race_internal.h"

/* 4-way set associative, 2^18 sets by default: 1 M entries of 32 bytes (32 MiB, touched
 * as it fills), one per gateway process and pool, shared by its workers;
 * dm_race_addr_cache_set_entries (gateway option addr-cache-entries) sizes it. Inserts
 * fill it too, so a working set as large as the cache answers GETs in 1 round trip
 * (YCSB C over 1 M loaded keys: 1.27 round trips per GET with 256 K entries, 1.01 with
 * 1 M). Direct-mapped with 64 K entries it kept about half of a 100,000-key working set
 * (redis-benchmark -r 100000): every miss costs a SET or a GET one more round trip (the
 * buckets, then the block). With 2 ways, a set that 3 keys of a working set read in turn
 * missed on every read (it_addr_cache: 4% of 40,000 keys). One cache per worker lost every
 * key that clients of two workers both wrote: each worker's CAS changed the word the other
 * remembered (redis-benchmark -P 16 SETs at the default 2 threads: 2.5 round trips per SET,
 * 1.25 with one thread). */
#define CACHE_WAYS 4
#define CACHE_SET_BITS_DEFAULT 18
#define LOCK_SPINS 64 /* a writer gives up on a set held longer (the cache is a hint) */

/* Fields are read and written with __atomic builtins: other workers' threads use them. */
typedef struct acache_entry {
    uint64_t tag; /* the key's 128-bit hash folded to 64 bits; 0 = empty */
    dm_gaddr_t slot_addr;
    uint64_t word;
    uint64_t seen; /* low SEEN_BITS: the slot held word at some time after this (monotonic
                      us); above: the worker (dm_race_t.owner) that stored or last saw it */
} acache_entry_t;

#define SEEN_BITS 48 /* 8.9 years of monotonic microseconds */
#define SEEN_MASK ((1ull << SEEN_BITS) - 1)

static uint64_t seen_pack(uint64_t seen_us, uint16_t owner)
{
    return (seen_us & SEEN_MASK) | (uint64_t)owner << SEEN_BITS;
}

/* A pool's cache: sets of CACHE_WAYS entries, most recently stored first, each guarded by
 * a sequence word (odd while a writer changes the set). A reader that meets a writer
 * treats the key as missing. An entry is read whole or not at all: a blind update CASes
 * the remembered slot from the remembered word, so a tag of one key with the slot of
 * another would overwrite that other key. */
typedef struct acache {
    uint64_t incarnation, root; /* the pool: node 0's incarnation and the table header */
    unsigned refs;
    struct acache *next;
    size_t set_mask; /* sets - 1 (a power of two) */
    uint32_t *seq;   /* one per set */
    acache_entry_t *e;
} acache_t;

/* Sets of a cache created from now on (dm_race_addr_cache_set_entries). */
static size_t cache_sets = (size_t)1 << CACHE_SET_BITS_DEFAULT;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static acache_t *registry;

static uint64_t hits, stale, blinds, moved_over;

void dm_race_addr_cache_stats(uint64_t *hit, uint64_t *dropped, uint64_t *blind_sets,
                              uint64_t *moved)
{
    *hit = __atomic_load_n(&hits, __ATOMIC_RELAXED);
    *dropped = __atomic_load_n(&stale, __ATOMIC_RELAXED);
    *blind_sets = __atomic_load_n(&blinds, __ATOMIC_RELAXED);
    *moved = __atomic_load_n(&moved_over, __ATOMIC_RELAXED);
}

/* DMKV_ADDR_CACHE=off turns the cache off for the whole process (the benchmark's
 * reference run of the previous design). Read at each attach only. */
static int cache_enabled(void)
{
    const char *e = getenv("DMKV_ADDR_CACHE");
    return !(e && (!strcmp(e, "off") || !strcmp(e, "0")));
}

int dm_race_addr_cache_set_entries(uint64_t entries)
{
    if (entries < (1u << 10) || entries > (1ull << 30)) return DM_EINVAL;
    size_t sets = 1;
    while ((uint64_t)sets * CACHE_WAYS < entries)
        sets <<= 1;
    pthread_mutex_lock(&registry_lock);
    cache_sets = sets;
    pthread_mutex_unlock(&registry_lock);
    return 0;
}

uint64_t dm_race_addr_cache_entries(void)
{
    pthread_mutex_lock(&registry_lock);
    uint64_t n = (uint64_t)cache_sets * CACHE_WAYS;
    pthread_mutex_unlock(&registry_lock);
    return n;
}

static void cache_free(acache_t *c)
{
    free(c->seq);
    free(c->e);
    free(c);
}

/* A cache of cache_sets sets, zeroed (calloc: the pages are touched as entries fill them). */
static acache_t *cache_new(uint64_t incarnation, uint64_t root)
{
    acache_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->incarnation = incarnation;
    c->root = root;
    c->set_mask = cache_sets - 1;
    c->seq = calloc(cache_sets, sizeof(*c->seq));
    c->e = calloc(cache_sets * CACHE_WAYS, sizeof(*c->e));
    if (!c->seq || !c->e) {
        cache_free(c);
        return NULL;
    }
    return c;
}

void race_addr_cache_attach(dm_race_t *r, uint64_t incarnation)
{
    if (!cache_enabled()) return;
    pthread_mutex_lock(&registry_lock);
    acache_t *c = registry;
    while (c && (c->incarnation != incarnation || c->root != r->root))
        c = c->next;
    if (!c && (c = cache_new(incarnation, r->root)) != NULL) {
        c->next = registry;
        registry = c;
    }
    if (c) c->refs++;
    pthread_mutex_unlock(&registry_lock);
    r->acache = c;
}

void race_addr_cache_detach(dm_race_t *r)
{
    acache_t *c = r->acache;
    if (!c) return;
    r->acache = NULL;
    pthread_mutex_lock(&registry_lock);
    if (--c->refs == 0) {
        acache_t **p = &registry;
        while (*p != c)
            p = &(*p)->next;
        *p = c->next;
        cache_free(c);
    }
    pthread_mutex_unlock(&registry_lock);
}

static uint64_t tag_of(uint64_t low, uint64_t high)
{
    uint64_t t = low ^ (high * 0x9E3779B97F4A7C15ull);
    return t ? t : 1;
}

static uint64_t key_tag(const void *key, size_t klen)
{
    uint64_t high, low = race_key_hash(key, klen, &high);
    return tag_of(low, high);
}

static size_t set_index(const acache_t *c, uint64_t tag)
{
    return (size_t)tag & c->set_mask;
}

/* Acquire loads: the reader's second look at the sequence word stays after them (a fence
 * would do too, but ThreadSanitizer cannot check fences). Plain moves on x86. */
static void entry_load(const acache_entry_t *e, acache_entry_t *out)
{
    out->tag = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
    out->slot_addr = __atomic_load_n(&e->slot_addr, __ATOMIC_ACQUIRE);
    out->word = __atomic_load_n(&e->word, __ATOMIC_ACQUIRE);
    out->seen = __atomic_load_n(&e->seen, __ATOMIC_ACQUIRE);
}

/* Release stores: a reader whose acquire load sees one of them then sees the set's odd
 * sequence word on its second look (on ARM a relaxed store may pass the CAS that made it
 * odd). Plain moves on x86. */
static void entry_store(acache_entry_t *e, const acache_entry_t *in)
{
    __atomic_store_n(&e->tag, in->tag, __ATOMIC_RELEASE);
    __atomic_store_n(&e->slot_addr, in->slot_addr, __ATOMIC_RELEASE);
    __atomic_store_n(&e->word, in->word, __ATOMIC_RELEASE);
    __atomic_store_n(&e->seen, in->seen, __ATOMIC_RELEASE);
}

/* 1 and tag's entry in *out when the set holds it and no writer changed the set while it
 * was read (seqlock read side); 0 otherwise. */
static int lookup(acache_t *c, uint64_t tag, acache_entry_t *out)
{
    if (!c) return 0;
    size_t s = set_index(c, tag);
    uint32_t s1 = __atomic_load_n(&c->seq[s], __ATOMIC_ACQUIRE);
    if (s1 & 1) return 0;
    int found = 0;
    for (int i = 0; i < CACHE_WAYS && !found; i++) {
        entry_load(&c->e[s * CACHE_WAYS + (size_t)i], out);
        found = out->tag == tag;
    }
    return found && __atomic_load_n(&c->seq[s], __ATOMIC_RELAXED) == s1;
}

/* key's entry, when its slot lies in the subtable r's directory maps the key to. A key a
 * split moved is thus passed over without the wasted round trip of a stale read, for every
 * moved key once any operation of this worker refreshed its directory (one per split in
 * practice, instead of one per cached key: after another gateway doubled the table, YCSB A
 * over the first gateway's keys: 2.16 round trips per GET and 3.08 per SET without this
 * check, 1.67 and 2.60 with it, 1.91 and 2.84 when nothing but reads filled the cache). The entry
 * stays: a worker of an older directory than the one that stored it passes it over as well, and the
 * full search that follows stores the key's slot as it finds it. */
static int lookup_key(const dm_race_t *r, const void *key, size_t klen, acache_entry_t *out)
{
    uint64_t high, low = race_key_hash(key, klen, &high);
    if (!lookup(r->acache, tag_of(low, high), out)) return 0;
    dm_gaddr_t st = race_dir_addr(race_dir_get(r, low));
    if (st && out->slot_addr >= st &&
        out->slot_addr < st + r->groups * 3 * (uint64_t)DM_RACE_BUCKET)
        return 1;
    __atomic_fetch_add(&moved_over, 1, __ATOMIC_RELAXED);
    return 0;
}

/* Take tag's set for writing: its sequence word made odd. 0 when another writer held it
 * LOCK_SPINS times in a row (the caller skips its change). */
static acache_entry_t *set_lock(acache_t *c, uint64_t tag, uint32_t *seq)
{
    size_t s = set_index(c, tag);
    for (int i = 0; i < LOCK_SPINS; i++) {
        uint32_t v = __atomic_load_n(&c->seq[s], __ATOMIC_RELAXED);
        if (!(v & 1) && __atomic_compare_exchange_n(&c->seq[s], &v, v + 1, 0, __ATOMIC_ACQUIRE,
                                                    __ATOMIC_RELAXED)) {
            *seq = v + 1;
            return &c->e[s * CACHE_WAYS];
        }
    }
    return NULL;
}

static void set_unlock(acache_t *c, uint64_t tag, uint32_t seq)
{
    __atomic_store_n(&c->seq[set_index(c, tag)], seq + 1, __ATOMIC_RELEASE);
}

/* Index of tag's entry in the locked set, or -1. */
static int way_of(const acache_entry_t *set, uint64_t tag)
{
    for (int i = 0; i < CACHE_WAYS; i++)
        if (__atomic_load_n(&set[i].tag, __ATOMIC_RELAXED) == tag) return i;
    return -1;
}

/* Blocks over 16 KB continue past the slot's length: not cached (they need 2 reads). */
static int cacheable(uint64_t word)
{
    return word && !race_slot_moving(word) && race_slot_len(word) < DM_KV_LEN_MAX_UNITS;
}

void race_addr_cache_put(dm_race_t *r, const void *key, size_t klen, dm_gaddr_t slot_addr,
                         uint64_t word, uint64_t seen_us)
{
    acache_t *c = r->acache;
    if (!c) return;
    uint64_t tag = key_tag(key, klen);
    uint32_t seq;
    acache_entry_t *set = set_lock(c, tag, &seq);
    if (!set) return;
    int i = way_of(set, tag);
    acache_entry_t ne = {tag, slot_addr, word, seen_pack(seen_us, r->owner)};
    if (!cacheable(word)) {
        if (i >= 0) __atomic_store_n(&set[i].tag, 0, __ATOMIC_RELEASE);
    } else {
        if (i < 0) { /* a new key: first in its set, the least recently stored one goes */
            for (int j = CACHE_WAYS - 1; j > 0; j--) {
                acache_entry_t t;
                entry_load(&set[j - 1], &t);
                entry_store(&set[j], &t);
            }
            i = 0;
        }
        entry_store(&set[i], &ne);
    }
    set_unlock(c, tag, seq);
}

void dm_race_addr_cache_prefetch(dm_race_t *r, const void *key, size_t klen)
{
    acache_t *c = r ? r->acache : NULL;
    if (!c) return;
    size_t s = set_index(c, key_tag(key, klen));
    __builtin_prefetch(&c->seq[s], 0, 3);
    __builtin_prefetch(&c->e[s * CACHE_WAYS], 0, 3);
    __builtin_prefetch(&c->e[s * CACHE_WAYS + CACHE_WAYS - 1], 0, 3);
}

int race_addr_cache_knows(const dm_race_t *r, const void *key, size_t klen)
{
    acache_entry_t e;
    return lookup(r->acache, key_tag(key, klen), &e);
}

int race_addr_cache_get(dm_race_t *r, const void *key, size_t klen, dm_gaddr_t *slot_addr,
                        uint64_t *word, uint64_t *seen_us, int *mine)
{
    acache_entry_t e;
    if (!lookup_key(r, key, klen, &e)) return 0;
    *slot_addr = e.slot_addr;
    *word = e.word;
    if (seen_us) *seen_us = e.seen & SEEN_MASK;
    if (mine) *mine = e.seen >> SEEN_BITS == r->owner;
    return 1;
}

/* The slot held want's word at start_us or later, as r's worker saw: move the entry's seen
 * time up (and make it r's), if it still remembers that word. */
static void refresh_seen(dm_race_t *r, const acache_entry_t *want, uint64_t start_us)
{
    acache_t *c = r->acache;
    uint32_t seq;
    acache_entry_t *set = c ? set_lock(c, want->tag, &seq) : NULL;
    if (!set) return;
    int i = way_of(set, want->tag);
    if (i >= 0 && __atomic_load_n(&set[i].slot_addr, __ATOMIC_RELAXED) == want->slot_addr &&
        __atomic_load_n(&set[i].word, __ATOMIC_RELAXED) == want->word &&
        (__atomic_load_n(&set[i].seen, __ATOMIC_RELAXED) & SEEN_MASK) < start_us)
        __atomic_store_n(&set[i].seen, seen_pack(start_us, r->owner), __ATOMIC_RELEASE);
    set_unlock(c, want->tag, seq);
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
    acache_entry_t want;
    if (!lookup_key(ctx->w->race, key, klen, &want)) return 0;
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
        item->view.version = want.word;
        /* Read after start_us: seen valid again (the entry may hold another key by now:
         * the batch yielded, and other operations stored keys in its set). */
        refresh_seen(ctx->w->race, &want, ctx->start_us);
        race_addr_cache_hit();
        return 1;
    }
    free(block);
    if (rc == DM_ERETRY) return 0; /* read too late to trust: not known stale, it stays */
    if (rc) return rc;
    race_addr_cache_stale(ctx->w->race, key, klen);
    return 0;
}

int dm_race_search_hot(dm_ctx_t *ctx, const void *key, size_t klen, dm_race_item_t *item)
{
    int rc = cached_get(ctx, key, klen, item);
    if (rc == DM_EIO) rc = 0; /* a read is safe to redo: the search reconnects (batch.c) */
    if (rc) return rc;
    int frozen = 0;
    rc = race_search(ctx, key, klen, item, &frozen);
    if (rc == DM_EIO) rc = race_search(ctx, key, klen, item, &frozen); /* once, as above */
    /* Not while a split holds a frozen copy: an update through the cache would change the
     * new subtable's copy behind the frozen one (writers must wait for the split). */
    if (rc == 1 && !frozen)
        race_addr_cache_put(ctx->w->race, key, klen, item->addr, item->version, ctx->start_us);
    return rc;
}
