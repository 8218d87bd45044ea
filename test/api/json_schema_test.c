/* json_schema_test.c: JSON Schema -> GBNF, keyword by keyword: the grammar (compiled by
 * sampler/grammar.h over a byte vocabulary) accepts a set of JSON texts and rejects another;
 * unsupported keywords are refused naming their location. */
#include "test.h"

#include "api/json_schema.h"
#include "common/err.h"
#include "sampler/grammar.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static struct grammar_vocab *bytes_vocab(void) {
    static char b[256];
    const char *pieces[256];
    uint32_t lens[256];
    uint8_t kinds[256];
    for (int i = 0; i < 256; i++) b[i] = (char)i, pieces[i] = &b[i], lens[i] = 1, kinds[i] = GRAMMAR_TOKEN_TEXT;
    struct grammar_vocab *v = NULL;
    return grammar_vocab_create(&v, 256, pieces, lens, kinds) ? NULL : v;
}

static bool full_match(struct grammar *g, const char *s) {
    struct grammar_state *st;
    if (grammar_state_create(&st, g)) return false;
    bool ok = grammar_state_accept_bytes(st, s, strlen(s)) == 0 && grammar_state_complete(st);
    grammar_state_free(st);
    return ok;
}

struct schema_case {
    const char *schema;
    const char *accept[8];
    const char *reject[8];
};

