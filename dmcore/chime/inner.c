/* CHIME inner nodes: the per-worker cache, traversal to a leaf (B-link move-right on fence
 * keys, §4.1), Sherman-style up-propagation of splits and root growth (§4.4), key records
 * and leaf fences. */
#include <stdlib.h>
#include <string.h>

#include "chime_internal.h"
#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/errors.h"
#include "dmkv/fence.h"
#include "dmkv/kvblock.h"
#include "dmkv/lease.h"
#include "dmkv/superblock.h"

#define MAX_TORN_READS 64
#define TORN_WAIT_US 500000u /* a torn inner node is read again for at least this long */
#define MAX_RESTARTS 64

ch_counters_t ch_stats;
static unsigned inner_fanout = 65535;

void dm_chime_set_inner_fanout(unsigned max_children)
{
    inner_fanout = max_children < 3 ? 3 : max_children;
}

/* ---- cache ---- */

static unsigned bucket_of(dm_gaddr_t a)
{
    return (unsigned)((a >> 6) * 0x9e3779b97f4a7c15ull >> 52) % CH_CACHE_BUCKETS;
}

ch_inner_t *ch_cache_get(dm_chime_t *c, dm_gaddr_t a)
{
    for (ch_inner_t *n = c->cache[bucket_of(a)]; n; n = n->next_in_bucket)
        if (n->addr == a) return n;
    return NULL;
}

static void account(dm_chime_t *c, const ch_inner_t *n, int sign)
{
    c->cache_bytes += sign > 0 ? n->bytes : -n->bytes;
    c->cache_nodes += sign > 0 ? 1 : (size_t)-1;
    ch_count(&ch_stats.cache_bytes, sign > 0 ? n->bytes : -(uint64_t)n->bytes);
    ch_count(&ch_stats.cache_nodes, sign > 0 ? 1 : (uint64_t)-1);
}

void ch_cache_drop(dm_chime_t *c, dm_gaddr_t a)
{
    ch_inner_t **pp = &c->cache[bucket_of(a)];
    for (; *pp; pp = &(*pp)->next_in_bucket) {
        if ((*pp)->addr != a) continue;
        ch_inner_t *n = *pp;
        *pp = n->next_in_bucket;
        account(c, n, -1);
        ch_inner_free(n);
        return;
    }
}

void ch_cache_clear(dm_chime_t *c)
{
    for (unsigned b = 0; b < CH_CACHE_BUCKETS; b++)
        while (c->cache[b])
            ch_cache_drop(c, c->cache[b]->addr);
}

void ch_cache_put(dm_chime_t *c, ch_inner_t *n)
{
    ch_cache_drop(c, n->addr);
    /* Over budget: start again (inner nodes are ~1/50 of the leaves; a full reload is
     * rare and costs one read per node on the way down). */
    if (c->cache_bytes + n->bytes > CH_CACHE_MAX_BYTES) ch_cache_clear(c);
    unsigned b = bucket_of(n->addr);
    n->next_in_bucket = c->cache[b];
    c->cache[b] = n;
    n->gen = ++c->cache_gen;
    account(c, n, 1);
}

/* Slot of a in the worker's in-flight inner reads, or -1. */
static int reading_slot(const dm_chime_t *c, dm_gaddr_t a)
{
    for (int i = 0; i < CH_READING_SLOTS; i++)
        if (c->reading[i] == a) return i;
    return -1;
}

/* Wait while another coroutine of this worker reads node a: its read fills the cache. One
 * read instead of one per waiter when many descents miss the same node at once (a
 * pipeline's inserts after a cache drop). */
static void await_reader(dm_ctx_t *ctx, dm_gaddr_t a)
{
    for (int i = 0; i < 64 && reading_slot(ctx->w->chime, a) >= 0; i++)
        dm_ctx_yield(ctx);
}

/* After torn read number `attempt` (from 0) of a node, the first begun at t0_us (dm_now_us):
 * wait before reading again, or return 0 to give up. A node write in flight ends within its
 * writer's round trip, but a writer preempted in the middle of it (an in-process pool on a
 * loaded machine) takes milliseconds: 64 reads one loop turn apart gave up first, and
 * test_chime test_concurrent_writers under ThreadSanitizer answered "operation restarted too
 * often" 3 runs in 30. Quick yields first, then 1 ms sleeps, for at least MAX_TORN_READS
 * reads and TORN_WAIT_US. */
