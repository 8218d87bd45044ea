/* render.h: the JSON bodies uvlm answers with, as pure functions of plain C structs: the native
 * /completion response and its stream events, OpenAI text_completion / chat.completion objects and
 * their stream chunks (with the usage chunk), /tokenize, /detokenize, /v1/models and the error
 * body. No sockets, no scheduler: the endpoint handler fills a struct completion_result per choice
 * from the scheduler's events and sends what these return.
 *
 *   struct response_meta meta = { .id = "chatcmpl-42", .created = time(NULL), .model = name,
 *                                 .n_choices = p.n, .logprobs = p.want_logprobs,
 *                                 .include_usage = p.include_usage };
 *   struct completion_result r = { .index = 0, .text = piece, .text_len = n };  // stop_type NONE
 *   char *json = render_oai_chat_chunk(&meta, &r, first);   // send "data: " json "\n\n"
 *   free(json);
 *
 * Every function returns a NUL-terminated compact JSON text the caller frees with free(), or
 * NULL when memory runs out. Framing (SSE "data: ...\n\n", the final "data: [DONE]") is the HTTP
 * layer's. Field names and types follow llama.cpp's server and the OpenAI API reference exactly,
 * so that their clients work unmodified.
 *
 * UTF-8: JSON strings must be valid UTF-8 and the detokenizer upstream only hands out whole
 * characters, but the renderers do not rely on it: any invalid byte sequence in a text is replaced
 * by U+FFFD (one per maximal invalid subpart), so a body is always valid JSON. A streaming caller
 * that holds pieces which may end mid-character should send utf8_complete_len() bytes and keep the
 * rest for the next chunk. Token pieces are also given exactly as "bytes" arrays where the API has
 * them. Non-finite logprobs (a token of probability 0) are reported as -9999.0, as OpenAI does.
 */
#ifndef UVLM_API_RENDER_H
#define UVLM_API_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/params.h"
#include "api/tool_calls.h"

/* Why a choice stopped; llama.cpp's stop_type strings "none", "eos", "limit", "word".
 * OpenAI's finish_reason: eos and word -> "stop", limit -> "length", none -> null. */
enum stop_type {
    STOP_TYPE_NONE = 0,   /* still generating (a stream chunk) */
    STOP_TYPE_EOS,        /* end-of-generation token */
    STOP_TYPE_LIMIT,      /* n_predict / max_tokens reached, or the context is full */
    STOP_TYPE_WORD,       /* a stop string matched (stopping_word) */
};

/* One token with its log-probability. piece holds the token's bytes (not necessarily valid
 * UTF-8 on its own: byte-fallback tokens, split characters). */
struct token_logprob {
    int32_t id;
    const char *piece;
    size_t piece_len;
    float logprob;
};

/* One generated token: the one chosen and the top alternatives, most probable first. */
struct token_probs {
    struct token_logprob chosen;
    const struct token_logprob *top;
    size_t n_top;
};

struct completion_timings {
    int32_t cache_n;          /* prompt tokens reused from the cache */
    int32_t prompt_n;         /* prompt tokens evaluated (not cached) */
    double prompt_ms;
    int32_t predicted_n;      /* tokens generated */
    double predicted_ms;
};                            /* the per-second rates are derived (0 when a duration is 0) */

/* One choice of a completion, as the scheduler reports it. For a final response, text is the
 * whole generated text and probs every generated token; for a stream chunk, text is what is new
 * since the previous chunk (may be empty) and probs the tokens new since then. */
