#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "dmkv/errors.h"
#include "dmkv/region_exec.h"
#include "dmkv/superblock.h"
#include "dmkv/transport.h"

/* Cache-line atomicity. RDMA NICs land each aligned 64-byte line of a READ or WRITE
 * atomically with respect to other verbs in practice, and RACE's bucket header checks
 * and CHIME's versions rely on it (docs/NOTES.md §2.11). Threads sharing a local region get the
 * same guarantee from striped line locks: each line is copied, and each atomic executed,
 * under its stripe's lock. One lock is held at a time, so stripes never deadlock. */
#define LINE 64u
#define STRIPES 4096u
static uint8_t stripes[STRIPES];

static void line_lock(uint64_t line)
{
    uint8_t *l = &stripes[line % STRIPES];
    while (__atomic_test_and_set(l, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(l, __ATOMIC_RELAXED))
            ;
}

static void line_unlock(uint64_t line)
{
    __atomic_clear(&stripes[line % STRIPES], __ATOMIC_RELEASE);
}

/* Copy len bytes between the region at offset off and buf, one locked line at a time. */
static void copy_lines(uint8_t *base, uint64_t off, uint8_t *buf, uint64_t len, int to_region)
{
    while (len) {
        uint64_t line = off / LINE;
        uint64_t n = LINE - off % LINE;
        if (n > len) n = len;
        line_lock(line);
        if (to_region)
            memcpy(base + off, buf, n);
        else
            memcpy(buf, base + off, n);
        line_unlock(line);
        off += n;
        buf += n;
        len -= n;
    }
}

/* One verb; locked: each 64-byte line copied, and each atomic run, under its stripe. */
static int region_exec(uint8_t *base, uint64_t size, dm_verb_t *v, int locked)
{
    if (v->offset > size || v->len > size - v->offset) return DM_ERANGE;
    switch (v->op) {
    case DM_OP_READ:
        if (locked)
            copy_lines(base, v->offset, v->buf, v->len, 0);
        else
            memcpy(v->buf, base + v->offset, v->len);
        return 0;
    case DM_OP_WRITE:
        if (locked)
            copy_lines(base, v->offset, v->buf, v->len, 1);
        else
            memcpy(base + v->offset, v->buf, v->len);
        return 0;
    case DM_OP_CAS:
    case DM_OP_FAA:
    case DM_OP_MASKED_CAS:
        break;
    default:
        return DM_EINVAL;
    }
    if (v->len != 8) return DM_EINVAL;
    if (v->offset & 7) return DM_EALIGN;
    /* CPU atomics even when serial: a memory node's own threads (the ROLEX retrainer,
     * memnode/mn_retrainer.c) read and swing words beside its executor. */
    uint64_t *w = (uint64_t *)(base + v->offset);
    uint64_t line = v->offset / LINE, old;
    if (locked) line_lock(line);
    if (v->op == DM_OP_CAS) {
        old = v->compare; /* the word's value afterwards, whether it swapped or not */
        __atomic_compare_exchange_n(w, &old, v->swap, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    } else if (v->op == DM_OP_FAA) {
        old = __atomic_fetch_add(w, v->compare, __ATOMIC_ACQ_REL);
    } else {
        old = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        while ((old & v->compare_mask) == (v->compare & v->compare_mask) &&
               !__atomic_compare_exchange_n(w, &old,
                                            (old & ~v->swap_mask) | (v->swap & v->swap_mask), 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            ;
    }
    if (locked) line_unlock(line);
    v->result = old;
    return 0;
}

int dm_region_exec(uint8_t *base, uint64_t size, dm_verb_t *v)
{
    return region_exec(base, size, v, 1);
}

int dm_region_exec_serial(uint8_t *base, uint64_t size, dm_verb_t *v)
{
    return region_exec(base, size, v, 0);
}

void dm_region_format(uint8_t *base, uint64_t size)
{
    dm_superblock_t *sb = (dm_superblock_t *)base;
    memset(sb, 0, sizeof(*sb));
    sb->version = DM_SB_VERSION;
    sb->region_size = size;
    sb->alloc_ptr = DM_SB_FIRST_CHUNK;
    if (getrandom(&sb->cursor_secret, sizeof(sb->cursor_secret), 0) != sizeof(sb->cursor_secret))
        sb->cursor_secret = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    if (getrandom(&sb->incarnation, sizeof(sb->incarnation), 0) != sizeof(sb->incarnation))
        sb->incarnation = sb->cursor_secret * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)base;
    sb->incarnation |= 1; /* 0 means "unknown" to a gateway */
    __atomic_store_n(&sb->magic, DM_SB_MAGIC, __ATOMIC_RELEASE);
}
