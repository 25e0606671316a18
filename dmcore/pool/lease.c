/* Lease tokens and waiter-side lease observation (dmkv/lease.h). */
#include "dmkv/lease.h"

#include "dmkv/rand.h"
#include "dmkv/transport.h"
#include "dmkv/worker.h"

#define OBS_SLOTS 1024u

typedef struct obs {
    dm_gaddr_t addr;
    uint64_t word;
    uint64_t first_us;
} obs_t;

static _Thread_local obs_t table[OBS_SLOTS];
uint32_t dm_lease_token(void)
{
    uint32_t r = (uint32_t)(dm_rand64() >> 40) & ((1u << DM_LEASE_RANDOM_BITS) - 1);
    return (uint32_t)dm_holder_id() << DM_LEASE_RANDOM_BITS | r; /* the id is nonzero */
}

static obs_t *slot_of(dm_gaddr_t addr)
{
    return &table[(addr >> 3) * 0x9e3779b97f4a7c15ull >> 54];
}

uint64_t dm_lease_observed_us(dm_gaddr_t addr, uint64_t word)
{
    obs_t *o = slot_of(addr);
    uint64_t now = dm_now_us();
    if (o->addr != addr || o->word != word || !o->first_us) {
        o->addr = addr;
        o->word = word;
        o->first_us = now;
        return 0;
    }
    return now - o->first_us;
}

void dm_lease_forget(dm_gaddr_t addr)
{
    obs_t *o = slot_of(addr);
    if (o->addr == addr) o->first_us = 0;
}
