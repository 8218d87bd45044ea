/* tool_calls_test.c: every tool-call syntax on outputs as the models write them: the whole text
 * parsed at once, and streamed (byte by byte, and cut in two at every byte) with the fragments
 * adding up to the same content, reasoning, names and arguments; the detection from templates;
 * the call grammars compiled and matched against calls; the request fields' checks. */
#include "test.h"

#include <jansson.h>
#include <stdlib.h>

#include "api/params.h"
#include "api/tool_calls.h"
#include "common/err.h"
#include "sampler/grammar.h"

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

static const char *tools_json =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"search\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"query\": {\"type\": \"string\"}}, \"required\": [\"query\"]}}}]";

struct want {
    const char *content;   /* NULL: null */
    const char *reasoning; /* NULL: none */
    size_t n;
    const char *name[3];
    const char *args[3];
};

struct got {
    char content[2048], reasoning[2048];
    size_t content_len, reasoning_len;
    size_t n;
    char name[3][64];
    char args[3][512];
    bool bad_order; /* arguments before the call's id and name, or a call index out of order */
};

static void take(struct got *g, const struct tool_delta *d) {
    memcpy(g->content + g->content_len, d->content, d->content_len);
    g->content_len += d->content_len;
    memcpy(g->reasoning + g->reasoning_len, d->reasoning, d->reasoning_len);
    g->reasoning_len += d->reasoning_len;
    for (size_t i = 0; i < d->n_calls; i++) {
        const struct tool_call_delta *c = &d->calls[i];
        if (c->index < 0 || c->index > 2) {
            g->bad_order = true;
            continue;
        }
        if (c->id) {
            if ((size_t)c->index != g->n || strncmp(c->id, "call_", 5) != 0) g->bad_order = true;
            snprintf(g->name[c->index], sizeof g->name[0], "%s", c->name);
            g->n = (size_t)c->index + 1;
        } else if ((size_t)c->index >= g->n)
            g->bad_order = true;
        strncat(g->args[c->index], c->args, c->args_len);
    }
}

static bool same(struct test_case *t, const char *what, const char *a, const char *b, const char *text, size_t cut) {
    if ((a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0)) {
        fprintf(stderr, "  %s: \"%s\", expected \"%s\" (text \"%s\", cut %zu)\n", what, a ? a : "(null)",
                b ? b : "(null)", text, cut);
        t->failed = 1;
        return false;
    }
    return true;
}

static bool check_got(struct test_case *t, const struct got *g, const struct want *w, const char *text, size_t cut) {
    if (g->bad_order) {
        fprintf(stderr, "  call deltas out of order (text \"%s\", cut %zu)\n", text, cut);
        t->failed = 1;
        return false;
    }
    if (!same(t, "content", g->content, w->content ? w->content : "", text, cut)) return false;
    if (!same(t, "reasoning", g->reasoning, w->reasoning ? w->reasoning : "", text, cut)) return false;
    if (g->n != w->n) {
        fprintf(stderr, "  %zu calls streamed, expected %zu (text \"%s\", cut %zu)\n", g->n, w->n, text, cut);
        t->failed = 1;
        return false;
    }
    for (size_t i = 0; i < w->n; i++)
        if (!same(t, "name", g->name[i], w->name[i], text, cut) || !same(t, "args", g->args[i], w->args[i], text, cut))
            return false;
    return true;
}

/* text in pieces: cut == SIZE_MAX byte by byte, else [0, cut) then the rest. */
static bool stream(struct test_case *t, const struct tool_parse_opts *o, const char *text, size_t cut,
                   const struct want *w) {
    struct tool_stream s;
    struct tool_delta d;
    struct got g;
    memset(&g, 0, sizeof g);
    tool_stream_init(&s, o);
    size_t len = strlen(text);
    if (cut == (size_t)-1) {
        for (size_t i = 0; i < len; i++) {
            if (tool_stream_feed(&s, text + i, 1, false, &d) < 0) abort();
            take(&g, &d);
        }
    } else {
        if (tool_stream_feed(&s, text, cut, false, &d) < 0) abort();
        take(&g, &d);
        if (tool_stream_feed(&s, text + cut, len - cut, false, &d) < 0) abort();
        take(&g, &d);
    }
    if (tool_stream_feed(&s, "", 0, true, &d) < 0) abort();
    take(&g, &d);
    tool_stream_free(&s);
    return check_got(t, &g, w, text, cut);
}

