/* The latency monitor (latency.h). */
#include "commands/latency.h"

#include <stdio.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "commands/cmdstats.h"
#include "dmkv/clock.h"
#include "resp/reply.h"

#define TS_LEN 160 /* LATENCY_TS_LEN */

typedef struct series {
    const char *name;
    int idx; /* next slot */
    uint32_t max;
    struct {
        int32_t time; /* unix seconds, 0 = unused */
        uint32_t latency;
    } samples[TS_LEN];
} series_t;

enum { EV_COMMAND, EV_FAST, NEVENTS };
static series_t events[NEVENTS] = {{.name = "command"}, {.name = "fast-command"}};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long long threshold_ms;

long long gw_latency_threshold(void)
{
    return __atomic_load_n(&threshold_ms, __ATOMIC_RELAXED);
}

void gw_latency_set_threshold(long long ms)
{
    __atomic_store_n(&threshold_ms, ms, __ATOMIC_RELAXED);
}

void gw_latency_note(const gw_command_t *gc, uint64_t usec)
{
    long long th = gw_latency_threshold();
    uint64_t ms = usec / 1000;
    if (th <= 0 || (long long)ms < th) return;
    series_t *ts = &events[gw_command_has(gc, GW_CF_FAST) ? EV_FAST : EV_COMMAND];
    int32_t now = (int32_t)(dm_wall_ms() / 1000);
    uint32_t lat = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
    pthread_mutex_lock(&lock);
    int prev = (ts->idx + TS_LEN - 1) % TS_LEN;
    if (ts->samples[prev].time == now) { /* one sample per second: the highest */
        if (lat > ts->samples[prev].latency) ts->samples[prev].latency = lat;
    } else {
        ts->samples[ts->idx].time = now;
        ts->samples[ts->idx].latency = lat;
        ts->idx = (ts->idx + 1) % TS_LEN;
    }
    if (lat > ts->max) ts->max = lat;
    pthread_mutex_unlock(&lock);
}

static bool has_samples(const series_t *ts)
{
    return ts->samples[(ts->idx + TS_LEN - 1) % TS_LEN].time != 0;
}

static series_t *find(const char *name)
{
    for (int e = 0; e < NEVENTS; e++)
        if (!strcasecmp(events[e].name, name)) return &events[e];
    return NULL;
}

static const char *help[] = {
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "HISTOGRAM [<command> ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the",
    "    specified command names. If no commands are specified then all histograms are",
    "    replied.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HELP",
    "    Prints this help.",
};

static void reply_latest(gw_conn_t *c)
{
    gw_buf_t *out = gw_conn_out(c);
    int n = 0;
    for (int e = 0; e < NEVENTS; e++)
        n += has_samples(&events[e]);
    reply_array(out, n);
    for (int e = 0; e < NEVENTS; e++) {
        series_t *ts = &events[e];
        if (!has_samples(ts)) continue;
        int last = (ts->idx + TS_LEN - 1) % TS_LEN;
        reply_array(out, 4);
        reply_bulk_cstr(out, ts->name);
        reply_int(out, ts->samples[last].time);
        reply_int(out, ts->samples[last].latency);
        reply_int(out, ts->max);
    }
}

static void reply_history(gw_conn_t *c, const series_t *ts)
{
    gw_buf_t *out = gw_conn_out(c);
    int n = 0;
    for (int j = 0; ts && j < TS_LEN; j++)
        n += ts->samples[j].time != 0;
    reply_array(out, n);
    for (int j = 0; ts && j < TS_LEN; j++) {
        int i = (ts->idx + j) % TS_LEN; /* oldest first */
        if (!ts->samples[i].time) continue;
        reply_array(out, 2);
        reply_int(out, ts->samples[i].time);
        reply_int(out, ts->samples[i].latency);
    }
}

static void reply_doctor(gw_conn_t *c)
{
    gw_buf_t r;
    gw_buf_init(&r);
    int any = 0;
    for (int e = 0; e < NEVENTS; e++) {
        const series_t *ts = &events[e];
        if (!has_samples(ts)) continue;
        long long sum = 0;
        int n = 0;
        for (int j = 0; j < TS_LEN; j++)
            if (ts->samples[j].time) sum += ts->samples[j].latency, n++;
        gw_buf_printf(&r,
                      "%d. %s: %d latency spikes (average %lldms, worst all time %ums, "
                      "threshold %lldms).\n",
                      ++any, ts->name, n, n ? sum / n : 0, ts->max, gw_latency_threshold());
    }
    if (!any)
        gw_buf_printf(&r, "No latency spike was observed%s.\n",
                      gw_latency_threshold() > 0
                          ? ""
                          : " (the latency monitor is off: CONFIG SET latency-monitor-threshold "
                            "<milliseconds>)");
    else
        gw_buf_printf(&r, "\nIn dmkv a command's latency includes its round trips to the memory "
                          "nodes: see INFO dmkv for round trips per command.\n");
    gw_reply_verbatim(c, r.data, r.len);
    gw_buf_free(&r);
}

void cmd_latency(gw_conn_t *c, gw_cmd_t *cmd)
{
    const char *sub = cmd->argv[1];
    /* Each subcommand's arity, as Redis 7 checks it ("latency|help"). */
    static const struct {
        const char *name;
        int arity;
    } arity[] = {{"help", 2},   {"latest", 2}, {"history", 3},   {"reset", -2},
                 {"doctor", 2}, {"graph", 3},  {"histogram", -2}};
    for (size_t i = 0; i < sizeof(arity) / sizeof(arity[0]); i++) {
        int a = arity[i].arity;
        if (strcasecmp(sub, arity[i].name) || (a > 0 ? cmd->argc == a : cmd->argc >= -a)) continue;
        char name[32];
        snprintf(name, sizeof(name), "latency|%s", arity[i].name);
        gw_reply_arity(c, name);
        return;
    }
    if (!strcasecmp(sub, "help")) {
        GW_REPLY_HELP(c, help);
    } else if (!strcasecmp(sub, "latest")) {
        pthread_mutex_lock(&lock);
        reply_latest(c);
        pthread_mutex_unlock(&lock);
    } else if (!strcasecmp(sub, "history")) {
        pthread_mutex_lock(&lock);
        reply_history(c, find(cmd->argv[2]));
        pthread_mutex_unlock(&lock);
    } else if (!strcasecmp(sub, "reset")) {
        long long n = 0;
        pthread_mutex_lock(&lock);
        for (int e = 0; e < NEVENTS; e++) {
            bool named = cmd->argc == 2;
            for (int i = 2; i < cmd->argc; i++)
                named |= !strcasecmp(cmd->argv[i], events[e].name);
            if (!named || !has_samples(&events[e])) continue;
            const char *name = events[e].name;
            memset(&events[e], 0, sizeof(events[e]));
            events[e].name = name;
            n++;
        }
        pthread_mutex_unlock(&lock);
        reply_int(gw_conn_out(c), n);
    } else if (!strcasecmp(sub, "doctor")) {
        pthread_mutex_lock(&lock);
        reply_doctor(c);
        pthread_mutex_unlock(&lock);
    } else if (!strcasecmp(sub, "histogram")) {
        gw_cmdstats_reply_histogram(c, cmd, 2);
    } else if (!strcasecmp(sub, "graph")) {
        reply_error(gw_conn_out(c), "ERR dmkv: LATENCY GRAPH is not implemented (use LATENCY "
                                    "HISTORY)");
    } else {
        gw_reply_unknown_subcommand(c, cmd);
    }
}
