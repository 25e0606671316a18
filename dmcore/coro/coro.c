/* Coroutines on boost.context's fcontext. The assembly switch routines live in
 * libboost_context with C linkage; we declare them here rather than include C++ headers. */
#include "dmkv/coro.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define DM_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer must be told about every stack switch, or it mixes up the shadow stacks
 * of coroutines (and reports nonsense). */
#define DM_TSAN 1
#include <sanitizer/tsan_interface.h>
#endif

typedef void *fcontext_t;
typedef struct {
    fcontext_t fctx;
    void *data;
} transfer_t;
extern transfer_t jump_fcontext(fcontext_t const to, void *vp);
extern fcontext_t make_fcontext(void *sp, size_t size, void (*fn)(transfer_t));

#define CORO_STACK (256u << 10)
#define CORO_POOL_MAX 1024

struct dm_coro {
    fcontext_t ctx;    /* where to jump to resume this coroutine */
    fcontext_t caller; /* where to jump to on yield/finish */
    dm_coro_fn fn;
    void *arg;
    void *local;                /* dm_coro_set_local */
    const dm_turn_hook_t *turn; /* dm_coro_set_turn */
    int turn_held;              /* dm_coro_wait_turn returned: every earlier command ended */
    uint64_t turn_seq;          /* its command's age on this thread (dm_coro_set_turn) */
    uint64_t early_res;         /* the leaf lock it holds (0: none) */
    int early;                  /* ... taken before its turn: an early lock */
    int wounded;                /* dm_coro_early_contend: give the early lock up */
    struct dm_coro *early_next, *early_prev; /* holders of its bucket's locks */
    uint64_t wait_res;                       /* dm_coro_wait_turn_or: waits for res too */
    struct dm_coro *wait_next, *wait_prev;   /* waiters in its bucket, oldest first */
    void *stack;                             /* base of the mmap'd stack */
    const char *name;                        /* dm_coro_set_name, NULL: none */
    const char *waits_on;                    /* dm_coro_yield_on's label while suspended */
    uint64_t switches;                       /* times resumed: dm_coro_watch tells a parked one */
    uint64_t seen_switches;                  /* switches at dm_coro_watch's last look */
    uint64_t still_since_ms;                 /* ... and when they last changed */
    int reported;                            /* dm_coro_watch reported this stillness */
    unsigned bounded;                        /* dm_coro_begin_bounded depth (0: none) */
    uint64_t bounded_since_ms;               /* ... when the outermost began */
    int long_reported;                       /* dm_coro_watch reported this work running long */
    struct dm_coro *live_next, *live_prev;   /* this thread's live coroutines */
    int done;
    struct dm_coro *next_free;
#ifdef DM_ASAN
    void *fake_stack;
    const void *caller_bottom;
    size_t caller_size;
    void *caller_fake_stack; /* the switching-in context's (a coroutine may spawn another) */
#endif
#ifdef DM_TSAN
    void *tsan_fiber;  /* this coroutine's */
    void *tsan_caller; /* the thread's own, to switch back to */
#endif
};

static __thread dm_coro_t *current;
static __thread dm_coro_t *pool;
static __thread size_t pool_n;
static __thread size_t live;
static __thread dm_coro_t *live_head; /* dm_coro_watch walks them */
/* Lock holders (dm_coro_early_hold) and waiters for a resource (dm_coro_wait_turn_or), in
 * lists per bucket of the resource: a release looks for the lock's other holders and a signal
 * for its waiters, and one list per thread made each a walk of every command in flight (256
 * per pipelined connection: 2.9% of the gateway's CPU in a 1M-key load). */
#define RES_BUCKETS 256
static __thread dm_coro_t *early_head[RES_BUCKETS];
static __thread dm_coro_t *wait_head[RES_BUCKETS], *wait_tail[RES_BUCKETS];
static __thread uint64_t turn_seq;
static uint64_t early_holds, early_wounds; /* dm_coro_early_stats */

static void start_switch(dm_coro_t *co, int into)
{
#ifdef DM_TSAN
    if (into) {
        co->tsan_caller = __tsan_get_current_fiber();
        __tsan_switch_to_fiber(co->tsan_fiber, 0);
    } else {
        __tsan_switch_to_fiber(co->tsan_caller, 0);
    }
#endif
#ifdef DM_ASAN
    if (into)
        __sanitizer_start_switch_fiber(&co->caller_fake_stack, co->stack, CORO_STACK);
    else
        __sanitizer_start_switch_fiber(co->done ? NULL : &co->fake_stack, co->caller_bottom,
                                       co->caller_size);
#else
    (void)co;
    (void)into;
#endif
}

