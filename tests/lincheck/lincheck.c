/* Linearizability checker (lincheck.h): per-key Wing & Gong search with Lowe's memo. */
#include "lincheck.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define T_INF UINT64_MAX

typedef struct rec {
    int client;
    lc_op_t op;
    unsigned flags;
    uint8_t *key, *arg, *rstr;
    size_t klen, alen, rlen;
    uint64_t t_inv, t_ret;
    lc_kind_t kind;
    long long rnum;
} rec_t;

struct lc_history {
    pthread_mutex_t mu;
    rec_t *r;
    size_t n, cap;
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static uint8_t *dup_bytes(const void *p, size_t n)
{
    if (!p) return NULL;
    uint8_t *d = xmalloc(n + 1);
    memcpy(d, p, n);
    d[n] = 0;
    return d;
}

lc_history_t *lc_history_new(void)
{
    lc_history_t *h = calloc(1, sizeof(*h));
    if (!h) abort();
    pthread_mutex_init(&h->mu, NULL);
    return h;
}

void lc_history_free(lc_history_t *h)
{
    if (!h) return;
    for (size_t i = 0; i < h->n; i++) {
        free(h->r[i].key);
        free(h->r[i].arg);
        free(h->r[i].rstr);
    }
    free(h->r);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

size_t lc_history_size(lc_history_t *h)
{
    pthread_mutex_lock(&h->mu);
    size_t n = h->n;
    pthread_mutex_unlock(&h->mu);
    return n;
}

size_t lc_invoke(lc_history_t *h, int client, lc_op_t op, unsigned flags, const void *key,
                 size_t klen, const void *arg, size_t alen, uint64_t t_ns)
{
    rec_t r = {.client = client,
               .op = op,
               .flags = flags,
               .key = dup_bytes(key, klen),
               .klen = klen,
               .arg = dup_bytes(arg, alen),
               .alen = alen,
               .t_inv = t_ns,
               .t_ret = T_INF,
               .kind = LC_R_UNKNOWN};
    pthread_mutex_lock(&h->mu);
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        h->r = realloc(h->r, h->cap * sizeof(*h->r));
        if (!h->r) abort();
    }
    size_t idx = h->n++;
    h->r[idx] = r;
    pthread_mutex_unlock(&h->mu);
    return idx;
}

void lc_return(lc_history_t *h, size_t idx, const lc_result_t *res, uint64_t t_ns)
{
    uint8_t *s = res->kind == LC_R_STR ? dup_bytes(res->str ? res->str : "", res->len) : NULL;
    pthread_mutex_lock(&h->mu);
    rec_t *r = &h->r[idx];
    r->kind = res->kind;
    if (res->kind != LC_R_UNKNOWN) r->t_ret = t_ns;
    free(r->rstr);
    r->rstr = s;
    r->rlen = res->len;
    r->rnum = res->num;
    pthread_mutex_unlock(&h->mu);
}

/* ---- the model: interned states, 0 = absent ---- */

typedef struct states {
    uint8_t **v;
    size_t *len;
    size_t n, cap;
    uint32_t *tab; /* open addressing: state id + 1 */
    size_t tcap;
} states_t;

static uint64_t hash_bytes(const uint8_t *p, size_t n, uint64_t h)
{
    h ^= 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static void states_grow_tab(states_t *s)
{
    size_t nc = s->tcap ? 2 * s->tcap : 1024;
    uint32_t *nt = calloc(nc, sizeof(*nt));
    if (!nt) abort();
    for (size_t id = 1; id < s->n; id++) {
        size_t j = hash_bytes(s->v[id], s->len[id], 0) & (nc - 1);
        while (nt[j])
            j = (j + 1) & (nc - 1);
        nt[j] = (uint32_t)id + 1;
    }
    free(s->tab);
    s->tab = nt;
    s->tcap = nc;
}

/* State id of a present value. */
static uint32_t intern(states_t *s, const uint8_t *p, size_t n)
{
    if (!s->n) { /* id 0 = absent */
        s->cap = 64;
        s->v = xmalloc(s->cap * sizeof(*s->v));
        s->len = xmalloc(s->cap * sizeof(*s->len));
        s->v[0] = NULL;
        s->len[0] = 0;
        s->n = 1;
    }
    if (2 * s->n >= s->tcap) states_grow_tab(s);
    size_t j = hash_bytes(p, n, 0) & (s->tcap - 1);
    while (s->tab[j]) {
        uint32_t id = s->tab[j] - 1;
        if (s->len[id] == n && memcmp(s->v[id], p, n) == 0) return id;
        j = (j + 1) & (s->tcap - 1);
    }
    if (s->n == s->cap) {
        s->cap *= 2;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        s->len = realloc(s->len, s->cap * sizeof(*s->len));
        if (!s->v || !s->len) abort();
    }
    uint32_t id = (uint32_t)s->n++;
    s->v[id] = dup_bytes(p, n);
    s->len[id] = n;
    s->tab[j] = id + 1;
    return id;
}

static void states_free(states_t *s)
{
    for (size_t i = 1; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    free(s->len);
    free(s->tab);
}

/* Redis's string2ll for INCR: optional '-', digits, no leading zeros, no overflow. */
static int parse_ll(const uint8_t *p, size_t n, long long *out)
{
    if (n == 0 || n > 20) return 0;
    size_t i = 0;
    int neg = 0;
    if (p[0] == '-') {
        neg = 1;
        i = 1;
        if (n == 1) return 0;
    }
    if (p[i] == '0' && n > i + 1) return 0;
    unsigned long long v = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (ULLONG_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1) return 0;
        *out = v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)LLONG_MAX) return 0;
        *out = (long long)v;
    }
    return 1;
}

