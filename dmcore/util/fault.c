/* Test-only fault points (dmkv/fault.h). */
#include "dmkv/fault.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/log.h"

static const char *const site_names[DM_FAULT_NSITES] = {"locked", "inserted"};

typedef struct {
    uint32_t ms, one_in;
} stall_t;

static stall_t stalls[DM_FAULT_NSITES];
static atomic_int parsed; /* 0 not yet, 1 parsing, 2 done */
static atomic_uint_fast64_t rng = 0x9E3779B97F4A7C15ull;

static void parse_spec(const char *spec)
{
    memset(stalls, 0, sizeof(stalls));
    while (spec && *spec) {
        const char *end = strchr(spec, ',');
        size_t n = end ? (size_t)(end - spec) : strlen(spec);
        for (int s = 0; s < DM_FAULT_NSITES; s++) {
            size_t sl = strlen(site_names[s]);
            unsigned ms, one_in;
            if (n > sl && !strncmp(spec, site_names[s], sl) && spec[sl] == ':' &&
                sscanf(spec + sl + 1, "%u:%u", &ms, &one_in) == 2 && one_in > 0) {
                stalls[s].ms = ms;
                stalls[s].one_in = one_in;
                dm_log(DM_LOG_WARNING, "fault: stalling %u ms at '%s', 1 in %u (test mode)", ms,
                       site_names[s], one_in);
            }
        }
        spec = end ? end + 1 : NULL;
    }
}

static void parse_env(void)
{
    int expect = 0;
    if (!atomic_compare_exchange_strong(&parsed, &expect, 1)) {
        while (atomic_load(&parsed) != 2) {
        }
        return;
    }
    parse_spec(getenv("DMKV_FAULT_STALL"));
    atomic_store(&parsed, 2);
}

void dm_fault_configure(const char *spec)
{
    atomic_store(&parsed, 1);
    parse_spec(spec);
    atomic_store(&parsed, 2);
}

int dm_fault_point(dm_ctx_t *ctx, dm_fault_site_t site)
{
    if (atomic_load_explicit(&parsed, memory_order_acquire) != 2) parse_env();
    const stall_t *s = &stalls[site];
    if (!s->ms) return 0;
    /* splitmix64 step on a shared counter: cheap, thread-safe, good enough for a coin. */
    uint64_t z = atomic_fetch_add(&rng, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    if (z % s->one_in) return 0;
    dm_log(DM_LOG_NOTICE, "fault: stalling %u ms at '%s'", s->ms, site_names[site]);
    dm_ctx_sleep(ctx, s->ms * 1000u);
    return 1;
}
