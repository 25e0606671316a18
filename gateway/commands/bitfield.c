/* BITFIELD and BITFIELD_RO (Redis 7.0's bitfieldGeneric): GET, SET and INCRBY of signed
 * (i1..i64) or unsigned (u1..u63) integers at any bit offset ("#N": the N-th field of that
 * width), big-endian bit order as SETBIT, with OVERFLOW WRAP | SAT | FAIL for the
 * operations after it. Every argument is checked before anything runs. A command with a
 * SET or INCRBY is one read-modify-write of the key (dm_kv_rmw): the string grows with
 * zero bytes to its farthest written bit (even when FAIL leaves every field as it was),
 * keeps its expiry, and the GETs among the operations see the writes before them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands/commands.h"
#include "dmkv/errors.h"
#include "resp/reply.h"
#include "util/oom.h"
#include "util/strconv.h"

enum { BF_GET, BF_SET, BF_INCRBY };
enum { OV_WRAP, OV_SAT, OV_FAIL };

typedef struct bf_op {
    uint64_t off;  /* first bit */
    int64_t arg;   /* SET value or INCRBY increment */
    uint8_t code;  /* BF_* */
    uint8_t ov;    /* OV_*: the OVERFLOW in force */
    uint8_t bits;  /* width, 1..64 */
    uint8_t sign;  /* 1: signed */
    int64_t reply; /* the result, after a run */
    bool null;     /* FAIL refused it: the reply is a null */
} bf_op_t;

typedef struct bf_run {
    bf_op_t *ops;
    int n;
    uint64_t end; /* bytes the string needs for the farthest written bit, 0 without writes */
} bf_run_t;

static uint64_t get_field(const uint8_t *p, uint64_t off, unsigned bits)
{
    uint64_t v = 0;
    for (unsigned j = 0; j < bits; j++, off++)
        v = v << 1 | ((p[off >> 3] >> (7 - (off & 7))) & 1u);
    return v;
}

static void set_field(uint8_t *p, uint64_t off, unsigned bits, uint64_t v)
{
    for (unsigned j = 0; j < bits; j++, off++) {
        uint8_t m = (uint8_t)(1u << (7 - (off & 7)));
        if (v >> (bits - 1 - j) & 1)
            p[off >> 3] |= m;
        else
            p[off >> 3] &= (uint8_t)~m;
    }
}

/* The field's value as the integer its type says (sign-extended when signed). */
static int64_t as_int(uint64_t raw, const bf_op_t *o)
{
    if (!o->sign || o->bits == 64 || !(raw >> (o->bits - 1) & 1)) return (int64_t)raw;
    return (int64_t)(raw | ~0ull << o->bits);
}

/* base + incr for the field's type and the overflow rule (Redis's check*BitfieldOverflow):
 * false with the value to store in *out (its low bits count), or true when FAIL refuses
 * it. An unsigned SET passes its value as base: a negative one reads as 2^64 + base, over
 * every unsigned width. */
static bool add_field(const bf_op_t *o, int64_t base, int64_t incr, uint64_t *out)
{
    unsigned bits = o->bits;
    if (!o->sign) {
        uint64_t max = (1ull << bits) - 1, v = (uint64_t)base;
        bool up = v > max || (incr > 0 && (uint64_t)incr > max - v);
        bool down = !up && incr < 0 && -(uint64_t)incr > v;
        if (!up && !down) return *out = v + (uint64_t)incr, false;
        if (o->ov == OV_FAIL) return true;
        *out = o->ov == OV_WRAP ? (v + (uint64_t)incr) & max : up ? max : 0;
        return false;
    }
    int64_t max = bits == 64 ? INT64_MAX : (int64_t)((1ull << (bits - 1)) - 1), min = -max - 1;
    /* Redis's test, as it computes it: max - base and min - base in 64-bit two's complement.
     * For a SET (incr 0) of a base far below min that difference wraps, and SAT stores max,
     * not min (Redis 7.0.15 does; compat/differential compares with it). */
    int64_t maxincr = (int64_t)((uint64_t)max - (uint64_t)base);
    int64_t minincr = (int64_t)((uint64_t)min - (uint64_t)base);
    bool up =
        base > max || (bits != 64 && incr > maxincr) || (base >= 0 && incr > 0 && incr > maxincr);
    bool down = !up && (base < min || (bits != 64 && incr < minincr) ||
                        (base < 0 && incr < 0 && incr < minincr));
    if (!up && !down) return *out = (uint64_t)base + (uint64_t)incr, false;
    if (o->ov == OV_FAIL) return true;
    /* WRAP: two's complement addition, cut to the width by the caller */
    *out = o->ov == OV_WRAP ? (uint64_t)base + (uint64_t)incr : (uint64_t)(up ? max : min);
    return false;
}

/* Run every operation on p (at least run->end bytes, or len bytes for reads only); fields
 * past len read as 0. Returns whether a written field changed. */
static bool run_ops(bf_run_t *run, uint8_t *p, size_t len)
{
    bool changed = false;
    for (int i = 0; i < run->n; i++) {
        bf_op_t *o = &run->ops[i];
        uint8_t tmp[9] = {0}; /* a GET past the end reads zeros */
        uint64_t first = o->off >> 3;
        const uint8_t *src = p;
        uint64_t off = o->off;
        if (o->code == BF_GET && first + 9 > len) {
            for (uint64_t k = 0; k < 9 && first + k < len; k++)
                tmp[k] = p[first + k];
            src = tmp;
            off -= first * 8;
        }
        uint64_t raw = get_field(src, off, o->bits);
        int64_t cur = as_int(raw, o);
        o->null = false;
        if (o->code == BF_GET) {
            o->reply = cur;
            continue;
        }
        uint64_t next;
        bool incrby = o->code == BF_INCRBY;
        if (add_field(o, incrby ? cur : o->arg, incrby ? o->arg : 0, &next)) {
            o->null = true;
            continue;
        }
        uint64_t mask = o->bits == 64 ? ~0ull : (1ull << o->bits) - 1;
        next &= mask;
        o->reply = incrby ? as_int(next, o) : cur;
        changed |= next != raw;
        set_field(p, o->off, o->bits, next);
    }
    return changed;
}

