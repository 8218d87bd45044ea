/* anthropic.h: Anthropic's Messages API, POST /v1/messages and /v1/messages/count_tokens: the
 * request body read into the completion parameters every endpoint shares (params.h), and the
 * message object, its stream events and the error body rendered from the generation's result
 * (render.h's structs). Pure functions: the generation itself is generate.c's.
 *
 * Request (unknown fields ignored, null means the default):
 *   messages        required, non-empty: [{"role": "user" | "assistant", "content": string |
 *                   [blocks]}]; {"type": "text", "text": string} blocks are concatenated in
 *                   order. An assistant turn's {"type": "tool_use", "id", "name", "input"}
 *                   blocks become its tool_calls (arguments: input as JSON text); a user turn's
 *                   {"type": "tool_result", "tool_use_id", "content": string | [text blocks]}
 *                   blocks become "tool" messages before its text. image, document, thinking,
 *                   ... blocks are refused with a 400 naming them (text only).
 *   system          a string or an array of text blocks: the system message, first.
 *   max_tokens      required (as Anthropic requires it) on /v1/messages: >= 1; not read by
 *                   count_tokens (API_ANTHROPIC_COUNT).
 *   stop_sequences  an array of strings (params.h's limits for stop strings).
 *   temperature     [0, 1]; top_k >= 0 (0: off); top_p [0, 1]; stream (bool); model (echoed).
 *   tools           [{"name", "description"?, "input_schema"?}] (type absent or "custom"; server
 *                   tools are a 400), read as the chat API's function tools (tool_calls.h).
 *                   tool_choice {"type": "auto" (default with tools) | "any" | "tool" (with
 *                   "name") | "none", "disable_parallel_tool_use"?}. Reasoning blocks stay in
 *                   the text.
 *   metadata, thinking, service_tier are ignored. The other sampling settings keep params.h's
 *   defaults.
 *
 * Message object:
 *   {id: "msg_...", type: "message", role: "assistant", model, content: [{type: "text", text},
 *    then per tool call {type: "tool_use", id: "call_...", name, input: {...}}] (the text block
 *    only when there is text or no call), stop_reason: "end_turn" (end of generation) |
 *    "max_tokens" (max_tokens or the end of the context) | "stop_sequence" | "tool_use" (calls
 *    were made), stop_sequence: the one matched or null,
 *    usage: {input_tokens, output_tokens}}
 * input_tokens counts the whole prompt, as POST /v1/messages/count_tokens's {"input_tokens"}.
 *
 * Stream (stream: true), each event "event: TYPE" + "data: {type: TYPE, ...}":
 *   open:  message_start {message (content [], stop_reason null, usage {input_tokens,
 *          output_tokens: 0})}, content_block_start {index: 0, content_block: {type: "text",
 *          text: ""}}, ping {}
 *   text:  content_block_delta {index: 0, delta: {type: "text_delta", text}}
 *   close: content_block_stop {index: 0}, message_delta {delta: {stop_reason, stop_sequence},
 *          usage: {output_tokens}}, message_stop {}
 *   error: error {error: {type, message}}
 * With tools (struct anthropic_stream, the anthropic_tools_* functions) blocks open as they
 * come: open gives message_start and ping; text opens a text block unless one is open; a call
 * stops the open block and starts {type: "tool_use", id, name, input: {}} whose input arrives as
 * content_block_delta {index, delta: {type: "input_json_delta", partial_json}}; close stops the
 * open block (an empty text block when none came), then message_delta and message_stop.
 * Each stream function fills ev[] (at most SSE_EVENTS_MAX) and returns the count; an event whose
 * data is NULL ran out of memory (the caller ends the stream). The caller frees every data.
 *
 *   int n = anthropic_stream_open(&meta, n_prompt, ev);   // send each, free(ev[i].data)
 *   n = anthropic_stream_text(piece, len, ev);
 *   n = anthropic_stream_close(&result, ev);
 *
 * Errors: {"type": "error", "error": {"type", "message"}}, the type from the status
 * (errors.h's api_error_type_anthropic: 400 invalid_request_error, 401 authentication_error,
 * 404 not_found_error, 413 request_too_large, 503 overloaded_error, 500 api_error).
 */
#ifndef UVLM_API_ANTHROPIC_H
#define UVLM_API_ANTHROPIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/params.h"
#include "api/render.h"

char *render_anthropic_message(const struct response_meta *meta, const struct completion_result *r);

int anthropic_stream_open(const struct response_meta *meta, int32_t n_prompt, struct sse_event *ev);
int anthropic_stream_text(const char *text, size_t len, struct sse_event *ev);
int anthropic_stream_close(const struct completion_result *r, struct sse_event *ev);
struct anthropic_stream {      /* a stream with tools; zero-initialised, nothing to free */
    int n_blocks;               /* content blocks started */
    bool open, open_call;       /* the last one is open; it is a tool_use block */
};
int anthropic_tools_open(const struct response_meta *meta, int32_t n_prompt, struct sse_event *ev);
int anthropic_tools_text(struct anthropic_stream *st, const char *text, size_t len, struct sse_event *ev);
/* id and name: a new call (tool_call_delta's), else more input of the open one. */
int anthropic_tools_call(struct anthropic_stream *st, const char *id, const char *name, const char *args, size_t len,
                         struct sse_event *ev);
int anthropic_tools_close(struct anthropic_stream *st, const struct completion_result *r, struct sse_event *ev);
int anthropic_stream_error(const struct api_error *err, struct sse_event *ev);

/* The error body of err in Anthropic's shape. NULL: out of memory. */
char *anthropic_error_render(const struct api_error *err);

/* POST /v1/messages/count_tokens: {"input_tokens": n}. */
char *render_anthropic_count(int32_t n_tokens);

#endif
