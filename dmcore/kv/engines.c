/* The one place that names the concrete index engines a worker uses: RACE as the point
 * index, CHIME as the range index (docs/DESIGN.md), attached by dm_kv_worker_create (kv.h).
 * The worker itself knows no index, so pool/ does not depend on race/ or chime/. */
#include <stdio.h>

#include "dmkv/chime.h"
#include "dmkv/errors.h"
#include "dmkv/kv.h"
#include "dmkv/race.h"
#include "keyq.h"

static void detach(dm_worker_t *w)
{
    dm_race_detach(w->race);
    dm_chime_detach(w->chime);
    dm_keyq_destroy(w->keyq);
    w->race = NULL;
    w->chime = NULL;
    w->keyq = NULL;
}

dm_worker_t *dm_kv_worker_create(uv_loop_t *loop, const char *const *uris, unsigned n, char *err,
                                 size_t errlen)
{
    dm_worker_t *w = dm_worker_create(loop, uris, n, err, errlen);
    if (!w) return NULL;
    w->detach = detach;
    w->keyq = dm_keyq_create();
    if (!w->keyq) {
        snprintf(err, errlen, "out of memory");
        dm_worker_destroy(w);
        return NULL;
    }
    dm_ctx_t ctx;
    dm_ctx_init(&ctx, w, DM_CLS_ADMIN);
    int rc = dm_race_attach(&ctx, &w->race);
    if (rc) {
        snprintf(err, errlen, "cannot attach to the RACE table: %s", dm_strerror(rc));
        dm_worker_destroy(w);
        return NULL;
    }
    rc = dm_chime_attach(&ctx, &w->chime);
    if (rc) {
        snprintf(err, errlen, "cannot attach to the CHIME tree: %s", dm_strerror(rc));
        dm_worker_destroy(w);
        return NULL;
    }
    return w;
}
