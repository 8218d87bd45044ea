/* tool_calls.h: what a chat model's output says, in the OpenAI message's terms: the reasoning
 * (message.reasoning_content), the text (content) and the tool calls (tool_calls: id, type
 * "function", function.name, function.arguments as a JSON string), for the call syntax of the
 * model's family; and the GBNF grammar that makes a model write calls in that syntax.
 *
 * The syntax (struct tool_dialect) is chosen once per model from markers in its chat template
 * (tool_dialect_detect), the native chat family deciding when no marker is found:
 *   hermes        <tool_call>{"name": N, "arguments": {...}}</tool_call>  (Qwen 2.5/3, Hermes, Granite 4, MiMo, ...)
 *   qwen-xml      <tool_call><function=N><parameter=K>V</parameter></function></tool_call>  (Qwen 3.5/Coder,
 *                 Nemotron 3, StepFun; Seed-OSS with <seed:tool_call>)
 *   llama3        {"name": N, "parameters": {...}} as the whole output, or after <|python_tag|>
 *   mistral       [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] or [TOOL_CALLS]N[ARGS]{...}
 *   deepseek-r1   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>...
 *   deepseek-v3   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...
 *   command-r7b   <|START_ACTION|>[{"tool_call_id": "0", "tool_name": N, "parameters": {...}}]<|END_ACTION|>
 *   granite       <|tool_call|>[{"name": N, "arguments": {...}}]
 *   functionary   <function=N>{...}</function>  (functionary v3.1)
 *   functionary-v3.2  N\n{...} after the prompt's ">>>", more calls after ">>>", text after "all\n" 
 *   gpt-oss       <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}; analysis channel = reasoning
 *   glm           <tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>
 *   kimi          <|tool_calls_section_begin|><|tool_call_begin|>functions.N:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...
 *   firefunction  functools[{"name": N, "arguments": {...}}]
 * Reasoning blocks: <think>...</think> (most), <|START_THINKING|>...<|END_THINKING|> (Command-R7B),
 * <seed:think>...</seed:think>, [THINK]...[/THINK] (Mistral reasoning models), the analysis
 * channel (gpt-oss). A prompt that ends with the block's opening tag (the template opened it)
 * makes the output start inside the block (tool_parse_opts.in_think).
 *
 * Arguments are the JSON text the model wrote (valid JSON, not re-serialized), or for the XML
 * syntaxes an object built from the parameters (a value is a JSON string when the tool's schema
 * says "string" or it does not parse as JSON, else the JSON value). A block that does not parse
 * stays in the content as written. Content is trimmed at the end when calls were made and at the
 * start after a reasoning block; reasoning is trimmed at both ends.
 *
 * Streaming (struct tool_stream): the text is fed as it grows; each feed returns what became
 * final since the last one: content and reasoning fragments, and per call first its index, id
 * and name, then fragments of its arguments. Bytes that may be the start of an opener or closer
 * are held back until they are known. The fragments add up to what tool_parse_text gives for the
 * whole text.
 *
 *   struct tool_dialect d;
 *   tool_dialect_detect(template_text, len, CHAT_CHATML, &d);
 *   struct tool_parse_opts o = {.dialect = &d, .tools = true, .reasoning = true, .tool_defs = tools};
 *   struct tool_parse r;
 *   tool_parse_text(&o, text, len, false, &r);  // r.content (NULL: none), r.calls[0].name ...
 *   tool_parse_free(&r);
 *
 *   struct tool_stream s;  struct tool_delta dl;
 *   tool_stream_init(&s, &o);
 *   tool_stream_feed(&s, piece, n, false, &dl);  // dl.content, dl.calls[i].args ... (until the next feed)
 *   tool_stream_feed(&s, "", 0, true, &dl);      // the end: everything left
 *   tool_stream_free(&s);
 *
 * Ownership: results own their strings; a delta points into the stream (valid until the next
 * feed). opts and what it points to are borrowed for the stream's life.
 */
#ifndef UVLM_API_TOOL_CALLS_H
#define UVLM_API_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

#include "api/chat_template.h"

struct json_t;

enum tool_format {
    TOOL_FORMAT_HERMES = 0,
    TOOL_FORMAT_QWEN_XML,
    TOOL_FORMAT_SEED_XML,
    TOOL_FORMAT_LLAMA3,
    TOOL_FORMAT_MISTRAL,
    TOOL_FORMAT_DEEPSEEK_R1,
    TOOL_FORMAT_DEEPSEEK_V3,
    TOOL_FORMAT_COMMAND_R7B,
    TOOL_FORMAT_GRANITE,
    TOOL_FORMAT_FUNCTIONARY,
    TOOL_FORMAT_GPT_OSS,
    TOOL_FORMAT_GLM,
    TOOL_FORMAT_KIMI,
    TOOL_FORMAT_FIREFUNCTION,
    TOOL_FORMAT_FUNCTIONARY_V32,
    TOOL_FORMAT_COUNT_
};

struct tool_dialect {
    enum tool_format format;
    const char *think_open;   /* the reasoning block's tags (static strings), or NULL: none */
    const char *think_close;
};