static int out_str(const rec_t *r, const states_t *s, uint32_t st)
{
    if (!st) return r->kind == LC_R_NIL;
    return r->kind == LC_R_STR && r->rlen == s->len[st] && memcmp(r->rstr, s->v[st], r->rlen) == 0;
}

/* Apply r to state st: 1 and *next when r's recorded output fits, else 0. */
static int step(states_t *s, const rec_t *r, uint32_t st, uint32_t *next)
{
    int any = r->kind == LC_R_UNKNOWN;
    *next = st;
    switch (r->op) {
    case LC_GET:
        return any || out_str(r, s, st);
    case LC_SET: {
        int ok = !((r->flags & LC_NX) && st) && !((r->flags & LC_XX) && !st);
        int fits = any || ((r->flags & LC_GETOLD) ? out_str(r, s, st)
                                                  : r->kind == (ok ? LC_R_OK : LC_R_NIL));
        if (fits && ok) *next = intern(s, r->arg, r->alen);
        return fits;
    }
    case LC_DEL:
        *next = 0;
        return any || (r->kind == LC_R_INT && r->rnum == (st ? 1 : 0));
    case LC_GETSET:
        if (!(any || out_str(r, s, st))) return 0;
        *next = intern(s, r->arg, r->alen);
        return 1;
    case LC_GETDEL:
        *next = 0;
        return any || out_str(r, s, st);
    case LC_APPEND: {
        size_t ol = st ? s->len[st] : 0;
        if (!(any || (r->kind == LC_R_INT && (size_t)r->rnum == ol + r->alen))) return 0;
        uint8_t *buf = xmalloc(ol + r->alen);
        if (ol) memcpy(buf, s->v[st], ol);
        if (r->alen) memcpy(buf + ol, r->arg, r->alen);
        *next = intern(s, buf, ol + r->alen);
        free(buf);
        return 1;
    }
    case LC_INCR: {
        long long v = 0;
        if (st && !parse_ll(s->v[st], s->len[st], &v)) return any || r->kind == LC_R_NOTINT;
        if (v == LLONG_MAX) return any || r->kind == LC_R_NOTINT;
        if (!(any || (r->kind == LC_R_INT && r->rnum == v + 1))) return 0;
        char buf[32];
        int n = snprintf(buf, sizeof(buf), "%lld", v + 1);
        *next = intern(s, (const uint8_t *)buf, (size_t)n);
        return 1;
    }
    default:
        return 0;
    }
}

/* ---- Wing & Gong over one key's operations ---- */

typedef struct node {
    struct node *prev, *next, *match; /* match: a call's return node */
    size_t op;                        /* index into the key's operation list */
    int is_call;
    uint64_t t;
} node_t;

static int ev_cmp(const void *a, const void *b)
{
    const node_t *x = *(node_t *const *)a, *y = *(node_t *const *)b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->is_call != y->is_call) return x->is_call ? -1 : 1; /* ties overlap */
    return x->op < y->op ? -1 : x->op > y->op;
}

