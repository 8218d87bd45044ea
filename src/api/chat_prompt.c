/* chat_prompt.c: a chat request -> prompt text, by the model's template run as Jinja or by a
 * native family (see chat_prompt.h). */
#include "api/chat_prompt.h"

#include "api/chat_jinja.h"
#include "api/chat_json.h"
#include "common/err.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(int code, char *why, size_t why_cap, const char *fmt, ...) {
    if (why && why_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_cap, fmt, ap);
        va_end(ap);
    }
    return code;
}

int chat_prompt_init(struct chat_prompt *cp, const struct chat_prompt_source *src, char *warn,
                     size_t warn_cap, char *why, size_t why_cap) {
    memset(cp, 0, sizeof *cp);
    if (warn && warn_cap) warn[0] = '\0';
    if (src->forced) return chat_family_resolve(src->forced, NULL, 0, &cp->family, why, why_cap);
    char family_warn[512] = "";
    chat_family_resolve(NULL, src->text, src->text ? src->len : 0, &cp->family, family_warn, sizeof family_warn);
    if (!src->text || src->len == 0) {
        if (warn && warn_cap) snprintf(warn, warn_cap, "%s", family_warn);
        return 0;
    }
    char perr[256];
    int rc = chat_jinja_create(src->text, src->len, src->bos, src->eos, src->strip_bos, src->strip_eos, &cp->jinja,
                               perr, sizeof perr);
    if (rc == -ERR_NOMEM) return fail(rc, why, why_cap, "out of memory");
    if (rc < 0 && warn && warn_cap)
        snprintf(warn, warn_cap, "the chat template of %s cannot be run (%s): formatting as %s instead",
                 src->origin ? src->origin : "the model", perr, chat_family_name(cp->family));
    return 0;
}

void chat_prompt_free(struct chat_prompt *cp) {
    chat_jinja_free(cp->jinja);
    cp->jinja = NULL;
}

const char *chat_prompt_kind(const struct chat_prompt *cp) {
    return cp->jinja ? "jinja" : chat_family_name(cp->family);
}

/* The native family's prompt for messages[0..n). */
static int render_native(const struct chat_prompt *cp, const json_t *messages, bool add_gen, char **prompt,
                         size_t *len, char *why, size_t why_cap) {
    int n = chat_prompt_from_json(cp->family, messages, add_gen, prompt, why, why_cap);
    if (n < 0) return n;
    *len = (size_t)n;
    return 0;
}

/* The first n messages as a new array (sharing the message values). */
static json_t *first_messages(const json_t *messages, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append(a, json_array_get(messages, i)) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The text of one message (text parts joined with "\n"), into a new string. */
static int message_text(const json_t *message, char **text, char *why, size_t why_cap) {
    json_t *one = json_array();
    if (!one || json_array_append(one, (json_t *)message) != 0) {
        json_decref(one);
        return fail(-ERR_NOMEM, why, why_cap, "out of memory");
    }
    struct chat_messages cm;
    int rc = chat_messages_from_json(one, &cm, why, why_cap);
    json_decref(one);
    if (rc < 0) return rc;
    *text = (char *)cm.msgs[0].content;
    cm.msgs[0].content = strdup("");
    chat_messages_free(&cm);
    return *text ? 0 : fail(-ERR_NOMEM, why, why_cap, "out of memory");
}

static const char *role_of(const json_t *message) {
    const char *r = json_string_value(json_object_get(message, "role"));
    return r ? r : "";
}

int chat_prompt_render(const struct chat_prompt *cp, const struct chat_request *req, int64_t now,
                       char **prompt, size_t *len, char *why, size_t why_cap) {
    *prompt = NULL;
    *len = 0;
    if (!json_is_array(req->messages)) return fail(-ERR_INVAL, why, why_cap, "messages: expected an array");
    size_t n = json_array_size(req->messages);
    const json_t *last = n ? json_array_get(req->messages, n - 1) : NULL;
    bool last_is_assistant = last && !strcmp(role_of(last), "assistant");
    bool cont = req->continue_final == 1 || (req->continue_final < 0 && last_is_assistant && req->add_generation_prompt);
    if (cont && !last_is_assistant)
        return fail(-ERR_INVAL, why, why_cap, "continue_final_message: the last message is not the assistant's");
    if (cont && n > 1 && !strcmp(role_of(json_array_get(req->messages, n - 2)), "assistant"))
        return fail(-ERR_INVAL, why, why_cap, "continue_final_message: two assistant messages end the conversation");
    if (!cp->jinja && json_array_size(req->tools) > 0)
        return fail(-ERR_INVAL, why, why_cap, "the %s chat format has no place for tools", chat_family_name(cp->family));

    char *prefill = NULL;
    json_t *head = NULL;
    const json_t *messages = req->messages;
    if (cont) {
        int rc = message_text(last, &prefill, why, why_cap);
        if (rc < 0) return rc;
        head = first_messages(req->messages, n - 1);
        if (!head) {
            free(prefill);
            return fail(-ERR_NOMEM, why, why_cap, "out of memory");
        }
        messages = head;
    }
    bool add_gen = cont || req->add_generation_prompt;
    int rc;
    if (cp->jinja) {
        struct chat_jinja_input in = {messages, req->tools, req->kwargs, add_gen, now};
        rc = chat_jinja_apply(cp->jinja, &in, prompt, len, why, why_cap);
    } else {
        rc = render_native(cp, messages, add_gen, prompt, len, why, why_cap);
    }
    json_decref(head);
    if (rc == 0 && prefill) {
        size_t pl = strlen(prefill);
        char *grown = realloc(*prompt, *len + pl + 1);
        if (!grown) {
            free(*prompt);
            *prompt = NULL;
            *len = 0;
            rc = fail(-ERR_NOMEM, why, why_cap, "out of memory");
        } else {
            memcpy(grown + *len, prefill, pl + 1);
            *len += pl;
            *prompt = grown;
        }
    }
    free(prefill);
    return rc;
}
