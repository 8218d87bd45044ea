/* jinja_fuzz.c: libFuzzer target for the Jinja engine (src/api/jinja*.c) and the chat-template
 * layer over it (src/api/chat_jinja.c). The input is a template, then optionally a NUL byte and a
 * JSON object of template variables (when absent or not an object, a small conversation with a
 * tool and a tool call is used). Whatever the input: no crash, no leak, no hang (the render limits
 * are small here), a parse or render either succeeds with a NUL-terminated output of the length
 * it reports or fails with a known error code and a message; and when the variables hold a
 * messages array (and the template kept within those limits), the template also goes through
 * chat_jinja_create and chat_jinja_apply.
 *
 * Build and run (scripts/fuzz.mk, target "jinja"):
 *   make fuzz FUZZ_TARGETS=jinja
 *   build-fuzz/fuzz-jinja -max_total_time=60 test/fuzz/corpus/jinja
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_jinja.h"
#include "api/jinja.h"
#include "common/err.h"

static const char default_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
    "   \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"{\\\"temp\\\": 21}\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\","
    "   \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static void check_result(int rc, const char *out, size_t len, const char *why) {
    if (rc == 0) {
        if (!out || out[len] != '\0') abort();
        return;
    }
    if (out) abort();
    if (rc != -ERR_INVAL && rc != -ERR_FORMAT && rc != -ERR_TOOBIG && rc != -ERR_NOMEM && rc != -ERR_UNSUPPORTED)
        abort();
    if (!why[0]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    json_t *vars = NULL;
    if (nul) vars = json_loadb((const char *)nul + 1, size - tlen - 1, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_loads(default_vars, 0, NULL);
    }

    struct jinja_template *t;
    char why[256] = "";
    bool runaway = false;
    int rc = jinja_parse(text, tlen, &t, why, sizeof why);
    if (rc < 0) {
        if ((rc != -ERR_FORMAT && rc != -ERR_TOOBIG && rc != -ERR_NOMEM) || !why[0]) abort();
    } else {
        struct jinja_render_opts o = JINJA_RENDER_OPTS_DEFAULT;
        o.now = 1795694400;
        o.limits.max_steps = 20000;
        o.limits.max_output = 1 << 16;
        o.limits.max_memory = 64u << 20;
        o.limits.max_call_depth = 40;
        char *out;
        size_t len;
        why[0] = '\0';
        rc = jinja_render(t, vars, &o, &out, &len, why, sizeof why);
        check_result(rc, out, len, why);
        runaway = rc == -ERR_TOOBIG;
        free(out);
        jinja_free(t);
    }

    /* the chat layer: normalizes messages and tools, probes the template, renders (not for a
     * template that ran past the small limits above: the chat layer's are the server's, and
     * running one to them would only slow the search down) */
    const json_t *messages = json_object_get(vars, "messages");
    if (json_is_array(messages) && !runaway) {
        struct chat_jinja *cj;
        why[0] = '\0';
        rc = chat_jinja_create(text, tlen, "<s>", "</s>", true, (size & 1) != 0, &cj, why, sizeof why);
        if (rc < 0) {
            if (!why[0]) abort();
        } else {
            if (!chat_jinja_source(cj)) abort();
            struct chat_jinja_input in = {messages, json_object_get(vars, "tools"),
                                          json_object_get(vars, "chat_template_kwargs"), (size & 2) != 0,
                                          1795694400};
            char *out;
            size_t len;
            why[0] = '\0';
            rc = chat_jinja_apply(cj, &in, &out, &len, why, sizeof why);
            check_result(rc, out, len, why);
            free(out);
            chat_jinja_free(cj);
        }
    }
    json_decref(vars);
    return 0;
}
