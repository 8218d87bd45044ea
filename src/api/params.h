/* params.h: parsing and validation of the JSON request bodies of the completion endpoints
 * (llama.cpp-native POST /completion, OpenAI POST /v1/completions and /v1/chat/completions; the
 * Responses and Messages APIs through the parsers of responses.h and anthropic.h, into the same
 * struct) and of /tokenize, /detokenize and /apply-template. Pure functions: no sockets, no
 * scheduler.
 *
 * Every bad input (invalid JSON, a wrong type, an out-of-range value, an empty or oversized prompt,
 * an unsupported form) yields -ERR_INVAL and a struct api_error naming the field (`param`, e.g.
 * "top_p", "stop[2]", "messages[1].content"); render it with api_error_render() (render.h), the one
 * place that knows the error body's shape. Unknown fields are ignored, as llama.cpp and OpenAI
 * clients send extras; JSON null for an optional field means "the default".
 *
 *   struct completion_params p;
 *   struct api_error err;
 *   struct params_limits lim = PARAMS_LIMITS_DEFAULT;
 *   lim.max_n = conf->max_n;
 *   if (completion_params_parse(&p, API_OAI_CHAT, body, body_len, &lim, &err) < 0) {
 *       char *json = api_error_render(&err);     // send err.status with json, free(json)
 *       ...
 *   }
 *   // chat: chat_template_apply_alloc(fam, p.messages, p.n_messages, true, &prompt), tokenize;
 *   // otherwise tokenize p.prompt_text
 *   // unless p.prompt_tokens is set; then, once n_vocab is known:
 *   if (completion_params_check_tokens(&p, n_vocab, &err) < 0) ...   // same error path
 *   ...
 *   completion_params_free(&p);
 *
 * Ownership: every string and array in a parsed struct lives in one arena owned by the struct
 * (chat messages: in a struct chat_messages it also owns) and is released by
 * completion_params_free() (resp. tokenize_params_free, ...). A parse that fails
 * leaves nothing to free (the struct is zeroed), and freeing a zeroed struct is a no-op.
 *
 * Defaults (llama.cpp server's, chosen for every endpoint so that the three agree; OpenAI's own
 * differ where noted):
 *   n_predict / max_tokens   -1 (until EOS or the context ends; OpenAI's /v1/completions says 16)
 *   temperature 0.8 (OpenAI 1.0), top_k 40, top_p 0.95 (OpenAI 1.0), min_p 0.05,
 *   repeat_penalty 1.0 (off), repeat_last_n 64, presence_penalty 0, frequency_penalty 0,
 *   seed random (-1 or absent), stream false, include_usage false, n_probs 0, cache_prompt true,
 *   ignore_eos false, n 1.
 *
 * Forms accepted and how they map:
 *   prompt       a string; an array of token ids; an array of prompts, each a string or an
 *                array of token ids (a batch: 1..max_prompts of them, each run as a request of
 *                its own, all at once; one result per prompt and choice, "index" = prompt * n +
 *                choice). llama.cpp's mixed string/token arrays ([12, "text", 34]) are refused
 *                (400, "prompt").
 *   n_predict    native name; max_tokens (both APIs) and max_completion_tokens (chat) are aliases.
 *   n            n_cmpl is an alias (native); 1..limits.max_n.
 *   stop         a string or an array of strings, non-empty, at most max_stop of at most
 *                max_stop_bytes bytes each.
 *   logit_bias   [[id, bias], ...] or {"id": bias, ...}; bias a finite number or false (= never
 *                sample the token: -INFINITY). A key that is not a decimal id is text
 *                ([["Hello", -1]], {"Hello": -1}, llama.cpp's form): every token of the text
 *                (tokenized without BOS) gets the bias, in logit_bias_text for the handler, which
 *                has the tokenizer.
 *   n_probs      native; OpenAI chat: logprobs (bool) + top_logprobs (0..max_n_probs);
 *                OpenAI completions: logprobs (integer 0..max_n_probs). Either way the result
 *                is want_logprobs + n_probs (top-N alternatives per generated token).
 *                /v1/completions answers with OpenAI's legacy shape (tokens, token_logprobs,
 *                top_logprobs, text_offset) for "logprobs", with llama.cpp's {"content": [...]}
 *                for "n_probs" (logprobs_content).
 *   return_tokens, post_sampling_probs, response_fields (native): the generated ids in
 *                "tokens"; probabilities after the sampling chain ("prob", "top_probs") instead
 *                of log-probabilities; only these fields of the response (a "/" path picks a
 *                nested one: "generation_settings/n_predict", named by its path).
 *   echo (/v1/completions): the prompt's text before the completion's, and with logprobs the
 *                prompt tokens' log-probabilities before the generated ones (the first token's
 *                is null: nothing precedes it; the scheduler keeps them, n_prompt - 1 entries:
 *                bounded by the context).
 *   messages     chat only, required, 1..max_messages: [{role, content}], role one of system,
 *                user, assistant, developer, tool; content required except for assistant turns
 *                (null: empty); the conversion (a string, or text parts joined with "\n";
 *                other part types refused) is chat_json.h's, so that /v1/chat/completions,
 *                POST /apply-template (parse its body as API_OAI_CHAT: only messages is needed)
 *                and `uvlm apply-template` read messages the same way.
 *   add_generation_prompt (chat, default true), continue_final_message (chat: continue the
 *                assistant's last message; absent: continue it when the generation prompt is
 *                asked for), chat_template_kwargs (chat: an object of extra template variables):
 *                see chat_prompt.h.
 *   grammar      GBNF text (sampler/grammar.h's dialect) the output must match; "" means none.
 *   json_schema  a JSON Schema the output must validate against (json_schema.h: what is honoured;
 *                a keyword that is not is a 400 naming its location); {} means none.
 *   response_format  {"type": "text"} (none), {"type": "json_object"} (any JSON object; with
 *                llama.cpp's "schema" member, that schema), {"type": "json_schema", "json_schema":
 *                {"name", "schema", "strict"}} (the schema, enforced whether strict or not).
 *                At most one of grammar, json_schema and response_format (400 otherwise). The
 *                schema forms become grammar text here; the grammar itself is compiled by the
 *                handler (a 400 naming grammar_param with the grammar's "LINE:COL: what").
 *   tools        chat only (/v1/responses reads its own form, responses.h; elsewhere a
 *                non-empty tools is a 400): OpenAI function tools
 *                [{"type": "function", "function": {"name", "description", "parameters"}}];
 *                tool_choice "auto" (default with tools), "none", "required" or
 *                {"type": "function", "function": {"name"}}; parallel_tool_calls (default true);
 *                reasoning_format "auto" (reasoning blocks become reasoning_content), "none"
 *                (left in the content), "deepseek"/"deepseek-legacy" (as auto); absent: the
 *                server's --reasoning-format. Checked by
 *                tool_params_parse (tool_calls.h). Tools with grammar, json_schema or a
 *                response_format other than text are a 400. Sampler options uvlm lacks
 *                (mirostat, typical_p, ...) are ignored like unknown fields.
 *   best_of != n, suffix: refused on /v1/completions (not supported).
 *   cache_salt   a non-empty string (vLLM's): requests with different salts never share cached
 *                prompt cells (serving.h: the cache partition); null or absent: no salt.
 *   model, user and other unknown fields: ignored (model is kept for echoing back).
 * Strings may contain "\u0000": texts keep it (use the _len fields), stop strings refuse it.
 */