static int torn_again(dm_ctx_t *ctx, int attempt, uint64_t t0_us)
{
    if (attempt + 1 >= MAX_TORN_READS && dm_now_us() - t0_us >= TORN_WAIT_US) return 0;
    if (attempt < 8)
        dm_ctx_yield(ctx);
    else
        dm_ctx_sleep(ctx, 1000);
    return 1;
}

int ch_inner_read(dm_ctx_t *ctx, dm_gaddr_t a, ch_inner_t **out)
{
    uint8_t *img = malloc(CH_INNER_BYTES);
    if (!img) return DM_ENOMEM;
    dm_chime_t *c = ctx->w->chime;
    int slot = reading_slot(c, 0);
    if (slot >= 0) c->reading[slot] = a;
    int rc = DM_ERETRY;
    uint64_t t0 = dm_now_us();
    for (int i = 0;; i++) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, a, img, CH_INNER_BYTES);
        rc = dm_batch_exec(ctx, &b);
        if (rc) break;
        ch_inner_t *n = ch_inner_decode(a, img);
        if (n) {
            ch_cache_put(ctx->w->chime, n);
            *out = n;
            break;
        }
        rc = DM_ERETRY; /* torn by a node write in flight: read again */
        if (!torn_again(ctx, i, t0)) break;
    }
    if (slot >= 0) c->reading[slot] = 0;
    free(img);
    return rc;
}

int ch_read_root(dm_ctx_t *ctx)
{
    uint64_t w = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    dm_batch_read(&b, dm_gaddr_make(0, DM_SB_OFF(chime_root)), &w, 8);
    int rc = dm_batch_exec(ctx, &b);
    if (rc) return rc;
    if (!w) return DM_ECORRUPT;
    ctx->w->chime->root = w;
    return 0;
}

/* ---- traversal ---- */

/* Note the cached copy n (or a node read, cached = 0) on memo's path. */
static void memo_note(ch_find_memo_t *memo, const ch_inner_t *n, int cached)
{
    if (!memo || !memo->kept) return;
    if (!cached || memo->n == CH_MEMO_NODES) { /* read, or too long a way: not kept */
        memo->kept = 0;
        return;
    }
    memo->addr[memo->n] = n->addr;
    memo->gen[memo->n] = n->gen;
    memo->n++;
}

/* Descend to the node at target level covering key. At level 1 and above *out is the
 * node's address; for target 0 the path describes the leaf. memo (when not NULL) records
 * the cached nodes the descent goes through (kept 0 when the path did not come from the
 * cache alone). */
static int descend(dm_ctx_t *ctx, const void *key, size_t klen, unsigned target, int fresh,
                   ch_path_t *p, dm_gaddr_t *out, ch_find_memo_t *memo)
{
    dm_chime_t *c = ctx->w->chime;
    for (int restart = 0; restart < MAX_RESTARTS; restart++) {
        int root_cached = c->root != 0 && !(fresh && restart == 0 && target == 0);
        if (!root_cached || restart > 0) {
            int rc = ch_read_root(ctx);
            if (rc) return rc;
        }
        unsigned lvl = ch_root_level(c->root);
        dm_gaddr_t a = ch_root_addr(c->root);
        if (lvl < target) return DM_EINVAL;
        memset(p, 0, sizeof(*p));
        p->lo.len = 0; /* the root leaf: [empty key, +inf) */
        p->hi.len = CH_BOUND_INF;
        if (memo) {
            memo->kept = root_cached && restart == 0;
            memo->n = 0;
        }
        if (lvl == 0) {
            p->leaf = a;
            p->from_cache = root_cached && restart == 0;
            return 0;
        }
        int again = 0;
        for (int steps = 0; steps < 4096 && !again; steps++) {
            if (lvl == target) {
                *out = a;
                return 0;
            }
            int skip_cache = fresh && lvl == 1;
            ch_inner_t *n = skip_cache ? NULL : ch_cache_get(c, a);
            if (!n && !skip_cache && reading_slot(c, a) >= 0) {
                await_reader(ctx, a);
                n = ch_cache_get(c, a);
            }
            int cached = n != NULL;
            if (!n) {
                int rc = ch_inner_read(ctx, a, &n);
                if (rc) return rc;
            }
            memo_note(memo, n, cached);
            if (n->level != lvl || !n->valid) {
                ch_cache_drop(c, a);
                again = 1;
                break;
            }
            if (n->has_high && ch_key_cmp(key, klen, n->high.key, n->high.len) >= 0) {
                a = n->sibling; /* B-link: the key moved right with a split */
                continue;
            }
            if (ch_key_cmp(key, klen, n->sep[0].key, n->sep[0].len) < 0) {
                ch_cache_drop(c, a); /* came here through a stale pointer */
                again = 1;
                break;
            }
            unsigned i = ch_inner_route(n, key, klen);
            dm_gaddr_t nx = i + 1 < n->count ? n->child[i + 1] : n->sib_first_child;
            if (lvl == 1 && target == 0) {
                p->leaf = n->child[i];
                p->expect_next = nx;
                p->parent = a;
                p->from_cache = cached;
                ch_bound_set(&p->lo, n->sep[i].key, n->sep[i].len);
                if (i + 1 < n->count)
                    ch_bound_set(&p->hi, n->sep[i + 1].key, n->sep[i + 1].len);
                else if (n->has_high)
                    ch_bound_set(&p->hi, n->high.key, n->high.len);
                else
                    p->hi.len = CH_BOUND_INF;
                return 0;
            }
            a = n->child[i];
            lvl--;
        }
        if (!again) return DM_ERETRY;
    }
    return DM_ERETRY;
}

