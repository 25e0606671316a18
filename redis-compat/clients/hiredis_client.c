/* Client matrix, C: hiredis (Debian's 0.14, RESP2 only: it has no RESP3 reply types).
 * Usage: hiredis_client <port>. Connect, SET/GET (binary), pipeline, MULTI/EXEC, SCAN
 * iteration, expiry. Exits 0 when every check passed. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "hiredis_client: %s:%d: %s\n", __FILE__, __LINE__, #c);                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    CHECK(r != NULL);
    return r;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    redisContext *c = redisConnect("127.0.0.1", atoi(argv[1]));
    CHECK(c && !c->err);
    redisReply *r = cmd(c, "SET hi:k %b", "a\0b", (size_t)3);
    CHECK(r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = cmd(c, "GET hi:k");
    CHECK(r->type == REDIS_REPLY_STRING && r->len == 3 && memcmp(r->str, "a\0b", 3) == 0);
    freeReplyObject(r);
    for (int i = 0; i < 100; i++) /* pipeline */
        redisAppendCommand(c, "SET hi:s%d %d", i, i);
    for (int i = 0; i < 100; i++) {
        CHECK(redisGetReply(c, (void **)&r) == REDIS_OK && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    freeReplyObject(cmd(c, "MULTI"));
    freeReplyObject(cmd(c, "INCR hi:n"));
    freeReplyObject(cmd(c, "INCR hi:n"));
    r = cmd(c, "EXEC");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer == 2);
    freeReplyObject(r);
    char cursor[32] = "0";
    int seen = 0;
    do {
        r = cmd(c, "SCAN %s MATCH hi:s* COUNT 30", cursor);
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        seen += (int)r->element[1]->elements;
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    CHECK(seen >= 100);
    /* DMKV_BIG keys named big:* (loaded by clients.py): a full SCAN returns each once, with
     * every cursor a decimal below 2^53. Keys come in lexicographic order, without repeats. */
    const char *bigenv = getenv("DMKV_BIG");
    long big = bigenv ? atol(bigenv) : 0;
    if (big) {
        long got = 0;
        char last[64] = "";
        snprintf(cursor, sizeof(cursor), "0");
        do {
            r = cmd(c, "SCAN %s MATCH big:* COUNT 1000", cursor);
            CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
            char *end;
            unsigned long long cur = strtoull(r->element[0]->str, &end, 10);
            CHECK(*end == 0 && cur < (1ULL << 53));
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            for (size_t i = 0; i < r->element[1]->elements; i++) {
                const char *k = r->element[1]->element[i]->str;
                CHECK(strcmp(k, last) > 0);
                snprintf(last, sizeof(last), "%s", k);
                got++;
            }
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0);
        CHECK(got == big);
    }
    freeReplyObject(cmd(c, "SET hi:e x PX 50"));
    usleep(120000);
    r = cmd(c, "GET hi:e");
    CHECK(r->type == REDIS_REPLY_NIL);
    freeReplyObject(r);
    redisFree(c);
    printf("hiredis RESP2: ok\n");
    return 0;
}
