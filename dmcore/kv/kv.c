/* The gateway's KV API over RACE: expiry is checked here (expired = absent), SET's
 * NX/XX/GET/KEEPTTL become RACE's decide callback. */
#include "dmkv/kv.h"

#include <stdlib.h>
#include <string.h>

#include "dmkv/errors.h"
#include "dmkv/race.h"
#include "keyq.h"
#include <xxhash.h>

static int live(const dm_kv_view_t *v, uint64_t now_ms)
{
    return v && (v->expire_ms == 0 || v->expire_ms > now_ms);
}

void dm_value_free(dm_value_t *v)
{
    free(v->data);
    v->data = NULL;
    v->len = 0;
}

static int copy_value(const dm_kv_view_t *v, dm_value_t *out)
{
    out->data = malloc(v->val_len ? v->val_len : 1);
    if (!out->data) return DM_ENOMEM;
    memcpy(out->data, v->val, v->val_len);
    out->len = v->val_len;
    out->expire_ms = v->expire_ms;
    return 0;
}

int dm_kv_get(dm_ctx_t *ctx, const void *key, size_t klen, dm_value_t *out)
{
    dm_race_item_t it;
    int rc = dm_race_search(ctx, key, klen, &it);
    if (rc == 1) {
        if (live(&it.view, dm_wall_ms()))
            rc = out ? copy_value(&it.view, out) == 0 ? 1 : DM_ENOMEM : 1;
        else
            rc = 0;
        free(it.block);
    }
    return rc;
}

int dm_kv_exists(dm_ctx_t *ctx, const void *key, size_t klen)
{
    return dm_kv_get(ctx, key, klen, NULL);
}

typedef struct set_decide {
    unsigned flags;
    uint64_t now_ms;
    int existed;
} set_decide_t;

static int decide_set(void *arg, const dm_kv_view_t *v)
{
    set_decide_t *d = arg;
    d->existed = live(v, d->now_ms);
    if ((d->flags & DM_SET_NX) && d->existed) return 0;
    if ((d->flags & DM_SET_XX) && !d->existed) return 0;
    return 1;
}

int dm_kv_set(dm_ctx_t *ctx, const void *key, size_t klen, const void *val, size_t vlen,
              uint64_t expire_ms, unsigned flags, dm_value_t *old)
{
    if (old) memset(old, 0, sizeof(*old));
    if (klen > DM_KV_MAX_KEY || vlen > DM_KV_MAX_VALUE) return DM_ETOOBIG;
    uint64_t size = dm_kvblock_size(klen, vlen);
    uint8_t *block = malloc(size);
    if (!block) return DM_ENOMEM;
    dm_kvblock_build(block, key, klen, val, vlen, expire_ms);
    dm_keyq_entry_t q = {.hash = XXH3_64bits(key, klen), .blind = flags == 0};
    if (!dm_keyq_enter(ctx->w, &q)) {
        free(block);
        return q.result; /* combined with a later SET of this key (keyq.h) */
    }
    set_decide_t d = {.flags = flags, .now_ms = dm_wall_ms(), .existed = 0};
    dm_race_item_t prev;
    memset(&prev, 0, sizeof(prev));
    /* KEEPTTL keeps the expiry only of a live key (an expired one is absent). */
    int rc = dm_race_set(ctx, key, klen, block, size, decide_set, &d, (flags & DM_SET_KEEPTTL) != 0,
                         (flags & DM_SET_GET) ? &prev : NULL);
    dm_keyq_leave(ctx->w, &q, rc);
    if ((flags & DM_SET_GET) && old) {
        /* The old value is reported when the key was live, written or not (SET ... GET). */
        if (rc >= 0 && prev.block && live(&prev.view, d.now_ms)) copy_value(&prev.view, old);
    }
    free(prev.block);
    free(block);
    return rc;
}

static int decide_del(void *arg, const dm_kv_view_t *v)
{
    int *was_live = arg;
    *was_live = live(v, dm_wall_ms());
    return 1; /* expired keys are removed too, but reported as absent */
}

int dm_kv_del(dm_ctx_t *ctx, const void *key, size_t klen)
{
    int was_live = 0;
    dm_keyq_entry_t q = {.hash = XXH3_64bits(key, klen), .blind = 0};
    dm_keyq_enter(ctx->w, &q);
    int rc = dm_race_delete(ctx, key, klen, decide_del, &was_live);
    dm_keyq_leave(ctx->w, &q, rc);
    if (rc == 1) return was_live;
    return rc;
}

int64_t dm_kv_dbsize(dm_ctx_t *ctx)
{
    int64_t n = dm_race_count(ctx);
    return n;
}

int dm_kv_flushall(dm_ctx_t *ctx)
{
    int64_t n = dm_race_flush(ctx);
    return n < 0 ? (int)n : 0;
}

void dm_keylist_free(dm_keylist_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->keys[i].data);
    free(l->keys);
    l->keys = NULL;
    l->n = l->cap = 0;
}

typedef struct scan_out {
    dm_keylist_t *l;
    int err;
    int want_expired; /* 0: live keys only (SCAN) */
    uint64_t now_ms;
} scan_out_t;

static void emit_key(void *arg, const dm_kv_view_t *v)
{
    scan_out_t *so = arg;
    dm_keylist_t *l = so->l;
    if (so->err || live(v, so->now_ms) == so->want_expired) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        dm_key_t *k = realloc(l->keys, cap * sizeof(*k));
        if (!k) {
            so->err = DM_ENOMEM;
            return;
        }
        l->keys = k;
        l->cap = cap;
    }
    uint8_t *d = malloc(v->key_len ? v->key_len : 1);
    if (!d) {
        so->err = DM_ENOMEM;
        return;
    }
    memcpy(d, v->key, v->key_len);
    l->keys[l->n].data = d;
    l->keys[l->n].len = v->key_len;
    l->n++;
}

int dm_kv_scan(dm_ctx_t *ctx, uint64_t cursor, size_t count, dm_keylist_t *out, uint64_t *next)
{
    scan_out_t so = {.l = out, .err = 0, .want_expired = 0, .now_ms = dm_wall_ms()};
    int rc = dm_race_scan(ctx, cursor, count, emit_key, &so, next);
    return rc ? rc : so.err;
}
