/* SCAN's guarantee judged from a history (issue 10): a full SCAN must return every key
 * present for the whole scan and no key absent for the whole scan (Redis, SCAN
 * "Scan guarantees"). Keys changed during a scan may go either way.
 *
 * The recorder logs, per key, each command's interval [t0, t1] (t1 = SC_UNKNOWN when no
 * reply came: it may act at any time after t0) and what it can do or has seen:
 *   - SC_MAKES / SC_DELETES: may make the key present (SET, INCR, APPEND, GETSET) or absent
 *     (DEL, GETDEL), whatever it answered;
 *   - SC_SAW_PRESENT / SC_SAW_ABSENT: its reply proves the key was present (absent) at some
 *     instant of its interval (GET answered a value, SET answered OK, ...).
 * A key is proven present throughout a scan [s0, s1] when some SAW_PRESENT operation W
 * returned before s0 and every DELETES operation D ended before W began or began after s1
 * (so nothing could have removed it between W's instant and s1); absent symmetrically.
 * Only proven cases are judged: the check never accuses a correct store.
 *
 * Thread-safe recording; sc_check is O((ops + scans * keys) log ops). */
#ifndef DMKV_SCANCHECK_H
#define DMKV_SCANCHECK_H

#include <stdint.h>
#include <stdio.h>

#define SC_UNKNOWN UINT64_MAX

#define SC_MAKES 1u
#define SC_DELETES 2u
#define SC_SAW_PRESENT 4u
#define SC_SAW_ABSENT 8u

typedef struct sc_log sc_log_t;

/* A log for keys 0..nkeys-1. NULL when out of memory. */
sc_log_t *sc_log_new(unsigned nkeys);
void sc_log_free(sc_log_t *l);

/* One command on key: what (SC_* bits), interval in any monotonic unit. */
void sc_log_op(sc_log_t *l, unsigned key, unsigned what, uint64_t t0, uint64_t t1);

/* One completed full scan over [t0, t1]; returned[key] != 0 for each key it returned. */
void sc_log_scan(sc_log_t *l, uint64_t t0, uint64_t t1, const unsigned char *returned);

/* Judge every scan. Each violation is described on out (when not NULL) with the key's
 * number; returns the number of violations. Scans proven: *judged (may be NULL). */
size_t sc_check(sc_log_t *l, FILE *out, size_t *judged);

#endif
