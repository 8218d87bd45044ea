/* chat_jinja.h: a model's chat template run as a program (jinja.h), with the variables a
 * reference server gives it, so that the prompt is byte for byte what that server renders.
 *
 * At load, chat_jinja_create parses the template and learns what it can take (as the reference
 * does, by rendering probe conversations): whether it has a place for a system message
 * (otherwise the system text is merged into the next message, joined with "\n"), whether it
 * wants tool-call arguments as objects (then a call's JSON-string arguments are parsed), and
 * whether it can keep earlier turns' reasoning. It also applies the reference's fixes to two
 * known templates (a condition in gpt-oss's and in Mistral's tool-calling templates). A
 * template that does not parse is refused here: the caller falls back to the native family
 * (chat_template.h) with a warning.
 *
 * Per request, chat_jinja_apply renders OpenAI-style messages. The template sees:
 *   messages      each {role, content, [reasoning_content], [name], [tool_call_id], [tool_calls]}
 *                 in that key order: content a string ("" when null; text parts joined with "\n"),
 *                 tool_calls [{type: "function", function: {name, arguments}, [id]}]; role
 *                 "developer" reads as "system" (except in Harmony templates, which know it);
 *                 Ministral 3 templates read system and assistant content as typed blocks
 *                 ([{type: "thinking"}], [{type: "text"}]), as the reference gives it them
 *   tools         [{type: "function", function: {name, description, parameters}}], only when the
 *                 request has at least one tool
 *   add_generation_prompt  true, or undefined when false
 *   bos_token, eos_token   the model's BOS and EOS text
 *   enable_thinking        true
 *   datetime, date_string  the day ("Nov 26 2026", "26 Nov 2026"); strftime_now(fmt) too
 *   preserve_reasoning, preserve_thinking (true), clear_thinking, drop_thinking (false): when the
 *                 template can show earlier turns' reasoning (the probe at load), it is asked to,
 *                 as the reference does by default: the prompt of a conversation then only grows
 *   and every member of chat_template_kwargs (which may override the above).
 * A leading BOS text is cut from the result when the tokenizer adds BOS itself (and a trailing
 * EOS text when it adds EOS), so the prompt does not carry it twice.
 *
 * Continuing the assistant's last message (prefill) is chat_prompt.h's: it renders the
 * messages before it here and appends its text.
 *
 *   struct chat_jinja *cj;
 *   if (chat_jinja_create(text, len, "<s>", "</s>", true, false, &cj, why, sizeof why) < 0)
 *       -> warn, use the native family
 *   struct chat_jinja_input in = {.messages = msgs, .tools = tools, .add_generation_prompt = true,
 *                                 .now = time(NULL)};
 *   char *prompt; size_t n;
 *   if (chat_jinja_apply(cj, &in, &prompt, &n, why, sizeof why) < 0) -> 400 with why
 *   ... free(prompt); ... chat_jinja_free(cj);
 *
 * Threads: a created template is read-only: any number of threads may apply it at once.
 */
#ifndef UVLM_API_CHAT_JINJA_H
#define UVLM_API_CHAT_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct chat_jinja;
struct json_t; /* jansson's */

/* Parses the template and probes it. bos/eos: the model's BOS and EOS text (NULL: ""); strip_bos /
 * strip_eos: cut them from the ends of a rendered prompt (the tokenizer adds them). 0 and *out, or
 * -ERR_FORMAT (why: the parse error with its line), -ERR_NOMEM. */
int chat_jinja_create(const char *text, size_t len, const char *bos, const char *eos, bool strip_bos,
                      bool strip_eos, struct chat_jinja **out, char *why, size_t why_cap);
void chat_jinja_free(struct chat_jinja *cj);

/* The template text as created (after the reference's fixes to two known templates). */
const char *chat_jinja_source(const struct chat_jinja *cj);

struct chat_jinja_input {
    const struct json_t *messages;  /* array of OpenAI messages (required, may be empty) */
    const struct json_t *tools;     /* array of OpenAI tools, or NULL / null / [] for none */
    const struct json_t *kwargs;    /* chat_template_kwargs: an object, or NULL */
    bool add_generation_prompt;
    int64_t now;                    /* seconds since the epoch, for the date variables */
};

/* Renders into *prompt (malloc'd, NUL-terminated, *len bytes; the caller frees it). 0, or
 * -ERR_INVAL (bad messages or tools, the template raised or failed: why says which),
 * -ERR_UNSUPPORTED (a content part that is not text),
 * -ERR_TOOBIG (the template ran past its limits), -ERR_NOMEM. */
int chat_jinja_apply(const struct chat_jinja *cj, const struct chat_jinja_input *in, char **prompt,
                     size_t *len, char *why, size_t why_cap);

#endif
