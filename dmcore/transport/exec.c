#include <string.h>

#include "dmkv/errors.h"
#include "dmkv/region_exec.h"
#include "dmkv/superblock.h"
#include "dmkv/transport.h"

/* Copy with aligned 8-byte words moved atomically (the RNIC's guarantee, NOTES §2.11). */
static void copy_words(uint8_t *dst, const uint8_t *src, uint64_t len)
{
    while (len && (((uintptr_t)dst | (uintptr_t)src) & 7)) {
        *dst++ = *src++;
        len--;
    }
    if ((((uintptr_t)dst ^ (uintptr_t)src) & 7) == 0) {
        for (; len >= 8; len -= 8, dst += 8, src += 8)
            __atomic_store_n((uint64_t *)dst,
                             __atomic_load_n((const uint64_t *)src, __ATOMIC_RELAXED),
                             __ATOMIC_RELAXED);
    }
    if (len)
        memcpy(dst, src, len);
}

int dm_region_exec(uint8_t *base, uint64_t size, dm_verb_t *v)
{
    if (v->offset > size || v->len > size - v->offset)
        return DM_ERANGE;
    uint8_t *p = base + v->offset;
    switch (v->op) {
    case DM_OP_READ:
        copy_words(v->buf, p, v->len);
        return 0;
    case DM_OP_WRITE:
        copy_words(p, v->buf, v->len);
        return 0;
    case DM_OP_CAS:
    case DM_OP_FAA:
    case DM_OP_MASKED_CAS:
        break;
    default:
        return DM_EINVAL;
    }
    if (v->len != 8)
        return DM_EINVAL;
    if (v->offset & 7)
        return DM_EALIGN;
    uint64_t *w = (uint64_t *)p;
    if (v->op == DM_OP_CAS) {
        uint64_t expect = v->compare;
        __atomic_compare_exchange_n(w, &expect, v->swap, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        v->result = expect;
    } else if (v->op == DM_OP_FAA) {
        v->result = __atomic_fetch_add(w, v->compare, __ATOMIC_SEQ_CST);
    } else {
        uint64_t old = __atomic_load_n(w, __ATOMIC_SEQ_CST);
        for (;;) {
            if ((old & v->compare_mask) != (v->compare & v->compare_mask))
                break;
            uint64_t nw = (old & ~v->swap_mask) | (v->swap & v->swap_mask);
            if (__atomic_compare_exchange_n(w, &old, nw, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                break;
        }
        v->result = old;
    }
    return 0;
}

void dm_region_format(uint8_t *base, uint64_t size)
{
    dm_superblock_t *sb = (dm_superblock_t *)base;
    memset(sb, 0, sizeof(*sb));
    sb->version = DM_SB_VERSION;
    sb->region_size = size;
    sb->alloc_ptr = 65536;
    __atomic_store_n(&sb->magic, DM_SB_MAGIC, __ATOMIC_RELEASE);
}
