/* dmkv error codes shared by every dmcore module. Functions return 0 or a negative DM_E*. */
#ifndef DMKV_ERRORS_H
#define DMKV_ERRORS_H

enum {
    DM_OK = 0,
    DM_EINVAL = -1,      /* malformed request or argument */
    DM_ERANGE = -2,      /* address or length outside the memory node's region */
    DM_EALIGN = -3,      /* atomic verb on an address that is not 8-byte aligned */
    DM_EIO = -4,         /* connection to a memory node lost or broken */
    DM_ETIMEDOUT = -5,   /* memory node did not answer in time */
    DM_ENOMEM = -6,      /* memory pool full (Redis: -OOM) */
    DM_EFULL = -7,       /* RACE: no free slot in either combined bucket */
    DM_ERETRY = -8,      /* operation outlived the reclamation grace period; restart it */
    DM_EPROTO = -9,      /* peer spoke an incompatible protocol version */
    DM_ETOOBIG = -10,    /* value or key larger than supported */
    DM_EAUTH = -11,      /* memory node rejected the auth token */
    DM_ECORRUPT = -12,   /* a block or index node kept failing its check */
    DM_ECONFLICT = -13,  /* a guarded (WATCHed) key changed: the write was not done */
    DM_ELOST = -14,      /* a memory node came back without its memory (new incarnation) */
    DM_ESKIPPED = -15,   /* a chained verb not executed: an earlier verb of its chain failed */
    DM_EYIELD = -16,     /* an early lock's holder gave its turn wait up (dmkv/coro.h) */
    DM_ELATE = -17,      /* a lease holder's batch not sent: its send-by bound passed first
                            (dm_conn_t.send_by_us); nothing of it executed */
    DM_EINDEXFULL = -18, /* an index of fixed room has none left (ROLEX's leaf region): the
                            pool may have memory, the index cannot use it */
};

/* Short human-readable text for a DM_E* code (static string). */
const char *dm_strerror(int err);

#endif
