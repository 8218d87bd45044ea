/* json_schema_fuzz.c: libFuzzer target for the JSON Schema converter (src/api/json_schema.c). The
 * input's first byte seeds the choices, the rest is a JSON value read as a schema. Whatever the
 * schema: the converter translates or refuses naming where and why; a translation always compiles
 * (sampler/grammar.h) unless the schema itself is circular without progress (left recursion) or too
 * big; and a generation that follows the compiled grammar over single-byte tokens until it is
 * complete is a JSON text jansson parses.
 *   make fuzz FUZZ_TARGETS=json_schema
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_schema.h"
#include "common/err.h"
#include "sampler/grammar.h"

static struct grammar_vocab *js_vocab(void) {
    static struct grammar_vocab *v;
    if (v) return v;
    static char bytes[256];
    const char *pieces[256];
    uint32_t lens[256];
    uint8_t kinds[256];
    for (int i = 0; i < 256; i++) bytes[i] = (char)i, pieces[i] = &bytes[i], lens[i] = 1, kinds[i] = GRAMMAR_TOKEN_TEXT;
    if (grammar_vocab_create(&v, 256, pieces, lens, kinds)) abort();
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    json_t *schema = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, NULL);
    if (!schema) return 0;
    char *gbnf = NULL, where[96], why[160];
    int rc = json_schema_to_grammar(schema, &gbnf, where, sizeof where, why, sizeof why);
    json_decref(schema);
    if (rc) {
        if (rc == -ERR_INVAL && !why[0]) abort(); /* a refusal says why */
        return 0;
    }
    struct grammar_vocab *v = js_vocab();
    struct grammar *g;
    char gwhy[256];
    rc = grammar_compile(&g, v, gbnf, strlen(gbnf), gwhy, sizeof gwhy);
    if (rc) {
        if (rc != -ERR_TOOBIG && !strstr(gwhy, "left recursion") && !strstr(gwhy, "matches nothing")) {
            fprintf(stderr, "converter output does not compile: %s\n%s\n", gwhy, gbnf);
            abort();
        }
        free(gbnf);
        return 0;
    }
    uint64_t m[4];
    char out[512];
    size_t n = 0;
    uint32_t rng = data[0] * 2654435761u + 7;
    struct grammar_state *st;
    if (grammar_state_create(&st, g)) abort();
    /* prefer the structure's closing bytes so that outputs finish within the budget */
    while (n < sizeof out - 1) {
        if (grammar_state_complete(st) && (rng >> 3) % 2 == 0) break;
        int32_t count = grammar_state_mask(st, m);
        if (count <= 0) break;
        int32_t ids[256], k = 0, closing = -1;
        for (int t = 0; t < 256; t++)
            if ((m[t >> 6] >> (t & 63)) & 1) {
                ids[k++] = t;
                if (strchr("\"]}0", t) && t) closing = t;
            }
        rng = rng * 1103515245u + 12345u;
        int32_t pick = closing >= 0 && (rng >> 8) % 3 ? closing : ids[(rng >> 4) % (uint32_t)k];
        if (grammar_state_accept(st, pick)) abort();
        out[n++] = (char)pick;
    }
    if (grammar_state_complete(st)) {
        json_t *j = json_loadb(out, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!j) {
            fprintf(stderr, "a complete output is not JSON: %.*s\n%s\n", (int)n, out, gbnf);
            abort();
        }
        json_decref(j);
    }
    grammar_state_free(st);
    grammar_unref(g);
    free(gbnf);
    return 0;
}
