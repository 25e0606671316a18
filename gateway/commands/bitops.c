/* BITCOUNT, BITPOS and BITOP on string values, with Redis 7.0's replies (bitops.c there):
 * bit 0 is the most significant bit of byte 0; ranges count in bytes, or in bits with BIT;
 * negative indexes count from the end. BITCOUNT and BITPOS read one key. BITOP reads its
 * sources one after the other, then writes the destination (each read linearizable, the
 * set of them not one instant, as MGET and LCS; README "Transactions"). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "dmkv/kv.h"
#include "resp/reply.h"
#include "util/oom.h"
#include "util/strconv.h"

/* BYTE or BIT in argv[i]: *isbit set and true, or "ERR syntax error" replied. */
static bool unit_arg(gw_conn_t *c, gw_cmd_t *cmd, int i, bool *isbit)
{
    if (!strcasecmp(cmd->argv[i], "bit"))
        *isbit = true;
    else if (!strcasecmp(cmd->argv[i], "byte"))
        *isbit = false;
    else {
        reply_error(gw_conn_out(c), "ERR syntax error");
        return false;
    }
    return true;
}

/* [start, end] in units of a string of total units, negative indexes from its end, as a
 * range of bits [*sb, *eb] (isbit: the units are bits, else bytes). False when empty. */
static bool bit_range(long long total, bool isbit, long long start, long long end, uint64_t *sb,
                      uint64_t *eb)
{
    if (!gw_clamp_range(total, &start, &end)) return false;
    *sb = isbit ? (uint64_t)start : (uint64_t)start * 8;
    *eb = isbit ? (uint64_t)end : (uint64_t)end * 8 + 7;
    return true;
}

/* Set bits of p in bits [sb, eb]. */
static long long count_bits(const uint8_t *p, uint64_t sb, uint64_t eb)
{
    uint64_t b0 = sb >> 3, b1 = eb >> 3;
    uint8_t head = (uint8_t)(0xffu >> (sb & 7)), tail = (uint8_t)(0xffu << (7 - (eb & 7)));
    if (b0 == b1) return __builtin_popcount(p[b0] & head & tail);
    long long n = __builtin_popcount(p[b0] & head) + __builtin_popcount(p[b1] & tail);
    uint64_t i = b0 + 1;
    for (; i + 8 <= b1; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        n += __builtin_popcountll(w);
    }
    for (; i < b1; i++)
        n += __builtin_popcount(p[i]);
    return n;
}

/* The first bit of p in [sb, eb] equal to bit, or -1. */
static long long find_bit(const uint8_t *p, uint64_t sb, uint64_t eb, int bit)
{
    const uint8_t skip = bit ? 0x00 : 0xff; /* a byte without the bit sought */
    uint64_t i = sb;
    while (i <= eb) {
        if ((i & 63) == 0 && i + 63 <= eb) {
            uint64_t w;
            memcpy(&w, p + (i >> 3), 8);
            if (w == (bit ? 0 : ~0ull)) {
                i += 64;
                continue;
            }
        }
        if ((i & 7) == 0 && i + 7 <= eb && p[i >> 3] == skip) {
            i += 8;
            continue;
        }
        if (((p[i >> 3] >> (7 - (i & 7))) & 1) == bit) return (long long)i;
        i++;
    }
    return -1;
}

/* BITCOUNT key [start end [BYTE | BIT]]. As in Redis 7.0 the key is read first: a missing
 * key answers 0 whatever the range arguments. */
void cmd_bitcount(gw_conn_t *c, gw_cmd_t *cmd)
{
    dm_value_t v;
    int rc = gw_get_key_at(c, cmd, 1, &v);
    if (rc <= 0) {
        if (rc == 0) reply_int(gw_conn_out(c), 0);
        return;
    }
    long long total = (long long)v.len, start = 0, end = total - 1;
    bool isbit = false;
    if (cmd->argc == 4 || cmd->argc == 5) {
        if (!gw_arg_ll(c, cmd, 2, &start) || !gw_arg_ll(c, cmd, 3, &end)) goto out;
        if (start < 0 && end < 0 && start > end) { /* before the unit is looked at */
            reply_int(gw_conn_out(c), 0);
            goto out;
        }
        if (cmd->argc == 5 && !unit_arg(c, cmd, 4, &isbit)) goto out;
    } else if (cmd->argc != 2) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        goto out;
    }
    uint64_t sb = 0, eb = 0;
    bool empty = !bit_range(isbit ? total * 8 : total, isbit, start, end, &sb, &eb);
    reply_int(gw_conn_out(c), empty ? 0 : count_bits(v.data, sb, eb));
out:
    dm_value_free(&v);
}

/* BITPOS key bit [start [end [BYTE | BIT]]]: the first bit set to bit in the range. A missing
 * key is an endless run of 0 bits (0 for bit 0, -1 for bit 1); without an end, the bits past
 * the string count as 0 too, so a search for 0 in all-ones answers the bit after it. */
