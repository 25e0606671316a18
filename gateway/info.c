/* INFO sections. */
#include "info.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "commands/cmdstats.h"
#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/clock.h"
#include "dmkv/coro.h"
#include "dmkv/fence.h"
#include "dmkv/kv.h"
#include "dmkv/lease_lock.h"
#include "dmkv/rdma.h"
#include "dmkv/index.h"
#include "dmkv/stats.h"
#include "server/dead_repair.h"
#include "server/server.h"
#include "server/stats.h"
#include "version.h"

enum {
    S_SERVER = 1 << 0,
    S_CLIENTS = 1 << 1,
    S_MEMORY = 1 << 2,
    S_PERSISTENCE = 1 << 3,
    S_STATS = 1 << 4,
    S_REPLICATION = 1 << 5,
    S_CPU = 1 << 6,
    S_KEYSPACE = 1 << 7,
    S_DMKV = 1 << 8,
    S_ERRORSTATS = 1 << 9,
    S_COMMANDSTATS = 1 << 10,
    S_LATENCYSTATS = 1 << 11,
    S_DEFAULT = (1 << 10) - 1, /* INFO, INFO default: all but command/latencystats (Redis) */
    S_ALL = (1 << 12) - 1,
};

static const struct {
    const char *name;
    unsigned bit;
} section_names[] = {
    {"server", S_SERVER},
    {"clients", S_CLIENTS},
    {"memory", S_MEMORY},
    {"persistence", S_PERSISTENCE},
    {"stats", S_STATS},
    {"replication", S_REPLICATION},
    {"cpu", S_CPU},
    {"keyspace", S_KEYSPACE},
    {"dmkv", S_DMKV},
    {"errorstats", S_ERRORSTATS},
    {"commandstats", S_COMMANDSTATS},
    {"latencystats", S_LATENCYSTATS},
};

static unsigned pick_sections(int nsec, char **sections)
{
    if (nsec == 0) return S_DEFAULT;
    unsigned m = 0;
    for (int i = 0; i < nsec; i++) {
        if (!strcasecmp(sections[i], "all") || !strcasecmp(sections[i], "everything")) {
            m |= S_ALL;
            continue;
        }
        if (!strcasecmp(sections[i], "default")) {
            m |= S_DEFAULT;
            continue;
        }
        for (size_t k = 0; k < sizeof(section_names) / sizeof(section_names[0]); k++)
            if (!strcasecmp(sections[i], section_names[k].name)) m |= section_names[k].bit;
    }
    return m;
}

static void header(gw_buf_t *b, const char *title)
{
    if (b->len) gw_buf_puts(b, "\r\n");
    gw_buf_printf(b, "# %s\r\n", title);
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, rss = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &rss) != 2) rss = 0;
        fclose(f);
    }
    return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void human_bytes(char *s, size_t n, uint64_t v)
{
    if (v < 1024)
        snprintf(s, n, "%lluB", (unsigned long long)v);
    else if (v < 1024ull * 1024)
        snprintf(s, n, "%.2fK", v / 1024.0);
    else if (v < 1024ull * 1024 * 1024)
        snprintf(s, n, "%.2fM", v / (1024.0 * 1024));
    else
        snprintf(s, n, "%.2fG", v / (1024.0 * 1024 * 1024));
}