static bool run(struct test_case *t, enum tool_format f, const char *think, bool in_think, const char *text,
                const struct want *w) {
    struct tool_dialect dl = {f, NULL, NULL};
    if (think) {
        dl.think_open = think;
        dl.think_close = strcmp(think, "<think>") == 0 ? "</think>" : "<|END_THINKING|>";
    }
    json_t *tools = json_loads(tools_json, 0, NULL);
    struct tool_parse_opts o = {.dialect = &dl, .tools = true, .reasoning = true, .in_think = in_think, .tool_defs = tools};
    struct tool_parse r;
    bool ok = tool_parse_text(&o, text, strlen(text), false, &r) == 0;
    if (!ok) t->failed = 1;
    ok = ok && same(t, "whole content", r.content, w->content, text, 0) &&
         same(t, "whole reasoning", r.reasoning, w->reasoning, text, 0);
    if (ok && r.n_calls != w->n) {
        fprintf(stderr, "  %zu calls, expected %zu (text \"%s\")\n", r.n_calls, w->n, text);
        t->failed = 1;
        ok = false;
    }
    for (size_t i = 0; ok && i < w->n; i++) {
        ok = same(t, "whole name", r.calls[i].name, w->name[i], text, 0) &&
             same(t, "whole args", r.calls[i].args, w->args[i], text, 0);
        if (ok && strncmp(r.calls[i].id, "call_", 5) != 0) ok = false, t->failed = 1;
    }
    tool_parse_free(&r);
    ok = ok && stream(t, &o, text, (size_t)-1, w);
    for (size_t cut = 0; ok && cut <= strlen(text); cut++) ok = stream(t, &o, text, cut, w);
    json_decref(tools);
    return ok;
}

#define PARIS "{\"city\": \"Paris\"}"

TEST(tool_calls_hermes) {
    struct want w1 = {NULL, NULL, 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_HERMES, NULL, false,
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " PARIS "}\n</tool_call>", &w1));
    struct want w2 = {"Let me check.", NULL, 2, {"get_weather", "search"}, {PARIS, "{\"query\": \"a<b }\"}"}};
    CHECK(run(t, TOOL_FORMAT_HERMES, NULL, false,
              "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " PARIS "}\n</tool_call>\n"
              "<tool_call>\n{\"arguments\": {\"query\": \"a<b }\"}, \"name\": \"search\"}\n</tool_call>",
              &w2));
    /* no closing tag at the end of the output: still a call */
    CHECK(run(t, TOOL_FORMAT_HERMES, NULL, false, "<tool_call>{\"name\": \"search\", \"arguments\": {}}", &(struct want){NULL, NULL, 1, {"search"}, {"{}"}}));
}

TEST(tool_calls_hermes_takes_the_xml_form_too) {
    struct want w = {NULL, NULL, 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_HERMES, "<think>", false,
              "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>", &w));
}

TEST(tool_calls_hermes_text_and_bad_blocks_stay_text) {
    struct want w = {"a < b and <tool> x", NULL, 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_HERMES, NULL, false, "a < b and <tool> x", &w));
    struct want w2 = {"<tool_call>not json</tool_call> ok", NULL, 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_HERMES, NULL, false, "<tool_call>not json</tool_call> ok", &w2));
    struct want w3 = {"Hello world!\n\n", NULL, 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_HERMES, NULL, false, "Hello world!\n\n", &w3));
}

TEST(tool_calls_reasoning_think) {
    struct want w = {NULL, "I should call it.", 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_HERMES, "<think>", false,
              "<think>\nI should call it.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " PARIS
              "}\n</tool_call>",
              &w));
    struct want w2 = {"The answer is 4.", "2 + 2 is 4", 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_HERMES, "<think>", true, "2 + 2 is 4\n</think>\n\nThe answer is 4.", &w2));
    struct want w3 = {"", "still thinking", 0, {0}, {0}}; /* cut short inside the block */
    CHECK(run(t, TOOL_FORMAT_HERMES, "<think>", false, "<think>still thinking", &w3));
    struct want w4 = {"<thin", NULL, 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_HERMES, "<think>", false, "<thin", &w4));
}