struct completion_result {
    int32_t index;            /* choice index, 0..n-1 */
    const char *text;
    size_t text_len;
    size_t text_offset;       /* chunks: bytes of this choice's text sent before (OpenAI
                               * /v1/completions logprobs.text_offset); 0 for final responses */
    int32_t tokens_predicted; /* generated so far */
    int32_t tokens_evaluated; /* prompt tokens (all, cached included) */
    int32_t tokens_cached;    /* prompt tokens reused from the cache */
    enum stop_type stop_type; /* NONE while streaming; set on a final response / last chunk */
    const char *stopping_word;/* STOP_TYPE_WORD: the stop string that matched, else NULL */
    bool truncated;           /* generation stopped because prompt + generated tokens reached the
                               * context (n_ctx / --max-seq-tokens, or the whole memory): llama.cpp's
                               * meaning; stop_type is then "limit" */
    struct completion_timings timings;
    const struct token_probs *probs; /* NULL or n_probs entries (when logprobs were asked for) */
    size_t n_probs;
    /* chat, when the output was read for reasoning and tool calls (tool_calls.h): text is then
     * the content (a chunk: its new bytes) */
    bool content_null;        /* message.content is null (calls were made, no text) */
    const char *reasoning;    /* reasoning_content (a chunk: new bytes), NULL: none */
    size_t reasoning_len;
    const struct tool_call *tool_calls;        /* the message's calls */
    size_t n_tool_calls;
    const struct tool_call_delta *call_deltas; /* a chunk's calls news */
    size_t n_call_deltas;
    bool made_tool_calls;     /* finish_reason "tool_calls" when it stopped by EOS or a stop word */
    /* native (meta->params set): */
    const int32_t *tokens;    /* the generated ids of text (return_tokens), n_tokens of them */
    size_t n_tokens;
    int32_t id_slot;          /* the sequence that generated it (-1: none any more) */
    bool has_new_line;        /* the text generated so far holds a "\n" */
    const char *prompt;       /* final response: the prompt's text as the model read it */
    size_t prompt_len;
    /* /v1/completions with echo and logprobs: the prompt's tokens, before probs; the first has no
     * logprob (null), n_prompt_probs entries */
    const struct token_probs *prompt_probs;
    size_t n_prompt_probs;
};

/* What every response of one request shares. */
struct response_meta {
    const char *id;           /* OpenAI "id": "cmpl-..." / "chatcmpl-...", same in every chunk */
    int64_t created;          /* unix seconds, same in every chunk */
    const char *model;        /* model name reported back */
    const char *system_fingerprint; /* NULL: omitted */
    int32_t n_choices;        /* the request's n: the native API adds "index" when > 1 */
    bool logprobs;            /* the request asked for logprobs: render them (null otherwise) */
    bool include_usage;       /* OpenAI streams: every chunk carries "usage": null */
    const struct completion_params *params; /* the request (native: generation_settings,
                                             * return_tokens, post_sampling_probs,
                                             * response_fields; /v1/completions: the logprobs
                                             * shape), or NULL: none of these */
    int32_t n_ctx;            /* generation_settings.n_ctx */
    int32_t n_per_prompt;     /* choices per prompt when a batch has several prompts (usage
                               * counts each prompt once); 0: all choices share one prompt */
};

/* ---- llama.cpp native POST /completion ---- */

/* The final response: meta->n_choices == 1 gives one object; more an array of objects.
 * Object: index, content, tokens, id_slot, stop: true, model, tokens_predicted,
 * tokens_evaluated, generation_settings (the request's sampling settings, as /props'
 * default_generation_settings.params, with n_ctx), prompt, has_new_line, truncated, stop_type,
 * stopping_word, tokens_cached, timings{cache_n, prompt_n, prompt_ms, prompt_per_token_ms,
 * prompt_per_second, predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second},
 * completion_probabilities (meta->logprobs): [{id, token, bytes, logprob, top_logprobs: [{id,
 * token, bytes, logprob}]}] (post_sampling_probs: prob and top_probs: [{id, token, bytes,
 * prob}]). The fields from tokens to prompt and has_new_line need meta->params; "tokens" is
 * empty unless return_tokens. With response_fields, only those (a path "a/b" named as is). */
char *render_completion(const struct response_meta *meta, const struct completion_result *r,
                        size_t n);

/* A stream event. While generating (stop_type NONE): {index, content, tokens, stop: false,
 * id_slot, tokens_predicted, tokens_evaluated[, completion_probabilities]} (tokens: this
 * event's ids, always); the last event of a choice (stop_type set) is the final object above
 * with stop: true, content the last new text and tokens its ids. */
char *render_completion_chunk(const struct response_meta *meta, const struct completion_result *r);

/* ---- OpenAI POST /v1/completions ---- */

