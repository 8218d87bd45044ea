#include "api/chat_prompt.h"

#include "api/chat_json.h"
#include "api/chat_template.h"
#include "common/err.h"

#include <jansson.h>
#include <stdio.h>

int chat_prompt_from_body(int family, const char *body, size_t len, char **prompt, char *why,
                          size_t why_cap) {
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root) {
        snprintf(why, why_cap, "invalid JSON: %s", jerr.text);
        return -ERR_FORMAT;
    }
    json_t *messages = json_is_array(root) ? root : json_object_get(root, "messages");
    int rc;
    if (!json_is_array(messages)) {
        snprintf(why, why_cap, "messages: expected an array of {role, content}");
        rc = -ERR_FORMAT;
    } else {
        rc = chat_prompt_from_json((enum chat_family)family, messages, true, prompt, why, why_cap);
    }
    json_decref(root);
    return rc;
}

const char *chat_prompt_family_name(int family) { return chat_family_name((enum chat_family)family); }