#ifndef UVLM_API_PARAMS_H
#define UVLM_API_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/chat_json.h"
#include "api/chat_prompt.h"

/* Which request body is being parsed: the accepted field names and forms differ. */
enum api_endpoint {
    API_COMPLETION = 0,   /* POST /completion (llama.cpp native) */
    API_OAI_COMPLETION,   /* POST /v1/completions */
    API_OAI_CHAT,         /* POST /v1/chat/completions */
    API_OAI_RESPONSES,    /* POST /v1/responses (responses.h has the body's rules) */
    API_ANTHROPIC,        /* POST /v1/messages (anthropic.h) */
    API_ANTHROPIC_COUNT,  /* POST /v1/messages/count_tokens: the same without max_tokens */
};

/* A request error, as the handler turns it into an HTTP response (api_error_render in render.h):
 * {"error":{"code":status,"message":message,"type":type,"param":param|null}}
 * and, for exceed_context_size_error, also "n_prompt_tokens" and "n_ctx". */
struct api_error {
    int status;               /* HTTP status: 400 for every bad input */
    const char *type;         /* static string: "invalid_request_error", "exceed_context_size_error",
                               * "not_supported_error", "server_error", ... */
    char message[256];
    char param[96];           /* the offending field, "" when the error concerns no field */
    int32_t n_prompt_tokens;  /* exceed_context_size_error only */
    int32_t n_ctx;            /* exceed_context_size_error only */
};

