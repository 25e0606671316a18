/* dmkv-lincheck FILE [MAX_STEPS]: check a history written by lc_history_write (lincheck.h),
 * searching up to MAX_STEPS steps per key (default lc_check's, 5e7: what the tests allow;
 * an "undecided" history can be given more here). Exit 0 linearizable, 1 not (the
 * offending keys' operations on stdout), 2 bad input or undecided. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lincheck.h"

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s HISTORY-FILE [MAX-STEPS-PER-KEY]\n", argv[0]);
        return 2;
    }
    uint64_t max_steps = argc == 3 ? strtoull(argv[2], NULL, 10) : 0;
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    char err[256];
    lc_history_t *h = lc_history_read(f, err, sizeof(err));
    fclose(f);
    if (!h) {
        fprintf(stderr, "%s: %s\n", argv[1], err);
        return 2;
    }
    lc_report_t rep;
    int rc = lc_check(h, max_steps, &rep, stdout);
    printf("%zu operations (%zu unknown) on %zu keys, %llu search steps: %s\n", rep.ops,
           rep.unknown, rep.keys, (unsigned long long)rep.steps,
           rc == 0   ? "linearizable"
           : rc == 1 ? "NOT linearizable"
                     : "undecided");
    lc_history_free(h);
    return rc;
}
