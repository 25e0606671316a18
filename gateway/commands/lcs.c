/* LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN] (Redis 7.0's t_string.c
 * lcsCommand): the longest common subsequence of two strings by the usual dynamic
 * programming table, its length, or the matching ranges from the end of the strings
 * backwards. Missing keys are empty strings. The two values are read one after the
 * other (each read linearizable, the pair not one instant, as MGET). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "resp/reply.h"
#include "util/strconv.h"

#define MAX_TABLE 536870912ull /* proto-max-bulk-len: Redis bounds the table by it, bytes */

/* One match as IDX reports it: [[a_start, a_end], [b_start, b_end]] (+ its length). */
static void reply_range(gw_conn_t *c, uint32_t as, uint32_t ae, uint32_t bs, uint32_t be,
                        bool withlen)
{
    gw_buf_t *out = gw_conn_out(c);
    reply_array(out, 2 + withlen);
    reply_array(out, 2);
    reply_int(out, as);
    reply_int(out, ae);
    reply_array(out, 2);
    reply_int(out, bs);
    reply_int(out, be);
    if (withlen) reply_int(out, (long long)(ae - as + 1));
}

void cmd_lcs(gw_conn_t *c, gw_cmd_t *cmd)
{
    bool getlen = false, getidx = false, withlen = false;
    long long minlen = 0;
    for (int j = 3; j < cmd->argc; j++) {
        const char *opt = cmd->argv[j];
        if (!strcasecmp(opt, "idx")) {
            getidx = true;
        } else if (!strcasecmp(opt, "len")) {
            getlen = true;
        } else if (!strcasecmp(opt, "withmatchlen")) {
            withlen = true;
        } else if (!strcasecmp(opt, "minmatchlen") && j + 1 < cmd->argc) {
            if (!gw_arg_ll(c, cmd, j + 1, &minlen)) return;
            if (minlen < 0) minlen = 0;
            j++;
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return;
        }
    }
    if (getidx && getlen) {
        reply_error(gw_conn_out(c),
                    "ERR If you want both the length and indexes, please just use IDX.");
        return;
    }
    dm_value_t va, vb;
    if (gw_get_key_at(c, cmd, 1, &va) < 0) return; /* absent: an empty string */
    if (gw_get_key_at(c, cmd, 2, &vb) < 0) {
        dm_value_free(&va);
        return;
    }
    const uint8_t *a = (const uint8_t *)va.data, *b = (const uint8_t *)vb.data;
    uint32_t alen = (uint32_t)va.len, blen = (uint32_t)vb.len;
    uint64_t cells = (uint64_t)(alen + 1) * (blen + 1);
    uint32_t *dp = NULL;
    if (cells * sizeof(uint32_t) > MAX_TABLE) {
        reply_error(gw_conn_out(c), "ERR Insufficient memory, transient memory for LCS exceeds "
                                    "proto-max-bulk-len");
        goto done;
    }
    dp = malloc(cells * sizeof(uint32_t));
    if (!dp) {
        reply_error(gw_conn_out(c), "ERR Insufficient memory, failed allocating transient "
                                    "memory for LCS");
        goto done;
    }
#define LCS(I, J) dp[(J) + (uint64_t)(I) * (blen + 1)]
    for (uint32_t i = 0; i <= alen; i++)
        for (uint32_t j = 0; j <= blen; j++) {
            if (i == 0 || j == 0)
                LCS(i, j) = 0;
            else if (a[i - 1] == b[j - 1])
                LCS(i, j) = LCS(i - 1, j - 1) + 1;
            else
                LCS(i, j) = LCS(i - 1, j) > LCS(i, j - 1) ? LCS(i - 1, j) : LCS(i, j - 1);
        }
    uint32_t idx = LCS(alen, blen), total = idx;
    if (getlen) {
        reply_int(gw_conn_out(c), idx);
        goto done;
    }
    char *result = malloc(idx ? idx : 1);
    /* The matches IDX reports, found from the end backwards (at most one per LCS byte). */
    typedef struct range {
        uint32_t as, ae, bs, be;
    } range_t;
    range_t *ranges = malloc(sizeof(range_t) * (idx ? idx : 1));
    if (!result || !ranges) abort();
    size_t nranges = 0;
    uint32_t as = alen, ae = 0, bs = 0, be = 0; /* as == alen: no range open */
    uint32_t i = alen, j = blen;
    while (i > 0 && j > 0) {
        bool emit = false;
        if (a[i - 1] == b[j - 1]) {
            result[idx - 1] = (char)a[i - 1];
            if (as == alen) {
                as = ae = i - 1;
                bs = be = j - 1;
            } else if (as == i && bs == j) { /* contiguous: extend backwards */
                as--;
                bs--;
            } else {
                emit = true;
            }
            if (as == 0 || bs == 0) emit = true;
            idx--, i--, j--;
        } else {
            if (LCS(i - 1, j) > LCS(i, j - 1))
                i--;
            else
                j--;
            if (as != alen) emit = true;
        }
        if (emit) {
            if (minlen == 0 || (long long)(ae - as + 1) >= minlen)
                ranges[nranges++] = (range_t){as, ae, bs, be};
            as = alen;
        }
    }
    if (getidx) {
        gw_reply_map(c, 2);
        reply_bulk_cstr(gw_conn_out(c), "matches");
        reply_array(gw_conn_out(c), (long long)nranges);
        for (size_t k = 0; k < nranges; k++)
            reply_range(c, ranges[k].as, ranges[k].ae, ranges[k].bs, ranges[k].be, withlen);
        reply_bulk_cstr(gw_conn_out(c), "len");
        reply_int(gw_conn_out(c), total);
    } else {
        reply_bulk(gw_conn_out(c), result, total);
    }
    free(ranges);
    free(result);
done:
    free(dp);
    dm_value_free(&va);
    dm_value_free(&vb);
}