static void sec_server(gw_buf_t *b)
{
    struct utsname u;
    uname(&u);
    uint64_t up_s = (dm_now_us() - gw_server.start_us) / 1000000u;
    header(b, "Server");
    gw_buf_printf(b,
                  "redis_version:%s\r\n"
                  "dmkv_version:%s\r\n"
                  "redis_git_sha1:00000000\r\n"
                  "redis_git_dirty:0\r\n"
                  "redis_build_id:0\r\n"
                  "redis_mode:standalone\r\n"
                  "os:%s %s %s\r\n"
                  "arch_bits:%d\r\n"
                  "monotonic_clock:POSIX clock_gettime\r\n"
                  "multiplexing_api:epoll\r\n"
                  "atomicvar_api:c11-builtin\r\n"
                  "gcc_version:%d.%d.%d\r\n"
                  "process_id:%d\r\n"
                  "process_supervised:no\r\n"
                  "run_id:%s\r\n"
                  "tcp_port:%d\r\n"
                  "server_time_usec:%llu\r\n"
                  "uptime_in_seconds:%llu\r\n"
                  "uptime_in_days:%llu\r\n"
                  "hz:10\r\n"
                  "configured_hz:10\r\n"
                  "lru_clock:0\r\n"
                  "executable:%s\r\n"
                  "config_file:%s\r\n"
                  "io_threads_active:%d\r\n"
                  "dmkv_threads:%d\r\n"
                  "dmkv_memnodes:%d\r\n",
                  GW_REDIS_VERSION, GW_DMKV_VERSION, u.sysname, u.release, u.machine,
                  (int)(sizeof(void *) * 8),
#ifdef __GNUC__
                  __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__,
#else
                  0, 0, 0,
#endif
                  (int)getpid(), gw_server.run_id, gw_server.cfg->port,
                  (unsigned long long)dm_wall_ms() * 1000ull, (unsigned long long)up_s,
                  (unsigned long long)(up_s / 86400), gw_server.executable,
                  gw_server.cfg->config_file ? gw_server.cfg->config_file : "",
                  gw_server.cfg->threads > 1, gw_server.cfg->threads, gw_server.cfg->nmemnodes);
}

static void sec_clients(gw_buf_t *b)
{
    header(b, "Clients");
    gw_buf_printf(b,
                  "connected_clients:%llu\r\n"
                  "cluster_connections:0\r\n"
                  "maxclients:%d\r\n"
                  "client_recent_max_input_buffer:0\r\n"
                  "client_recent_max_output_buffer:0\r\n"
                  "blocked_clients:0\r\n"
                  "tracking_clients:0\r\n"
                  "clients_in_timeout_table:0\r\n",
                  (unsigned long long)GW_STAT_GET(connected_clients), gw_server.cfg->maxclients);
}

/* used_memory is this gateway's RSS; maxmemory is the pool-wide budget from the
 * superblock (0 = none), as CONFIG GET shows. mem_fragmentation_ratio keeps Redis's meaning
 * (memory the OS gave / memory in use) for the pool: bytes taken from the memory nodes over
 * bytes in live blocks (dm_pool_memory), so freed blocks waiting for reuse, abandoned
 * chunk tails and size-class rounding raise it. */
static void sec_memory(gw_conn_t *c, gw_buf_t *b)
{
    uint64_t rss = rss_bytes(), limit = 0, used = 0, taken = 0, live = 0;
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_ADMIN);
    dm_pool_usage(&ctx, &limit, &used);
    dm_pool_memory(&ctx, &taken, &live);
    uint64_t spare = 0, returned = 0;
    dm_pool_spare_board_bytes(&ctx, &spare);
    dm_pool_returned_bytes(&ctx, &returned);
    char h[32], hm[32];
    human_bytes(h, sizeof(h), rss);
    human_bytes(hm, sizeof(hm), limit);
    header(b, "Memory");
    gw_buf_printf(b,
                  "used_memory:%llu\r\n"
                  "used_memory_human:%s\r\n"
                  "used_memory_rss:%llu\r\n"
                  "used_memory_rss_human:%s\r\n"
                  "maxmemory:%llu\r\n"
                  "maxmemory_human:%s\r\n"
                  "maxmemory_policy:noeviction\r\n"
                  "mem_fragmentation_ratio:%.2f\r\n"
                  "mem_fragmentation_bytes:%lld\r\n"
                  "mem_allocator:libc\r\n"
                  "pool_taken_bytes:%llu\r\n"
                  "pool_live_bytes:%llu\r\n"
                  "pool_spare_board_bytes:%llu\r\n"
                  "pool_returned_bytes:%llu\r\n",
                  (unsigned long long)rss, h, (unsigned long long)rss, h, (unsigned long long)limit,
                  hm, live ? (double)taken / (double)live : 0.0, (long long)taken - (long long)live,
                  (unsigned long long)taken, (unsigned long long)live, (unsigned long long)spare,
                  (unsigned long long)returned);
}