TEST(tool_calls_reasoning_format_none_keeps_the_block) {
    struct tool_dialect dl = {TOOL_FORMAT_HERMES, "<think>", "</think>"};
    struct tool_parse_opts o = {.dialect = &dl, .tools = false, .reasoning = false};
    struct tool_parse r;
    const char *text = "<think>x</think>y";
    CHECK(tool_parse_text(&o, text, strlen(text), false, &r) == 0);
    CHECK_EQ_STR(r.content, "<think>x</think>y");
    CHECK(r.reasoning == NULL);
    tool_parse_free(&r);
}

TEST(tool_calls_qwen_xml_and_seed) {
    struct want w = {NULL, NULL, 1, {"get_weather"}, {"{\"city\": \"Paris\", \"days\": 3}"}};
    CHECK(run(t, TOOL_FORMAT_QWEN_XML, "<think>", false,
              "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
              "</parameter>\n</function>\n</tool_call>",
              &w));
    struct want w2 = {NULL, NULL, 1, {"search"}, {"{\"query\": \"42\"}"}}; /* a string by its schema */
    CHECK(run(t, TOOL_FORMAT_SEED_XML, NULL, false,
              "<seed:tool_call>\n<function=search>\n<parameter=query>42</parameter>\n</function>\n</seed:tool_call>", &w2));
}

TEST(tool_calls_llama3) {
    struct want w = {NULL, NULL, 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_LLAMA3, NULL, false, "{\"name\": \"get_weather\", \"parameters\": " PARIS "}", &w));
    struct want w2 = {NULL, NULL, 2, {"search", "get_weather"}, {"{\"query\": \"x\"}", PARIS}};
    CHECK(run(t, TOOL_FORMAT_LLAMA3, NULL, false,
              "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"x\"}}; {\"name\": \"get_weather\", "
              "\"parameters\": " PARIS "}",
              &w2));
    struct want w3 = {"{not a call} ok", NULL, 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_LLAMA3, NULL, false, "{not a call} ok", &w3));
}

TEST(tool_calls_mistral) {
    struct want w = {NULL, NULL, 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_MISTRAL, NULL, false,
              "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " PARIS ", \"id\": \"abc123def\"}]", &w));
    CHECK(run(t, TOOL_FORMAT_MISTRAL, NULL, false, "[TOOL_CALLS]get_weather[ARGS]" PARIS, &w));
}

TEST(tool_calls_deepseek) {
    struct want w = {NULL, "hmm", 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_DEEPSEEK_R1, "<think>", false,
              "<think>\nhmm\n</think>\n\n" DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "get_weather\n```json\n" PARIS
              "\n```" DS_CALL_END DS_CALLS_END,
              &w));
    struct want w2 = {NULL, NULL, 2, {"get_weather", "search"}, {PARIS, "{\"query\": \"q\"}"}};
    CHECK(run(t, TOOL_FORMAT_DEEPSEEK_V3, NULL, false,
              DS_CALLS_BEGIN DS_CALL_BEGIN "get_weather" DS_SEP PARIS DS_CALL_END DS_CALL_BEGIN "search" DS_SEP
              "{\"query\": \"q\"}" DS_CALL_END DS_CALLS_END,
              &w2));
}

TEST(tool_calls_command_r7b) {
    struct want w = {NULL, "I will look it up.", 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_COMMAND_R7B, "<|START_THINKING|>", false,
              "<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", "
              "\"tool_name\": \"get_weather\", \"parameters\": " PARIS "}\n]<|END_ACTION|>",
              &w));
    struct want w2 = {"Hello", NULL, 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_COMMAND_R7B, "<|START_THINKING|>", false, "<|START_RESPONSE|>Hello<|END_RESPONSE|>", &w2));
}

TEST(tool_calls_granite_functionary_firefunction_kimi_glm) {
    struct want w = {NULL, NULL, 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_GRANITE, NULL, false,
              "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " PARIS "}]", &w));
    CHECK(run(t, TOOL_FORMAT_FUNCTIONARY, NULL, false, "<function=get_weather>" PARIS "</function>", &w));
    CHECK(run(t, TOOL_FORMAT_FIREFUNCTION, NULL, false,
              " functools[{\"name\": \"get_weather\", \"arguments\": " PARIS "}]", &w));
    CHECK(run(t, TOOL_FORMAT_KIMI, "<think>", false,
              "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>" PARIS
              "<|tool_call_end|><|tool_calls_section_end|>",
              &w));
    struct want wg = {NULL, NULL, 1, {"get_weather"}, {"{\"city\": \"Paris\", \"days\": 2}"}};
    CHECK(run(t, TOOL_FORMAT_GLM, "<think>", false,
              "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
              "<arg_value>2</arg_value>\n</tool_call>",
              &wg));
}