/* Children of the level-1 node n after index i, then those of its cached right siblings
 * (or the first child the node keeps of its sibling), up to max. */
static unsigned children_after(dm_chime_t *c, const ch_inner_t *n, unsigned i, dm_gaddr_t *out,
                               unsigned max)
{
    unsigned k = 0;
    for (int hops = 0; n && k < max && hops < 8; hops++) {
        for (unsigned j = i + 1; j < n->count && k < max; j++)
            out[k++] = n->child[j];
        if (k >= max || !n->sibling) break;
        const ch_inner_t *sib = ch_cache_get(c, n->sibling);
        if (!sib || sib->level != 1) {
            if (n->sib_first_child) out[k++] = n->sib_first_child;
            break;
        }
        n = sib;
        out[k++] = n->child[0];
        i = 0;
    }
    return k;
}

unsigned ch_cached_next_leaves(dm_chime_t *c, const void *key, size_t klen, dm_gaddr_t leaf,
                               dm_gaddr_t *out, unsigned max)
{
    if (!c->root || ch_root_level(c->root) == 0) return 0;
    if (!key) {
        /* Position unknown (a SCAN cursor): the cached parent that lists leaf. */
        for (unsigned b = 0; b < CH_CACHE_BUCKETS; b++)
            for (const ch_inner_t *n = c->cache[b]; n; n = n->next_in_bucket) {
                if (n->level != 1) continue;
                for (unsigned i = 0; i < n->count; i++)
                    if (n->child[i] == leaf) return children_after(c, n, i, out, max);
            }
        return 0;
    }
    dm_gaddr_t a = ch_root_addr(c->root);
    for (unsigned lvl = ch_root_level(c->root); lvl >= 1; lvl--) {
        ch_inner_t *n = ch_cache_get(c, a);
        for (int moves = 0;
             n && n->has_high && moves < 8 && ch_key_cmp(key, klen, n->high.key, n->high.len) >= 0;
             moves++)
            n = ch_cache_get(c, n->sibling);
        if (!n || n->level != lvl) return 0;
        unsigned i = ch_inner_route(n, key, klen);
        if (lvl > 1) {
            a = n->child[i];
            continue;
        }
        for (unsigned j = i; j < n->count && n->child[j] != leaf; j++)
            if (j > i + 2) return 0; /* not where the cache thinks: no guesses */
        while (i < n->count && n->child[i] != leaf)
            i++;
        if (i == n->count) return 0;
        return children_after(c, n, i, out, max);
    }
    return 0;
}

int ch_find_leaf(dm_ctx_t *ctx, const void *key, size_t klen, int fresh, ch_path_t *p)
{
    return descend(ctx, key, klen, 0, fresh, p, NULL, NULL);
}

