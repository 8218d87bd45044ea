/* responses.h: OpenAI's Responses API, POST /v1/responses: the request body read into the
 * completion parameters every endpoint shares (params.h), and the response object and its typed
 * stream events rendered from the generation's result (render.h's structs). Pure functions: the
 * generation itself is generate.c's, as for /v1/chat/completions.
 *
 * Request (unknown fields ignored, null means the default):
 *   input              required: a string (one user message), or an array of items. An item is a
 *                      message {"type"?: "message", "role": user|assistant|system|developer,
 *                      "content": string | [parts]}; parts are {"type": "input_text"|"output_text",
 *                      "text": string}, concatenated in order; a function_call {call_id, name,
 *                      arguments} (joins the assistant turn before it as one of its tool_calls);
 *                      a function_call_output {call_id, output: string | [parts]} (a "tool"
 *                      message); a reasoning item (accepted and left out: templates drop past
 *                      reasoning). Other part types (input_image, input_file, ...) and other items
 *                      are refused with a 400 naming them (text only).
 *   tools              [{"type": "function", "name", "description"?, "parameters"?, "strict"?}]
 *                      (other tool types are a 400), read as the chat API's function tools
 *                      (tool_calls.h: the template shows them, a grammar holds the calls to the
 *                      schemas). tool_choice "auto" (default with tools), "none", "required" or
 *                      {"type": "function", "name"}; parallel_tool_calls (default true).
 *   The output is read for reasoning as on /v1/chat/completions (when the chat template has a
 *   reasoning block and the server's --reasoning-format is not "none"): the reasoning becomes a
 *   reasoning output item before the message.
 *   instructions       a string: the system message, before the input.
 *   max_output_tokens  >= 1 (absent: until EOS or the context ends).
 *   temperature        [0, 2]; top_p [0, 1]; stream (bool); model (echoed back).
 *   text.format other than {"type": "text"}, previous_response_id and
 *   conversation are refused (400 naming the field): nothing is stored between requests and
 *   output constraints are not implemented. reasoning, store, metadata, include, user, ... are
 *   ignored. The other sampling settings keep params.h's defaults.
 *
 * Response object (what every renderer below builds on):
 *   {id: "resp_...", object: "response", created_at, status: "completed" | "incomplete" |
 *    "in_progress", error: null, incomplete_details: null | {reason: "max_output_tokens"},
 *    instructions, max_output_tokens, model, output: [{id: "rs_...", type: "reasoning", status,
 *    summary: [], content: [{type: "reasoning_text", text}]} (when there was reasoning; the
 *    message's id then ends "_1"), {id: "msg_...", type: "message", status,
 *    role: "assistant", content: [{type: "output_text", text, annotations: [], logprobs: []}]},
 *    then per tool call {id: "fc_...", type: "function_call", call_id: "call_...", name,
 *    arguments (JSON text), status: "completed"}] (the message only when it has text or no call
 *    was made and there was no reasoning), parallel_tool_calls, previous_response_id: null, reasoning: {effort: null,
 *    summary: null}, store: false, temperature, text: {format: {type: "text"}}, tool_choice,
 *    tools (the request's), top_p, truncation: "disabled", usage: {input_tokens,
 *    input_tokens_details: {cached_tokens}, output_tokens, output_tokens_details:
 *    {reasoning_tokens: 0}, total_tokens} (null while in progress), metadata: {}}
 * "incomplete": the output stopped at max_output_tokens or at the end of the context.
 * The output item's id is the response id with "msg_" for "resp_".
 *
 * Stream (stream: true): every event is "event: TYPE" + "data: {type: TYPE, sequence_number,
 * ...}", sequence_number counting from 0 in *seq:
 *   open:  response.created {response}, response.in_progress {response}  (status in_progress,
 *          output []), response.output_item.added {output_index: 0, item (status in_progress,
 *          content [])}, response.content_part.added {item_id, output_index, content_index: 0,
 *          part (text "")}
 *   text:  response.output_text.delta {item_id, output_index, content_index, delta, logprobs: []}
 *   close: response.output_text.done {..., text}, response.content_part.done {..., part},
 *          response.output_item.done {output_index, item}, then response.completed {response}
 *          or, when incomplete, response.incomplete {response}
 *   error: error {code, message, param} (the generation failed mid-stream)
 * With tools (or reasoning) the output items open as they come (struct responses_stream, the responses_tools_*
 * functions): open gives response.created and response.in_progress only; text opens a message
 * item (output_item.added, content_part.added) unless one is open, then output_text.delta; a
 * call finishes the open item and adds a function_call item (output_item.added with arguments
 * ""), its arguments arriving as response.function_call_arguments.delta {item_id, output_index,
 * delta}; reasoning opens a reasoning item (output_item.added, content []) unless one is open,
 * then response.reasoning_text.delta {item_id, output_index, content_index: 0, delta}; finishing
 * an item gives output_text.done + content_part.done, function_call_arguments.done {item_id,
 * output_index, arguments} or reasoning_text.done {item_id, output_index, content_index, text},
 * then output_item.done. A request whose output is read for reasoning streams this way too.
 * close finishes the open item (its status the response's), then response.completed whose output is
 * the items streamed.
 * Each stream function fills ev[] (at most SSE_EVENTS_MAX) and returns the count; an event whose
 * data is NULL ran out of memory (the caller ends the stream). The caller frees every data.
 *
 *   struct completion_params p;                       // completion_params_parse(&p,
 *   ...                                               //     API_OAI_RESPONSES, body, ...)
 *   struct sse_event ev[SSE_EVENTS_MAX];
 *   int64_t seq = 0;
 *   int n = responses_stream_open(&seq, &meta, &p, ev);   // send each, free(ev[i].data)
 *   n = responses_stream_text(&seq, &meta, piece, len, ev);
 *   n = responses_stream_close(&seq, &meta, &p, &result, ev);
 */