/* Fill err (returns -ERR_INVAL so that callers can `return api_error_set(...)`).
 * param may be NULL or "" for "no field". */
int api_error_set(struct api_error *err, int status, const char *type, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The llama.cpp-compatible 400 for a prompt longer than the context (or --max-seq-tokens):
 * type exceed_context_size_error, message and the two counts. Returns -ERR_TOOBIG. */
int api_error_exceed_context(struct api_error *err, int32_t n_prompt_tokens, int32_t n_ctx);

/* The server's defaults for fields a request omits (--seed, --temp, --top-k, --top-p,
 * --n-predict); PARAMS_DEFAULTS_BUILTIN are the llama.cpp server's listed above. */
struct params_defaults {
    int64_t seed;             /* -1: a random seed per request */
    float temperature;
    int32_t top_k;
    float top_p;
    int32_t n_predict;
};
#define PARAMS_DEFAULTS_BUILTIN { .seed = -1, .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, \
    .n_predict = -1 }

/* Bounds the parser enforces, from the server's configuration. */
struct params_limits {
    int32_t max_n;            /* --max-n: n / n_cmpl at most this (default 16) */
    int32_t max_n_probs;      /* n_probs / top_logprobs / logprobs at most this (default 20) */
    size_t max_stop;          /* number of stop strings (default 16) */
    size_t max_stop_bytes;    /* bytes per stop string (default 256) */
    size_t max_prompt_bytes;  /* text prompt, and all chat message contents together (default 1 MiB) */
    size_t max_prompt_tokens; /* token-id prompt length, and /detokenize input (default 1 Mi) */
    size_t max_logit_bias;    /* logit_bias entries (default 4096) */
    size_t max_messages;      /* chat messages (default 1024) */
    size_t max_prompts;       /* prompts of a batch (default 32) */
    size_t max_response_fields; /* response_fields entries (default 64) */
    const struct params_defaults *defaults; /* NULL: PARAMS_DEFAULTS_BUILTIN */
};
#define PARAMS_LIMITS_DEFAULT { .max_n = 16, .max_n_probs = 20, .max_stop = 16, \
    .max_stop_bytes = 256, .max_prompt_bytes = 1u << 20, .max_prompt_tokens = 1u << 20, \
    .max_logit_bias = 4096, .max_messages = 1024, .max_prompts = 32, .max_response_fields = 64 }

struct logit_bias {
    int32_t token;
    float bias;               /* -INFINITY: the token is never sampled */
};

/* A logit_bias key that is text: each of its tokens gets bias. */
struct logit_bias_text {
    const char *text;         /* NUL-terminated, len bytes, not empty */
    size_t len;
    float bias;
};

/* One prompt of a batch: text (tokens NULL) or token ids. */
struct completion_prompt {
    const char *text;
    size_t text_len;
    const int32_t *tokens;
    size_t n_tokens;
};

struct params_arena;          /* private: where a parsed struct's strings and arrays live */

struct completion_params {
    enum api_endpoint endpoint;

    /* The prompt: for API_COMPLETION and API_OAI_COMPLETION exactly one of prompt_text
     * (prompt_tokens == NULL) or prompt_tokens; for API_OAI_CHAT both are NULL and messages is
     * set (the handler formats it with the chat template). */
    const char *prompt_text;  /* NUL-terminated UTF-8, prompt_text_len bytes, never empty */
    size_t prompt_text_len;
    const int32_t *prompt_tokens; /* token ids, checked by completion_params_check_tokens */
    size_t n_prompt_tokens;
    const struct completion_prompt *prompts; /* API_COMPLETION, API_OAI_COMPLETION: n_prompts
                                              * (>= 1) prompts; prompts[0] is the prompt above */
    size_t n_prompts;
    const struct chat_message *messages; /* chat_template.h's: ready for chat_template_apply */
    size_t n_messages;
    struct chat_request chat;     /* chat: the request as a chat template renders it
                                   * (chat_prompt_render); its JSON values are references this
                                   * struct holds */

