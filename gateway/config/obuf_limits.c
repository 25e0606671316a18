/* client-output-buffer-limit values (obuf_limits.h). */
#include "config/obuf_limits.h"

#include <string.h>
#include <strings.h>

#include "util/splitargs.h"
#include "util/strconv.h"

static const char *const class_names[GW_OBUF_CLASSES] = {"normal", "slave", "pubsub"};

void gw_obuf_defaults(gw_obuf_limit_t lim[GW_OBUF_CLASSES])
{
    lim[GW_OBUF_NORMAL] = (gw_obuf_limit_t){0, 0, 0};
    lim[GW_OBUF_REPLICA] = (gw_obuf_limit_t){256ull << 20, 64ull << 20, 60};
    lim[GW_OBUF_PUBSUB] = (gw_obuf_limit_t){32ull << 20, 8ull << 20, 60};
}

/* Redis's getClientTypeByName, less "master" (not a class a limit applies to). */
static int class_by_name(const char *s)
{
    if (!strcasecmp(s, "normal")) return GW_OBUF_NORMAL;
    if (!strcasecmp(s, "slave") || !strcasecmp(s, "replica")) return GW_OBUF_REPLICA;
    if (!strcasecmp(s, "pubsub")) return GW_OBUF_PUBSUB;
    return -1;
}
static int parse_words(int argc, char **argv, gw_obuf_limit_t lim[GW_OBUF_CLASSES],
                       const char **why)
{
    if (argc == 0 || argc % 4) {
        *why = "Wrong number of arguments in buffer limit configuration.";
        return -1;
    }
    gw_obuf_limit_t next[GW_OBUF_CLASSES];
    memcpy(next, lim, sizeof(next));
    for (int j = 0; j < argc; j += 4) {
        int cls = class_by_name(argv[j]);
        if (cls < 0) {
            *why = "Invalid client class specified in buffer limit configuration.";
            return -1;
        }
        uint64_t v[3];
        for (int k = 0; k < 3; k++)
            if (!gw_str2mem(argv[j + 1 + k], &v[k])) {
                *why = "Error in hard, soft or soft_seconds setting in buffer limit "
                       "configuration.";
                return -1;
            }
        next[cls] = (gw_obuf_limit_t){.hard = v[0], .soft = v[1], .soft_secs = v[2]};
    }
    memcpy(lim, next, sizeof(next));
    return 0;
}

int gw_obuf_parse(int argc, char **argv, gw_obuf_limit_t lim[GW_OBUF_CLASSES], const char **why)
{
    if (argc != 1) return parse_words(argc, argv, lim, why);
    gw_args_t a;
    if (gw_splitargs(argv[0], strlen(argv[0]), &a) != 0) {
        *why = "Wrong number of arguments in buffer limit configuration.";
        return -1;
    }
    int rc = parse_words(a.argc, a.argv, lim, why);
    gw_args_free(&a);
    return rc;
}

void gw_obuf_format(const gw_obuf_limit_t lim[GW_OBUF_CLASSES], gw_buf_t *b)
{
    for (int i = 0; i < GW_OBUF_CLASSES; i++)
        gw_buf_printf(b, "%s%s %llu %llu %llu", i ? " " : "", class_names[i],
                      (unsigned long long)lim[i].hard, (unsigned long long)lim[i].soft,
                      (unsigned long long)lim[i].soft_secs);
}
