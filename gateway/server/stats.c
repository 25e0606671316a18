/* Process-wide gateway counters. */
#include "server/stats.h"

gw_stats_t gw_stats;

void gw_stats_reset(void)
{
    GW_STAT_SET(total_connections_received, 0);
    GW_STAT_SET(rejected_connections, 0);
    GW_STAT_SET(total_commands_processed, 0);
    GW_STAT_SET(total_error_replies, 0);
    GW_STAT_SET(client_query_buffer_limit_disconnections, 0);
    GW_STAT_SET(client_output_buffer_limit_disconnections, 0);
    GW_STAT_SET(evicted_clients, 0);
    GW_STAT_SET(total_net_input_bytes, 0);
    GW_STAT_SET(total_net_output_bytes, 0);
    GW_STAT_SET(total_reads_processed, 0);
    GW_STAT_SET(total_writes_processed, 0);
    GW_STAT_SET(keyspace_hits, 0);
    GW_STAT_SET(keyspace_misses, 0);
    GW_STAT_SET(expired_keys, 0);
    GW_STAT_SET(stalled_coroutines, 0);
    GW_STAT_SET(long_running_commands, 0);
}
