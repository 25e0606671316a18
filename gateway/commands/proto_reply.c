/* Replies whose encoding depends on the connection's protocol (RESP2 / RESP3). */
#include "commands/commands.h"
#include "resp/reply.h"

void gw_reply_null(gw_conn_t *c)
{
    if (c->resp == 3)
        reply_null3(&c->out);
    else
        reply_null(&c->out);
}

void gw_reply_null_array(gw_conn_t *c)
{
    if (c->resp == 3)
        reply_null3(&c->out);
    else
        reply_null_array(&c->out);
}

void gw_reply_map(gw_conn_t *c, long long n)
{
    if (c->resp == 3)
        reply_map(&c->out, n);
    else
        reply_array(&c->out, 2 * n);
}

void gw_reply_set(gw_conn_t *c, long long n)
{
    if (c->resp == 3)
        reply_set(&c->out, n);
    else
        reply_array(&c->out, n);
}

void gw_reply_verbatim(gw_conn_t *c, const void *p, size_t len)
{
    if (c->resp == 3)
        reply_verbatim(&c->out, p, len);
    else
        reply_bulk(&c->out, p, len);
}