static void finish_switch(dm_coro_t *co, int into)
{
#ifdef DM_ASAN
    if (into)
        __sanitizer_finish_switch_fiber(co->fake_stack, &co->caller_bottom, &co->caller_size);
    else
        __sanitizer_finish_switch_fiber(co->caller_fake_stack, NULL, NULL);
#else
    (void)co;
    (void)into;
#endif
}

static void trampoline(transfer_t t)
{
    dm_coro_t *co = t.data;
    co->caller = t.fctx;
    finish_switch(co, 1);
    co->fn(co->arg);
    co->done = 1;
    start_switch(co, 0);
    jump_fcontext(co->caller, co);
    abort(); /* a finished coroutine is never resumed */
}

static unsigned res_bucket(uint64_t res)
{
    return (unsigned)((res * 0x9E3779B97F4A7C15ull) >> 56); /* Fibonacci hashing, 8 bits */
}

static void early_link(dm_coro_t *co, uint64_t res)
{
    dm_coro_t **head = &early_head[res_bucket(res)];
    co->early_res = res;
    co->early_prev = NULL;
    co->early_next = *head;
    if (*head) (*head)->early_prev = co;
    *head = co;
}

static void early_remove(dm_coro_t *co)
{
    if (co->early_prev)
        co->early_prev->early_next = co->early_next;
    else
        early_head[res_bucket(co->early_res)] = co->early_next;
    if (co->early_next) co->early_next->early_prev = co->early_prev;
}

static void coro_destroy(dm_coro_t *co)
{
#ifdef DM_TSAN
    if (co->tsan_fiber) __tsan_destroy_fiber(co->tsan_fiber);
#endif
    munmap(co->stack, CORO_STACK);
    free(co);
}

/* Free the thread's pooled stacks when the thread exits. */
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_drain(void *unused)
{
    (void)unused;
    while (pool) {
        dm_coro_t *co = pool;
        pool = co->next_free;
        coro_destroy(co);
    }
    pool_n = 0;
}

static void pool_key_init(void)
{
    pthread_key_create(&pool_key, pool_drain);
}

