/* INFO text: Redis's sections (server, clients, memory, persistence, stats, replication,
 * cpu, keyspace) plus "# dmkv" with per-class round trips, verbs and bytes per op. */
#ifndef GW_INFO_H
#define GW_INFO_H

#include "net/conn.h"
#include "util/buf.h"

/* Append the INFO text for the requested sections (nsec names from INFO's arguments,
 * case-insensitive; none, "default", "all" or "everything" = every section) to out, with
 * "\r\n" line ends. Runs on c's coroutine: the keyspace section asks the pool for DBSIZE. */
void gw_info_generate(gw_conn_t *c, int nsec, char **sections, gw_buf_t *out);

#endif