#ifndef UVLM_API_RESPONSES_H
#define UVLM_API_RESPONSES_H

#include <stddef.h>
#include <stdint.h>

#include "api/params.h"
#include "api/render.h"

/* The response object, finished (r: the one choice, its whole text). NULL: out of memory. */
char *render_response(const struct response_meta *meta, const struct completion_params *p,
                      const struct completion_result *r);

int responses_stream_open(int64_t *seq, const struct response_meta *meta,
                          const struct completion_params *p, struct sse_event *ev);
int responses_stream_text(int64_t *seq, const struct response_meta *meta, const char *text, size_t len,
                          struct sse_event *ev);
int responses_stream_close(int64_t *seq, const struct response_meta *meta, const struct completion_params *p,
                           const struct completion_result *r, struct sse_event *ev);
/* A stream with tools: its output items so far. Zero-initialised; responses_stream_free. */
struct responses_stream {
    int n_items;                 /* output items opened */
    enum { RESPONSES_OPEN_NONE = 0, RESPONSES_OPEN_MESSAGE, RESPONSES_OPEN_CALL, RESPONSES_OPEN_REASONING } open;
    char call_id[40];            /* the open call's */
    char *name;                  /* the open call's function (owned) */
    char *buf;                   /* the open item's text or arguments so far (owned) */
    size_t len, cap;
    struct json_t *items;        /* the finished items (owned) */
};
void responses_stream_free(struct responses_stream *st);
int responses_tools_open(int64_t *seq, const struct response_meta *meta, const struct completion_params *p,
                         struct sse_event *ev);
int responses_tools_text(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                         const char *text, size_t len, struct sse_event *ev);
/* Reasoning text: opens a reasoning item unless one is open, then response.reasoning_text.delta. */
int responses_tools_reasoning(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                              const char *text, size_t len, struct sse_event *ev);
/* call_id and name: a new call (tool_call_delta's id, name), else more arguments of the open one. */
int responses_tools_call(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                         const char *call_id, const char *name, const char *args, size_t len, struct sse_event *ev);
int responses_tools_close(int64_t *seq, struct responses_stream *st, const struct response_meta *meta,
                          const struct completion_params *p, const struct completion_result *r,
                          struct sse_event *ev);

int responses_stream_error(int64_t *seq, const struct api_error *err, struct sse_event *ev);

#endif
