/* Redis's sdssplitargs: split an inline command or config line into arguments with
 * "double quotes" (escapes \n \r \t \b \a \\ \" \xHH) and 'single quotes' (\' only). */
#ifndef GW_UTIL_SPLITARGS_H
#define GW_UTIL_SPLITARGS_H

#include <stddef.h>

typedef struct gw_args {
    int argc;
    char **argv;     /* each malloc'd and NUL-terminated (may also contain NULs) */
    size_t *argvlen; /* bytes of each argument */
} gw_args_t;

/* Split line[0..len). Returns 0 and fills out (argc may be 0), or -1 for unbalanced quotes
 * (a closing quote not followed by a space or the end of the line counts as unbalanced). */
int gw_splitargs(const char *line, size_t len, gw_args_t *out);
/* Free what gw_splitargs filled. */
void gw_args_free(gw_args_t *a);

#endif