static void lift(node_t *call)
{
    call->prev->next = call->next;
    if (call->next) call->next->prev = call->prev;
    node_t *ret = call->match;
    ret->prev->next = ret->next;
    if (ret->next) ret->next->prev = ret->prev;
}

static void unlift(node_t *call)
{
    node_t *ret = call->match;
    ret->prev->next = ret;
    if (ret->next) ret->next->prev = ret;
    call->prev->next = call;
    if (call->next) call->next->prev = call;
}

/* Memo of visited configurations (definite operations linearized, state, unknown
 * operations linearized). An unknown operation may take effect at any later instant or
 * never, so a configuration that linearized a subset of another's unknown operations (same
 * definite set, same state) can do everything the other can: when it was seen (failed or
 * on the search path), the other is pruned. Without this, every unknown write pending at
 * once multiplied the search by two (13 unknown writes on one key: undecided after 2e8
 * steps, the CI run of 2026-11-28); with it, an unknown write linearized where nobody reads
 * it is pruned as soon as a definite write overwrites it. */
typedef struct memo_entry {
    uint64_t hash; /* 0 = empty */
    uint64_t *bits;
    uint32_t state;
    uint32_t nmasks, capmasks;
    uint64_t *masks; /* unknown subsets seen, none a superset of another */
} memo_entry_t;

typedef struct memo {
    memo_entry_t *e;
    size_t cap, n, words;
} memo_t;

static uint64_t bits_hash(const uint64_t *b, size_t words, uint32_t st)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ st;
    for (size_t i = 0; i < words; i++)
        h = (h ^ b[i]) * 0xff51afd7ed558ccdull, h ^= h >> 32;
    return h ? h : 1;
}

static void memo_grow(memo_t *m)
{
    size_t nc = m->cap ? 2 * m->cap : 4096;
    memo_entry_t *ne = calloc(nc, sizeof(*ne));
    if (!ne) abort();
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].hash) continue;
        size_t j = m->e[i].hash & (nc - 1);
        while (ne[j].hash)
            j = (j + 1) & (nc - 1);
        ne[j] = m->e[i];
    }
    free(m->e);
    m->e = ne;
    m->cap = nc;
}

/* Add the configuration (b, st, unknown subset um); 0 when it, or one that linearized a
 * subset of um, was there already. */
