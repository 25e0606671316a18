/* dmkv-lincheck FILE: check a history written by lc_history_write (lincheck.h).
 * Exit 0 linearizable, 1 not (the offending keys' operations on stdout), 2 bad input or
 * undecided. */
#include <stdio.h>
#include <stdlib.h>

#include "lincheck.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s HISTORY-FILE\n", argv[0]);
        return 2;
    }
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
    int rc = lc_check(h, 0, &rep, stdout);
    printf("%zu operations (%zu unknown) on %zu keys, %llu search steps: %s\n", rep.ops,
           rep.unknown, rep.keys, (unsigned long long)rep.steps,
           rc == 0   ? "linearizable"
           : rc == 1 ? "NOT linearizable"
                     : "undecided");
    lc_history_free(h);
    return rc;
}