static void sec_persistence(gw_buf_t *b)
{
    header(b, "Persistence");
    gw_buf_printf(b,
                  "loading:0\r\n"
                  "async_loading:0\r\n"
                  "rdb_changes_since_last_save:0\r\n"
                  "rdb_bgsave_in_progress:0\r\n"
                  "rdb_last_save_time:%llu\r\n"
                  "rdb_last_bgsave_status:ok\r\n"
                  "aof_enabled:0\r\n"
                  "aof_rewrite_in_progress:0\r\n"
                  "aof_last_bgrewrite_status:ok\r\n"
                  "aof_last_write_status:ok\r\n",
                  (unsigned long long)(gw_server.start_ms / 1000));
}

static void sec_stats(gw_buf_t *b)
{
    header(b, "Stats");
    gw_buf_printf(b,
                  "total_connections_received:%llu\r\n"
                  "total_commands_processed:%llu\r\n"
                  "instantaneous_ops_per_sec:%llu\r\n"
                  "total_net_input_bytes:%llu\r\n"
                  "total_net_output_bytes:%llu\r\n"
                  "instantaneous_input_kbps:0.00\r\n"
                  "instantaneous_output_kbps:0.00\r\n"
                  "rejected_connections:%llu\r\n"
                  "expired_keys:%llu\r\n"
                  "evicted_keys:0\r\n"
                  "keyspace_hits:%llu\r\n"
                  "keyspace_misses:%llu\r\n"
                  "pubsub_channels:0\r\n"
                  "pubsub_patterns:0\r\n"
                  "total_error_replies:%llu\r\n"
                  "client_query_buffer_limit_disconnections:%llu\r\n"
                  "client_output_buffer_limit_disconnections:%llu\r\n"
                  "evicted_clients:%llu\r\n"
                  "client_oom_disconnections:%llu\r\n"
                  "total_reads_processed:%llu\r\n"
                  "total_writes_processed:%llu\r\n",
                  (unsigned long long)GW_STAT_GET(total_connections_received),
                  (unsigned long long)GW_STAT_GET(total_commands_processed),
                  (unsigned long long)__atomic_load_n(&gw_server.ops_per_sec, __ATOMIC_RELAXED),
                  (unsigned long long)GW_STAT_GET(total_net_input_bytes),
                  (unsigned long long)GW_STAT_GET(total_net_output_bytes),
                  (unsigned long long)GW_STAT_GET(rejected_connections),
                  (unsigned long long)GW_STAT_GET(expired_keys),
                  (unsigned long long)GW_STAT_GET(keyspace_hits),
                  (unsigned long long)GW_STAT_GET(keyspace_misses),
                  (unsigned long long)GW_STAT_GET(total_error_replies),
                  (unsigned long long)GW_STAT_GET(client_query_buffer_limit_disconnections),
                  (unsigned long long)GW_STAT_GET(client_output_buffer_limit_disconnections),
                  (unsigned long long)GW_STAT_GET(evicted_clients),
                  (unsigned long long)GW_STAT_GET(client_oom_disconnections),
                  (unsigned long long)GW_STAT_GET(total_reads_processed),
                  (unsigned long long)GW_STAT_GET(total_writes_processed));
}

static void sec_replication(gw_buf_t *b)
{
    header(b, "Replication");
    gw_buf_printf(b,
                  "role:master\r\n"
                  "connected_slaves:0\r\n"
                  "master_failover_state:no-failover\r\n"
                  "master_replid:%s\r\n"
                  "master_replid2:0000000000000000000000000000000000000000\r\n"
                  "master_repl_offset:0\r\n"
                  "second_repl_offset:-1\r\n"
                  "repl_backlog_active:0\r\n",
                  gw_server.run_id);
}

