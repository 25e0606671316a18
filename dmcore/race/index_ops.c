/* RACE as the point role (dmkv/index.h): the table kv/engines.c lists. */
#include "dmkv/index.h"
#include "dmkv/race.h"
#include "race_internal.h"

static int race_attach(dm_ctx_t *ctx, dm_worker_t *w)
{
    return dm_race_attach(ctx, &w->race);
}

static void race_detach(dm_worker_t *w)
{
    dm_race_detach(w->race);
    w->race = NULL;
}

static size_t race_stats(dm_index_stat_t *out)
{
    uint64_t splits, splitting, doublings, stranded, adopted, hits, dropped, blind, moved;
    dm_race_split_stats(&splits, &splitting, &doublings);
    dm_race_stranded_stats(&stranded, &adopted);
    dm_race_addr_cache_stats(&hits, &dropped, &blind, &moved);
    size_t n = 0;
    out[n++] = dm_index_count("race_splits", splits);
    out[n++] = dm_index_count("race_splits_in_progress", splitting);
    out[n++] = dm_index_count("race_directory_doublings", doublings);
    out[n++] = dm_index_count("race_stranded_inserts", stranded);
    out[n++] = dm_index_count("race_stranded_adopted", adopted);
    out[n++] = dm_index_count("race_addr_cache_hits", hits);
    out[n++] = dm_index_count("race_addr_cache_dropped", dropped);
    out[n++] = dm_index_count("race_addr_cache_blind_sets", blind);
    out[n++] = dm_index_count("race_addr_cache_moved", moved);
    return n;
}

static void race_cache_prefetch(dm_worker_t *w, const void *key, size_t klen)
{
    dm_race_addr_cache_prefetch(w->race, key, klen);
}

static int race_cache_knows(dm_worker_t *w, const void *key, size_t klen)
{
    return w->race && race_addr_cache_knows(w->race, key, klen);
}

/* A key's slot: its share of a bucket, header included. */
static uint64_t race_key_bytes(void)
{
    return (DM_RACE_BUCKET + DM_RACE_SLOTS - 1) / DM_RACE_SLOTS;
}

/* RACE's slots size a block in 32-byte units: dm_alloc_kv_block's own rounding. */
static uint64_t race_block_bytes(uint64_t block_len)
{
    return block_len;
}

const dm_point_index_ops_t dm_race_point_index = {.engine = {"race", 1},
                                                  .attach = race_attach,
                                                  .detach = race_detach,
                                                  .count = dm_race_count,
                                                  .flush = dm_race_flush,
                                                  .recount = dm_race_recount,
                                                  .stats = race_stats,
                                                  .search = dm_race_search,
                                                  .search_cached = dm_race_search_hot,
                                                  .cache_prefetch = race_cache_prefetch,
                                                  .cache_knows = race_cache_knows,
                                                  .set = dm_race_set_carry,
                                                  .set_blind = dm_race_update_blind,
                                                  .del = dm_race_delete_carry,
                                                  .carry_release = dm_race_carry_release,
                                                  .block_bytes = race_block_bytes,
                                                  .prefetch = dm_race_prefetch,
                                                  .probe = dm_race_probe,
                                                  .key_bytes = race_key_bytes,
                                                  .scan = dm_race_scan,
                                                  .objects = dm_race_objects};