TEST(tool_calls_functionary_v32_recipients) {
    struct want w = {NULL, NULL, 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_FUNCTIONARY_V32, NULL, false, "get_weather\n" PARIS, &w));
    struct want w2 = {"Hello there", NULL, 1, {"search"}, {"{\"query\": \"a>b\"}"}};
    CHECK(run(t, TOOL_FORMAT_FUNCTIONARY_V32, NULL, false, "all\nHello there\n>>>search\n{\"query\": \"a>b\"}", &w2));
    struct want w3 = {"Just text.", NULL, 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_FUNCTIONARY_V32, NULL, false, "all\nJust text.", &w3));
}

TEST(tool_calls_gpt_oss_channels) {
    struct want w = {NULL, "Need weather.", 1, {"get_weather"}, {PARIS}};
    CHECK(run(t, TOOL_FORMAT_GPT_OSS, NULL, false,
              "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
              "to=functions.get_weather <|constrain|>json<|message|>" PARIS,
              &w));
    struct want w2 = {"Hi there.", "Think.", 0, {0}, {0}};
    CHECK(run(t, TOOL_FORMAT_GPT_OSS, NULL, false,
              "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi there.", &w2));
}

/* Every template of ../shared/chat/tools.jsonl: the syntax its markers name. */
TEST(tool_calls_detect_from_templates) {
    const char *path = shared_path(t, "chat/tools.jsonl");
    if (!path) return;
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    static const struct {
        const char *name;
        enum tool_format f;
        const char *think;
    } want[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", TOOL_FORMAT_HERMES, NULL},
        {"Qwen-Qwen3-0.6B.jinja", TOOL_FORMAT_HERMES, "<think>"},
        {"Qwen3.5-4B.jinja", TOOL_FORMAT_QWEN_XML, "<think>"},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", TOOL_FORMAT_HERMES, NULL},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", TOOL_FORMAT_LLAMA3, NULL},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", TOOL_FORMAT_MISTRAL, NULL},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", TOOL_FORMAT_DEEPSEEK_R1, "<think>"},
        {"deepseek-ai-DeepSeek-V3.1.jinja", TOOL_FORMAT_DEEPSEEK_V3, "<think>"},
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", TOOL_FORMAT_COMMAND_R7B, "<|START_THINKING|>"},
        {"ibm-granite-granite-3.3-2B-Instruct.jinja", TOOL_FORMAT_GRANITE, "<think>"},
        {"meetkai-functionary-medium-v3.1.jinja", TOOL_FORMAT_FUNCTIONARY, NULL},
        {"meetkai-functionary-medium-v3.2.jinja", TOOL_FORMAT_FUNCTIONARY_V32, NULL},
        {"openai-gpt-oss-120b.jinja", TOOL_FORMAT_GPT_OSS, NULL},
        {"GLM-4.6.jinja", TOOL_FORMAT_GLM, "<think>"},
        {"Kimi-K2-Instruct.jinja", TOOL_FORMAT_KIMI, NULL},
        {"fireworks-ai-llama-3-firefunction-v2.jinja", TOOL_FORMAT_FIREFUNCTION, NULL},
        {"ByteDance-Seed-OSS.jinja", TOOL_FORMAT_SEED_XML, "<seed:think>"},
    };
    size_t found = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *name = json_string_value(json_object_get(o, "name"));
        const json_t *tm = json_object_get(o, "template");
        for (size_t i = 0; name && i < sizeof want / sizeof *want; i++) {
            if (strcmp(name, want[i].name) != 0) continue;
            struct tool_dialect d;
            tool_dialect_detect(json_string_value(tm), json_string_length(tm), CHAT_UNKNOWN, &d);
            if (d.format != want[i].f || (want[i].think ? !d.think_open || strcmp(d.think_open, want[i].think) : !!d.think_open)) {
                fprintf(stderr, "  %s: %s, think %s\n", name, tool_format_name(d.format), d.think_open ? d.think_open : "-");
                t->failed = 1;
            }
            found++;
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    CHECK_EQ_INT(found, sizeof want / sizeof *want);
}

