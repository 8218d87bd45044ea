/* responses.h: OpenAI's Responses API, POST /v1/responses: the request body read into the
 * completion parameters every endpoint shares (params.h), and the response object and its typed
 * stream events rendered from the generation's result (render.h's structs). Pure functions: the
 * generation itself is generate.c's, as for /v1/chat/completions.
 *
 * Request (unknown fields ignored, null means the default):
 *   input              required: a string (one user message), or an array of items. An item is a
 *                      message {"type"?: "message", "role": user|assistant|system|developer,
 *                      "content": string | [parts]}; parts are {"type": "input_text"|"output_text",
 *                      "text": string}, concatenated in order. Other part types (input_image,
 *                      input_file, ...) and other items (function_call, function_call_output,
 *                      reasoning, ...) are refused with a 400 naming them (uvlm has no tools and
 *                      reads text only).
 *   instructions       a string: the system message, before the input.
 *   max_output_tokens  >= 1 (absent: until EOS or the context ends).
 *   temperature        [0, 2]; top_p [0, 1]; stream (bool); model (echoed back).
 *   tools (non-empty), text.format other than {"type": "text"}, previous_response_id and
 *   conversation are refused (400 naming the field): nothing is stored between requests and
 *   output constraints are not implemented. reasoning, store, metadata, include, user, ... are
 *   ignored. The other sampling settings keep params.h's defaults.
 *
 * Response object (what every renderer below builds on):
 *   {id: "resp_...", object: "response", created_at, status: "completed" | "incomplete" |
 *    "in_progress", error: null, incomplete_details: null | {reason: "max_output_tokens"},
 *    instructions, max_output_tokens, model, output: [{id: "msg_...", type: "message", status,
 *    role: "assistant", content: [{type: "output_text", text, annotations: [], logprobs: []}]}],
 *    parallel_tool_calls: false, previous_response_id: null, reasoning: {effort: null,
 *    summary: null}, store: false, temperature, text: {format: {type: "text"}}, tool_choice:
 *    "auto", tools: [], top_p, truncation: "disabled", usage: {input_tokens,
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
int responses_stream_error(int64_t *seq, const struct api_error *err, struct sse_event *ev);

#endif
