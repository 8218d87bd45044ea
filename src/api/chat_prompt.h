/* chat_prompt.h: a request body's "messages" -> the prompt text of a chat family, for the serving
 * endpoints (/v1/chat/completions, /apply-template).
 *
 * Why a separate module: params.h and chat_template.h each define a `struct chat_message`, so no
 * file can include both; this header includes neither and takes the family as an int
 * (enum chat_family).
 *
 *   char *prompt, why[128];
 *   int len = chat_prompt_from_body(srv->chat_family, body, body_len, &prompt, why, sizeof why);
 *   if (len < 0) -> 400 with why;   ... free(prompt);
 */
#ifndef UVLM_API_CHAT_PROMPT_H
#define UVLM_API_CHAT_PROMPT_H

#include <stddef.h>

/* body: JSON text with a "messages" array (or a bare array). Returns the prompt length with
 * *prompt a new NUL-terminated buffer, or -ERR_FORMAT / -ERR_INVAL / -ERR_UNSUPPORTED /
 * -ERR_NOMEM with why filled. The generation prompt (the assistant's opening) is added. */
int chat_prompt_from_body(int family, const char *body, size_t len, char **prompt, char *why,
                          size_t why_cap);

/* The family's name ("chatml", ...). */
const char *chat_prompt_family_name(int family);

#endif
