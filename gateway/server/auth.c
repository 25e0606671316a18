/* The process's requirepass, shared by every worker thread (under a mutex). */
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "server/server.h"

static uv_mutex_t pass_lock;
static uv_once_t pass_once = UV_ONCE_INIT;
static char *pass;      /* NULL when no password is required */
static size_t pass_len; /* bytes */

static void pass_init(void)
{
    uv_mutex_init(&pass_lock);
}

bool gw_server_requirepass_set(void)
{
    uv_once(&pass_once, pass_init);
    uv_mutex_lock(&pass_lock);
    bool set = pass != NULL;
    uv_mutex_unlock(&pass_lock);
    return set;
}

bool gw_server_check_pass(const char *p, size_t len)
{
    uv_once(&pass_once, pass_init);
    uv_mutex_lock(&pass_lock);
    bool ok = pass && len == pass_len;
    unsigned char diff = 0;
    for (size_t i = 0; ok && i < len; i++)
        diff |= (unsigned char)(pass[i] ^ p[i]);
    ok = ok && diff == 0;
    uv_mutex_unlock(&pass_lock);
    return ok;
}

void gw_server_set_requirepass(const char *p, size_t len)
{
    uv_once(&pass_once, pass_init);
    char *np = NULL;
    if (len) {
        np = malloc(len + 1);
        if (!np) abort();
        memcpy(np, p, len);
        np[len] = 0;
    }
    uv_mutex_lock(&pass_lock);
    free(pass);
    pass = np;
    pass_len = len;
    uv_mutex_unlock(&pass_lock);
}

void gw_server_get_requirepass(gw_buf_t *b)
{
    uv_once(&pass_once, pass_init);
    uv_mutex_lock(&pass_lock);
    if (pass) gw_buf_append(b, pass, pass_len);
    uv_mutex_unlock(&pass_lock);
}
