/* chat_prompt.h: how the server turns a chat request into prompt text.
 *
 * By default the model's own template (`tokenizer.chat_template`, or the text of
 * `--chat-template-file`) runs as a program (chat_jinja.h), with messages, tools and
 * chat_template_kwargs as the reference server passes them. `--chat-template NAME` forces a
 * native family (chat_template.h) instead; a template that does not parse falls back to the
 * family detected in its text (chatml when none), with a warning at load.
 *
 * Continuing the assistant (prefill): when the conversation ends with the assistant's message and
 * the request asks for it (continue_final_message true), or leaves it unsaid while asking for the
 * generation prompt, that message is continued instead of closed: the messages before it are
 * rendered with the generation prompt and its text (text parts joined with "\n") is appended as
 * is. With add_generation_prompt false and no continue_final_message the conversation renders as
 * it is, final turn closed.
 *
 *   struct chat_prompt cp;
 *   struct chat_prompt_source src = {.text = tmpl, .len = tmpl_len, .bos = "<s>", .eos = "</s>",
 *                                    .strip_bos = true};
 *   char warn[512], why[512];
 *   if (chat_prompt_init(&cp, &src, warn, sizeof warn, why, sizeof why) < 0) -> refuse to start
 *   if (warn[0]) log_warn(...warn...);
 *   struct chat_request req = {.messages = msgs, .add_generation_prompt = true, .continue_final = -1};
 *   char *prompt; size_t len;
 *   int rc = chat_prompt_render(&cp, &req, time(NULL), &prompt, &len, why, sizeof why);
 *   ... free(prompt); chat_prompt_free(&cp);
 *
 * Threads: once initialized, any number of threads may render at once.
 */
#ifndef UVLM_API_CHAT_PROMPT_H
#define UVLM_API_CHAT_PROMPT_H

#include "api/chat_template.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t;      /* jansson's */
struct chat_jinja;

/* A chat request as a template renders it (the JSON values belong to the caller). */
struct chat_request {
    const struct json_t *messages;  /* array of OpenAI messages */
    const struct json_t *tools;     /* array of OpenAI tools, or NULL */
    const struct json_t *kwargs;    /* chat_template_kwargs: an object, or NULL */
    bool add_generation_prompt;     /* end with the opening of the assistant's reply (default) */
    int continue_final;             /* continue_final_message: 1 yes, 0 no, -1 not given */
};

struct chat_prompt {
    enum chat_family family;        /* the native family: forced, or the fallback */
    struct chat_jinja *jinja;       /* the template run as Jinja, or NULL: the family formats */
};

struct chat_prompt_source {
    const char *forced;             /* --chat-template NAME, or NULL */
    const char *text;               /* the template's text, or NULL when there is none */
    size_t len;
    const char *origin;             /* where the text came from, for messages ("the model") */
    const char *bos, *eos;          /* the model's BOS and EOS text (NULL: none) */
    bool strip_bos, strip_eos;      /* the tokenizer adds them: cut them from rendered prompts */
};

/* 0, or -ERR_INVAL (an unknown forced name: why lists the names), -ERR_NOMEM. warn gets what to
 * log at load when the template cannot be run or no family was recognised, else "". */
int chat_prompt_init(struct chat_prompt *cp, const struct chat_prompt_source *src, char *warn,
                     size_t warn_cap, char *why, size_t why_cap);
void chat_prompt_free(struct chat_prompt *cp);

/* "jinja" when the template runs as Jinja, else the family's name. */
const char *chat_prompt_kind(const struct chat_prompt *cp);

/* The prompt for req into *prompt (malloc'd, NUL-terminated, *len bytes; the caller frees it);
 * now is the time the template's date variables show. 0, or -ERR_INVAL (messages the template or
 * family cannot express, tools a native family has no place for, a template that raised: why
 * says which), -ERR_UNSUPPORTED (a non-text content part), -ERR_TOOBIG (the template ran past its
 * limits), -ERR_NOMEM. */
int chat_prompt_render(const struct chat_prompt *cp, const struct chat_request *req, int64_t now,
                       char **prompt, size_t *len, char *why, size_t why_cap);

#endif