int ch_find_leaf_again(dm_ctx_t *ctx, const void *key, size_t klen, ch_path_t *p,
                       ch_find_memo_t *memo)
{
    dm_chime_t *c = ctx->w->chime;
    if (memo->kept && memo->root == c->root) {
        unsigned i = 0;
        for (; i < memo->n; i++) {
            const ch_inner_t *n = ch_cache_get(c, memo->addr[i]);
            if (!n || n->gen != memo->gen[i]) break;
        }
        if (i == memo->n) return 0;
    }
    int rc = descend(ctx, key, klen, 0, 0, p, NULL, memo);
    if (rc || !p->from_cache) memo->kept = 0;
    memo->root = c->root;
    return rc;
}

/* ---- records and fences ---- */

/* The fence cache: 2-way sets, the most recently used way first. Most of a load's fences
 * are looked at once or twice, a few (the leaves at the ends of each connection's range)
 * all the time: those stay while splits add new ones (share.c group_covering). */
static ch_fence_cache_t *fence_set(dm_chime_t *c, dm_gaddr_t rec)
{
    return &c->fence[((rec * 0x9e3779b97f4a7c15ull) >> 40) % (CH_FENCE_SLOTS / 2) * 2];
}

static ch_fence_cache_t *fence_find(dm_chime_t *c, dm_gaddr_t rec)
{
    ch_fence_cache_t *f = fence_set(c, rec);
    if (f[0].addr == rec && f[0].key) return &f[0];
    if (f[1].addr != rec || !f[1].key) return NULL;
    ch_fence_cache_t t = f[0];
    f[0] = f[1];
    f[1] = t;
    return &f[0];
}

/* rec's entry: key (owned, len bytes) put in as the most recent of its set, the least
 * recent going, unless rec is cached already (another coroutine read it meanwhile: key is
 * freed). */
static ch_fence_cache_t *fence_keep(dm_chime_t *c, dm_gaddr_t rec, uint8_t *key, uint32_t len)
{
    ch_fence_cache_t *f = fence_find(c, rec);
    if (f) {
        free(key);
        return f;
    }
    f = fence_set(c, rec);
    free(f[1].key);
    f[1] = f[0];
    f[0] = (ch_fence_cache_t){.addr = rec, .key = key, .len = len};
    return f;
}

int ch_fence_get(dm_ctx_t *ctx, dm_gaddr_t rec, uint8_t **key, uint32_t *len)
{
    dm_chime_t *c = ctx->w->chime;
    ch_fence_cache_t *f = fence_find(c, rec);
    if (!f) {
        uint8_t *k;
        uint32_t l;
        int rc = dm_keyrec_read(ctx, &rec, 1, DM_KV_MAX_KEY, NULL, &k, &l);
        if (rc) return rc;
        f = fence_keep(c, rec, k, l);
    }
    *key = f->key;
    *len = f->len;
    return 0;
}

void ch_fence_note(dm_chime_t *c, dm_gaddr_t rec, const uint8_t *key, uint32_t len)
{
    if (fence_find(c, rec)) return;
    uint8_t *k = malloc(len ? len : 1);
    if (!k) return;
    memcpy(k, key, len);
    fence_keep(c, rec, k, len);
}

int ch_fence_cached(dm_chime_t *c, dm_gaddr_t rec, const uint8_t **key, uint32_t *len)
{
    const ch_fence_cache_t *f = fence_find(c, rec);
    if (!f) return 0;
    *key = f->key;
    *len = f->len;
    return 1;
}

/* ---- up-propagation ---- */

static uint64_t inner_lock_addr(dm_gaddr_t a)
{
    return a + CH_INNER_BYTES;
}

/* Take an inner node's lock (CAS 0 -> locked with a fresh lease token), taking over an
 * expired lease, and read the node (CH_INNER_BYTES into img) behind the CAS in the same
 * batch, fenced: the lock word sits right after the node, so the READ runs after the CAS
 * and, when the CAS won, sees the node as locked (one round trip, not two). *since_us: when
 * the winning CAS was posted (the hold's start). */
