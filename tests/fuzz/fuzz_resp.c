/* libFuzzer target (issue 12, hostile input): the RESP parser fed the input in pieces whose
 * sizes come from the input itself, as a client's bytes arrive. Every command it returns
 * must be well formed (argc >= 1, every argument NUL-terminated at its length), bytes
 * held must stay bounded by what was fed, and nothing may leak or touch memory out of
 * bounds (AddressSanitizer, UBSan). run-fuzz.sh also runs it with DMKV_TEST_ALLOC_MAX=300,
 * so allocations fail (util/oom.h) and the out-of-memory paths are fuzzed too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "resp/parser.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    unsigned step = data[0] % 17 + 1; /* piece size: 1..17 bytes, then the rest at once */
    int unauth = data[0] >> 7;
    data++, size--;
    resp_parser_t p;
    resp_parser_init(&p);
    p.unauth = unauth; /* the limits before AUTH */
    size_t pos = 0;
    int dead = 0;
    while (pos < size && !dead) {
        size_t piece = size - pos < step ? size - pos : step;
        if (piece == step && (pos / step) % 3 == 2) piece = size - pos;
        size_t off = 0;
        while (off < piece) {
            size_t used = 0;
            gw_cmd_t *cmd = NULL;
            int rc = resp_parse(&p, (const char *)data + pos + off, piece - off, &used, &cmd);
            if (used > piece - off) abort();
            off += used;
            if (rc == RESP_CMD) {
                if (!cmd || cmd->argc < 1) abort();
                for (int i = 0; i < cmd->argc; i++)
                    if (cmd->argv[i][cmd->argvlen[i]] != 0) abort();
                gw_cmd_free(cmd);
            } else if (rc == RESP_ERROR) {
                if (p.oom ? strcmp(p.err, "ERR dmkv: out of memory reading the command") != 0
                          : strncmp(p.err, "ERR Protocol error: ", 20) != 0)
                    abort();
                dead = 1;
                break;
            } else if (used == 0) {
                break;
            }
        }
        pos += piece;
        /* A command being read holds at most what was fed plus its fixed allocations: the
         * argument tables of the first 1024 arguments and 1 MiB for a bulk argument
         * announced but not yet received (Redis preallocates the whole announced size). */
        if (!dead && resp_parser_pending_bytes(&p) > 64 * pos + (2u << 20)) abort();
    }
    resp_parser_free(&p);
    return 0;
}
