/* chat_json.h: OpenAI-style chat messages read from JSON into chat_template's plain structs.
 *
 * Accepted: an array of objects {"role": string, "content": C}, where C is a string, null (an
 * assistant turn that only called tools: empty text) or an array of content parts of which the
 * {"type": "text", "text": string} parts are joined in order with "\n" (other part types, like
 * images, are refused: uvlm is text-only). Other keys ("name", "tool_calls", ...) are ignored.
 *
 * The result owns copies of every string: it outlives the JSON it came from.
 *
 *   struct chat_messages cm;
 *   char why[128];
 *   if (chat_messages_parse(body, body_len, &cm, why, sizeof why) < 0) -> 400 with why
 *   chat_template_apply_alloc(fam, cm.msgs, cm.n, true, &prompt);
 *   chat_messages_free(&cm);
 *
 * From an already-parsed jansson value (the API layer), use chat_messages_from_json(), or
 * chat_prompt_from_json() for messages -> prompt in one call (what POST /apply-template and
 * /v1/chat/completions need):
 *
 *   char *prompt, why[128];
 *   int len = chat_prompt_from_json(srv->chat_family, json_object_get(body, "messages"), true,
 *                                   &prompt, why, sizeof why);
 *   if (len < 0) -> error status for len, message why
 *   ... reply {"prompt": prompt}; free(prompt);
 */
#ifndef UVLM_API_CHAT_JSON_H
#define UVLM_API_CHAT_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "api/chat_template.h"

struct chat_messages {
    struct chat_message *msgs; /* n messages; role and content strings owned by this struct */
    size_t n;
};

struct json_t; /* jansson's json_t, declared so that this header does not need jansson.h */

/* Fills *out from a JSON array value. 0, -ERR_FORMAT (why says what is wrong: "messages[2]:
 * role is not a string"), -ERR_UNSUPPORTED (a non-text content part) or -ERR_NOMEM; on error
 * *out is left empty (nothing to free). why may be NULL. */
int chat_messages_from_json(const struct json_t *array, struct chat_messages *out,
                            char *why, size_t why_cap);

/* The same from JSON text (len bytes, need not be NUL-terminated). -ERR_FORMAT for bad JSON. */
int chat_messages_parse(const char *json_text, size_t len, struct chat_messages *out,
                        char *why, size_t why_cap);

void chat_messages_free(struct chat_messages *cm);

/* The prompt family fam makes of a JSON messages array, in a new NUL-terminated buffer *prompt
 * (the caller frees it). Returns its length, or chat_messages_from_json's errors, or
 * chat_template_apply's (-ERR_INVAL: a role the family cannot express); why says which. */
int chat_prompt_from_json(enum chat_family fam, const struct json_t *messages,
                          bool add_generation_prompt, char **prompt, char *why, size_t why_cap);

#endif