    int32_t n_predict;        /* -1: until EOS or the context ends; 0: evaluate the prompt only */
    float temperature;        /* >= 0; 0 = greedy */
    int32_t top_k;            /* >= 0; 0 = off (whole vocabulary) */
    float top_p;              /* [0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repeat_penalty;     /* > 0; 1 = off */
    int32_t repeat_last_n;    /* >= -1; -1 = the whole context, 0 = off */
    float presence_penalty;   /* [-2, 2] */
    float frequency_penalty;  /* [-2, 2] */
    bool seed_random;         /* true when seed was absent, null or -1: the server picks one */
    uint32_t seed;            /* when !seed_random; choice i samples with seed + i */

    const char *const *stop;  /* n_stop NUL-terminated non-empty strings */
    size_t n_stop;

    bool stream;
    bool include_usage;       /* stream_options.include_usage (OpenAI): a final usage chunk */
    bool want_logprobs;       /* report the chosen token's logprob per generated token */
    int32_t n_probs;          /* and this many top alternatives (0..max_n_probs) */
    bool cache_prompt;
    bool ignore_eos;

    const struct logit_bias *logit_bias; /* one per token, in token order (duplicates summed);
                                          * ids checked like the prompt's */
    size_t n_logit_bias;
    const struct logit_bias_text *logit_bias_text; /* keys that are text, in request order */
    size_t n_logit_bias_text;

    bool return_tokens;       /* native: "tokens" holds the generated ids */
    bool post_sampling_probs; /* native: probabilities after the sampling chain */
    bool logprobs_content;    /* /v1/completions: logprobs in llama.cpp's {"content": [...]} shape */
    bool echo;                /* /v1/completions: the prompt (and its logprobs) first */
    const char *const *response_fields; /* native: only these fields ("a/b": nested), or NULL */
    size_t n_response_fields;

    int32_t n;                /* choices: 1..max_n */
    /* speculative decoding, as llama.cpp's server names them ("speculative.n_max" ...): -1 (n_max,
     * n_min) or < 0 (p_min): the server's --draft-max / --draft-min / --draft-p-min */
    int32_t spec_n_max, spec_n_min;
    float spec_p_min;
    const char *model;        /* as the client named it, or NULL */
    const char *cache_salt;   /* NULL or cache_salt_len (> 0) bytes, NUL-terminated */
    size_t cache_salt_len;
    const char *instructions; /* API_OAI_RESPONSES: echoed in the response object, or NULL */

    const char *grammar;      /* NULL, or GBNF text (grammar_len bytes, NUL-terminated) the output
                               * must match: the request's grammar, or its schema's translation */
    size_t grammar_len;
    char grammar_param[40];   /* the field it came from, for the grammar's 400: "grammar",
                               * "json_schema", "response_format", "response_format.json_schema.schema" */

    /* chat tool calls and reasoning (tool_calls.h): how the output is read */
    enum params_tool_choice {
        TOOL_CHOICE_NONE = 0,     /* no tools, or "none": the output is text */
        TOOL_CHOICE_AUTO,         /* calls when the model writes them (a lazy grammar) */
        TOOL_CHOICE_REQUIRED,     /* one call or more, enforced */
        TOOL_CHOICE_NAMED,        /* a call of tool_name, enforced */
    } tool_choice;
    const char *tool_name;    /* TOOL_CHOICE_NAMED: the function's name (arena) */
    bool parallel_tool_calls; /* several calls may be made (default true) */
    signed char reasoning_format; /* -1: not given (the server's --reasoning-format), 0: "none"
                                   * (reasoning blocks stay in the content), 1: "auto" */

    struct params_arena *arena_;
    struct chat_messages chat_;  /* owns messages */
};

/* The defaults every request starts from (the list at the top, with the server's d over them;
 * d NULL: none); GET /props reports them. */
