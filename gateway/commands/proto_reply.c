/* Replies whose encoding depends on the connection's protocol (RESP2 / RESP3). */
#include "commands/commands.h"
#include "resp/reply.h"

void gw_reply_null(gw_conn_t *c)
{
    if (c->resp == 3)
        reply_null3(gw_conn_out(c));
    else
        reply_null(gw_conn_out(c));
}

void gw_reply_null_array(gw_conn_t *c)
{
    if (c->resp == 3)
        reply_null3(gw_conn_out(c));
    else
        reply_null_array(gw_conn_out(c));
}

void gw_reply_map(gw_conn_t *c, long long n)
{
    if (c->resp == 3)
        reply_map(gw_conn_out(c), n);
    else
        reply_array(gw_conn_out(c), 2 * n);
}

void gw_reply_set(gw_conn_t *c, long long n)
{
    if (c->resp == 3)
        reply_set(gw_conn_out(c), n);
    else
        reply_array(gw_conn_out(c), n);
}

void gw_reply_verbatim(gw_conn_t *c, const void *p, size_t len)
{
    if (c->resp == 3)
        reply_verbatim(gw_conn_out(c), p, len);
    else
        reply_bulk(gw_conn_out(c), p, len);
}
