#include "dmkv/kvblock.h"

#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

#include "dmkv/errors.h"

static uint64_t ld64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}
static uint32_t ld32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    return x;
}

static uint64_t sum_off(uint64_t klen, uint64_t vlen)
{
    return (DM_KV_HDR + klen + vlen + 7) & ~7ull;
}

uint64_t dm_kvblock_size(size_t klen, size_t vlen)
{
    return (sum_off(klen, vlen) + 8 + DM_KV_UNIT - 1) & ~(uint64_t)(DM_KV_UNIT - 1);
}

/* Write ids: a random odd per-thread base plus even steps, so never 0. */
static uint64_t next_write_id(void)
{
    static _Thread_local uint64_t base, n;
    if (!base && getrandom(&base, sizeof(base), 0) != sizeof(base)) base = (uint64_t)(uintptr_t)&n;
    base |= 1;
    return base + (n++ << 1);
}

void dm_kvblock_build(uint8_t *buf, const void *key, size_t klen, const void *val, size_t vlen,
                      uint64_t expire_ms)
{
    uint64_t size = dm_kvblock_size(klen, vlen);
    uint32_t k = (uint32_t)klen, vl = (uint32_t)vlen;
    memcpy(buf, &k, 4);
    memcpy(buf + 4, &vl, 4);
    memcpy(buf + 8, &expire_ms, 8);
    uint64_t wid = next_write_id();
    memcpy(buf + 16, &wid, 8);
    if (klen) memcpy(buf + DM_KV_HDR, key, klen);
    if (vlen) memcpy(buf + DM_KV_HDR + klen, val, vlen);
    uint64_t so = sum_off(klen, vlen);
    memset(buf + DM_KV_HDR + klen + vlen, 0, size - (DM_KV_HDR + klen + vlen));
    uint64_t sum = XXH3_64bits(buf, DM_KV_HDR + klen + vlen);
    memcpy(buf + so, &sum, 8);
}

uint8_t dm_kvblock_len_units(uint64_t block_bytes)
{
    uint64_t u = block_bytes / DM_KV_UNIT;
    return u > DM_KV_LEN_MAX_UNITS ? DM_KV_LEN_MAX_UNITS : (uint8_t)u;
}

uint64_t dm_kvblock_size_from_hdr(const uint8_t *buf, size_t have)
{
    if (have < DM_KV_HDR) return 0;
    uint32_t k = ld32(buf), vl = ld32(buf + 4);
    if (k > DM_KV_MAX_KEY || vl > DM_KV_MAX_VALUE) return 0;
    return dm_kvblock_size(k, vl);
}

int dm_kvblock_parse(const uint8_t *buf, size_t have, dm_kv_view_t *v)
{
    uint64_t size = dm_kvblock_size_from_hdr(buf, have);
    if (size == 0 || size > have) return DM_ECORRUPT;
    uint32_t k = ld32(buf), vl = ld32(buf + 4);
    uint64_t sum = ld64(buf + sum_off(k, vl));
    if (sum != XXH3_64bits(buf, DM_KV_HDR + (uint64_t)k + vl)) return DM_ECORRUPT;
    v->key = buf + DM_KV_HDR;
    v->key_len = k;
    v->val = buf + DM_KV_HDR + k;
    v->val_len = vl;
    v->expire_ms = ld64(buf + 8);
    v->write_id = ld64(buf + 16);
    return 0;
}

int dm_kvblock_key_equals(const uint8_t *buf, size_t have, const void *key, size_t klen)
{
    if (have < DM_KV_HDR + klen || ld32(buf) != klen) return 0;
    return klen == 0 || memcmp(buf + DM_KV_HDR, key, klen) == 0;
}
