/* MONITOR (monitor.h). */
#include "server/monitor.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "dmkv/log.h"

#define MAX_MONITORS 64
#define MAX_PENDING (64u << 20) /* bytes waiting for one monitor: past it, it is dropped */

static uv_mutex_t lock; /* the list; a monitor's pending lines are under its th->lock */
static uv_once_t once = UV_ONCE_INIT;
static gw_conn_t *monitors[MAX_MONITORS];
static int nmonitors; /* atomic reads outside the lock */

static void init(void)
{
    uv_mutex_init(&lock);
}

void gw_monitor_add(gw_conn_t *c)
{
    uv_once(&once, init);
    uv_mutex_lock(&lock);
    if (!c->monitor && nmonitors < MAX_MONITORS) {
        __atomic_store_n(&c->monitor, true, __ATOMIC_RELAXED); /* CLIENT LIST reads it */
        monitors[nmonitors] = c;
        __atomic_store_n(&nmonitors, nmonitors + 1, __ATOMIC_RELEASE);
    }
    uv_mutex_unlock(&lock);
}

void gw_monitor_remove(gw_conn_t *c)
{
    if (!c->monitor) return;
    uv_once(&once, init);
    uv_mutex_lock(&lock);
    for (int i = 0; i < nmonitors; i++)
        if (monitors[i] == c) {
            monitors[i] = monitors[nmonitors - 1];
            __atomic_store_n(&nmonitors, nmonitors - 1, __ATOMIC_RELEASE);
            break;
        }
    __atomic_store_n(&c->monitor, false, __ATOMIC_RELAXED);
    uv_mutex_unlock(&lock);
    uv_mutex_lock(&c->th->lock);
    gw_buf_free(&c->monitor_feed);
    uv_mutex_unlock(&c->th->lock);
}

/* One argument as Redis's sdscatrepr quotes it. */
static void append_repr(gw_buf_t *b, const char *p, size_t len)
{
    gw_buf_puts(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)p[i];
        switch (ch) {
        case '\\':
            gw_buf_puts(b, "\\\\");
            break;
        case '"':
            gw_buf_puts(b, "\\\"");
            break;
        case '\n':
            gw_buf_puts(b, "\\n");
            break;
        case '\r':
            gw_buf_puts(b, "\\r");
            break;
        case '\t':
            gw_buf_puts(b, "\\t");
            break;
        case '\a':
            gw_buf_puts(b, "\\a");
            break;
        case '\b':
            gw_buf_puts(b, "\\b");
            break;
        default:
            if (isprint(ch))
                gw_buf_append(b, &ch, 1);
            else
                gw_buf_printf(b, "\\x%02x", ch);
        }
    }
    gw_buf_puts(b, "\"");
}

/* Arguments that carry a password: AUTH's, and HELLO's after its AUTH option. */
static bool redacted(const gw_command_t *gc, const gw_cmd_t *cmd, int i)
{
    if (gc->proc == cmd_auth) return i >= 1;
    if (gc->proc != cmd_hello) return false;
    for (int j = 2; j + 2 < cmd->argc && j < i; j++)
        if (!strcasecmp(cmd->argv[j], "auth") && (i == j + 1 || i == j + 2)) return true;
    return false;
}

void gw_monitor_feed(gw_conn_t *from, const gw_command_t *gc, const gw_cmd_t *cmd)
{
    if (!__atomic_load_n(&nmonitors, __ATOMIC_ACQUIRE) || gw_command_has(gc, GW_CF_ADMIN)) return;
    gw_buf_t line;
    gw_buf_init(&line);
    struct timespec now;
    timespec_get(&now, TIME_UTC);
    gw_buf_printf(&line, "+%lld.%06ld [0 %s]", (long long)now.tv_sec, now.tv_nsec / 1000,
                  from->addr);
    for (int i = 0; i < cmd->argc; i++) {
        gw_buf_puts(&line, " ");
        if (redacted(gc, cmd, i))
            gw_buf_puts(&line, "\"(redacted)\"");
        else
            append_repr(&line, cmd->argv[i], cmd->argvlen[i]);
    }
    gw_buf_puts(&line, "\r\n");
    uv_mutex_lock(&lock);
    for (int i = 0; i < nmonitors; i++) {
        gw_conn_t *m = monitors[i];
        uv_mutex_lock(&m->th->lock);
        if (m->monitor_feed.len + line.len <= MAX_PENDING) {
            gw_buf_append(&m->monitor_feed, line.data, line.len);
        } else if (!m->kill) { /* a monitor that does not read: closed, as Redis would */
            dm_log(DM_LOG_WARNING, "Client id=%llu addr=%s closed: MONITOR output over %u bytes",
                   (unsigned long long)m->id, m->addr, MAX_PENDING);
            __atomic_store_n(&m->kill, true, __ATOMIC_RELAXED);
        }
        uv_mutex_unlock(&m->th->lock);
        uv_async_send(&m->th->monitor_async);
    }
    uv_mutex_unlock(&lock);
    gw_buf_free(&line);
}

void gw_monitor_deliver(gw_thread_t *th)
{
    if (!__atomic_load_n(&nmonitors, __ATOMIC_ACQUIRE)) return; /* removal drops the lines */
    for (;;) {
        gw_conn_t *c = NULL;
        gw_buf_t feed;
        gw_buf_init(&feed);
        uv_mutex_lock(&th->lock);
        for (gw_conn_t *x = th->conns; x && !c; x = x->next)
            /* Only between commands: a reply being built must not be split by a line. */
            if (x->monitor_feed.len && !x->closing && !x->coro_running && !x->sinflight) c = x;
        if (c) {
            feed = c->monitor_feed;
            gw_buf_init(&c->monitor_feed);
        }
        uv_mutex_unlock(&th->lock);
        if (!c) return;
        gw_buf_append(&c->out, feed.data, feed.len);
        gw_buf_free(&feed);
        gw_conn_flush(c);
    }
}
