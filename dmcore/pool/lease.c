/* Lease tokens and waiter-side lease observation (dmkv/lease.h). */
#include "dmkv/lease.h"

#include <pthread.h>
#include <stdlib.h>

#include "dmkv/rand.h"
#include "dmkv/transport.h"
#include "dmkv/worker.h"

/* Observations: a per-thread open-addressing table (linear probing) that grows, so that no
 * waiter's clock is ever reset by another waiter's word. The direct-mapped table it replaced
 * (1,024 slots) let two waiters of one thread on two words of one slot evict each other's
 * observation at every poll: neither saw its word unchanged for a lease, neither took its
 * dead holder's lock over, and their commands (and every command queued behind them) ran
 * for minutes (test_lease_lock test_colliding_waiters). An entry not observed for
 * OBS_STALE_US is dropped when the table fills: no waiter polls that rarely, and one that
 * did would only observe its word again from scratch. */
#define OBS_MIN 1024u
#define OBS_MAX (1u << 19)       /* slots: 16 MiB, 262,144 words observed within 10 s */
#define OBS_STALE_US 10000000ull /* 10 s: more than any lease, 3 s */
#define OBS_CROWD_US 1000000ull  /* at OBS_MAX: entries not observed for 1 s go */

typedef struct obs {
    dm_gaddr_t addr; /* 0: empty */
    uint64_t word;
    uint64_t first_us; /* 0: forgotten */
    uint64_t last_us;
} obs_t;

static _Thread_local struct {
    obs_t *v;
    uint32_t cap, n; /* cap a power of two; n entries in use */
} obs;

/* The table is freed when its thread exits (a pthread key's destructor). */
static pthread_key_t obs_key;
static pthread_once_t obs_once = PTHREAD_ONCE_INIT;

static void obs_key_make(void)
{
    pthread_key_create(&obs_key, free);
}

uint32_t dm_lease_token(void)
{
    uint32_t r = (uint32_t)(dm_rand64() >> 40) & ((1u << DM_LEASE_RANDOM_BITS) - 1);
    return (uint32_t)dm_holder_id() << DM_LEASE_RANDOM_BITS | r; /* the id is nonzero */
}

static uint32_t home(dm_gaddr_t addr, uint32_t cap)
{
    return (uint32_t)((addr >> 3) * 0x9e3779b97f4a7c15ull >> 32) & (cap - 1);
}

/* addr's entry, or the empty one where it would go (NULL: no table). */
static obs_t *find(dm_gaddr_t addr)
{
    if (!obs.v) return NULL;
    for (uint32_t i = home(addr, obs.cap);; i = (i + 1) & (obs.cap - 1))
        if (obs.v[i].addr == addr || !obs.v[i].addr) return &obs.v[i];
}

/* Rebuild into cap slots, keeping the entries observed since `since`. 0, or -1 out of memory
 * (the table unchanged). */
static int rebuild(uint32_t cap, uint64_t since)
{
    obs_t *old = obs.v;
    uint32_t ocap = obs.cap;
    obs.v = calloc(cap, sizeof(*obs.v));
    if (!obs.v) {
        obs.v = old;
        return -1;
    }
    obs.cap = cap, obs.n = 0;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i].addr && old[i].last_us >= since) {
            *find(old[i].addr) = old[i];
            obs.n++;
        }
    free(old);
    pthread_once(&obs_once, obs_key_make);
    pthread_setspecific(obs_key, obs.v);
    return 0;
}

/* Room for one more entry: 0, or -1 (out of memory, or OBS_MAX slots of words observed
 * within the last second). */
static int make_room(uint64_t now)
{
    if (obs.v && 2 * (obs.n + 1) <= obs.cap) return 0;
    uint64_t since = now > OBS_STALE_US ? now - OBS_STALE_US : 0;
    if (obs.v && rebuild(obs.cap, since) == 0 && 2 * (obs.n + 1) <= obs.cap) return 0;
    uint32_t cap = obs.cap ? obs.cap : OBS_MIN;
    while (2 * (obs.n + 1) > cap && cap < OBS_MAX)
        cap *= 2;
    if (2 * (obs.n + 1) > cap) /* crowded: keep the words of the last second only */
        since = now > OBS_CROWD_US ? now - OBS_CROWD_US : 0;
    if (rebuild(cap, since)) return -1;
    return 2 * (obs.n + 1) <= obs.cap ? 0 : -1;
}

uint64_t dm_lease_observed_us(dm_gaddr_t addr, uint64_t word)
{
    uint64_t now = dm_now_us();
    obs_t *o = find(addr);
    if (!o || !o->addr) {             /* a new entry */
        if (make_room(now)) return 0; /* observed from scratch each time */
        o = find(addr);
        obs.n++;
    }
    o->last_us = now;
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
    obs_t *o = find(addr);
    if (o && o->addr == addr) o->first_us = 0;
}