/* {id, object: "text_completion", created, model, [system_fingerprint,] choices: [{text, index,
 * logprobs: null | {tokens, token_logprobs, top_logprobs: [{piece: logprob}], text_offset},
 * finish_reason}], usage: {prompt_tokens, completion_tokens, total_tokens,
 * prompt_tokens_details: {cached_tokens}}}. logprobs is {content: [...]} (the chat shape, with
 * ids) instead when params->logprobs_content. With prompt_probs (echo) the prompt's tokens come
 * first, the first with a null logprob and null alternatives. A prompt is counted once (it is
 * evaluated once for its n choices); completion_tokens sums the choices. */
char *render_oai_completion(const struct response_meta *meta, const struct completion_result *r,
                            size_t n);
/* One choice's chunk: the same object with one choice (finish_reason null until the last). */
char *render_oai_completion_chunk(const struct response_meta *meta,
                                  const struct completion_result *r);

/* ---- OpenAI POST /v1/chat/completions ---- */

/* {id, object: "chat.completion", created, model, [system_fingerprint,] choices: [{index,
 * message: {role: "assistant", content[, reasoning_content][, tool_calls: [{id, type: "function",
 * function: {name, arguments}}]]}, logprobs: null | {content: [{token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}]}, finish_reason}], usage}. */
char *render_oai_chat(const struct response_meta *meta, const struct completion_result *r,
                      size_t n);
/* {id, object: "chat.completion.chunk", created, model, choices: [{index, delta, logprobs,
 * finish_reason}]}. delta holds "role": "assistant" when with_role (a choice's first chunk:
 * {"role": "assistant", "content": null} without text, as llama.cpp's server opens a stream),
 * "content" when there is new text, "reasoning_content" when there is new reasoning, and
 * "tool_calls": [{index, id, type: "function", function: {name, arguments: ""}}] when a call
 * appears, then [{index, function: {arguments: fragment}}]; the last chunk of a choice has its finish_reason and usually
 * an empty delta {}. */
char *render_oai_chat_chunk(const struct response_meta *meta, const struct completion_result *r,
                            bool with_role);

/* The stream's usage chunk (stream_options.include_usage), sent after every choice finished and
 * before [DONE]: {id, object, created, model, choices: [], usage}. chat selects the object name. */
char *render_oai_usage_chunk(const struct response_meta *meta, const struct completion_result *r,
                             size_t n, bool chat);

/* ---- tokens, models, errors ---- */

struct token_piece {
    const char *ptr;
    size_t len;
};

/* POST /tokenize: {"tokens": [id, ...]}, or with pieces (non-NULL, n entries):
 * {"tokens": [{"id": id, "piece": "text" | [byte, ...]}]}: a piece is a string when it is valid
 * UTF-8, else the array of its bytes (as llama.cpp does). */
char *render_tokenize(const int32_t *ids, size_t n, const struct token_piece *pieces);

/* POST /detokenize: {"content": text}. */
char *render_detokenize(const char *text, size_t len);

struct model_info {
    const char *id;           /* the model's name (alias or file name) */
    int64_t created;          /* unix seconds (load time) */
    int64_t n_vocab;
    int64_t n_ctx_train;
    int64_t n_embd;
    int64_t n_params;
    int64_t size;             /* bytes of weights */
};

/* GET /v1/models: {"object": "list", "data": [{id, object: "model", created, owned_by: "uvlm",
 * meta: {n_vocab, n_ctx_train, n_embd, n_params, size}}]}. */
char *render_models(const struct model_info *m);
/* GET /v1/models/{id}: that model object alone. */
char *render_model(const struct model_info *m);

/* GET /props: what the server runs, in the shape llama.cpp's web UI and clients read. */
struct props_info {
    const char *model_path;
    int32_t total_slots;      /* the sequences that fit at full context (or --parallel) */
    const char *chat_template_text; /* the template's text ("" when there is none) */
    const char *bos_token, *eos_token; /* their text ("" when the vocabulary has none) */
    int64_t batch_tokens;
    const char *model_alias;  /* the name responses report (meta.model) */
    int32_t n_ctx;            /* the longest sequence: the model's context or --max-seq-tokens */
    int64_t kv_tokens;        /* --kv-tokens: KV cells for all sequences together */
    int64_t kv_bytes;         /* the cells' memory */
    const char *kv_type_k, *kv_type_v; /* the cells' K and V types ("f16", "q8_0") */
    int32_t max_n;            /* --max-n */
    int32_t n_vocab;
    const char *chat_template;/* its kind: "jinja" (the template runs), or the native family ("chatml", ...) */
    const char *build_info;
    const struct completion_params *defaults; /* completion_params_defaults(&d, API_COMPLETION) */
};

