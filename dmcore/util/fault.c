/* Test-only fault points (dmkv/fault.h). */
#include "dmkv/fault.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmkv/log.h"
#include "dmkv/rand.h"

static const char *const site_names[DM_FAULT_NSITES] = {
    "locked", "inserted",    "taken_back", "propagate", "posted", "uncounted",
    "wire",   "commit_miss", "split",      "late",      "cron",   "clock"};

typedef struct {
    uint32_t ms, one_in;
    uint32_t times; /* stalls allowed, 0: no limit */
    uint32_t fired; /* atomic */
} stall_t;

static stall_t stalls[DM_FAULT_NSITES];

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void parse_spec(const char *spec)
{
    memset(stalls, 0, sizeof(stalls));
    while (spec && *spec) {
        const char *end = strchr(spec, ',');
        size_t n = end ? (size_t)(end - spec) : strlen(spec);
        for (int s = 0; s < DM_FAULT_NSITES; s++) {
            size_t sl = strlen(site_names[s]);
            unsigned ms, one_in, times = 0;
            if (n > sl && !strncmp(spec, site_names[s], sl) && spec[sl] == ':' &&
                sscanf(spec + sl + 1, "%u:%u:%u", &ms, &one_in, &times) >= 2 && one_in > 0) {
                stalls[s].ms = ms;
                stalls[s].one_in = one_in;
                stalls[s].times = times;
                dm_log(DM_LOG_WARNING, "fault: stalling %u ms at '%s', 1 in %u (test mode)", ms,
                       site_names[s], one_in);
            }
        }
        spec = end ? end + 1 : NULL;
    }
}

static void parse_env(void)
{
    parse_spec(getenv("DMKV_FAULT_STALL"));
}

void dm_fault_configure(const char *spec)
{
    pthread_once(&env_once, parse_env); /* a later first point must not undo this */
    parse_spec(spec);
}

int dm_fault_armed(dm_fault_site_t site)
{
    pthread_once(&env_once, parse_env);
    return stalls[site].ms != 0;
}

uint32_t dm_fault_delay_ms(dm_fault_site_t site)
{
    pthread_once(&env_once, parse_env);
    const stall_t *s = &stalls[site];
    if (!s->ms || (dm_rand64() >> 32) % s->one_in) return 0;
    uint32_t fired = __atomic_fetch_add(&stalls[site].fired, 1, __ATOMIC_RELAXED);
    if (s->times && fired >= s->times) return 0;
    dm_log(DM_LOG_NOTICE, "fault: stalling %u ms at '%s'", s->ms, site_names[site]);
    return s->ms;
}

uint32_t dm_fault_fired(dm_fault_site_t site)
{
    uint32_t n = __atomic_load_n(&stalls[site].fired, __ATOMIC_RELAXED);
    return stalls[site].times && n > stalls[site].times ? stalls[site].times : n;
}