static int inner_lock(dm_ctx_t *ctx, dm_gaddr_t a, uint8_t *img, uint64_t *word, uint64_t *since_us)
{
    uint64_t expect = 0;
    for (int tries = 0; tries < 100000; tries++) {
        uint64_t mine = 1 | ((uint64_t)dm_lease_token() << 1);
        *since_us = dm_now_us();
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, inner_lock_addr(a), expect, mine);
        dm_batch_read(&b, a, img, CH_INNER_BYTES)->fence = 1;
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        if (v->result == expect) {
            *word = mine;
            dm_lease_forget(inner_lock_addr(a));
            return 0;
        }
        expect = 0;
        if (ch_lock_held(v->result) &&
            dm_lease_takeover_ready(ctx, inner_lock_addr(a), v->result, CH_LEASE_MS)) {
            expect = v->result; /* the holder died mid-propagation: take the lock over */
            ch_count(&ch_stats.takeovers, 1);
            continue;
        }
        ch_count(&ch_stats.lock_waits, 1);
        if (tries < 16)
            dm_ctx_yield(ctx);
        else
            dm_ctx_sleep(ctx, 1000);
    }
    return DM_ETIMEDOUT;
}

/* Write img as node a's new content and unlock, in one batch (Sherman's combined write).
 * held: the lock word we hold (the unlock is a CAS from it, so a holder whose lease was
 * taken over never frees the taker's lock), or 0 for a node nobody can reach yet; since_us:
 * the hold's start (inner_lock), so that the batch never leaves after the hold's end (a
 * stale image would land over a taker's; dm_conn_t.send_by_us), 0 with held 0. */
static int inner_write_unlock(dm_ctx_t *ctx, dm_gaddr_t a, const uint8_t *img, uint64_t held,
                              uint64_t since_us)
{
    static const uint64_t zero = 0;
    dm_batch_t b;
    dm_batch_init(&b);
    if (held && img) b.send_by_us = since_us + (uint64_t)CH_HOLD_MAX_MS * 1000;
    if (img) dm_batch_write(&b, a, img, CH_INNER_BYTES);
    if (held)
        dm_batch_cas(&b, inner_lock_addr(a), held, 0);
    else
        dm_batch_write(&b, inner_lock_addr(a), &zero, 8);
    return dm_batch_exec(ctx, &b);
}

static int sep_dup(ch_sep_t *s, const uint8_t *k, uint32_t len)
{
    s->key = malloc(len ? len : 1);
    if (!s->key) return DM_ENOMEM;
    memcpy(s->key, k, len);
    s->len = len;
    return 0;
}

/* The right neighbor and high fence of a node at level lvl (leaf: replica 0 and its fence
 * record; inner: a fresh read). *high NULL = +inf. */
static int node_next(dm_ctx_t *ctx, unsigned lvl, dm_gaddr_t a, dm_gaddr_t *sib, ch_sep_t *high)
{
    high->key = NULL;
    high->len = 0;
    if (lvl == 0) {
        uint8_t rep[CH_OBJ];
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, a, rep, CH_OBJ); /* replica 0 is at offset 0 */
        int rc = dm_batch_exec(ctx, &b);
        if (rc) return rc;
        *sib = ch_u64(rep + 8);
        dm_gaddr_t f = ch_u64(rep + 16);
        if (!f) return 0;
        uint8_t *k;
        uint32_t l;
        rc = ch_fence_get(ctx, f, &k, &l);
        return rc ? rc : sep_dup(high, k, l);
    }
    ch_inner_t *n;
    int rc = ch_inner_read(ctx, a, &n);
    if (rc) return rc;
    *sib = n->sibling;
    return n->has_high ? sep_dup(high, n->high.key, n->high.len) : 0;
}

/* Allocate, write and publish a new root one level above the current root (§4.4 step 3).
 * Its children are the whole chain of nodes at the old root's level (the root is leftmost
 * there; its right neighbors exist only because it split), so a gateway that died between
 * splitting the root and publishing the new one is repaired by the next one. */
