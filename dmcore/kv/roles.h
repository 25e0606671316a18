/* The two index roles the KV layer composes (dmkv/index.h), by role: the engines this
 * process runs are chosen in kv/engines.c alone. */
#ifndef DMKV_KV_ROLES_H
#define DMKV_KV_ROLES_H

#include "dmkv/index.h"
#include "dmkv/kv.h"

/* The point index (values; RACE today). */
static inline const dm_point_index_ops_t *point_role(void)
{
    return dm_kv_point_index();
}

/* The range index (order, range locks; CHIME today). */
static inline const dm_range_index_ops_t *range_role(void)
{
    return dm_kv_range_index();
}

#endif
