/* KV block layouts (dmcore/kvblock/kvblock.c, kvblock.h): which layout a block takes, what
 * it costs in bytes, and that every byte a reader trusts is covered by the checksum. */
#include <stdint.h>

#include "dmkv/errors.h"
#include "dmkv/kvblock.h"
#include "harness.h"

static uint8_t block[1u << 24] __attribute__((aligned(8)));

/* Build, parse back and compare; returns the block's size. */
static uint64_t roundtrip(const char *key, size_t klen, const uint8_t *val, size_t vlen,
                          uint64_t expire_ms, int timed)
{
    uint64_t size = dm_kvblock_size(klen, vlen, timed || expire_ms);
    CHECK(size % DM_KV_UNIT == 0 && size <= sizeof(block));
    memset(block, 0xa5, size + 64);
    dm_kvblock_build(block, key, klen, val, vlen, expire_ms, timed);
    for (unsigned i = 0; i < 64; i++)
        CHECK(block[size + i] == 0xa5); /* stays in its size */
    CHECK(dm_kvblock_size_from_hdr(block, DM_KV_HDR) == size);
    dm_kv_view_t v;
    CHECK(dm_kvblock_parse(block, size, &v) == 0);
    CHECK(v.key_len == klen && memcmp(v.key, key, klen) == 0);
    CHECK(v.val_len == vlen && (!vlen || memcmp(v.val, val, vlen) == 0));
    CHECK(v.expire_ms == expire_ms && v.write_id != 0);
    CHECK(dm_kvblock_key_equals(block, size, key, klen));
    CHECK(!dm_kvblock_key_equals(block, size, key, klen ? klen - 1 : 1));
    CHECK(dm_kvblock_parse(block, size - DM_KV_UNIT, &v) == DM_ECORRUPT); /* short read */
    return size;
}

/* The benchmark's key and value (16 + 32 bytes) fit two units, not three; a block with an
 * expiry, or one that may get one (KEEPTTL), keeps the full layout. */
static void test_sizes(void)
{
    uint8_t val[64];
    memset(val, 'v', sizeof(val));
    CHECK(roundtrip("key:000000000001", 16, val, 32, 0, 0) == 64);
    CHECK(roundtrip("key:000000000001", 16, val, 32, 0, 1) == 96);
    CHECK(roundtrip("key:000000000001", 16, val, 32, 1700000000000ull, 0) == 96);
    CHECK(roundtrip("", 0, val, 0, 0, 0) == 32);
    CHECK(roundtrip("k", 1, val, 0, 0, 1) == 64);
    CHECK(roundtrip("k", 1, val, 0, 0, 0) == 32);
}

/* The compact layout's edges: a 255-byte key and an 8 MiB - 1 value still fit it; one
 * byte more of either takes the full layout. */
static void test_compact_edges(void)
{
    static char key[300];
    memset(key, 'k', sizeof(key));
    uint8_t *val = malloc(1u << 23);
    CHECK(val);
    for (uint32_t i = 0; i < 1u << 23; i++)
        val[i] = (uint8_t)(i * 7);
    CHECK(roundtrip(key, 255, val, 1, 0, 0) == 288);
    CHECK(roundtrip(key, 256, val, 1, 0, 0) == 320);
    uint64_t small = roundtrip(key, 1, val, (1u << 23) - 1, 0, 0);
    uint64_t big = roundtrip(key, 1, val, 1u << 23, 0, 0);
    CHECK(small == (1u << 23) + 32 && big == (1u << 23) + 64);
    free(val);
}

/* A torn or reused block: any changed byte of header, key or value fails the checksum. */
static void test_torn(void)
{
    uint8_t val[32];
    memset(val, 'v', sizeof(val));
    for (int timed = 0; timed < 2; timed++) {
        uint64_t size = dm_kvblock_size(16, 32, timed);
        uint64_t covered = (timed ? DM_KV_HDR : 8) + 16 + 32;
        for (uint64_t at = 0; at < covered; at++) {
            dm_kvblock_build(block, "key:000000000001", 16, val, 32, 0, timed);
            block[at] ^= 0x10;
            dm_kv_view_t v;
            CHECKF(dm_kvblock_parse(block, size, &v) == DM_ECORRUPT, "timed %d byte %llu", timed,
                   (unsigned long long)at);
        }
    }
    memset(block, 0, 64); /* a zeroed (never written) block */
    dm_kv_view_t v;
    CHECK(dm_kvblock_parse(block, 64, &v) == DM_ECORRUPT);
}

/* Two builds of the same key and value differ in their write ids (WATCH tells a reused
 * block's rewrite from the old write by it), in both layouts. */
static void test_write_ids(void)
{
    for (int timed = 0; timed < 2; timed++) {
        dm_kv_view_t a, b;
        static uint8_t other[96];
        dm_kvblock_build(block, "k", 1, "v", 1, 0, timed);
        dm_kvblock_build(other, "k", 1, "v", 1, 0, timed);
        CHECK(dm_kvblock_parse(block, 64, &a) == 0 && dm_kvblock_parse(other, 64, &b) == 0);
        CHECK(a.write_id != b.write_id && a.write_id && b.write_id);
    }
}

/* KEEPTTL's in-place expiry: a timed block takes it (and still parses); a compact one has no
 * room and is refused, untouched. */
static void test_set_expire(void)
{
    dm_kv_view_t v;
    dm_kvblock_build(block, "key:1", 5, "value", 5, 0, 1);
    CHECK(dm_kvblock_set_expire(block, 64, 1800000000000ull) == 0);
    CHECK(dm_kvblock_parse(block, 64, &v) == 0 && v.expire_ms == 1800000000000ull);
    CHECK(v.key_len == 5 && memcmp(v.val, "value", 5) == 0);
    dm_kvblock_build(block, "key:1", 5, "value", 5, 0, 0);
    CHECK(dm_kvblock_set_expire(block, 32, 1800000000000ull) == DM_ECORRUPT);
    CHECK(dm_kvblock_parse(block, 32, &v) == 0 && v.expire_ms == 0);
}

int main(void)
{
    RUN(test_sizes);
    RUN(test_compact_edges);
    RUN(test_torn);
    RUN(test_write_ids);
    RUN(test_set_expire);
    return 0;
}
