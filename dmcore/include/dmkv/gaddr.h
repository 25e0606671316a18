/* Global addresses: one byte in the pool = memory-node id (8 bits) + offset (40 bits).
 * The packed form fits the 48-bit pointer field of a RACE slot (docs/DESIGN.md "Remote memory
 * model"). Nothing else in dmkv does bit tricks on addresses. */
#ifndef DMKV_GADDR_H
#define DMKV_GADDR_H

#include <stdint.h>

typedef uint64_t dm_gaddr_t;

#define DM_GADDR_NODE_BITS 8
#define DM_GADDR_OFF_BITS 40
#define DM_GADDR_MAX_NODES (1u << DM_GADDR_NODE_BITS)
#define DM_GADDR_OFF_MASK ((1ull << DM_GADDR_OFF_BITS) - 1)
#define DM_GADDR_NULL ((dm_gaddr_t)0)

/* Pack node (< 256) and byte offset (< 1 TiB) into a 48-bit global address. */
static inline dm_gaddr_t dm_gaddr_make(unsigned node, uint64_t off)
{
    return ((dm_gaddr_t)(node & 0xff) << DM_GADDR_OFF_BITS) | (off & DM_GADDR_OFF_MASK);
}
static inline unsigned dm_gaddr_node(dm_gaddr_t a)
{
    return (unsigned)(a >> DM_GADDR_OFF_BITS) & 0xff;
}
static inline uint64_t dm_gaddr_off(dm_gaddr_t a)
{
    return a & DM_GADDR_OFF_MASK;
}

#endif
