/* SETBIT and GETBIT on string values (Redis 7.0 bitops.c): bit 0 is the most significant
 * bit of byte 0; SETBIT grows the string with zero bytes and keeps the key's expiry. */
#include <stdlib.h>
#include <string.h>

#include "commands/commands.h"
#include "dmkv/errors.h"
#include "resp/reply.h"
#include "util/strconv.h"

#define MAX_BITS (536870912ULL * 8) /* proto-max-bulk-len in bits */

bool gw_bit_offset(gw_conn_t *c, gw_cmd_t *cmd, int i, int width, unsigned long long *off)
{
    const char *s = cmd->argv[i];
    size_t n = cmd->argvlen[i];
    bool fields = width > 0 && n > 0 && s[0] == '#';
    long long v;
    if (!gw_str2ll(s + fields, n - fields, &v) ||
        (fields && __builtin_mul_overflow(v, width, &v)) || v < 0 ||
        (unsigned long long)v >= MAX_BITS) {
        reply_error(gw_conn_out(c), "ERR bit offset is not an integer or out of range");
        return false;
    }
    *off = (unsigned long long)v;
    return true;
}

typedef struct setbit_arg {
    unsigned long long off;
    int bit;
    int old; /* the bit before */
} setbit_arg_t;

static int setbit_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    setbit_arg_t *a = arg;
    size_t byte = (size_t)(a->off >> 3);
    uint8_t mask = (uint8_t)(1u << (7 - (a->off & 7)));
    size_t olen = cur ? cur->len : 0;
    a->old = byte < olen && (((const uint8_t *)cur->data)[byte] & mask);
    if (a->old == a->bit && byte < olen) return DM_RMW_KEEP;
    size_t nlen = byte < olen ? olen : byte + 1;
    out->data = calloc(1, nlen);
    if (!out->data) return DM_RMW_ABORT;
    if (olen) memcpy(out->data, cur->data, olen);
    if (a->bit)
        out->data[byte] |= mask;
    else
        out->data[byte] &= (uint8_t)~mask;
    out->len = nlen;
    out->expire_ms = cur ? cur->expire_ms : 0;
    return DM_RMW_WRITE;
}

void cmd_setbit(gw_conn_t *c, gw_cmd_t *cmd)
{
    setbit_arg_t a = {0};
    if (!gw_bit_offset(c, cmd, 2, 0, &a.off)) return;
    if (cmd->argvlen[3] != 1 || (cmd->argv[3][0] != '0' && cmd->argv[3][0] != '1')) {
        reply_error(gw_conn_out(c), "ERR bit is not an integer or out of range");
        return;
    }
    a.bit = cmd->argv[3][0] == '1';
    int act;
    if (!gw_rmw_key(c, cmd, setbit_fn, &a, &act)) return;
    if (act == DM_RMW_ABORT)
        gw_reply_dm_error(c, DM_ENOMEM);
    else
        reply_int(gw_conn_out(c), a.old);
}

void cmd_getbit(gw_conn_t *c, gw_cmd_t *cmd)
{
    unsigned long long off;
    if (!gw_bit_offset(c, cmd, 2, 0, &off)) return;
    dm_value_t v;
    int rc = gw_get_key(c, cmd, &v);
    if (rc < 0) return;
    size_t byte = (size_t)(off >> 3);
    int bit = rc && byte < v.len && (((const uint8_t *)v.data)[byte] >> (7 - (off & 7)) & 1);
    if (rc) dm_value_free(&v);
    reply_int(gw_conn_out(c), bit);
}