/* {default_generation_settings: {id: 0, id_task: -1, n_ctx, speculative: false,
 * is_processing: false, params: {n_predict, max_tokens, temperature, top_k, top_p, min_p,
 * typical_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, seed
 * (4294967295 = random, as llama.cpp), stop, logit_bias, grammar, n_probs, min_keep, n_keep,
 * cache_prompt, ignore_eos, stream, n, post_sampling_probs, samplers}, prompt: "",
 * next_token: {has_next_token, has_new_line, n_remain, n_decoded, stopping_word}}, total_slots,
 * model, model_path, model_alias, n_ctx, kv_tokens, kv_bytes, kv_type_k, kv_type_v, batch_tokens, max_n, n_vocab,
 * chat_template (the text), chat_template_kind ("jinja" or the native family), bos_token,
 * eos_token, build_info, modalities: {vision: false, audio: false}}. */
char *render_props(const struct props_info *pi);

/* GET /slots: one entry per live sequence. No prompt or output text (like /health?detail=1). */
struct slot_info {
    int64_t id;               /* sequence id (-1: none now) */
    int32_t n_ctx;
    const struct completion_params *params; /* the request's, or NULL: omitted */
    bool has_new_line;        /* its text so far holds a "\n" */
    int64_t id_task;          /* the request it serves */
    int32_t index;            /* its choice index within the request */
    const char *state;        /* "queued", "prefill", "generating", "preempted", ... */
    bool is_processing;       /* holds cells / takes part in steps */
    int32_t n_prompt_tokens;
    int32_t n_prompt_tokens_processed;
    int32_t n_decoded;        /* tokens generated */
    int32_t n_predict;        /* its limit, -1 none */
    int64_t n_cells;          /* KV cells it holds (shared prefix cells counted for each holder) */
};

/* [{id, id_task, n_ctx, speculative: false, is_processing, params (as /props'),
 * next_token: {has_next_token, has_new_line, n_remain, n_decoded}, index, state,
 * n_prompt_tokens, n_prompt_tokens_processed, n_decoded, n_predict, n_cells}, ...] */
char *render_slots(const struct slot_info *s, size_t n);

/* The error body of a struct api_error: {"error": {"code", "message", "type", "param":
 * string|null}}, plus "n_prompt_tokens" and "n_ctx" for exceed_context_size_error. The same shape
 * as errors.h's api_error_json (which has no param, for errors that concern no field); a NULL
 * err->type takes api_error_type(status) from there, so the type names agree. */
char *api_error_render(const struct api_error *err);

/* ---- typed event streams (responses.h, anthropic.h) ---- */

/* One event of a stream whose events have names: "event: name\ndata: data\n\n". */
struct sse_event {
    const char *name;         /* static string */
    char *data;               /* compact JSON the sender frees; NULL when memory ran out */
};
#define SSE_EVENTS_MAX 8      /* the most events one call of a stream renderer gives */

/* The JSON string of s[0..len), invalid UTF-8 replaced as above (a jansson json_t *), or NULL
 * when memory runs out: for the other APIs' renderers. */
struct json_t;
struct json_t *render_json_text(const char *s, size_t len);
/* obj[key] = v, consuming v (jansson's *_new calls consume their value even when they fail); on
 * failure, obj NULL included, obj is released and NULL returned, so a chain of render_with()
 * stays NULL. For the renderers of every API's objects. */
struct json_t *render_with(struct json_t *obj, const char *key, struct json_t *v);

/* ---- UTF-8 ---- */

/* Whether s[0..len) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
bool utf8_valid(const char *s, size_t len);

/* The number of leading bytes of s that can be sent now: len minus a trailing incomplete (but so
 * far valid) multi-byte sequence, which the caller keeps until more bytes arrive. Invalid bytes
 * are not held back (the renderers replace them). */
size_t utf8_complete_len(const char *s, size_t len);

#endif