static int grow_root(dm_ctx_t *ctx, uint64_t rootw, int *published)
{
    enum { MAX_CHAIN = 256 };
    unsigned lvl = ch_root_level(rootw);
    ch_sep_t seps[MAX_CHAIN];
    dm_gaddr_t kids[MAX_CHAIN];
    unsigned count = 0;
    int rc = 0;
    dm_gaddr_t a = ch_root_addr(rootw);
    seps[0].key = NULL;
    seps[0].len = 0;
    while (a && count < MAX_CHAIN && !rc) {
        kids[count] = a;
        ch_sep_t high;
        dm_gaddr_t sib = 0;
        rc = node_next(ctx, lvl, a, &sib, &high);
        count++;
        if (rc || !sib || !high.key) {
            free(high.key);
            break;
        }
        seps[count] = high;
        a = sib;
    }
    ch_inner_t n;
    memset(&n, 0, sizeof(n));
    n.level = lvl + 1;
    n.valid = 1;
    n.count = count;
    n.sep = seps;
    n.child = kids;
    seps[0].key = (uint8_t *)"";
    uint8_t *img = malloc(CH_INNER_BYTES);
    dm_gaddr_t na = 0;
    if (!rc) rc = img ? ch_inner_encode(&n, 0, img) : DM_ENOMEM;
    if (!rc && count < 2) rc = DM_ERETRY; /* the chain is still being written */
    if (!rc) rc = dm_alloc_block(ctx, CH_INNER_BYTES + CH_LINE, &na);
    if (!rc) rc = inner_write_unlock(ctx, na, img, 0, 0);
    if (!rc) {
        dm_batch_t b;
        dm_batch_init(&b);
        dm_verb_t *v = dm_batch_cas(&b, dm_gaddr_make(0, DM_SB_OFF(chime_root)), rootw,
                                    ch_root_word(lvl + 1, na));
        rc = dm_batch_exec(ctx, &b);
        *published = !rc && v->result == rootw;
        if (*published) {
            ctx->w->chime->root = ch_root_word(lvl + 1, na);
            ch_count(&ch_stats.roots, 1);
        } else if (!rc) {
            dm_alloc_free(ctx->w->alloc, na, CH_INNER_BYTES + CH_LINE);
        }
    }
    for (unsigned i = 1; i < count; i++)
        free(seps[i].key);
    free(img);
    return rc;
}

/* Insert (sep -> right) into node n (fresh, locked) at its place; 1 if already there. */
static int inner_insert(ch_inner_t *n, const uint8_t *sep, uint32_t seplen, dm_gaddr_t right)
{
    unsigned i = ch_inner_route(n, sep, seplen);
    for (unsigned k = 0; k < n->count; k++)
        if (n->child[k] == right) return 1;
    ch_sep_t *ns = realloc(n->sep, (n->count + 1) * sizeof(*ns));
    if (ns) n->sep = ns;
    dm_gaddr_t *nc = realloc(n->child, (n->count + 1) * sizeof(*nc));
    if (nc) n->child = nc;
    if (!ns || !nc) return DM_ENOMEM;
    memmove(&n->sep[i + 2], &n->sep[i + 1], (n->count - i - 1) * sizeof(*ns));
    memmove(&n->child[i + 2], &n->child[i + 1], (n->count - i - 1) * sizeof(*nc));
    n->count++;
    n->child[i + 1] = right;
    return sep_dup(&n->sep[i + 1], sep, seplen);
}

/* Split a full, locked node n into n and a new right node; writes both, unlocks n.
 * Returns the separator pushed up (malloc'd) and the new node's address. */
static int inner_split(dm_ctx_t *ctx, ch_inner_t *n, uint64_t held, uint64_t since_us, uint8_t ver,
                       ch_sep_t *up, dm_gaddr_t *ra)
{
    size_t total = ch_inner_size(n), acc = CH_INNER_HDR;
    unsigned m = 1;
    while (m < n->count - 1 && acc + 10 + n->sep[m].len < total / 2)
        acc += 10 + n->sep[m++].len;
    ch_inner_t r;
    memset(&r, 0, sizeof(r));
    r.level = n->level;
    r.valid = 1;
    r.count = n->count - m;
    r.sep = n->sep + m;
    r.child = n->child + m;
    r.sibling = n->sibling;
    r.sib_first_child = n->sib_first_child;
    r.has_high = n->has_high;
    r.high = n->high;
    uint8_t *img = malloc(CH_INNER_BYTES);
    if (!img) return DM_ENOMEM;
    int rc = ch_inner_encode(&r, 0, img);
    if (!rc) rc = dm_alloc_block(ctx, CH_INNER_BYTES + CH_LINE, ra);
    if (!rc) rc = inner_write_unlock(ctx, *ra, img, 0, 0); /* unreachable until n points to it */
    if (rc) {
        free(img);
        return rc;
    }
    /* Left half: [0, m), high fence = sep[m], sibling = the new node. */
    unsigned count = n->count;
    int had_high = n->has_high;
    ch_sep_t old_high = n->high;
    rc = sep_dup(up, n->sep[m].key, n->sep[m].len);
    if (!rc) {
        n->count = m;
        n->has_high = 1;
        n->high = *up;
        n->sibling = *ra;
        n->sib_first_child = r.child[0];
        rc = ch_inner_encode(n, ver, img);
        if (!rc) rc = inner_write_unlock(ctx, n->addr, img, held, since_us);
        n->count = count;
        n->has_high = had_high;
        n->high = old_high;
    }
    free(img);
    ch_count(&ch_stats.inner_splits, 1);
    return rc;
}

