#include "dmkv/errors.h"

const char *dm_strerror(int err)
{
    switch (err) {
    case DM_OK:
        return "ok";
    case DM_EINVAL:
        return "invalid request";
    case DM_ERANGE:
        return "address out of range";
    case DM_EALIGN:
        return "misaligned atomic";
    case DM_EIO:
        return "memory node connection lost";
    case DM_ETIMEDOUT:
        return "memory node timed out";
    case DM_ENOMEM:
        return "memory pool full";
    case DM_EFULL:
        return "hash table full";
    case DM_ERETRY:
        return "operation restarted too often";
    case DM_EPROTO:
        return "protocol version mismatch";
    case DM_ETOOBIG:
        return "item too large";
    case DM_EAUTH:
        return "memory node rejected the auth token";
    case DM_ECORRUPT:
        /* KV blocks, CHIME and ROLEX nodes, SepHash segments: the gateway's log names which
         * (ROLEX: RX_CORRUPT) */
        return "data in the pool failed its check (a torn or corrupt block or index node)";
    case DM_ECONFLICT:
        return "a watched key changed during EXEC";
    case DM_ELOST:
        return "a memory node restarted without its data (new incarnation); the pool's data "
               "on it is gone: restore the node and restart the gateways";
    case DM_ESKIPPED:
        return "chained verb skipped: an earlier verb of its chain failed";
    case DM_EYIELD:
        return "an early lock's holder gave way to an earlier command";
    case DM_ELATE:
        return "a lock holder's write was not sent: its lease ended first";
    case DM_EINDEXFULL:
        return "the range index has no free leaf left in its leaf region";
    default:
        return "unknown error";
    }
}
