/* Read-modify-write, WATCH slot words and expired-only deletes on top of RACE (kv.h).
 * An RMW reads the item (dm_race_search_hot), lets the caller compute the new value, and
 * writes it with dm_race_set / dm_race_delete under a decide callback that vetoes unless
 * the item is still exactly what was read (value bytes + expiry, or absence); a veto
 * means another writer got in between, so the loop reads again. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "dmkv/clock.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "hybrid.h"
#include "keyq.h"
#include "roles.h"

#define RMW_MAX_ATTEMPTS 10000 /* conflicting writers before giving up with DM_ERETRY */

static int is_live(const dm_kv_view_t *v, uint64_t now_ms)
{
    return v && (v->expire_ms == 0 || v->expire_ms > now_ms);
}

/* What the RMW read: the decide callback accepts only this state. */
typedef struct rmw_seen {
    int present;
    const uint8_t *val;
    uint32_t len;
    uint64_t expire_ms;
} rmw_seen_t;

static int decide_unchanged(void *arg, const dm_kv_view_t *v)
{
    const rmw_seen_t *s = arg;
    int l = is_live(v, dm_wall_ms());
    if (!s->present) return !l;
    return l && v->val_len == s->len && v->expire_ms == s->expire_ms &&
           (s->len == 0 || memcmp(v->val, s->val, s->len) == 0);
}

/* One attempt: 1 done (*action set), 0 vetoed (retry), or DM_E*. */
static int rmw_once(dm_ctx_t *ctx, const void *key, size_t klen, dm_kv_rmw_fn fn, void *arg,
                    int *action)
{
    dm_point_item_t it;
    memset(&it, 0, sizeof(it));
    int rc =
        point_role()->search_cached(ctx, key, klen, &it); /* the write re-checks what it read */
    if (rc < 0) return rc;
    rmw_seen_t seen = {0};
    dm_value_t cur = {0};
    if (rc == 1 && is_live(&it.view, dm_wall_ms())) {
        seen.present = 1;
        seen.val = it.view.val;
        seen.len = it.view.val_len;
        seen.expire_ms = it.view.expire_ms;
        cur.data = (uint8_t *)it.view.val;
        cur.len = it.view.val_len;
        cur.expire_ms = it.view.expire_ms;
    }
    dm_value_t nv = {0};
    int act = fn(arg, seen.present ? &cur : NULL, &nv);
    if (act == DM_RMW_WRITE) {
        if (nv.len > DM_KV_MAX_VALUE) {
            rc = DM_ETOOBIG;
        } else {
            uint64_t size = dm_kvblock_size(klen, nv.len, nv.expire_ms != 0);
            uint8_t *block = malloc(size);
            if (nv.expire_ms && (rc = dm_kv_mark_volatile(ctx)) != 0) {
                free(block); /* the pool must know of volatile keys before this one */
            } else if (!block) {
                rc = DM_ENOMEM;
            } else {
                dm_kvblock_build(block, key, klen, nv.data ? (const void *)nv.data : "", nv.len,
                                 nv.expire_ms, 0);
                rc = dm_hybrid_set(ctx, key, klen, block, size, decide_unchanged, &seen, 0, NULL);
                free(block);
            }
        }
    } else if (act == DM_RMW_DELETE && seen.present) {
        /* 0 means vetoed or already gone: either way the key changed since the read. */
        rc = dm_hybrid_delete(ctx, key, klen, decide_unchanged, &seen);
    } else {
        rc = 1; /* KEEP, ABORT, or DELETE of an absent key: nothing to write */
    }
    free(nv.data);
    free(it.block);
    if (rc == 1) *action = act;
    return rc;
}

int dm_kv_rmw(dm_ctx_t *ctx, const void *key, size_t klen, dm_kv_rmw_fn fn, void *arg)
{
    if (klen > DM_KV_MAX_KEY) return DM_ETOOBIG;
    /* Writes to this key from this worker wait their turn, so local RMWs do not veto each
     * other; other gateways meet us at the slot CAS. */
    dm_keyq_entry_t q = {.hash = XXH3_64bits(key, klen), .key = key, .klen = klen, .blind = 0};
    dm_keyq_enter(ctx->w, &q);
    int rc = DM_ERETRY, action = DM_RMW_KEEP;
    for (int attempt = 0; attempt < RMW_MAX_ATTEMPTS; attempt++) {
        rc = rmw_once(ctx, key, klen, fn, arg, &action);
        if (rc != 0) break;
        rc = DM_ERETRY;
    }
    dm_keyq_leave(ctx->w, &q, rc < 0 ? rc : 1);
    return rc < 0 ? rc : action;
}

int dm_kv_absent_sig(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *sig)
{
    return range_role()->watch_sig(ctx, key, klen, sig);
}

int dm_kv_version(dm_ctx_t *ctx, const void *key, size_t klen, uint64_t *version,
                  uint64_t *write_id)
{
    dm_point_item_t it;
    memset(&it, 0, sizeof(it));
    *version = *write_id = 0;
    int rc = point_role()->search(ctx, key, klen, &it);
    if (rc < 0) return rc;
    if (rc == 1 && is_live(&it.view, dm_wall_ms())) {
        *version = it.version;
        *write_id = it.view.write_id;
    }
    free(it.block);
    return 0;
}

static int decide_expired(void *arg, const dm_kv_view_t *v)
{
    (void)arg;
    return v && !is_live(v, dm_wall_ms() - dm_clock_margin_ms()); /* expired everywhere */
}

int dm_kv_del_expired(dm_ctx_t *ctx, const void *key, size_t klen)
{
    dm_keyq_entry_t q = {.hash = XXH3_64bits(key, klen), .key = key, .klen = klen, .blind = 0};
    dm_keyq_enter(ctx->w, &q);
    int rc = dm_hybrid_delete(ctx, key, klen, decide_expired, NULL);
    dm_keyq_leave(ctx->w, &q, rc);
    return rc;
}
