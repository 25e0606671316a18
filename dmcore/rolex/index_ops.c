/* ROLEX as the range role (dmkv/index.h): the table kv/engines.c lists (engine id 2). */
#include "dmkv/rolex.h"

#include "rolex_range.h"

const dm_range_index_ops_t dm_rolex_range_index = {.engine = {"rolex", 2, DM_ROLEX_KEY_MAX},
                                                   .attach = rr_attach,
                                                   .set_presence = rr_set_presence,
                                                   .detach = rr_detach,
                                                   .settle_all = rr_settle_all,
                                                   .stats = rr_stats_get,
                                                   .lock = rr_lock,
                                                   .lock_insert = rr_lock_insert,
                                                   .mark_pending = rr_mark_pending,
                                                   .unlock = rr_unlock,
                                                   .lock_valid = rr_lock_valid,
                                                   .lock_in_doubt = rr_lock_in_doubt,
                                                   .lock_sure_until = rr_lock_sure_until,
                                                   .lock_hold_until = rr_lock_hold_until,
                                                   .lock_posted_us = rr_lock_posted_us,
                                                   .lock_range = rr_lock_range,
                                                   .search = rr_search,
                                                   .scan = rr_scan,
                                                   .random_cursor = rr_random_cursor,
                                                   .watch_sig = rr_watch_sig,
                                                   .key_bytes = rr_key_bytes,
                                                   .reset = rr_reset,
                                                   .objects = rr_objects};
