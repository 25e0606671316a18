/* Incremental RESP2 request parser: multibulk ("*N\r\n$len\r\n...") and inline commands,
 * fed with whatever each read() returned; commands come out as owned argv copies.
 * Limits and error texts are Redis's (networking.c). */
#ifndef GW_RESP_PARSER_H
#define GW_RESP_PARSER_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define RESP_INLINE_MAX (64u * 1024)         /* PROTO_INLINE_MAX_SIZE, bytes */
#define RESP_BULK_MAX (512ull * 1024 * 1024) /* proto-max-bulk-len, bytes */
#define RESP_UNAUTH_MULTIBULK 10             /* arguments a client may send before AUTH */
#define RESP_UNAUTH_BULK 16384               /* bytes per argument before AUTH */

/* One parsed command (or a protocol error to report), owned by whoever holds it. */
typedef struct gw_cmd {
    struct gw_cmd *next; /* queue link (the connection's command queue) */
    int argc;
    char **argv;     /* argc arguments, each malloc'd, NUL-terminated, binary-safe */
    size_t *argvlen; /* length in bytes of each argument */
    size_t bytes;    /* memory held: arguments, their argv/argvlen entries, the command */
    size_t wire;     /* request bytes it came in (set by the connection) */
    uint64_t rgen;   /* the client read it came in, counted per connection (set by it) */
    char *proto_err; /* non-NULL: no command, reply "-<proto_err>" and close the connection */
    const void *def; /* the gateway's command-table entry, once looked up (NULL before) */
    /* A multibulk command is one allocation: argv, argvlen and small arguments live in it
     * (no malloc per argument); bigger arguments and grown arrays are malloc'd. */
    char *small; /* inline argument bytes (NULL: none) */
    size_t small_used, small_cap;
} gw_cmd_t;

/* Free a command and its arguments (NULL is fine). A standard-size block is kept for the
 * calling thread's next command (up to 1024 blocks). */
void gw_cmd_free(gw_cmd_t *cmd);

/* Free the blocks the calling thread keeps (before the thread ends). */
void gw_cmd_spares_release(void);

enum { RESP_NEED_MORE = 0, RESP_CMD = 1, RESP_ERROR = -1 };

typedef struct resp_parser {
    int state;
    int skip;        /* bytes to skip before the next token ("\n" after "\r", CRLF after bulk) */
    gw_buf_t line;   /* partial header or inline line */
    const char *hdr; /* the header line just read (in the input or in line), no CR */
    size_t hdr_len;
    long long mb_left; /* bulk arguments still to read for the current multibulk */
    gw_cmd_t *cmd;     /* command under construction */
    int argcap;
    char *bulk; /* current bulk argument buffer (malloc'd, or in cmd->small) */
    size_t bulklen, bulkhave, bulkcap;
    char err[128]; /* protocol error text after RESP_ERROR ("ERR Protocol error: ...") */
    int oom;       /* the RESP_ERROR was an allocation that failed (util/oom.h), not bad input */
    int unauth;    /* set by the caller while the client must still authenticate: commands
                      over RESP_UNAUTH_MULTIBULK arguments or RESP_UNAUTH_BULK bytes per
                      argument are protocol errors, as in Redis 7 */
} resp_parser_t;

/* Initialise an empty parser. */
void resp_parser_init(resp_parser_t *p);
/* Free partial state. */
void resp_parser_free(resp_parser_t *p);

/* Bytes held by the command under construction (arguments read so far, the argument being
 * read, a partial header line): what client-query-buffer-limit bounds with the queue. */
size_t resp_parser_pending_bytes(const resp_parser_t *p);

/* Consume bytes from data[0..len). Stops after one complete command.
 * Returns RESP_CMD with *out set to a new command (caller owns it), RESP_NEED_MORE when
 * every byte was consumed without completing a command, or RESP_ERROR with p->err holding
 * Redis's text (the parser then stays in error: the connection must be closed).
 * *used is set to the number of bytes consumed in every case. Empty commands ("*0\r\n",
 * blank inline lines) are skipped silently. */
int resp_parse(resp_parser_t *p, const char *data, size_t len, size_t *used, gw_cmd_t **out);

#endif