static const struct schema_case cases[] = {
    {"{\"type\":\"string\"}", {"\"\"", "\"a b\"", "\"\\\\n\\\"\"", "\"\\u00e9x\"", "\"caf\xc3\xa9\" "}, {"a", "\"a", "\"\x01\"", "\"\\q\"", "5"}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", "\"a\\nc\"", "\"\xc3\xa9\xc3\xa9\""}, {"\"a\"", "\"abcd\""}},
    {"{\"type\":\"integer\"}", {"0", "-12", "123456789012345"}, {"01", "1.5", "-", "1e3", "\"1\""}},
    {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":130}", {"-5", "0", "9", "10", "99", "100", "130"}, {"-6", "131", "200", "-10", "1000"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":10,\"exclusiveMaximum\":20}", {"11", "19"}, {"10", "20", "5"}},
    {"{\"type\":\"integer\",\"minimum\":95}", {"95", "99", "100", "12345"}, {"94", "9", "0", "-1"}},
    {"{\"type\":\"integer\",\"maximum\":-3}", {"-3", "-10", "-99999"}, {"-2", "0", "3"}},
    {"{\"type\":\"number\"}", {"0", "-1.25", "3e10", "2.5E-3"}, {"1.", ".5", "--1", "0x10"}},
    {"{\"type\":\"number\",\"minimum\":0}", {"0", "1.5", "7e-3"}, {"-1", "-0.5"}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", {"1", "0.01", "2e5"}, {"0", "0.0", "-1"}},
    {"{\"type\":\"boolean\"}", {"true", "false"}, {"True", "1", "null"}},
    {"{\"type\":\"null\"}", {"null"}, {"nil", "\"null\""}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"x\"", "null"}, {"1"}},
    {"{\"type\":\"integer\",\"nullable\":true}", {"1", "null"}, {"\"1\""}},
    {"{\"enum\":[\"red\",1,null,{\"a\":[true]}]}", {"\"red\"", "1", "null", "{\"a\":[true]}"}, {"\"blue\"", "2", "{\"a\":[false]}"}},
    {"{\"const\":\"k\\\"q\"}", {"\"k\\\"q\""}, {"\"kq\""}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
     {"{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}", "{ \"a\": 1, \"b\": \"x\", \"c\": true }", "{\"b\":\"x\",\"c\":false}"},
     {"{}", "{\"a\":1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",\"d\":1}", "{\"b\":\"x\",}", "{\"a\":1,,\"b\":\"x\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}",
     {"{}", "{\"a\":1}", "{\"a\":1,\"zz\":[1,{}]}", "{\"ab\":null}", "{\"\":2}"}, {"{\"a\":\"s\"}", "{\"zz\":1,\"a\":1}", "{\"a\":1,\"a\":2}"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", {"{}", "{\"x\":1,\"y\":2}"}, {"{\"x\":\"1\"}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", {"[1]", "[1, 2,3]"}, {"[]", "[1,2,3,4]", "[\"a\"]", "[1,]"}},
    {"{\"type\":\"array\"}", {"[]", "[1,\"a\",{\"b\":[]}]"}, {"[", "{}"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":{\"type\":\"boolean\"}}",
     {"[\"a\",1]", "[\"a\",1,true,false]"}, {"[\"a\"]", "[1,\"a\"]", "[\"a\",1,2]"}},
    {"{\"type\":\"array\",\"items\":[{\"const\":1}],\"additionalItems\":false}", {"[1]"}, {"[1,1]", "[]"}},
    {"{\"type\":\"string\",\"pattern\":\"^[a-c]{2}\\\\d+(x|yz)?$\"}", {"\"ab1\"", "\"cc42yz\"", "\"ba0x\""}, {"\"ab\"", "\"ad1\"", "\"ab1y\"", "\"aab1\""}},
    {"{\"type\":\"string\",\"pattern\":\"ab\"}", {"\"ab\"", "\"xaby\""}, {"\"a b\"", "\"\""}},
    {"{\"type\":\"string\",\"pattern\":\"^a\\\\ud83d\\\\ude00$\"}", {"\"a\xf0\x9f\x98\x80\""}, {"\"a\"", "\"a\xed\xa0\xbd\""}},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\w+@[^.@ ]+\\\\.[a-z]{2,3}$\"}", {"\"jo_1@ex.com\"", "\"a@b.io\""}, {"\"a@b.c\"", "\"@b.io\"", "\"a@b.c.io\""}},
    {"{\"type\":\"string\",\"pattern\":\"^(?:\\\"|\\\\\\\\)[^a]?$\"}", {"\"\\\"\"", "\"\\\\\"", "\"\\\\b\"", "\"\\\"\\\"\""}, {"\"\\\"a\"", "\"x\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-29\""}, {"\"2024-13-01\"", "\"24-01-01\""}},
    {"{\"type\":\"string\",\"format\":\"time\"}", {"\"23:59:59Z\"", "\"01:02:03.5+02:00\""}, {"\"24:00:00Z\"", "\"12:00:00\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-01-31T12:30:00Z\""}, {"\"2024-01-31 12:30:00Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567e89b12d3a456426614174000\""}},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", {"5", "\"a\""}, {"\"ab\"", "true"}},
    {"{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"null\"}]}", {"true", "null"}, {"0"}},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
     "{\"properties\":{\"b\":{\"type\":\"string\"}}}]}", {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}"}, {"{\"b\":\"x\"}", "{}"}},
    {"{\"$defs\":{\"pos\":{\"type\":\"integer\",\"minimum\":1}},\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/pos\"}}", {"[1,2]"}, {"[0]"}},
    {"{\"definitions\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/node\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/definitions/node\"}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}"}, {"{\"v\":1,\"kids\":[{}]}", "{\"kids\":[]}"}},
    {"{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},\"required\":[\"next\"]}",
     {"{\"next\":null}", "{\"next\":{\"next\":null}}"}, {"{}", "{\"next\":{}}"}},
    {"true", {"1", "\"s\"", "{\"a\":[null]}"}, {"", "}"}},
    {"{\"title\":\"T\",\"description\":\"d\",\"type\":\"boolean\",\"default\":true,\"examples\":[false]}", {"true"}, {"1"}},
};

TEST(json_schema_keywords_accept_and_reject) {
    struct grammar_vocab *v = bytes_vocab();
    CHECK(v);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const struct schema_case *k = &cases[i];
        json_error_t je;
        json_t *schema = json_loads(k->schema, JSON_DECODE_ANY, &je);
        if (!schema) {
            fprintf(stderr, "  case %zu: bad test JSON: %s\n", i, je.text);
            t->failed = 1;
            return;
        }
        char *gbnf = NULL, where[96], why[160], gwhy[256];
        int rc = json_schema_to_grammar(schema, &gbnf, where, sizeof where, why, sizeof why);
        json_decref(schema);
        if (rc) {
            fprintf(stderr, "  case %zu %s: %s: %s\n", i, k->schema, where, why);
            t->failed = 1;
            return;
        }
        struct grammar *g = NULL;
        if (grammar_compile(&g, v, gbnf, strlen(gbnf), gwhy, sizeof gwhy)) {
            fprintf(stderr, "  case %zu: grammar does not compile: %s\n%s\n", i, gwhy, gbnf);
            free(gbnf);
            t->failed = 1;
            return;
        }
        for (int a = 0; a < 8 && k->accept[a]; a++)
            if (!full_match(g, k->accept[a])) {
                fprintf(stderr, "  case %zu %s: should accept %s\n%s\n", i, k->schema, k->accept[a], gbnf);
                t->failed = 1;
            }
        for (int r = 0; r < 8 && k->reject[r]; r++)
            if (full_match(g, k->reject[r])) {
                fprintf(stderr, "  case %zu %s: should reject %s\n%s\n", i, k->schema, k->reject[r], gbnf);
                t->failed = 1;
            }
        grammar_unref(g);
        free(gbnf);
        if (t->failed) return;
    }
    grammar_vocab_free(v);
}