static int memo_add(memo_t *m, const uint64_t *b, uint32_t st, uint64_t um)
{
    if (2 * (m->n + 1) > m->cap) memo_grow(m);
    uint64_t h = bits_hash(b, m->words, st);
    size_t j = h & (m->cap - 1);
    while (m->e[j].hash) {
        memo_entry_t *x = &m->e[j];
        if (x->hash == h && x->state == st && memcmp(x->bits, b, m->words * 8) == 0) {
            for (uint32_t i = 0; i < x->nmasks; i++)
                if (!(x->masks[i] & ~um)) return 0; /* a subset of um was seen */
            uint32_t k = 0;
            for (uint32_t i = 0; i < x->nmasks; i++) /* um dominates its supersets */
                if (um & ~x->masks[i]) x->masks[k++] = x->masks[i];
            x->nmasks = k;
            if (x->nmasks == x->capmasks) {
                x->capmasks = x->capmasks ? 2 * x->capmasks : 2;
                x->masks = realloc(x->masks, x->capmasks * sizeof(*x->masks));
                if (!x->masks) abort();
            }
            x->masks[x->nmasks++] = um;
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    memo_entry_t *x = &m->e[j];
    x->hash = h;
    x->bits = xmalloc(m->words * 8);
    memcpy(x->bits, b, m->words * 8);
    x->state = st;
    x->capmasks = 1;
    x->nmasks = 1;
    x->masks = xmalloc(sizeof(*x->masks));
    x->masks[0] = um;
    m->n++;
    return 1;
}

static void memo_free(memo_t *m)
{
    for (size_t i = 0; i < m->cap; i++) {
        free(m->e[i].bits);
        free(m->e[i].masks);
    }
    free(m->e);
}

static void print_bytes(FILE *f, const uint8_t *p, size_t n)
{
    fputc('\'', f);
    for (size_t i = 0; i < n && i < 48; i++)
        fputc(p[i] >= 32 && p[i] < 127 ? p[i] : '.', f);
    fputs(n > 48 ? "...'" : "'", f);
}

static const char *op_name[] = {"GET", "SET", "DEL", "INCR", "GETSET", "GETDEL", "APPEND"};

static void print_op(FILE *f, const rec_t *r, uint64_t t0)
{
    fprintf(f, "  c%-3d [%10.3f, ", r->client, (double)(r->t_inv - t0) / 1e6);
    if (r->t_ret == T_INF)
        fprintf(f, "      inf] ");
    else
        fprintf(f, "%10.3f] ", (double)(r->t_ret - t0) / 1e6);
    fprintf(f, "%s", op_name[r->op]);
    if (r->arg) fputc(' ', f), print_bytes(f, r->arg, r->alen);
    if (r->flags & LC_NX) fputs(" NX", f);
    if (r->flags & LC_XX) fputs(" XX", f);
    if (r->flags & LC_GETOLD) fputs(" GET", f);
    fputs(" -> ", f);
    switch (r->kind) {
    case LC_R_UNKNOWN:
        fputs("?", f);
        break;
    case LC_R_NIL:
        fputs("nil", f);
        break;
    case LC_R_OK:
        fputs("OK", f);
        break;
    case LC_R_STR:
        print_bytes(f, r->rstr, r->rlen);
        break;
    case LC_R_INT:
        fprintf(f, "%lld", r->rnum);
        break;
    case LC_R_NOTINT:
        fputs("ERR not an integer", f);
        break;
    }
    fputc('\n', f);
}

/* The effect an operation with an unknown outcome has on the key, as a class: DEL and
 * GETDEL delete; GETSET and SET ... GET are a SET. */
static int effect_class(const rec_t *r, unsigned *flags)
{
    *flags = r->flags & ~LC_GETOLD;
    switch (r->op) {
    case LC_GETDEL:
        return LC_DEL;
    case LC_GETSET:
        *flags = 0;
        return LC_SET;
    default:
        return (int)r->op;
    }
}

/* 1 when unknown operations a and b change every state the same way, or in ways no
 * operation of the history can tell apart: opaque[] marks an argument that no reply of
 * the key contains and that makes any string holding it a non-integer (INCR's answer is
 * the same); two SETs or APPENDs of such arguments, of one length, differ only in bytes
 * nobody read. */
static int same_effect(const rec_t *a, const rec_t *b, int opaque_a, int opaque_b)
{
    unsigned fa, fb;
    int ca = effect_class(a, &fa), cb = effect_class(b, &fb);
    if (ca != cb || fa != fb || ca == LC_GET) return 0;
    if (ca == LC_DEL || ca == LC_INCR) return 1;
    if (a->alen != b->alen) return 0;
    if (opaque_a && opaque_b) return 1;
    return !a->alen || memcmp(a->arg, b->arg, a->alen) == 0;
}

/* 1 when r's argument is opaque among the key's operations ops[0..n) (see same_effect). */
static int arg_opaque(const rec_t *r, rec_t **ops, size_t n)
{
    if (!r->alen) return 0;
    int nondigit = 0;
    for (size_t i = 0; i < r->alen; i++)
        if ((r->arg[i] < '0' || r->arg[i] > '9') && r->arg[i] != '-') nondigit = 1;
    if (!nondigit) return 0;
    for (size_t i = 0; i < n; i++)
        if (ops[i]->kind == LC_R_STR && ops[i]->rlen >= r->alen &&
            memmem(ops[i]->rstr, ops[i]->rlen, r->arg, r->alen))
            return 0;
    return 1;
}

/* The search's record of which operations are linearized: a definite operation's bit in
 * lin (indexed by operation), an unknown one's in um (indexed by ubit[]). */
typedef struct linset {
    uint64_t *lin, um;
    const int *ubit;
} linset_t;

static void linset_put(linset_t *l, size_t op, int on)
{
    int ub = l->ubit[op];
    uint64_t *w = ub >= 0 ? &l->um : &l->lin[op / 64];
    uint64_t bit = 1ull << (ub >= 0 ? (unsigned)ub : op % 64);
    *w = on ? *w | bit : *w & ~bit;
}

static int linset_has(const linset_t *l, size_t op)
{
    int ub = l->ubit[op];
    return ub >= 0 ? (int)(l->um >> ub & 1) : (int)(l->lin[op / 64] >> (op % 64) & 1);
}

/* Search one key's operations ops[0..n), in invocation order (lc_check sorts them so).
 * 1 linearizable, 0 not, -1 undecided. */
static int search_key(rec_t **ops, size_t n, uint64_t max_steps, uint64_t *steps, FILE *explain)
{
    node_t *ev = xmalloc(2 * n * sizeof(*ev));
    node_t **sorted = xmalloc(2 * n * sizeof(*sorted));
    for (size_t i = 0; i < n; i++) {
        ev[2 * i] = (node_t){.op = i, .is_call = 1, .t = ops[i]->t_inv, .match = &ev[2 * i + 1]};
        ev[2 * i + 1] = (node_t){.op = i, .is_call = 0, .t = ops[i]->t_ret};
        sorted[2 * i] = &ev[2 * i];
        sorted[2 * i + 1] = &ev[2 * i + 1];
    }
    qsort(sorted, 2 * n, sizeof(*sorted), ev_cmp);
    node_t head = {0};
    node_t *prev = &head;
    for (size_t i = 0; i < 2 * n; i++) {
        sorted[i]->prev = prev;
        prev->next = sorted[i];
        prev = sorted[i];
    }
    prev->next = NULL;
    states_t st = {0};
    intern(&st, (const uint8_t *)"", 0); /* creates id 0 (absent); "" is id 1 */
    /* The first 64 unknown operations get a bit in the memo's unknown subset; any further
     * ones count as definite there (correct, only without the pruning). */
    int *ubit = xmalloc((n ? n : 1) * sizeof(*ubit));
    size_t nunknown = 0, definite = 0;
    for (size_t i = 0; i < n; i++) {
        ubit[i] = -1;
        if (ops[i]->kind == LC_R_UNKNOWN && nunknown < 64) ubit[i] = (int)nunknown++;
        if (ops[i]->kind != LC_R_UNKNOWN) definite++;
    }
    /* Unknown operations with the same effect (their output does not matter) are
     * interchangeable: the earlier invoked one can stand for the later one anywhere both
     * are candidates, so a later twin is tried only once the earlier one is linearized.
     * twin[i]: the nearest earlier unknown operation with i's effect, SIZE_MAX none. */
    size_t *twin = xmalloc((n ? n : 1) * sizeof(*twin));
    char *opaque = calloc(n ? n : 1, 1);
    if (!opaque) abort();
    for (size_t i = 0; i < n; i++)
        if (ops[i]->kind == LC_R_UNKNOWN) opaque[i] = (char)arg_opaque(ops[i], ops, n);
    for (size_t i = 0; i < n; i++) {
        twin[i] = SIZE_MAX;
        for (size_t j = i; ops[i]->kind == LC_R_UNKNOWN && j-- > 0;)
            if (ops[j]->kind == LC_R_UNKNOWN && same_effect(ops[j], ops[i], opaque[j], opaque[i])) {
                twin[i] = j;
                break;
            }
    }
    memo_t memo = {.words = (n + 63) / 64};
    linset_t ls = {.lin = calloc(memo.words ? memo.words : 1, 8), .ubit = ubit};
    if (!ls.lin) abort();
    node_t **stack = xmalloc((n + 1) * sizeof(*stack));
    uint32_t *stack_state = xmalloc((n + 1) * sizeof(*stack_state));
    size_t depth = 0, best = 0;
    uint32_t state = 0;
    int result = 1;
    /* Wing & Gong: the candidates are the calls before the first pending return. Definite
     * operations are tried first (phase 0), unknown ones after (phase 1): the search first
     * assumes no unknown operation took effect, and the memo's subset pruning then cuts
     * every configuration that linearized more of them to no avail. Once every definite
     * operation is linearized the history is: the unknown ones left never took effect. */
    int phase = 0;
    node_t *e = head.next;
    uint64_t local = 0;
    while (definite) {
        if (++local > max_steps) {
            result = -1;
            break;
        }
        if (e && e->is_call) {
            const rec_t *r = ops[e->op];
            if ((r->kind == LC_R_UNKNOWN) != phase ||
                (twin[e->op] != SIZE_MAX && !linset_has(&ls, twin[e->op]))) {
                e = e->next;
                continue;
            }
            uint32_t next;
            if (step(&st, r, state, &next)) {
                linset_put(&ls, e->op, 1);
                if (memo_add(&memo, ls.lin, next, ls.um)) {
                    stack[depth] = e;
                    stack_state[depth++] = state;
                    if (depth > best) best = depth;
                    if (r->kind != LC_R_UNKNOWN) definite--;
                    state = next;
                    lift(e);
                    e = head.next;
                    phase = 0;
                    continue;
                }
                linset_put(&ls, e->op, 0);
            }
            e = e->next;
            continue;
        }
        if (phase == 0) { /* the definite candidates failed: try the unknown ones */
            phase = 1;
            e = head.next;
            continue;
        }
        if (!depth) {
            result = 0;
            break;
        }
        e = stack[--depth];
        state = stack_state[depth];
        const rec_t *r = ops[e->op];
        phase = r->kind == LC_R_UNKNOWN;
        if (!phase) definite++;
        linset_put(&ls, e->op, 0);
        unlift(e);
        e = e->next;
    }
    *steps += local;
    if (result == 0 && explain) {
        uint64_t t0 = ops[0]->t_inv;
        for (size_t i = 0; i < n; i++)
            if (ops[i]->t_inv < t0) t0 = ops[i]->t_inv;
        fprintf(explain, "key ");
        print_bytes(explain, ops[0]->key, ops[0]->klen);
        fprintf(explain, ": %zu operations\n", n);
        fprintf(explain,
                "  not linearizable: at most %zu of %zu operations linearize "
                "(times in ms)\n",
                best, n);
        /* Sort by invocation for reading. */
        rec_t **by = xmalloc(n * sizeof(*by));
        memcpy(by, ops, n * sizeof(*by));
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && by[j - 1]->t_inv > by[j]->t_inv; j--) {
                rec_t *t = by[j];
                by[j] = by[j - 1];
                by[j - 1] = t;
            }
        for (size_t i = 0; i < n && i < 400; i++)
            print_op(explain, by[i], t0);
        if (n > 400) fprintf(explain, "  ... %zu more\n", n - 400);
        free(by);
    }
    free(ubit);
    free(twin);
    free(opaque);
    free(stack);
    free(stack_state);
    free(ls.lin);
    memo_free(&memo);
    states_free(&st);
    free(sorted);
    free(ev);
    return result;
}

/* Check one key: first without the unknown SETs, GETSETs and APPENDs whose argument is
 * opaque (arg_opaque: no reply shows it), then, when that finds no linearization, with
 * every operation. The first pass can only find witnesses: an unknown operation may never
 * have taken effect, so a linearization without it is one of the whole history. It is the
 * case of a stopped memory node: a dozen clients' writes of one key pending at once, of
 * distinct values and lengths nobody read back (no twins), whose orders the full search
 * explores (tests/lincheck/histories/host-2026-12-01-memnode-stop.hist: undecided after
 * 3e9 steps, linearizable after 2e5 without them). 1 linearizable, 0 not, -1 undecided. */
static int check_key(rec_t **ops, size_t n, uint64_t max_steps, uint64_t *steps, FILE *explain)
{
    rec_t **kept = xmalloc((n ? n : 1) * sizeof(*kept));
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned fl;
        int c = effect_class(ops[i], &fl);
        if (ops[i]->kind == LC_R_UNKNOWN && (c == LC_SET || c == LC_APPEND) &&
            arg_opaque(ops[i], ops, n))
            continue;
        kept[nk++] = ops[i];
    }
    int r = nk < n ? search_key(kept, nk, max_steps, steps, NULL) : 0;
    free(kept);
    return r == 1 ? 1 : search_key(ops, n, max_steps, steps, explain);
}