int ch_propagate(dm_ctx_t *ctx, unsigned level, dm_gaddr_t left, const uint8_t *sep,
                 uint32_t seplen, dm_gaddr_t right)
{
    dm_chime_t *c = ctx->w->chime;
    (void)left; /* a new root covers the whole chain at left's level, found from the root */
    uint8_t *img = malloc(CH_INNER_BYTES);
    if (!img) return DM_ENOMEM;
    int rc = 0;
    for (int hop = 0; hop < 4096; hop++) {
        /* The cached root serves the first hop (a root that has grown since is still a node
         * of its level: the descent moves right from it); a root of a lower level may be
         * ours to grow, which a fresh read decides. */
        if (hop > 0 || !c->root || ch_root_level(c->root) < level) rc = ch_read_root(ctx);
        if (rc) break;
        if (ch_root_level(c->root) < level) {
            /* left was the root: a new root above the chain (it includes right). */
            int published = 0;
            rc = grow_root(ctx, c->root, &published);
            if (rc == DM_ERETRY) {
                rc = 0;
                dm_ctx_yield(ctx);
                continue;
            }
            if (rc || published) break;
            continue; /* someone else grew the tree: re-check at our level */
        }
        ch_path_t p;
        dm_gaddr_t a;
        rc = descend(ctx, sep, seplen, level, 1, &p, &a, NULL);
        for (int right_moves = 0; !rc && right_moves < 4096; right_moves++) {
            uint64_t word, since;
            rc = inner_lock(ctx, a, img, &word, &since);
            if (rc) break;
            ch_inner_t *n = ch_inner_decode(a, img); /* locked: never torn */
            if (!n) {
                inner_write_unlock(ctx, a, NULL, word, since);
                rc = rc ? rc : DM_ECORRUPT;
                break;
            }
            uint8_t ver = (uint8_t)(img[0] + 1);
            if (n->has_high && ch_key_cmp(sep, seplen, n->high.key, n->high.len) >= 0) {
                rc = inner_write_unlock(ctx, a, NULL, word, since);
                a = n->sibling;
                ch_inner_free(n);
                continue;
            }
            rc = inner_insert(n, sep, seplen, right);
            if (rc == 1) { /* a helper already linked it */
                rc = inner_write_unlock(ctx, a, img, word, since);
                ch_inner_free(n);
                goto out;
            }
            if (!rc && ch_inner_size(n) <= CH_INNER_PAYLOAD && n->count <= inner_fanout) {
                rc = ch_inner_encode(n, ver, img);
                if (!rc) rc = inner_write_unlock(ctx, a, img, word, since);
                /* Cache the node as written: the next lock below it needs no READ. */
                ch_inner_t *m = rc ? NULL : ch_inner_decode(a, img);
                if (m)
                    ch_cache_put(c, m);
                else
                    ch_cache_drop(c, a);
                ch_inner_free(n);
                goto out;
            }
            ch_sep_t up = {0};
            dm_gaddr_t ra = 0;
            if (!rc) rc = inner_split(ctx, n, word, since, ver, &up, &ra);
            ch_cache_drop(c, a);
            ch_inner_free(n);
            if (!rc) rc = ch_propagate(ctx, level + 1, a, up.key, up.len, ra);
            free(up.key);
            goto out;
        }
        break;
    }
out:
    free(img);
    return rc;
}
