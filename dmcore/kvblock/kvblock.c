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

#define COMPACT_BIT (1u << 31)
#define COMPACT_HDR 8u
#define COMPACT_MAX_KEY 255u
#define COMPACT_MAX_VALUE ((1u << 23) - 1)

/* The layout of a block of these lengths: its header's size, 8 (compact) or 24 (full). */
static uint64_t hdr_for(uint64_t klen, uint64_t vlen, int timed)
{
    return !timed && klen <= COMPACT_MAX_KEY && vlen <= COMPACT_MAX_VALUE ? COMPACT_HDR : DM_KV_HDR;
}

/* Offset of the checksum: after header, key and value, padded to 8. */
static uint64_t sum_off(uint64_t hdr, uint64_t klen, uint64_t vlen)
{
    return (hdr + klen + vlen + 7) & ~7ull;
}

static uint64_t size_of(uint64_t hdr, uint64_t klen, uint64_t vlen)
{
    return (sum_off(hdr, klen, vlen) + 8 + DM_KV_UNIT - 1) & ~(uint64_t)(DM_KV_UNIT - 1);
}

uint64_t dm_kvblock_size(size_t klen, size_t vlen, int timed)
{
    return size_of(hdr_for(klen, vlen, timed), klen, vlen);
}

/* Write ids: a random odd per-thread base plus even steps, so never 0 (nor its low half). */
static uint64_t next_write_id(void)
{
    static _Thread_local uint64_t base, n;
    if (!base && getrandom(&base, sizeof(base), 0) != sizeof(base)) base = (uint64_t)(uintptr_t)&n;
    base |= 1;
    return base + (n++ << 1);
}

void dm_kvblock_build(uint8_t *buf, const void *key, size_t klen, const void *val, size_t vlen,
                      uint64_t expire_ms, int timed)
{
    uint64_t hdr = hdr_for(klen, vlen, timed || expire_ms);
    uint64_t size = size_of(hdr, klen, vlen);
    uint64_t wid = next_write_id();
    if (hdr == COMPACT_HDR) {
        uint32_t word = COMPACT_BIT | (uint32_t)vlen << 8 | (uint32_t)klen, w32 = (uint32_t)wid;
        memcpy(buf, &word, 4);
        memcpy(buf + 4, &w32, 4);
    } else {
        uint32_t k = (uint32_t)klen, vl = (uint32_t)vlen;
        memcpy(buf, &k, 4);
        memcpy(buf + 4, &vl, 4);
        memcpy(buf + 8, &expire_ms, 8);
        memcpy(buf + 16, &wid, 8);
    }
    if (klen) memcpy(buf + hdr, key, klen);
    if (vlen) memcpy(buf + hdr + klen, val, vlen);
    uint64_t so = sum_off(hdr, klen, vlen);
    memset(buf + hdr + klen + vlen, 0, size - (hdr + klen + vlen));
    uint64_t sum = XXH3_64bits(buf, hdr + klen + vlen);
    memcpy(buf + so, &sum, 8);
}

uint8_t dm_kvblock_len_units(uint64_t block_bytes)
{
    uint64_t u = block_bytes / DM_KV_UNIT;
    return u > DM_KV_LEN_MAX_UNITS ? DM_KV_LEN_MAX_UNITS : (uint8_t)u;
}

uint64_t dm_kvblock_header(const uint8_t *buf, size_t have, uint32_t *klen, uint32_t *vlen)
{
    if (have < COMPACT_HDR) return 0;
    uint32_t w = ld32(buf);
    if (w & COMPACT_BIT) {
        *klen = w & 0xff;
        *vlen = (w & ~COMPACT_BIT) >> 8;
        return COMPACT_HDR;
    }
    if (have < DM_KV_HDR) return 0;
    *klen = w;
    *vlen = ld32(buf + 4);
    if (*klen > DM_KV_MAX_KEY || *vlen > DM_KV_MAX_VALUE) return 0;
    return DM_KV_HDR;
}

uint64_t dm_kvblock_size_from_hdr(const uint8_t *buf, size_t have)
{
    uint32_t k, vl;
    uint64_t hdr = dm_kvblock_header(buf, have, &k, &vl);
    return hdr ? size_of(hdr, k, vl) : 0;
}

int dm_kvblock_parse(const uint8_t *buf, size_t have, dm_kv_view_t *v)
{
    uint32_t k, vl;
    uint64_t hdr = dm_kvblock_header(buf, have, &k, &vl);
    if (!hdr || size_of(hdr, k, vl) > have) return DM_ECORRUPT;
    uint64_t sum = ld64(buf + sum_off(hdr, k, vl));
    if (sum != XXH3_64bits(buf, hdr + (uint64_t)k + vl)) return DM_ECORRUPT;
    v->key = buf + hdr;
    v->key_len = k;
    v->val = buf + hdr + k;
    v->val_len = vl;
    v->expire_ms = hdr == COMPACT_HDR ? 0 : ld64(buf + 8);
    v->write_id = hdr == COMPACT_HDR ? ld32(buf + 4) : ld64(buf + 16);
    return 0;
}

uint64_t dm_kvblock_expire(const uint8_t *buf)
{
    return ld32(buf) & COMPACT_BIT ? 0 : ld64(buf + 8);
}

int dm_kvblock_set_expire(uint8_t *buf, size_t have, uint64_t expire_ms)
{
    uint32_t k, vl;
    uint64_t hdr = dm_kvblock_header(buf, have, &k, &vl);
    if (hdr != DM_KV_HDR || size_of(hdr, k, vl) > have) return DM_ECORRUPT;
    memcpy(buf + 8, &expire_ms, 8);
    uint64_t sum = XXH3_64bits(buf, hdr + (uint64_t)k + vl);
    memcpy(buf + sum_off(hdr, k, vl), &sum, 8);
    return 0;
}

int dm_kvblock_key_equals(const uint8_t *buf, size_t have, const void *key, size_t klen)
{
    uint32_t k, vl;
    uint64_t hdr = dm_kvblock_header(buf, have, &k, &vl);
    if (!hdr || k != klen || have < hdr + klen) return 0;
    return klen == 0 || memcmp(buf + hdr, key, klen) == 0;
}