static int rec_key_cmp(const void *a, const void *b)
{
    const rec_t *x = *(rec_t *const *)a, *y = *(rec_t *const *)b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    if (x->klen != y->klen) return x->klen < y->klen ? -1 : 1;
    return x->t_inv < y->t_inv ? -1 : x->t_inv > y->t_inv;
}

int lc_check(lc_history_t *h, uint64_t max_steps, lc_report_t *rep, FILE *explain)
{
    memset(rep, 0, sizeof(*rep));
    if (!max_steps) max_steps = LC_DEFAULT_MAX_STEPS;
    pthread_mutex_lock(&h->mu);
    rec_t **all = xmalloc(h->n * sizeof(*all));
    for (size_t i = 0; i < h->n; i++) {
        all[i] = &h->r[i];
        if (h->r[i].kind == LC_R_UNKNOWN) {
            h->r[i].t_ret = T_INF;
            rep->unknown++;
        }
    }
    rep->ops = h->n;
    qsort(all, h->n, sizeof(*all), rec_key_cmp);
    int rc = 0;
    for (size_t i = 0; i < h->n;) {
        size_t j = i + 1;
        while (j < h->n && all[j]->klen == all[i]->klen &&
               memcmp(all[j]->key, all[i]->key, all[i]->klen) == 0)
            j++;
        rep->keys++;
        int r = check_key(all + i, j - i, max_steps, &rep->steps, explain);
        if (r == 0) {
            if (!rep->bad_keys) {
                size_t n = all[i]->klen < sizeof(rep->first_bad_key) - 1
                               ? all[i]->klen
                               : sizeof(rep->first_bad_key) - 1;
                for (size_t k = 0; k < n; k++) {
                    uint8_t c = all[i]->key[k];
                    rep->first_bad_key[k] = c >= 32 && c < 127 ? (char)c : '.';
                }
                rep->first_bad_key[n] = 0;
            }
            rep->bad_keys++;
            rc = 1;
        } else if (r < 0) {
            rep->undecided_keys++;
            if (!rc) rc = 2;
        }
        i = j;
    }
    if (rc == 2 && rep->bad_keys) rc = 1;
    free(all);
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* ---- text format ---- */

static void write_hex(FILE *f, const uint8_t *p, size_t n)
{
    if (!p || !n) {
        fputc('-', f);
        return;
    }
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", p[i]);
}

int lc_history_write(lc_history_t *h, FILE *f)
{
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n; i++) {
        rec_t *r = &h->r[i];
        fprintf(f, "%d %d %u %llu ", r->client, (int)r->op, r->flags, (unsigned long long)r->t_inv);
        if (r->kind == LC_R_UNKNOWN)
            fputc('-', f);
        else
            fprintf(f, "%llu", (unsigned long long)r->t_ret);
        fprintf(f, " %d ", (int)r->kind);
        write_hex(f, r->key, r->klen);
        fputc(' ', f);
        if (r->arg && !r->alen)
            fputc('=', f); /* an empty argument, not a missing one */
        else
            write_hex(f, r->arg, r->alen);
        fputc(' ', f);
        if (r->kind == LC_R_INT)
            fprintf(f, "%lld", r->rnum);
        else if (r->kind == LC_R_STR && !r->rlen)
            fputc('=', f);
        else
            write_hex(f, r->rstr, r->rlen);
        fputc('\n', f);
    }
    pthread_mutex_unlock(&h->mu);
    return ferror(f) ? -1 : 0;
}

