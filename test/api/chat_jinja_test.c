/* chat_jinja_test.c: the model's own template run as Jinja, golden against ../shared/chat/tools.jsonl
 * (40 real templates, up to three conversations each with tools, tool calls and tool results,
 * byte-exact as the reference server's Jinja engine renders them), plus what the golden file does
 * not reach: probing, prefill, kwargs, BOS/EOS stripping, refusals. */
#include "test.h"

#include "api/chat_jinja.h"
#include "common/err.h"

#include <jansson.h>
#include <stdlib.h>

/* The goldens were rendered on 2026-11-26: noon UTC is that day in every time zone within 12 h. */
#define GOLDEN_NOW 1795694400

/* Templates that must match byte for byte: the test fails if fewer do, so support cannot
 * regress silently. */
#define TOOLS_MATCH_FLOOR 40

static void show_diff(const char *name, size_t conv, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "  %s conversation %zu differs at byte %zu:\n    want: %.160s\n    got:  %.160s\n", name,
            conv, i, want + from, got + from);
}

TEST(chat_jinja_golden_tools) {
    SHARED(path, "chat/tools.jsonl");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    int templates = 0, exact = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *row = json_loads(line, 0, &jerr);
        if (!row) continue;
        templates++;
        const char *name = json_string_value(json_object_get(row, "name"));
        const json_t *tmpl = json_object_get(row, "template");
        struct chat_jinja *cj;
        char why[512];
        int rc = chat_jinja_create(json_string_value(tmpl), json_string_length(tmpl), "<s>", "</s>", true, false,
                                   &cj, why, sizeof why);
        if (rc < 0) {
            fprintf(stderr, "  %s: does not load: %s\n", name, why);
            json_decref(row);
            continue;
        }
        bool all = true;
        const json_t *convs = json_object_get(row, "conversations");
        for (size_t c = 0; c < json_array_size(convs); c++) {
            const json_t *conv = json_array_get(convs, c);
            struct chat_jinja_input in = {
                .messages = json_object_get(conv, "messages"),
                .tools = json_object_get(conv, "tools"),
                .add_generation_prompt = json_is_true(json_object_get(conv, "add_generation_prompt")),
                .now = GOLDEN_NOW,
            };
            char *prompt;
            size_t len;
            const char *want = json_string_value(json_object_get(conv, "expected"));
            rc = chat_jinja_apply(cj, &in, &prompt, &len, why, sizeof why);
            if (rc < 0) {
                fprintf(stderr, "  %s conversation %zu: %s\n", name, c, why);
                all = false;
                continue;
            }
            if (strlen(want) != len || memcmp(want, prompt, len) != 0) {
                show_diff(name, c, want, prompt);
                all = false;
            }
            free(prompt);
        }
        exact += all;
        chat_jinja_free(cj);
        json_decref(row);
    }
    free(line);
    fclose(f);
    printf("  chat_jinja: %d of %d templates exact (tools.jsonl)\n", exact, templates);
    CHECK_EQ_INT(templates, 40);
    CHECK(exact >= TOOLS_MATCH_FLOOR);
}

/* templates.jsonl's `expected` is the reference's native formatting (chat_template.h), not its
 * Jinja engine: the two agree for most families. Printed, and held at the count that agrees. */
#define NATIVE_AGREE_FLOOR 4
TEST(chat_jinja_vs_native_templates) {
    SHARED(path, "chat/templates.jsonl");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    int templates = 0, agree = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *row = json_loads(line, 0, NULL);
        if (!row) continue;
        templates++;
        const json_t *tmpl = json_object_get(row, "template");
        struct chat_jinja *cj;
        char why[512];
        if (chat_jinja_create(json_string_value(tmpl), json_string_length(tmpl), "<s>", "</s>", true, false, &cj, why,
                              sizeof why) < 0) {
            json_decref(row);
            continue;
        }
        bool all = true;
        const json_t *convs = json_object_get(row, "conversations");
        for (size_t c = 0; c < json_array_size(convs); c++) {
            const json_t *conv = json_array_get(convs, c);
            struct chat_jinja_input in = {.messages = json_object_get(conv, "messages"),
                                          .add_generation_prompt = true,
                                          .now = GOLDEN_NOW};
            char *prompt;
            size_t len;
            const char *want = json_string_value(json_object_get(conv, "expected"));
            if (chat_jinja_apply(cj, &in, &prompt, &len, why, sizeof why) < 0) {
                all = false;
                continue;
            }
            all &= strlen(want) == len && memcmp(want, prompt, len) == 0;
            free(prompt);
        }
        agree += all;
        chat_jinja_free(cj);
        json_decref(row);
    }
    free(line);
    fclose(f);
    printf("  chat_jinja: %d of %d templates render as the native formatting (templates.jsonl)\n", agree, templates);
    CHECK_EQ_INT(templates, 40);
    CHECK(agree >= NATIVE_AGREE_FLOOR);
}