void completion_params_defaults(struct completion_params *p, enum api_endpoint endpoint);
void completion_params_defaults_with(struct completion_params *p, enum api_endpoint endpoint,
                                     const struct params_defaults *d);

/* Parse and validate a request body (need not be NUL-terminated). 0 on success; -ERR_INVAL with
 * err filled on bad input; -ERR_NOMEM (err filled with a 500) when memory runs out. */
int completion_params_parse(struct completion_params *p, enum api_endpoint endpoint,
                            const char *body, size_t len, const struct params_limits *lim,
                            struct api_error *err);

/* Check every token id the request names (prompt tokens, logit_bias) against the vocabulary:
 * 0, or -ERR_INVAL with err naming the field ("prompt[3]", "logit_bias[0]"). */
int completion_params_check_tokens(const struct completion_params *p, int32_t n_vocab,
                                   struct api_error *err);

void completion_params_free(struct completion_params *p);

/* ---- for the parsers of the other APIs' request shapes (responses.c, anthropic.c) ----
 * completion_params_parse calls them for their endpoints with the parser state below; they fill
 * p (already holding completion_params_defaults) through these helpers, so that every string
 * lives in p's arena and every error has the same form. Each returns 0, or the error to return
 * (-ERR_INVAL with the error set, -ERR_NOMEM). A field absent or null keeps its default. */
struct params_parser;
struct json_t;
const struct json_t *params_body(const struct params_parser *ps);  /* the request object */
const struct params_limits *params_limits(const struct params_parser *ps);
int params_bad(struct params_parser *ps, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));                         /* 400 "param: message" */
int params_nomem(struct params_parser *ps);                         /* 500: returns -ERR_NOMEM */
int params_int(struct params_parser *ps, const char *name, long long min, long long max, int32_t *out);
int params_float(struct params_parser *ps, const char *name, double min, double max, float *out);
int params_bool(struct params_parser *ps, const char *name, bool *out);
/* A string field into p's arena (*out NULL when absent). */
int params_string(struct params_parser *ps, const char *name, const char **out);
/* Stop strings from the field `name` (a string or an array of strings), as "stop" is read. */
int params_stop(struct params_parser *ps, const char *name, struct completion_params *p);
/* The conversation, as an OpenAI chat "messages" array of {role, content: string} built by the
 * caller (which checked the request's own shape and names its fields in errors): becomes
 * p->messages; too many messages or too much text is refused naming `param`. */
int params_messages(struct params_parser *ps, const struct json_t *messages, const char *param,
                    struct completion_params *p);

/* Defined by responses.c and anthropic.c, called by completion_params_parse. */
int responses_params_fill(struct params_parser *ps, struct completion_params *p);
int anthropic_params_fill(struct params_parser *ps, struct completion_params *p);

/* POST /apply-template and `uvlm apply-template`: a chat request's body (messages and the chat
 * fields above, tools accepted: they are rendered, not used), parsed into p as API_OAI_CHAT.
 * Errors as completion_params_parse. */
int chat_template_params_parse(struct completion_params *p, const char *body, size_t len,
                               const struct params_limits *lim, struct api_error *err);

/* POST /tokenize: {"content": string (required, may be empty), "add_special": bool (false),
 * "parse_special": bool (true), "with_pieces": bool (false)}. */
struct tokenize_params {
    const char *content;
    size_t content_len;
    bool add_special;
    bool parse_special;
    bool with_pieces;
    struct params_arena *arena_;
};
int tokenize_params_parse(struct tokenize_params *p, const char *body, size_t len,
                          const struct params_limits *lim, struct api_error *err);
void tokenize_params_free(struct tokenize_params *p);

/* POST /detokenize: {"tokens": [id, ...]} (required, may be empty; ids >= 0, checked against
 * n_vocab with detokenize_params_check_tokens). */
struct detokenize_params {
    const int32_t *tokens;
    size_t n_tokens;
    struct params_arena *arena_;
};
int detokenize_params_parse(struct detokenize_params *p, const char *body, size_t len,
                            const struct params_limits *lim, struct api_error *err);
int detokenize_params_check_tokens(const struct detokenize_params *p, int32_t n_vocab,
                                   struct api_error *err);
void detokenize_params_free(struct detokenize_params *p);

#endif