static int rmw_fn(void *arg, const dm_value_t *cur, dm_value_t *out)
{
    bf_run_t *run = arg;
    size_t olen = cur ? cur->len : 0, nlen = olen > run->end ? olen : (size_t)run->end;
    out->data = gw_try_calloc(1, nlen ? nlen : 1);
    if (!out->data) return DM_RMW_ABORT;
    if (olen) memcpy(out->data, cur->data, olen);
    bool changed = run_ops(run, out->data, nlen);
    if (cur && nlen == olen && !changed) {
        free(out->data);
        out->data = NULL;
        return DM_RMW_KEEP;
    }
    out->len = nlen;
    out->expire_ms = cur ? cur->expire_ms : 0;
    return DM_RMW_WRITE;
}

/* Parse argv[2..] into run; false after replying the first error (Redis's order). */
static bool parse_ops(gw_conn_t *c, gw_cmd_t *cmd, bf_run_t *run)
{
    int ov = OV_WRAP;
    for (int j = 2; j < cmd->argc; j++) {
        int left = cmd->argc - j - 1, code;
        const char *sub = cmd->argv[j];
        if (!strcasecmp(sub, "get") && left >= 2) {
            code = BF_GET;
        } else if (!strcasecmp(sub, "set") && left >= 3) {
            code = BF_SET;
        } else if (!strcasecmp(sub, "incrby") && left >= 3) {
            code = BF_INCRBY;
        } else if (!strcasecmp(sub, "overflow") && left >= 1) {
            const char *t = cmd->argv[++j];
            ov = !strcasecmp(t, "wrap")   ? OV_WRAP
                 : !strcasecmp(t, "sat")  ? OV_SAT
                 : !strcasecmp(t, "fail") ? OV_FAIL
                                          : -1;
            if (ov < 0) {
                reply_error(gw_conn_out(c), "ERR Invalid OVERFLOW type specified");
                return false;
            }
            continue;
        } else {
            reply_error(gw_conn_out(c), "ERR syntax error");
            return false;
        }
        const char *t = cmd->argv[j + 1];
        long long bits;
        bool sign = t[0] == 'i';
        if ((t[0] != 'i' && t[0] != 'u') || !gw_str2ll(t + 1, strlen(t + 1), &bits) || bits < 1 ||
            bits > (sign ? 64 : 63)) {
            reply_error(gw_conn_out(c), "ERR Invalid bitfield type. Use something like i16 u8. "
                                        "Note that u64 is not supported but i64 is.");
            return false;
        }
        unsigned long long off;
        if (!gw_bit_offset(c, cmd, j + 2, (int)bits, &off)) return false;
        long long arg = 0;
        if (code != BF_GET) {
            if (!gw_arg_ll(c, cmd, j + 3, &arg)) return false;
            uint64_t end = (off + (uint64_t)bits - 1) / 8 + 1;
            if (end > run->end) run->end = end;
        }
        bf_op_t *ops = gw_try_realloc(run->ops, sizeof(*ops) * (size_t)(run->n + 1));
        if (!ops) {
            gw_reply_dm_error(c, DM_ENOMEM);
            return false;
        }
        run->ops = ops;
        ops[run->n++] = (bf_op_t){.off = off,
                                  .arg = arg,
                                  .code = (uint8_t)code,
                                  .ov = (uint8_t)ov,
                                  .bits = (uint8_t)bits,
                                  .sign = sign};
        j += code == BF_GET ? 2 : 3;
    }
    return true;
}

static void reply_ops(gw_conn_t *c, const bf_run_t *run)
{
    gw_buf_t *out = gw_conn_out(c);
    reply_array(out, run->n);
    for (int i = 0; i < run->n; i++)
        if (run->ops[i].null)
            gw_reply_null(c);
        else
            reply_int(out, run->ops[i].reply);
}

static void bitfield(gw_conn_t *c, gw_cmd_t *cmd, bool ro)
{
    bf_run_t run = {0};
    if (!parse_ops(c, cmd, &run)) goto out;
    if (run.end && ro) {
        reply_error(gw_conn_out(c), "ERR BITFIELD_RO only supports the GET subcommand");
        goto out;
    }
    if (!run.end) { /* GETs only: a plain read, a missing key reads as zeros */
        dm_value_t v;
        int rc = gw_get_key(c, cmd, &v);
        if (rc < 0) goto out;
        run_ops(&run, rc ? v.data : NULL, rc ? v.len : 0);
        if (rc) dm_value_free(&v);
        reply_ops(c, &run);
        goto out;
    }
    int act;
    if (!gw_rmw_key(c, cmd, rmw_fn, &run, &act)) goto out;
    if (act == DM_RMW_ABORT)
        gw_reply_dm_error(c, DM_ENOMEM);
    else
        reply_ops(c, &run);
out:
    free(run.ops);
}

void cmd_bitfield(gw_conn_t *c, gw_cmd_t *cmd)
{
    bitfield(c, cmd, false);
}

void cmd_bitfield_ro(gw_conn_t *c, gw_cmd_t *cmd)
{
    bitfield(c, cmd, true);
}