/* The grammar of a syntax, compiled for a byte vocabulary, takes a call and refuses bad arguments. */
static struct grammar_vocab *byte_vocab(void) {
    static char bytes[256];
    const char *pieces[257];
    uint32_t lens[257];
    uint8_t kinds[257];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        pieces[i] = &bytes[i];
        lens[i] = 1;
        kinds[i] = GRAMMAR_TOKEN_TEXT;
    }
    pieces[256] = "";
    lens[256] = 0;
    kinds[256] = GRAMMAR_TOKEN_EOG;
    struct grammar_vocab *v = NULL;
    if (grammar_vocab_create(&v, 257, pieces, lens, kinds) < 0) return NULL;
    return v;
}

static int matches(struct grammar_vocab *v, const char *gbnf, const char *text) {
    struct grammar *g;
    char why[256];
    if (grammar_compile(&g, v, gbnf, strlen(gbnf), why, sizeof why) < 0) {
        fprintf(stderr, "  grammar: %s\n%s\n", why, gbnf);
        return -1;
    }
    struct grammar_state *st;
    grammar_state_create(&st, g);
    int ok = grammar_state_accept_bytes(st, text, strlen(text)) == 0 && grammar_state_complete(st);
    grammar_state_free(st);
    grammar_unref(g);
    return ok;
}