TEST(json_schema_refuses_naming_the_keyword) {
    static const struct {
        const char *schema, *where, *why;
    } bad[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{\"type\":\"null\"}}}}", "properties.a.not", "not"},
        {"{\"type\":\"string\",\"format\":\"email\"}", "format", "email"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems", "uniqueItems"},
        {"{\"type\":\"integer\",\"multipleOf\":3}", "multipleOf", "multipleOf"},
        {"{\"type\":\"number\",\"maximum\":3}", "maximum", "maximum"},
        {"{\"patternProperties\":{\"^x\":{}}}", "patternProperties", "patternProperties"},
        {"{\"if\":{},\"then\":{}}", "if", "if"},
        {"{\"type\":\"strin\"}", "type", "unknown type"},
        {"{\"$ref\":\"http://x/y.json\"}", "$ref", "only references inside"},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref", "names nothing"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "pattern", "lookarounds"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "pattern", "backreferences"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "pattern", "anchors"},
        {"{\"type\":\"string\",\"pattern\":\"^]te{1,3}\\\\uddefape$\"}", "pattern", "surrogate"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\ud83dx\"}", "pattern", "surrogate"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"q\"]}}", "items.required", "not in properties"},
        {"{\"type\":\"object\",\"minProperties\":2}", "minProperties", "minProperties"},
        {"{\"type\":\"array\",\"maxItems\":20000}", "maxItems", "over 10000"},
        {"{\"anyOf\":[{\"type\":\"null\"}],\"type\":\"object\"}", "type", "beside anyOf"},
        {"{\"allOf\":[{\"type\":\"string\"}]}", "allOf[0]", "object schemas only"},
        {"false", "", "matches nothing"},
        {"{\"type\":\"integer\",\"minimum\":1e20}", "minimum", "digits"},
        {"{\"x-custom\":1}", "x-custom", "not supported"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *schema = json_loads(bad[i].schema, JSON_DECODE_ANY, NULL);
        CHECK(schema);
        char *gbnf = NULL, where[96], why[160];
        int rc = json_schema_to_grammar(schema, &gbnf, where, sizeof where, why, sizeof why);
        json_decref(schema);
        if (rc != -ERR_INVAL || strcmp(where, bad[i].where) || !strstr(why, bad[i].why)) {
            fprintf(stderr, "  %s: rc %d where \"%s\" why \"%s\"; expected \"%s\" \"%s\"\n", bad[i].schema, rc, where, why,
                    bad[i].where, bad[i].why);
            t->failed = 1;
        }
        free(gbnf);
    }
}

TEST(json_schema_object_grammar_is_any_object) {
    struct grammar_vocab *v = bytes_vocab();
    char *gbnf = NULL, why[256];
    CHECK(json_schema_object_grammar(&gbnf) == 0);
    struct grammar *g = NULL;
    CHECK(grammar_compile(&g, v, gbnf, strlen(gbnf), why, sizeof why) == 0);
    CHECK(full_match(g, "{}"));
    CHECK(full_match(g, "{\"a\": [1, -2.5e3, \"x\", {\"b\": null}], \"c\": true}\n"));
    CHECK(!full_match(g, "[1]"));
    CHECK(!full_match(g, "{\"a\" 1}"));
    CHECK(!full_match(g, "{\"a\": 01}"));
    grammar_unref(g);
    free(gbnf);
    grammar_vocab_free(v);
}