void cmd_bitpos(gw_conn_t *c, gw_cmd_t *cmd)
{
    long long bit;
    if (!gw_arg_ll(c, cmd, 2, &bit)) return;
    if (bit != 0 && bit != 1) {
        reply_error(gw_conn_out(c), "ERR The bit argument must be 1 or 0.");
        return;
    }
    dm_value_t v;
    int rc = gw_get_key_at(c, cmd, 1, &v);
    if (rc <= 0) {
        if (rc == 0) reply_int(gw_conn_out(c), bit ? -1 : 0);
        return;
    }
    long long total = (long long)v.len, start = 0, end = -1;
    bool isbit = false, end_given = cmd->argc >= 5;
    if (cmd->argc >= 4 && cmd->argc <= 6) {
        if (!gw_arg_ll(c, cmd, 3, &start)) goto out;
        if (cmd->argc == 6 && !unit_arg(c, cmd, 5, &isbit)) goto out;
        if (end_given && !gw_arg_ll(c, cmd, 4, &end)) goto out;
    } else if (cmd->argc != 3) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        goto out;
    }
    uint64_t sb = 0, eb = 0;
    long long pos = -1;
    if (bit_range(isbit ? total * 8 : total, isbit, start, end, &sb, &eb)) {
        pos = find_bit(v.data, sb, eb, (int)bit);
        if (pos < 0 && bit == 0 && !end_given) pos = (long long)eb + 1;
    }
    reply_int(gw_conn_out(c), pos);
out:
    dm_value_free(&v);
}

enum { OP_AND, OP_OR, OP_XOR, OP_NOT };

/* dst[0, len) = op over the n sources, each zero-padded to len. */
static void bit_op(int op, uint8_t *dst, size_t len, const dm_value_t *src, int n)
{
    for (size_t i = 0; i < len; i++) {
        uint8_t x = i < src[0].len ? src[0].data[i] : 0;
        if (op == OP_NOT) x = (uint8_t)~x;
        for (int j = 1; j < n; j++) {
            uint8_t y = i < src[j].len ? src[j].data[i] : 0;
            x = op == OP_AND ? x & y : op == OP_OR ? x | y : x ^ y;
        }
        dst[i] = x;
    }
}

/* BITOP AND | OR | XOR | NOT destkey key [key ...]: missing keys are empty strings, shorter
 * ones zero-padded; the destination gets the result without expiry, or is deleted when the
 * result is empty. Replies the result's length in bytes. */
void cmd_bitop(gw_conn_t *c, gw_cmd_t *cmd)
{
    static const char *const names[] = {"and", "or", "xor", "not"};
    int op = -1;
    for (int i = 0; i < 4 && op < 0; i++)
        if (!strcasecmp(cmd->argv[1], names[i])) op = i;
    if (op < 0) {
        reply_error(gw_conn_out(c), "ERR syntax error");
        return;
    }
    if (op == OP_NOT && cmd->argc != 4) {
        reply_error(gw_conn_out(c), "ERR BITOP NOT must be called with a single source key.");
        return;
    }
    int n = cmd->argc - 3;
    dm_value_t *src = gw_try_calloc((size_t)n, sizeof(*src));
    if (!src) {
        reply_error(gw_conn_out(c), "ERR Insufficient memory, failed allocating transient "
                                    "memory for BITOP");
        return;
    }
    size_t len = 0;
    int got = 0;
    for (; got < n; got++) {
        if (gw_get_key_at(c, cmd, 3 + got, &src[got]) < 0) goto out;
        if (src[got].len > len) len = src[got].len;
    }
    dm_ctx_t ctx;
    if (len == 0) {
        dm_ctx_init(&ctx, c->th->w, DM_CLS_DEL);
        int rc = dm_kv_del(&ctx, cmd->argv[2], cmd->argvlen[2]);
        dm_stats_op(DM_CLS_DEL);
        if (rc < 0)
            gw_reply_dm_error(c, rc);
        else
            reply_int(gw_conn_out(c), 0);
        goto out;
    }
    uint8_t *res = gw_try_malloc(len);
    if (!res) {
        reply_error(gw_conn_out(c), "ERR Insufficient memory, failed allocating transient "
                                    "memory for BITOP");
        goto out;
    }
    bit_op(op, res, len, src, n);
    dm_ctx_init(&ctx, c->th->w, DM_CLS_SET);
    int rc = dm_kv_set(&ctx, cmd->argv[2], cmd->argvlen[2], res, len, 0, 0, NULL);
    dm_stats_op(DM_CLS_SET);
    free(res);
    if (rc < 0)
        gw_reply_dm_error(c, rc);
    else
        reply_int(gw_conn_out(c), (long long)len);
out:
    for (int i = 0; i < got; i++)
        dm_value_free(&src[i]);
    free(src);
}