static void sec_cpu(gw_buf_t *b)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    header(b, "CPU");
    gw_buf_printf(b,
                  "used_cpu_sys:%ld.%06ld\r\n"
                  "used_cpu_user:%ld.%06ld\r\n",
                  (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec, (long)ru.ru_utime.tv_sec,
                  (long)ru.ru_utime.tv_usec);
}

static void sec_keyspace(gw_conn_t *c, gw_buf_t *b)
{
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SCAN);
    int64_t n = dm_kv_dbsize(&ctx);
    dm_stats_op(DM_CLS_SCAN);
    header(b, "Keyspace");
    if (n > 0) gw_buf_printf(b, "db0:keys=%lld,expires=0,avg_ttl=0\r\n", (long long)n);
}

/* One index engine's statistics, as it names them (dmkv/index.h). */
static void index_stats(gw_buf_t *b, size_t (*stats)(dm_index_stat_t *))
{
    dm_index_stat_t st[DM_INDEX_STATS_MAX];
    size_t n = stats(st);
    for (size_t i = 0; i < n; i++)
        if (st[i].decimals)
            gw_buf_printf(b, "%s:%.*f\r\n", st[i].name, st[i].decimals, st[i].d);
        else
            gw_buf_printf(b, "%s:%llu\r\n", st[i].name, (unsigned long long)st[i].u);
}

