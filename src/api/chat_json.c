/* chat_json.c: JSON chat messages -> struct chat_messages (see chat_json.h). */
#include "api/chat_json.h"

#include "common/err.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(int code, char *why, size_t why_cap, const char *fmt, ...) {
    if (why && why_cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_cap, fmt, ap);
        va_end(ap);
    }
    return code;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = '\0';
    return d;
}

/* The text of a message's content: a string, null, or an array of text parts joined with "\n"
 * (none before the first part with text), as the reference server joins them. */
static int content_text(const json_t *content, size_t i, char **text, char *why, size_t why_cap) {
    if (!content || json_is_null(content)) {
        *text = dup_n("", 0);
        return *text ? 0 : -ERR_NOMEM;
    }
    if (json_is_string(content)) {
        *text = dup_n(json_string_value(content), json_string_length(content));
        return *text ? 0 : -ERR_NOMEM;
    }
    if (!json_is_array(content))
        return fail(-ERR_FORMAT, why, why_cap, "messages[%zu]: content is not a string or an array", i);
    size_t total = 0, k;
    const json_t *part;
    json_array_foreach(content, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *ptext = json_object_get(part, "text");
        if (!type || strcmp(type, "text"))
            return fail(-ERR_UNSUPPORTED, why, why_cap,
                        "messages[%zu].content[%zu]: only text parts are supported", i, k);
        if (!json_is_string(ptext))
            return fail(-ERR_FORMAT, why, why_cap, "messages[%zu].content[%zu]: text is not a string", i, k);
        total += json_string_length(ptext) + 1;
    }
    char *buf = malloc(total + 1), *end = buf;
    if (!buf) return -ERR_NOMEM;
    json_array_foreach(content, k, part) {
        const json_t *ptext = json_object_get(part, "text");
        if (end > buf) *end++ = '\n';
        memcpy(end, json_string_value(ptext), json_string_length(ptext));
        end += json_string_length(ptext);
    }
    *end = '\0';
    *text = buf;
    return 0;
}

int chat_messages_from_json(const struct json_t *array, struct chat_messages *out,
                            char *why, size_t why_cap) {
    out->msgs = NULL;
    out->n = 0;
    if (!json_is_array(array)) return fail(-ERR_FORMAT, why, why_cap, "messages is not an array");
    size_t n = json_array_size(array);
    struct chat_messages cm = {calloc(n ? n : 1, sizeof *cm.msgs), 0};
    if (!cm.msgs) return -ERR_NOMEM;
    for (size_t i = 0; i < n; i++, cm.n++) {
        const json_t *m = json_array_get(array, i);
        const json_t *role = json_object_get(m, "role");
        int rc = 0;
        if (!json_is_object(m))
            rc = fail(-ERR_FORMAT, why, why_cap, "messages[%zu] is not an object", i);
        else if (!json_is_string(role))
            rc = fail(-ERR_FORMAT, why, why_cap, "messages[%zu]: role is not a string", i);
        else if (!(cm.msgs[i].role = dup_n(json_string_value(role), json_string_length(role))))
            rc = -ERR_NOMEM;
        else
            rc = content_text(json_object_get(m, "content"), i, (char **)&cm.msgs[i].content,
                              why, why_cap);
        if (rc < 0) {
            cm.n++; /* free this message's role too */
            chat_messages_free(&cm);
            return rc;
        }
    }
    *out = cm;
    return 0;
}

int chat_messages_parse(const char *json_text, size_t len, struct chat_messages *out,
                        char *why, size_t why_cap) {
    out->msgs = NULL;
    out->n = 0;
    json_error_t jerr;
    json_t *root = json_loadb(json_text, len, 0, &jerr);
    if (!root)
        return fail(-ERR_FORMAT, why, why_cap, "bad JSON at line %d column %d: %s", jerr.line,
                    jerr.column, jerr.text);
    int rc = chat_messages_from_json(root, out, why, why_cap);
    json_decref(root);
    return rc;
}

void chat_messages_free(struct chat_messages *cm) {
    for (size_t i = 0; i < cm->n; i++) {
        free((char *)cm->msgs[i].role);
        free((char *)cm->msgs[i].content);
    }
    free(cm->msgs);
    cm->msgs = NULL;
    cm->n = 0;
}

int chat_prompt_from_json(enum chat_family fam, const struct json_t *messages,
                          bool add_generation_prompt, char **prompt, char *why, size_t why_cap) {
    struct chat_messages cm;
    int rc = chat_messages_from_json(messages, &cm, why, why_cap);
    if (rc < 0) return rc;
    rc = chat_template_apply_alloc(fam, cm.msgs, cm.n, add_generation_prompt, prompt);
    chat_messages_free(&cm);
    if (rc == -ERR_INVAL)
        return fail(rc, why, why_cap, "the %s chat format has no place for one of these roles",
                    chat_family_name(fam));
    if (rc < 0) return fail(rc, why, why_cap, "%s", err_str(rc));
    return rc;
}
