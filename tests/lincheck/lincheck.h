/* A linearizability checker for histories of Redis string commands (issue 10).
 *
 * Each operation acts on one key, whose state is "absent" or a byte string; the model is
 * Redis 7's GET, SET [NX|XX] [GET], DEL, INCR, GETSET, GETDEL, APPEND. A history is
 * linearizable when every key's sub-history is (linearizability is local: Herlihy & Wing
 * 1990), so keys are checked one at a time, as Porcupine (Athalye, 2017) does. Per key the
 * search is Wing & Gong's (1993) with Lowe's memoization of (set of linearized operations,
 * state) ("Testing for linearizability", 2017).
 *
 * Outcomes. A definite reply constrains the search. An UNKNOWN outcome (timeout, lost
 * connection, killed gateway, or an error that does not say whether the write happened)
 * is an operation that may have taken effect at any instant after its invocation, or
 * never: its return time is +infinity and any output matches. The search tries definite
 * operations first and unknown ones after; a configuration is pruned when one with the
 * same definite operations and state but a subset of its unknown operations linearized was
 * seen (that one can do everything this one can); unknown operations with
 * indistinguishable effects are tried in invocation order only. Without these, a dozen
 * unknown writes pending at once left a key undecided (tests/lincheck/histories).
 *
 * Time ties: a call and a return at the same timestamp are treated as overlapping (the
 * call sorts first), which can only add linearizations: no false alarm from a coarse clock.
 *
 * Recording is thread-safe (one mutex per history). */
#ifndef DMKV_LINCHECK_H
#define DMKV_LINCHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    LC_GET,
    LC_SET,
    LC_DEL,
    LC_INCR,
    LC_GETSET,
    LC_GETDEL,
    LC_APPEND,
    LC_OP_COUNT
} lc_op_t;

/* SET flags. */
#define LC_NX 1u
#define LC_XX 2u
#define LC_GETOLD 4u /* SET ... GET: reply is the old value */

typedef enum {
    LC_R_UNKNOWN, /* no definite reply */
    LC_R_NIL,
    LC_R_OK,
    LC_R_STR,
    LC_R_INT,
    LC_R_NOTINT, /* INCR's "value is not an integer or out of range" */
} lc_kind_t;

typedef struct lc_result {
    lc_kind_t kind;
    const void *str; /* LC_R_STR */
    size_t len;
    long long num; /* LC_R_INT */
} lc_result_t;

typedef struct lc_history lc_history_t;

lc_history_t *lc_history_new(void);
void lc_history_free(lc_history_t *h);

/* Record an invocation at t_ns (any monotonic base, nanoseconds). arg: SET/GETSET/APPEND's
 * value (alen bytes), else NULL. Returns the operation's index for lc_return. Aborts when
 * out of memory. */
size_t lc_invoke(lc_history_t *h, int client, lc_op_t op, unsigned flags, const void *key,
                 size_t klen, const void *arg, size_t alen, uint64_t t_ns);

/* Record the reply of operation idx at t_ns. An operation never returned (or returned with
 * LC_R_UNKNOWN) is unknown. */
void lc_return(lc_history_t *h, size_t idx, const lc_result_t *r, uint64_t t_ns);

typedef struct lc_report {
    size_t keys, ops, unknown;
    size_t bad_keys;        /* keys whose history is not linearizable */
    size_t undecided_keys;  /* search bound hit */
    uint64_t steps;         /* search steps, all keys */
    char first_bad_key[80]; /* printable, truncated */
} lc_report_t;

/* Check every key. explain (may be NULL) gets, for each bad key, its operations and where
 * the search got stuck. max_steps bounds each key's search (0: LC_DEFAULT_MAX_STEPS). Returns 0
 * when all keys are linearizable, 1 when a key is not, 2 when none is bad but one was undecided. */
#define LC_DEFAULT_MAX_STEPS 50000000ull
int lc_check(lc_history_t *h, uint64_t max_steps, lc_report_t *rep, FILE *explain);

/* Text format, one operation per line:
 *   client op flags t_inv t_ret kind key arg result
 * op/kind as numbers, t_ret "-" when unknown, key/arg/result as hex bytes ("-" when empty
 * or absent), result of LC_R_INT as a decimal. Returns 0 or -1 (errno). */
int lc_history_write(lc_history_t *h, FILE *f);
/* Read a history written by lc_history_write; NULL with a message in err on bad input. */
lc_history_t *lc_history_read(FILE *f, char *err, size_t errlen);

/* Number of operations recorded. */
size_t lc_history_size(lc_history_t *h);

#endif