static void sec_dmkv(gw_buf_t *b)
{
    header(b, "dmkv");
    /* Commands still running, this INFO not counted: also those whose client gave up and
     * left (a test waits for 0 before it judges the end state). */
    uint64_t running = 0;
    for (int t = 0; t < gw_server.nthreads; t++)
        running += __atomic_load_n(&gw_server.threads[t].commands_running, __ATOMIC_RELAXED);
    gw_buf_printf(b, "commands_in_progress:%llu\r\n",
                  (unsigned long long)(running ? running - 1 : 0));
    /* Coroutines parked past GW_STALL_MS, each logged once (server/watchdog.h). */
    gw_buf_printf(b, "stalled_coroutines:%llu\r\n",
                  (unsigned long long)GW_STAT_GET(stalled_coroutines));
    gw_buf_printf(b, "long_running_commands:%llu\r\n",
                  (unsigned long long)GW_STAT_GET(long_running_commands));
    for (int i = 0; i < gw_server.cfg->nmemnodes; i++) {
        uint64_t msgs, verbs;
        dm_conn_node_stats((unsigned)i, &msgs, &verbs);
        double up_s = (double)(dm_now_us() - gw_server.start_us) / 1e6;
        gw_buf_printf(b,
                      "memnode%d:%s\r\nmemnode%d_messages:%llu\r\nmemnode%d_verbs:%llu\r\n"
                      "memnode%d_messages_per_sec:%.0f\r\nmemnode%d_verbs_per_message:%.2f\r\n",
                      i, gw_server.cfg->memnodes[i], i, (unsigned long long)msgs, i,
                      (unsigned long long)verbs, i, up_s > 0 ? (double)msgs / up_s : 0.0, i,
                      msgs ? (double)verbs / (double)msgs : 0.0);
    }
    dm_rdma_counters_t rc;
    dm_rdma_counters_get(&rc);
    if (rc.post_send_calls) /* rdma memory nodes (dmcore/transport/rdma.c) */
        gw_buf_printf(b,
                      "rdma_doorbells:%llu\r\nrdma_work_requests:%llu\r\n"
                      "rdma_connection_failures:%llu\r\n",
                      (unsigned long long)rc.post_send_calls, (unsigned long long)rc.wrs_posted,
                      (unsigned long long)rc.conn_failures);
    gw_buf_printf(b, "point_index:%s\r\nrange_index:%s\r\n", dm_kv_point_index()->engine.name,
                  dm_kv_range_index()->engine.name);
    index_stats(b, dm_kv_point_index()->stats);
    uint64_t chained, chain_skips, early, wounds, late, breaks;
    dm_chain_stats(&chained, &chain_skips);
    dm_conn_late_stats(&late, &breaks);
    dm_coro_early_stats(&early, &wounds);
    gw_buf_printf(b,
                  "chained_commits:%llu\r\nchained_commits_skipped:%llu\r\n"
                  "lease_batches_refused:%llu\r\nlease_chain_breaks:%llu\r\n"
                  "lease_turns_given:%llu\r\n"
                  "early_leaf_locks:%llu\r\nearly_leaf_lock_wounds:%llu\r\n"
                  "early_leaf_lock_yields:%llu\r\nsets_locked_first:%llu\r\n"
                  "hybrid_repairs:%llu\r\nbatches_reposted:%llu\r\n",
                  (unsigned long long)chained, (unsigned long long)chain_skips,
                  (unsigned long long)late, (unsigned long long)breaks,
                  (unsigned long long)dm_lease_turns_given(), (unsigned long long)early,
                  (unsigned long long)wounds, (unsigned long long)dm_kv_early_yields(),
                  (unsigned long long)dm_kv_lock_first(), (unsigned long long)dm_kv_repairs(),
                  (unsigned long long)dm_post_retries());
    dm_clock_status_t cs;
    dm_clock_status(&cs);
    gw_buf_printf(b,
                  "clock_peers:%d\r\nclock_far_peers:%d\r\nclock_offset_min_ms:%lld\r\n"
                  "clock_offset_max_ms:%lld\r\nclock_skewed:%d\r\nmax_clock_skew_ms:%u\r\n"
                  "clock_steps:%llu\r\n",
                  cs.peers, cs.far_peers, (long long)cs.lo_ms, (long long)cs.hi_ms, cs.skewed,
                  dm_clock_bound_ms(), (unsigned long long)cs.steps);
    gw_dead_repair_stats_t dr;
    gw_dead_repair_stats(&dr);
    gw_buf_printf(b,
                  "dead_gateways_found:%llu\r\ndead_gateway_repairs:%llu\r\n"
                  "dead_gateway_repair_running:%d\r\n"
                  "dead_gateway_repairs_failed:%llu\r\nkey_count_repairs:%llu\r\n"
                  "key_count_repaired_by:%lld\r\nmemnode_redials:%llu\r\n"
                  "redial_recounts:%llu\r\n",
                  (unsigned long long)dr.dead_found, (unsigned long long)dr.repairs_done,
                  dr.running, (unsigned long long)dr.repairs_failed,
                  (unsigned long long)dr.count_fixed, (long long)dr.count_drift,
                  (unsigned long long)dm_pool_redials(), (unsigned long long)dr.redial_recounts);
    dm_alloc_tail_stats_t ts;
    dm_alloc_tail_stats(&ts);
    uint64_t returned, taken_back;
    dm_alloc_returned_stats(&returned, &taken_back);
    gw_buf_printf(
        b,
        "chunk_tails_adopted:%llu\r\nchunk_tail_bytes_adopted:%llu\r\n"
        "chunk_tail_bytes_spare:%llu\r\nfree_lists_adopted:%llu\r\n"
        "free_list_bytes_adopted:%llu\r\nchunk_tails_from_spare_board:%llu\r\n"
        "allocator_free_list_bytes:%llu\r\nallocator_full_pool_waits:%llu\r\n"
        "allocator_blocks_returned:%llu\r\nallocator_blocks_taken_back:%llu\r\n"
        "free_logs_adopted:%llu\r\nfree_log_bytes_adopted:%llu\r\n"
        "free_log_early_bytes_adopted:%llu\r\nallocator_claims:%llu\r\n"
        "allocator_claim_waits:%llu\r\nallocator_claimed_ahead_bytes:%llu\r\n"
        "allocator_unlogged_free_bytes:%llu\r\n"
        "allocator_region_bytes:%llu\r\nallocator_free_log_bytes:%llu\r\n"
        "allocator_reserve_trims:%llu\r\nallocator_freed_bytes:%llu\r\n",
        (unsigned long long)ts.regions_adopted, (unsigned long long)ts.bytes_adopted,
        (unsigned long long)ts.spare_bytes, (unsigned long long)ts.handoffs_adopted,
        (unsigned long long)ts.handoff_bytes_adopted, (unsigned long long)ts.board_taken,
        (unsigned long long)dm_alloc_listed_bytes(), (unsigned long long)dm_alloc_oom_waits(),
        (unsigned long long)returned, (unsigned long long)taken_back,
        (unsigned long long)ts.free_logs_adopted, (unsigned long long)ts.free_log_bytes_adopted,
        (unsigned long long)ts.free_log_early_bytes, (unsigned long long)dm_alloc_claims(),
        (unsigned long long)dm_alloc_claim_waits(),
        (unsigned long long)dm_alloc_claimed_ahead_bytes(),
        (unsigned long long)dm_alloc_unlogged_free_bytes(),
        (unsigned long long)dm_alloc_region_bytes(), (unsigned long long)dm_alloc_free_log_bytes(),
        (unsigned long long)dm_alloc_reserve_trims(), (unsigned long long)dm_alloc_freed_bytes());
    index_stats(b, dm_kv_range_index()->stats);
    for (int k = 0; k < DM_CLS_COUNT; k++) {
        dm_cls_stats_t s;
        dm_stats_get((dm_cls_t)k, &s);
        const char *n = dm_cls_name((dm_cls_t)k);
        double ops = s.ops ? (double)s.ops : 1.0;
        uint64_t bytes = s.bytes_read + s.bytes_written;
        gw_buf_printf(b,
                      "%s_ops:%llu\r\n"
                      "%s_rtts_per_op:%.2f\r\n"
                      "%s_verbs_per_op:%.2f\r\n"
                      "%s_bytes_per_op:%.2f\r\n"
                      "%s_rtts:%llu\r\n"
                      "%s_async_batches:%llu\r\n"
                      "%s_verbs:%llu\r\n"
                      "%s_bytes_read:%llu\r\n"
                      "%s_bytes_written:%llu\r\n",
                      n, (unsigned long long)s.ops, n, s.ops ? s.rtts / ops : 0.0, n,
                      s.ops ? s.verbs / ops : 0.0, n, s.ops ? bytes / ops : 0.0, n,
                      (unsigned long long)s.rtts, n, (unsigned long long)s.async_batches, n,
                      (unsigned long long)s.verbs, n, (unsigned long long)s.bytes_read, n,
                      (unsigned long long)s.bytes_written);
    }
}

void gw_info_generate(gw_conn_t *c, int nsec, char **sections, gw_buf_t *out)
{
    unsigned m = pick_sections(nsec, sections);
    if (m & S_SERVER) sec_server(out);
    if (m & S_CLIENTS) sec_clients(out);
    if (m & S_MEMORY) sec_memory(c, out);
    if (m & S_PERSISTENCE) sec_persistence(out);
    if (m & S_STATS) sec_stats(out);
    if (m & S_REPLICATION) sec_replication(out);
    if (m & S_CPU) sec_cpu(out);
    if (m & S_COMMANDSTATS) {
        header(out, "Commandstats");
        gw_cmdstats_info_commands(out);
    }
    if (m & S_ERRORSTATS) {
        header(out, "Errorstats");
        gw_cmdstats_info_errors(out);
    }
    if (m & S_LATENCYSTATS) {
        header(out, "Latencystats");
        gw_cmdstats_info_latency(out);
    }
    if (m & S_KEYSPACE) sec_keyspace(c, out);
    if (m & S_DMKV) sec_dmkv(out);
}