TEST(tool_calls_grammar_forces_the_syntax) {
    struct grammar_vocab *v = byte_vocab();
    CHECK(v != NULL);
    json_t *tools = json_loads(tools_json, 0, NULL);
    char *g = NULL, where[96], why[160];
    struct tool_dialect d = {TOOL_FORMAT_HERMES, "<think>", "</think>"};
    CHECK(tool_grammar(&d, tools, NULL, true, false, false, &g, where, sizeof where, why, sizeof why) == 0);
    CHECK_EQ_INT(matches(v, g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"), 1);
    CHECK_EQ_INT(matches(v, g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>"), 0);
    CHECK_EQ_INT(matches(v, g, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"), 0);
    CHECK_EQ_INT(matches(v, g, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"days\": 2}}\n</tool_call>"), 1);
    free(g);
    /* named, one call, after the reasoning the prompt opened */
    CHECK(tool_grammar(&d, tools, "search", false, false, true, &g, where, sizeof where, why, sizeof why) == 0);
    CHECK_EQ_INT(matches(v, g, "ok so\n</think>\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n</tool_call>"), 1);
    CHECK_EQ_INT(matches(v, g, "</think><tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>"), 0);
    free(g);
    static const struct {
        enum tool_format f;
        const char *call;
    } calls[] = {
        {TOOL_FORMAT_LLAMA3, "{\"name\": \"search\", \"parameters\": {\"query\": \"x\"}}"},
        {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}]"},
        {TOOL_FORMAT_QWEN_XML, "<tool_call>\n<function=search>\n<parameter=query>\nx\n</parameter>\n</function>\n</tool_call>"},
        {TOOL_FORMAT_GLM, "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>x</arg_value>\n</tool_call>"},
        {TOOL_FORMAT_DEEPSEEK_V3, DS_CALLS_BEGIN DS_CALL_BEGIN "search" DS_SEP "{\"query\": \"x\"}" DS_CALL_END DS_CALLS_END},
        {TOOL_FORMAT_KIMI, "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>"
                           "{\"query\": \"x\"}<|tool_call_end|><|tool_calls_section_end|>"},
        {TOOL_FORMAT_FUNCTIONARY_V32, ">>>search\n{\"query\": \"x\"}"},
        {TOOL_FORMAT_GPT_OSS, "<|channel|>commentary to=functions.search <|constrain|>json<|message|>{\"query\": \"x\"}"},
        {TOOL_FORMAT_COMMAND_R7B, "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"search\", "
                                  "\"parameters\": {\"query\": \"x\"}}\n]<|END_ACTION|>"},
    };
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        struct tool_dialect di = {calls[i].f, NULL, NULL};
        CHECK(tool_grammar(&di, tools, "search", false, true, false, &g, where, sizeof where, why, sizeof why) == 0);
        int m = matches(v, g, calls[i].call);
        if (m != 1) fprintf(stderr, "  %s: %d\n%s\n", tool_format_name(calls[i].f), m, g);
        free(g);
        CHECK_EQ_INT(m, 1);
        /* the lazy grammar starts at the trigger */
        CHECK(strncmp(calls[i].call, tool_format_trigger(calls[i].f), strlen(tool_format_trigger(calls[i].f))) == 0);
    }
    /* functionary v3.2's prompt wrote the first ">>>": a forced call starts with the name */
    struct tool_dialect fv = {TOOL_FORMAT_FUNCTIONARY_V32, NULL, NULL};
    CHECK(tool_grammar(&fv, tools, NULL, true, false, false, &g, where, sizeof where, why, sizeof why) == 0);
    CHECK_EQ_INT(matches(v, g, "search\n{\"query\": \"x\"}>>>get_weather\n{\"city\": \"P\"}"), 1);
    CHECK_EQ_INT(matches(v, g, ">>>search\n{\"query\": \"x\"}"), 0);
    free(g);
    /* a schema the converter refuses is named */
    json_t *bad = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                             "{\"type\": \"object\", \"properties\": {\"a\": {\"not\": {}}}}}}]", 0, NULL);
    CHECK(tool_grammar(&d, bad, NULL, true, false, false, &g, where, sizeof where, why, sizeof why) == -ERR_INVAL);
    CHECK(strncmp(where, "tools[0].function.parameters", 28) == 0);
    json_decref(bad);
    json_decref(tools);
    grammar_vocab_free(v);
}

static int parse_chat(const char *extra, struct completion_params *p, struct api_error *err) {
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": %s%s}", tools_json,
             extra);
    return completion_params_parse(p, API_OAI_CHAT, body, strlen(body), NULL, err);
}

TEST(tool_calls_request_fields) {
    struct completion_params p;
    struct api_error err;
    CHECK(parse_chat("", &p, &err) == 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_AUTO);
    CHECK(p.parallel_tool_calls && p.reasoning_format == -1);
    completion_params_free(&p);
    CHECK(parse_chat(", \"tool_choice\": \"required\", \"parallel_tool_calls\": false, \"reasoning_format\": \"none\"", &p, &err) == 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_REQUIRED);
    CHECK(!p.parallel_tool_calls && p.reasoning_format == 0);
    completion_params_free(&p);
    CHECK(parse_chat(", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"search\"}}", &p, &err) == 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_NAMED);
    CHECK_EQ_STR(p.tool_name, "search");
    completion_params_free(&p);
    CHECK(parse_chat(", \"tool_choice\": \"none\"", &p, &err) == 0);
    CHECK_EQ_INT(p.tool_choice, TOOL_CHOICE_NONE);
    completion_params_free(&p);
    CHECK(parse_chat(", \"tool_choice\": \"sometimes\"", &p, &err) == -ERR_INVAL);
    CHECK_EQ_STR(err.param, "tool_choice");
    CHECK(parse_chat(", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"nope\"}}", &p, &err) == -ERR_INVAL);
    CHECK_EQ_STR(err.param, "tool_choice.function.name");
    CHECK(parse_chat(", \"reasoning_format\": \"loud\"", &p, &err) == -ERR_INVAL);
    CHECK_EQ_STR(err.param, "reasoning_format");
    CHECK(parse_chat(", \"parallel_tool_calls\": 3", &p, &err) == -ERR_INVAL);
    CHECK_EQ_STR(err.param, "parallel_tool_calls");
    CHECK(parse_chat(", \"response_format\": {\"type\": \"json_object\"}", &p, &err) == -ERR_INVAL);
    CHECK_EQ_STR(err.param, "response_format");
    const char *bad = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": \"function\", "
                      "\"function\": {\"name\": \"\"}}]}";
    CHECK(completion_params_parse(&p, API_OAI_CHAT, bad, strlen(bad), NULL, &err) == -ERR_INVAL);
    CHECK_EQ_STR(err.param, "tools[0].function.name");
    const char *nochat = "{\"prompt\": \"hi\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}";
    CHECK(completion_params_parse(&p, API_OAI_COMPLETION, nochat, strlen(nochat), NULL, &err) == -ERR_INVAL);
    CHECK_EQ_STR(err.param, "tools");
    const char *req = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tool_choice\": \"required\"}";
    CHECK(completion_params_parse(&p, API_OAI_CHAT, req, strlen(req), NULL, &err) == -ERR_INVAL);
    CHECK_EQ_STR(err.param, "tool_choice");
}