static dm_coro_t *coro_alloc(void)
{
    pthread_once(&pool_once, pool_key_init);
    pthread_setspecific(pool_key, (void *)1);
    dm_coro_t *co = pool;
    if (co) {
        pool = co->next_free;
        pool_n--;
        return co;
    }
    co = calloc(1, sizeof(*co));
    if (!co) return NULL;
    co->stack = mmap(NULL, CORO_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (co->stack == MAP_FAILED) {
        free(co);
        return NULL;
    }
    return co;
}

void dm_coro_early_move(dm_coro_t *co, uint64_t res)
{
    if (!co || !co->early_res) return;
    early_remove(co);
    early_link(co, res);
}

static void early_unlink(dm_coro_t *co);
static void wait_unlink(dm_coro_t *co);

static void coro_release(dm_coro_t *co)
{
    early_unlink(co); /* a command that ended holding a lock (its lease frees it) */
    wait_unlink(co);
    if (pool_n < CORO_POOL_MAX) {
        co->next_free = pool;
        pool = co;
        pool_n++;
        return;
    }
    coro_destroy(co);
}

/* Switch into co and handle its return (yield or finish). Returns 1 when it finished. */
static int switch_into(dm_coro_t *co)
{
    dm_coro_t *prev = current;
    current = co;
    start_switch(co, 1);
    transfer_t t = jump_fcontext(co->ctx, co);
    current = prev;
    co = t.data;
    co->ctx = t.fctx;
    finish_switch(co, 0);
    if (co->done) {
        live--;
        if (co->live_prev)
            co->live_prev->live_next = co->live_next;
        else
            live_head = co->live_next;
        if (co->live_next) co->live_next->live_prev = co->live_prev;
        coro_release(co);
        return 1;
    }
    return 0;
}

dm_coro_t *dm_coro_spawn(dm_coro_fn fn, void *arg)
{
    dm_coro_t *co = coro_alloc();
    if (!co) {
        errno = ENOMEM;
        return NULL;
    }
    co->fn = fn;
    co->arg = arg;
    co->local = NULL;
    co->turn = NULL;
    co->done = 0;
    co->name = co->waits_on = NULL;
    co->switches = 0;
    co->seen_switches = UINT64_MAX; /* the first look starts its clock */
    co->reported = 0;
    co->bounded = 0;
    co->live_prev = NULL;
    co->live_next = live_head;
    if (live_head) live_head->live_prev = co;
    live_head = co;
#ifdef DM_TSAN
    /* A finished coroutine never returned from its frames: a fresh fiber for each use. */
    if (co->tsan_fiber) __tsan_destroy_fiber(co->tsan_fiber);
    co->tsan_fiber = __tsan_create_fiber(0);
#endif
#ifdef DM_ASAN
    /* A pooled stack still carries the redzones of the frames its last coroutine never
     * returned from (trampoline's, and any frame left by a switch away): a fresh start. */
    __asan_unpoison_memory_region(co->stack, CORO_STACK);
#endif
    co->ctx = make_fcontext((char *)co->stack + CORO_STACK, CORO_STACK, trampoline);
    live++;
    return switch_into(co) ? NULL : co;
}

void dm_coro_yield(void)
{
    dm_coro_t *co = current;
    if (!co) abort();
    start_switch(co, 0);
    transfer_t t = jump_fcontext(co->caller, co);
    co->caller = t.fctx;
    finish_switch(co, 1);
}

void dm_coro_yield_on(const char *what)
{
    dm_coro_t *co = current;
    if (!co) abort();
    co->waits_on = what;
    dm_coro_yield();
    co->waits_on = NULL;
}

void dm_coro_resume(dm_coro_t *co)
{
    if (current || co->done) abort();
    co->switches++;
    switch_into(co);
}

void dm_coro_set_name(const char *name)
{
    if (current) current->name = name;
}

void dm_coro_begin_bounded(uint64_t now_ms)
{
    dm_coro_t *co = current;
    if (!co || co->bounded++) return; /* nested (EXEC's commands): the outermost counts */
    co->bounded_since_ms = now_ms;
    co->long_reported = 0;
}

void dm_coro_end_bounded(void)
{
    if (current && current->bounded) current->bounded--;
}

size_t dm_coro_watch(uint64_t now_ms, uint64_t still_ms, uint64_t run_ms, int once,
                     dm_coro_still_t *out, size_t max, size_t *nrunning)
{
    size_t n = 0, running = 0;
    for (dm_coro_t *co = live_head; co; co = co->live_next) {
        if (co == current) continue;
        int resumed = co->switches != co->seen_switches;
        if (resumed) {
            co->seen_switches = co->switches;
            co->still_since_ms = now_ms;
            co->reported = 0;
        }
        dm_coro_still_t s = {.name = co->name ? co->name : "(unnamed)",
                             .waits_on = co->waits_on ? co->waits_on : "(unlabelled)",
                             .still_ms = now_ms - co->still_since_ms};
        if (s.still_ms >= still_ms && !(once && co->reported)) {
            co->reported = 1;
        } else if (resumed && co->bounded && !co->long_reported &&
                   now_ms - co->bounded_since_ms >= run_ms) {
            co->long_reported = 1;
            s.running_ms = now_ms - co->bounded_since_ms;
            s.resumes = co->switches;
            running++;
        } else {
            continue;
        }
        if (n < max) out[n] = s;
        n++;
    }
    if (nrunning) *nrunning = running;
    return n;
}

dm_coro_t *dm_coro_self(void)
{
    return current;
}

void dm_coro_set_local(void *p)
{
    if (current) current->local = p;
}

void *dm_coro_get_local(void)
{
    return current ? current->local : NULL;
}

void dm_coro_set_turn(const dm_turn_hook_t *hook)
{
    if (!current) return;
    if (!hook) dm_coro_early_release();
    current->turn = hook;
    current->turn_held = 0;
    current->turn_seq = hook ? ++turn_seq : 0;
}

int dm_coro_turn_pending(void)
{
    return current && current->turn && !current->turn_held;
}

int dm_coro_chain_tag(void)
{
    return current && current->turn ? current->turn->chain_tag : 0;
}

int dm_coro_wait_turn(void)
{
    if (!dm_coro_turn_pending()) return 0;
    int rc = current->turn->wait(current->turn->arg, NULL);
    if (rc) return rc;
    current->turn_held = 1; /* held until the command ends: nothing earlier runs any more */
    return 0;
}

int dm_coro_wait_commit(const struct dm_chain_pos *on)
{
    if (!current || !current->turn) return 0;
    if (!current->turn_held) {
        int rc = current->turn->wait(current->turn->arg, on);
        if (rc) return rc;
    }
    return current->turn->chain_tag;
}

void dm_coro_commit_posted(const struct dm_chain_pos *at)
{
    if (current && current->turn) current->turn->posted(current->turn->arg, at);
}

void dm_coro_early_hold(uint64_t res)
{
    if (!current) return;
    if (current->early_res) { /* the lock moved (a split): same hold */
        uint64_t was = current->early_res;
        early_remove(current);
        early_link(current, res);
        if (was != res) dm_coro_signal(was);
        return;
    }
    early_link(current, res);
    current->early = dm_coro_turn_pending();
    current->wounded = 0;
    if (current->early) __atomic_fetch_add(&early_holds, 1, __ATOMIC_RELAXED);
}

static void early_unlink(dm_coro_t *co)
{
    if (!co->early_res) return;
    early_remove(co);
    uint64_t was = co->early_res;
    co->early_res = 0;
    co->early = 0;
    co->wounded = 0;
    if (!dm_coro_early_taken(was)) dm_coro_signal(was); /* its last holder: waiters go on */
}

void dm_coro_early_release(void)
{
    if (current) early_unlink(current);
}

int dm_coro_early_held(void)
{
    return current && ((current->early_res && current->early) || current->wait_res);
}

int dm_coro_early_wounded(void)
{
    return dm_coro_early_held() && current->wounded;
}

int dm_coro_more_behind(void)
{
    return current && current->turn && current->turn->behind &&
           current->turn->behind(current->turn->arg);
}

static void wait_unlink(dm_coro_t *co)
{
    if (!co->wait_res) return;
    unsigned b = res_bucket(co->wait_res);
    if (co->wait_prev)
        co->wait_prev->wait_next = co->wait_next;
    else
        wait_head[b] = co->wait_next;
    if (co->wait_next)
        co->wait_next->wait_prev = co->wait_prev;
    else
        wait_tail[b] = co->wait_prev;
    co->wait_res = 0;
}

int dm_coro_wait_turn_or(uint64_t res)
{
    if (!dm_coro_turn_pending()) return 0;
    if (current->early_res) return dm_coro_wait_turn(); /* holding a lock: not this wait */
    unsigned b = res_bucket(res);
    current->wait_res = res;
    current->wounded = 0;
    current->wait_next = NULL; /* appended: dm_coro_signal wakes them in arrival order */
    current->wait_prev = wait_tail[b];
    if (wait_tail[b])
        wait_tail[b]->wait_next = current;
    else
        wait_head[b] = current;
    wait_tail[b] = current;
    int rc = current->turn->wait(current->turn->arg, NULL);
    wait_unlink(current);
    current->wounded = 0;
    if (rc) return rc;
    current->turn_held = 1;
    return 0;
}

void dm_coro_signal(uint64_t res)
{
    for (dm_coro_t *h = wait_head[res_bucket(res)]; h; h = h->wait_next) {
        if (h->wait_res != res || h == current || h->wounded) continue;
        h->wounded = 1; /* its turn wait returns DM_EYIELD */
        if (h->turn && h->turn->wound) h->turn->wound(h->turn->arg);
    }
}

int dm_coro_early_taken(uint64_t res)
{
    for (dm_coro_t *h = early_head[res_bucket(res)]; h; h = h->early_next)
        if (h->early_res == res && h != current) return 1;
    return 0;
}

void dm_coro_early_contend(uint64_t res)
{
    int first = !dm_coro_turn_pending(); /* whole turn held, or no hook: comes first */
    for (dm_coro_t *h = early_head[res_bucket(res)]; h; h = h->early_next) {
        if (h->early_res != res || h == current || !h->early || h->wounded) continue;
        if (!first && current->turn_seq > h->turn_seq) continue; /* we wait for it */
        h->wounded = 1;
        __atomic_fetch_add(&early_wounds, 1, __ATOMIC_RELAXED);
        if (h->turn && h->turn->wound) h->turn->wound(h->turn->arg);
    }
}

void dm_coro_early_stats(uint64_t *holds, uint64_t *wounds)
{
    *holds = __atomic_load_n(&early_holds, __ATOMIC_RELAXED);
    *wounds = __atomic_load_n(&early_wounds, __ATOMIC_RELAXED);
}

size_t dm_coro_live(void)
{
    return live;
}
