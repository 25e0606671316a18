/* A tiny test harness: CHECK aborts the test with file:line and a message. */
#ifndef DMKV_TEST_HARNESS_H
#define DMKV_TEST_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Called, when set, before a failed CHECK prints its message: the integration tests dump
 * their servers' logs there (tests/integration/procs.c), so the message is printed last
 * (CI keeps an output's tail). Weak: one variable per binary. */
__attribute__((weak)) void (*harness_fail_hook)(void);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (harness_fail_hook) harness_fail_hook();                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (harness_fail_hook) harness_fail_hook();                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* TEST_ONLY=substring runs only the tests whose names contain it (hand runs). */
#define RUN(test)                                                                                  \
    do {                                                                                           \
        const char *only_ = getenv("TEST_ONLY");                                                   \
        if (only_ && !strstr(#test, only_)) break;                                                 \
        fprintf(stderr, "== %s\n", #test);                                                         \
        test();                                                                                    \
    } while (0)

#endif