/* Parse hex (or "-" / "=") into a malloc'd buffer; -1 on bad input. */
static int read_hex(const char *s, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (!strcmp(s, "-")) return 0;
    size_t n = strlen(s);
    if (!strcmp(s, "=")) n = 0;
    if (n % 2) return -1;
    *out = xmalloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        (*out)[i] = (uint8_t)v;
    }
    (*out)[n / 2] = 0;
    *len = n / 2;
    return 0;
}

lc_history_t *lc_history_read(FILE *f, char *err, size_t errlen)
{
    lc_history_t *h = lc_history_new();
    char line[1 << 16];
    size_t lineno = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (line[0] == '\n' || line[0] == '#') continue;
        int client, op, kind;
        unsigned flags;
        unsigned long long tinv;
        char tret[32], key[1 << 14], arg[1 << 14], res[1 << 14];
        if (sscanf(line, "%d %d %u %llu %31s %d %16383s %16383s %16383s", &client, &op, &flags,
                   &tinv, tret, &kind, key, arg, res) != 9 ||
            op < 0 || op >= LC_OP_COUNT || kind < LC_R_UNKNOWN || kind > LC_R_NOTINT) {
            snprintf(err, errlen, "line %zu: cannot parse", lineno);
            lc_history_free(h);
            return NULL;
        }
        uint8_t *k, *a, *rs;
        size_t kl, al, rl;
        if (read_hex(key, &k, &kl) || read_hex(arg, &a, &al) ||
            (kind != LC_R_INT && read_hex(res, &rs, &rl))) {
            snprintf(err, errlen, "line %zu: bad hex field", lineno);
            lc_history_free(h);
            return NULL;
        }
        size_t idx = lc_invoke(h, client, (lc_op_t)op, flags, k, kl, a, al, tinv);
        lc_result_t r = {.kind = (lc_kind_t)kind};
        if (kind == LC_R_INT) {
            r.num = atoll(res);
            rs = NULL;
        } else {
            r.str = rs;
            r.len = rl;
        }
        if (kind != LC_R_UNKNOWN) lc_return(h, idx, &r, strtoull(tret, NULL, 10));
        free(k);
        free(a);
        free(rs);
    }
    return h;
}
