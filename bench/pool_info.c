/* Reads a dmkv pool's own accounting, one-sidedly like a gateway: bytes taken from each
 * memory node, the pool-wide chunk usage, key count, RACE global depth and load factor,
 * and, by walking every node's chunk headers, the bytes each owner (gateway process) took:
 * an owner that no running gateway logged at start is a dead gateway, and its chunks are
 * the ones to reclaim (their live blocks are the ones RACE slots still point to).
 * Usage: dmkv-pool-info URI [URI...]   (the gateway's --memnode list, in the same order) */
#include <stdio.h>
#include <stdlib.h>

#include "dmkv/alloc.h"
#include "dmkv/batch.h"
#include "dmkv/kv.h"
#include "dmkv/race.h"
#include "dmkv/superblock.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s URI [URI...]\n", argv[0]);
        return 2;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    dm_worker_t *w = dm_kv_worker_create(&loop, (const char *const *)argv + 1, (unsigned)argc - 1,
                                         err, sizeof(err));
    if (!w) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    uint64_t allocated = 0;
    for (int i = 0; i < argc - 1; i++) {
        uint64_t ptr = 0;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make((unsigned)i, DM_SB_OFF(alloc_ptr)), &ptr, 8);
        if (dm_batch_exec(&ctx, &b) == 0) {
            printf("node%d_allocated_bytes %llu\n", i, (unsigned long long)ptr);
            allocated += ptr;
        }
    }
    /* Walk the chunk headers of every node. */
    enum { MAX_OWNERS = 64 };
    uint64_t owners[MAX_OWNERS] = {0}, owner_bytes[MAX_OWNERS] = {0}, chunks = 0;
    for (int i = 0; i < argc - 1; i++) {
        uint64_t end = 0, off = DM_SB_FIRST_CHUNK;
        dm_batch_t b;
        dm_batch_init(&b);
        dm_batch_read(&b, dm_gaddr_make((unsigned)i, DM_SB_OFF(alloc_ptr)), &end, 8);
        dm_batch_exec(&ctx, &b);
        if (end > w->conns[i]->region_size) end = w->conns[i]->region_size;
        while (off + sizeof(dm_chunk_hdr_t) <= end) {
            dm_chunk_hdr_t h;
            dm_batch_init(&b);
            dm_batch_read(&b, dm_gaddr_make((unsigned)i, off), &h, sizeof(h));
            if (dm_batch_exec(&ctx, &b) || h.magic != DM_CHUNK_MAGIC || h.bytes == 0) {
                printf("node%d: no chunk header at offset %llu (range being taken?)\n", i,
                       (unsigned long long)off);
                break;
            }
            int k = 0;
            while (k < MAX_OWNERS - 1 && owners[k] && owners[k] != h.owner)
                k++;
            owners[k] = h.owner;
            owner_bytes[k] += h.bytes;
            chunks++;
            off += h.bytes;
        }
    }
    printf("chunks %llu\n", (unsigned long long)chunks);
    for (int k = 0; k < MAX_OWNERS && owners[k]; k++)
        printf("owner %016llx bytes %llu\n", (unsigned long long)owners[k],
               (unsigned long long)owner_bytes[k]);
    uint64_t maxmem = 0, used = 0, slots_used = 0, slots = 0;
    dm_pool_usage(&ctx, &maxmem, &used);
    dm_race_load(&ctx, &slots_used, &slots);
    printf("pool_allocated_bytes %llu\n", (unsigned long long)allocated);
    printf("pool_chunk_bytes %llu\n", (unsigned long long)used);
    printf("keys %lld\n", (long long)dm_kv_dbsize(&ctx));
    printf("race_global_depth %u\n", dm_race_global_depth(w->race));
    printf("race_slots %llu\nrace_slots_used %llu\n", (unsigned long long)slots,
           (unsigned long long)slots_used);
    printf("race_load_factor %.3f\n", slots ? (double)slots_used / (double)slots : 0.0);
    dm_worker_destroy(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return 0;
}