/* The dialect of a chat template's text (NULL: none), else of the native family. */
void tool_dialect_detect(const char *tmpl, size_t len, enum chat_family native, struct tool_dialect *out);
const char *tool_format_name(enum tool_format f);
/* Whether the syntax's markers are control tokens: the output must be decoded with their text. */
bool tool_format_needs_special(enum tool_format f);
/* The text from which a lazy grammar (tool_choice "auto") applies. */
const char *tool_format_trigger(enum tool_format f);

struct tool_parse_opts {
    const struct tool_dialect *dialect;
    bool tools;                       /* parse tool calls (tools given, tool_choice not "none") */
    bool reasoning;                   /* reasoning blocks -> reasoning (reasoning_format auto) */
    bool in_think;                    /* the prompt opened the reasoning block */
    const struct json_t *tool_defs;   /* the request's tools (XML value types), or NULL */
};

struct tool_call {
    char id[40];                      /* "call_" + 24 random characters */
    char *name;
    char *args;                       /* JSON text, NUL-terminated */
    size_t args_len;
};

struct tool_parse {
    char *content;                    /* NULL when empty and calls were made (OpenAI: null) */
    size_t content_len;
    char *reasoning;                  /* NULL: none */
    size_t reasoning_len;
    struct tool_call *calls;
    size_t n_calls;
};

/* Parse text[0..len). partial: the text may continue (what may be the start of a marker is left
 * out; a call in progress has its name and its arguments so far). 0 or -ERR_NOMEM. */
int tool_parse_text(const struct tool_parse_opts *o, const char *text, size_t len, bool partial,
                    struct tool_parse *out);
void tool_parse_free(struct tool_parse *r);

/* One call's news in a stream delta. */
struct tool_call_delta {
    int index;
    const char *id;                   /* set the first time the call appears, with name */
    const char *name;
    const char *args;                 /* new arguments text (may be empty) */
    size_t args_len;
};

struct tool_delta {
    const char *content;              /* new content bytes (content_len may be 0) */
    size_t content_len;
    const char *reasoning;
    size_t reasoning_len;
    struct tool_call_delta *calls;
    size_t n_calls;
};

struct tool_stream {
    struct tool_parse_opts o;
    char *text;
    size_t len, cap;
    size_t content_sent, reasoning_sent;
    size_t n_sent;                    /* calls announced */
    struct tool_call *sent;           /* id, name of each announced call; args_len = bytes sent */
    size_t sent_cap;
    struct tool_parse last;           /* the parse the delta points into */
    struct tool_call_delta *deltas;
    size_t deltas_cap;
    bool content_started;             /* content was sent (the end keeps trailing space then) */
};

void tool_stream_init(struct tool_stream *s, const struct tool_parse_opts *o);
void tool_stream_free(struct tool_stream *s);
/* Append piece and fill *d with what became final (final: the text is complete). 0, -ERR_NOMEM. */
int tool_stream_feed(struct tool_stream *s, const char *piece, size_t len, bool final, struct tool_delta *d);
/* Calls announced so far. */
static inline size_t tool_stream_n_calls(const struct tool_stream *s) { return s->n_sent; }

/* The GBNF that makes the output tool calls in the dialect's syntax: the tools' parameter schemas
 * (json_schema.h) for the arguments, only the tool called only_name when it is not NULL, one call
 * or (parallel) one or more. lazy: the grammar of the text from tool_format_trigger on (tool_choice
 * "auto"); else of the whole output (a reasoning block first when in_think). *out malloc'd. 0,
 * -ERR_INVAL (where names the tool's schema location, why what failed), -ERR_NOMEM. */
int tool_grammar(const struct tool_dialect *d, const struct json_t *tools, const char *only_name, bool parallel,
                 bool lazy, bool in_think, char **out, char *where, size_t where_len, char *why, size_t why_len);

/* The chat request's tools, tool_choice, parallel_tool_calls and reasoning_format (params.h says
 * what is accepted) into p (whose chat.tools holds the request's tools; tool_name points into
 * them): 0, or params.h's errors naming the field ("tools[1].function.name", "tool_choice"). */
struct params_parser;
struct completion_params;
int tool_params_parse(struct params_parser *pp, struct completion_params *p);

/* The flat tools of /v1/responses and /v1/messages ({type, name, description, <schema_key>}) as
 * chat function tools ({type: "function", function: {name, description, parameters}}) into
 * p->chat.tools, replacing what it held; *n_tools: how many. 0, params.h's errors naming the field
 * ("tools[2].name", "tools[0].input_schema"), -ERR_NOMEM. */
struct tool_flat_api {
    const char *type;          /* the one tool type served ("function", "custom") */
    bool type_required;        /* a tool without a type is refused (else it is of that type) */
    const char *types_served;  /* the refusal's parenthesis: "function only" */
    const char *schema_key;    /* "parameters", "input_schema" */
};
int tool_flat_parse(struct params_parser *pp, struct completion_params *p, const struct tool_flat_api *api,
                    size_t *n_tools);
/* The name of p->chat.tools' tool called name (pointing into them), or NULL when none is. */
const char *tool_flat_named(const struct completion_params *p, const char *name);

#endif
