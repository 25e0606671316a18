/* Leases on remote lock words that no clock but the observer's own decides (docs/leases.md).
 *
 * A lock word names its holding by a lease token: a random 31-bit value written with every
 * acquisition (never a timestamp), so one holding never looks like another. The holder
 * times its hold on its monotonic clock from just BEFORE it posted the acquiring CAS; a
 * waiter times a holding from the first time it READ that exact word, on its own monotonic
 * clock. The CAS executed before the waiter's read, so the waiter's start is never earlier
 * than the holder's, whatever the wall clocks say: a holder that stops using the lock
 * within hold_ms is never overtaken by a waiter that waits lease_ms > hold_ms.
 *
 * Observations live in a per-thread hash table that grows: an observation stays while its
 * word is polled (a waiter's clock is never reset by another word), and one not polled for
 * 10 s is dropped when the table fills (pool/lease.c). */
#ifndef DMKV_LEASE_H
#define DMKV_LEASE_H

#include <stdint.h>

#include "dmkv/gaddr.h"

/* A fresh lease token, 31 bits, nonzero: this thread's holder id (dm_holder_id,
 * dmkv/transport.h) in bits 15..30, so that a taker knows whose connections to fence
 * (dmkv/fence.h), and 15 random bits: a holder that let go and took the lock again between
 * two reads of a waiter draws the same token 1 time in 2^15 (and must leave the vacancy
 * bits as they were) to look like one long holding, which a waiter takes over only if every
 * read of a whole lease saw that word. Thread-safe (per-thread generator). */
#define DM_LEASE_RANDOM_BITS 15
uint32_t dm_lease_token(void);

/* The holder id in a lock word whose bits 1..31 are a lease token (0 = none). */
static inline uint16_t dm_lease_holder(uint64_t word)
{
    return (uint16_t)(((word >> 1) & 0x7fffffffu) >> DM_LEASE_RANDOM_BITS);
}

/* Note that the lock word at addr read as word (held) just now. Returns how long, in
 * microseconds of this thread's monotonic clock, this thread has seen exactly that word
 * there (0 on first sight or after the word changed). */
uint64_t dm_lease_observed_us(dm_gaddr_t addr, uint64_t word);

/* Forget the observation of addr (after taking the lock over or seeing it free). */
void dm_lease_forget(dm_gaddr_t addr);

#endif
