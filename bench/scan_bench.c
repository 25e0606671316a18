/* Prefix-enumeration benchmark for bench/scan-prefix.sh. The server holds PREFIXES x
 * PER_PREFIX keys "p%04d:%010d" (dmkv-bench-load PORT N T P PER_PREFIX). For up to SAMPLES
 * random prefixes (and at most MAX_SECONDS in all), enumerate one prefix the way a client
 * does: SCAN 0 MATCH p<NNNN>:* COUNT <COUNT>, then the returned cursors until cursor 0,
 * timing every call. Checks that each enumeration found all PER_PREFIX distinct keys of the
 * prefix and nothing else. Prints one line of name=value pairs:
 *   samples, pages (calls in all), pages_per_prefix, first_page_us (mean time of the first
 *   call), page_us (mean time of a call), page_p50_us, enum_ms (mean time until all
 *   PER_PREFIX keys were seen), complete_ms (mean time until cursor 0), complete_p50_ms,
 *   bad (enumerations that missed or invented keys).
 * PER_PREFIX "hex:M" reads dmkv-bench-load's "hex:M" keys instead: prefix "%04x", the
 * key's number n in its last 8 hex digits, checked against the 4 before them.
 * Usage: dmkv-bench-scan PORT PREFIXES [hex:]PER_PREFIX SAMPLES [COUNT=100]
 *        [MAX_SECONDS=120] [SEED=1] */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PAGES_PER_PREFIX 10000000L

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v). */
static double median(double *v, size_t n)
{
    if (!n) return 0;
    qsort(v, n, sizeof(double), cmp_double);
    return v[n / 2];
}

/* The number of a key's part after its prefix: decimal, or for hex:M keys 4 hex digits of
 * (n * 40503) mod 2^16 then n in 8 hex digits; -1 when the two disagree. */
static long key_number(const char *s, int hex)
{
    if (!hex) return atol(s);
    char mid[5] = {0};
    memcpy(mid, s, 4);
    long n = strtol(s + 4, NULL, 16);
    return (n * 40503 & 0xffff) == strtol(mid, NULL, 16) ? n : -1;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr,
                "usage: %s PORT PREFIXES PER_PREFIX SAMPLES [COUNT=100] [MAX_SECONDS=120] "
                "[SEED=1]\n",
                argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    int hex = !strncmp(argv[3], "hex:", 4);
    long prefixes = atol(argv[2]), per_prefix = atol(argv[3] + (hex ? 4 : 0)),
         samples = atol(argv[4]);
    long count = argc > 5 ? atol(argv[5]) : 100;
    double max_us = (argc > 6 ? atof(argv[6]) : 120.0) * 1e6;
    uint64_t x = argc > 7 ? strtoull(argv[7], NULL, 10) : 1;
    if (prefixes < 1 || prefixes > 10000 || per_prefix < 1 || samples < 1 || count < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    x = x * 0x9E3779B97F4A7C15ull + 1;
    struct timeval tv = {60, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "oom");
        return 1;
    }
    redisSetTimeout(c, tv);
    unsigned char *seen = malloc((size_t)per_prefix);
    size_t cap = 1 << 16, npage = 0;
    double *page_us = malloc(cap * sizeof(double));
    double *complete = malloc((size_t)samples * sizeof(double));
    double first_sum = 0, enum_sum = 0, complete_sum = 0, start = now_us();
    long done = 0, bad = 0, pages = 0;
    while (done < samples && now_us() - start < max_us) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        long p = (long)(x % (uint64_t)prefixes);
        char pat[32], cursor[32] = "0", want[16];
        snprintf(pat, sizeof(pat), hex ? "%04lx*" : "p%04ld:*", p);
        int wl = snprintf(want, sizeof(want), hex ? "%04lx" : "p%04ld:", p);
        memset(seen, 0, (size_t)per_prefix);
        long found = 0, foreign = 0, calls = 0;
        double t0 = now_us(), enum_at = 0;
        do {
            double a = now_us();
            redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT %ld", cursor, pat, count);
            double us = now_us() - a;
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
                fprintf(stderr, "SCAN %s MATCH %s: %s\n", cursor, pat,
                        !r                             ? c->errstr
                        : r->type == REDIS_REPLY_ERROR ? r->str
                                                       : "bad reply");
                return 1;
            }
            if (calls == 0) first_sum += us;
            calls++;
            if (npage == cap) page_us = realloc(page_us, (cap *= 2) * sizeof(double));
            page_us[npage++] = us;
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            redisReply *ks = r->element[1];
            for (size_t i = 0; i < ks->elements; i++) {
                const char *k = ks->element[i]->str;
                long n = ks->element[i]->len == 16 && memcmp(k, want, (size_t)wl) == 0
                             ? key_number(k + wl, hex)
                             : -1;
                if (n < 0 || n >= per_prefix) {
                    foreign++;
                } else if (!seen[n]) {
                    seen[n] = 1;
                    if (++found == per_prefix) enum_at = now_us() - t0;
                }
            }
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0 && calls < MAX_PAGES_PER_PREFIX);
        double total = now_us() - t0;
        if (found != per_prefix || foreign || strcmp(cursor, "0") != 0) bad++;
        enum_sum += enum_at ? enum_at : total;
        complete_sum += total;
        complete[done++] = total;
        pages += calls;
    }
    if (!done) return 1;
    double mean_page = 0;
    for (size_t i = 0; i < npage; i++)
        mean_page += page_us[i];
    mean_page /= (double)npage;
    printf("samples=%ld pages=%ld pages_per_prefix=%.1f first_page_us=%.1f page_us=%.1f "
           "page_p50_us=%.1f enum_ms=%.3f complete_ms=%.3f complete_p50_ms=%.3f bad=%ld\n",
           done, pages, (double)pages / (double)done, first_sum / (double)done, mean_page,
           median(page_us, npage), enum_sum / (double)done / 1e3, complete_sum / (double)done / 1e3,
           median(complete, (size_t)done) / 1e3, bad);
    free(seen);
    free(page_us);
    free(complete);
    redisFree(c);
    return bad ? 3 : 0;
}
