/* generate.c: the completion endpoints (POST /completion and /infill, /v1/completions,
 * /v1/chat/completions, /v1/responses, /v1/messages): request -> tokens -> sched_submit, and the
 * scheduler's sink callbacks -> text (the engine's streaming detokenizer, stop strings) -> JSON
 * bodies or SSE events (the typed events of responses.h and anthropic.h for the last two).
 *
 * One struct gen_job per request, owned by the request: freed when the last choice is done (the
 * response is then finished), on the scheduler's on_error, or in the HTTP cancel callback (which
 * cancels the scheduler request first). A body over srv->offload_bytes is parsed and its prompt
 * tokenized off the loop (http_queue_work: job_prepare on the server's thread pool, then
 * job_prepared on the loop thread, which frees the job if the client left meanwhile). A grammar
 * not yet in the engine's cache is compiled off the loop the same way (job_compile, then
 * job_compiled), whatever the body's size: a small grammar can take seconds to compile. The
 * scheduler's stop conditions are EOS, n_predict and the context; stop strings are matched on the
 * text (stream_text.h) and end a choice by returning false from on_token; a stop string, or its
 * possible start, never reaches a streaming client. A chat output is read for reasoning and tool
 * calls (tool_calls.h) when the request has tools or the template a reasoning block: whole at the
 * end, or fed to a tool_stream whose deltas become the chunks (/v1/responses: output items, /v1/messages: content blocks).
 *
 * A batch of prompts (params.h: prompt as an array of prompts) is one job with one part per
 * prompt: each part is a scheduler request of its own (they run at once, like separate
 * requests), its choices are job->ch[part->base ..], and the response holds them all in index
 * order, or a stream interleaves their chunks, each with its index.
 */
#include "api/anthropic.h"
#include "api/errors.h"
#include "api/ids.h"
#include "api/infill.h"
#include "api/params.h"
#include "api/render.h"
#include "api/responses.h"
#include "api/serving.h"
#include "api/stream_text.h"
#include "api/tool_calls.h"
#include "common/err.h"
#include "sched/model_engine.h"
#include "sched/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gen_choice {
    struct stream_text st;          /* the text so far (cut at a stop string), what was streamed */
    struct tool_stream ts;          /* job->parse streams: the text read for reasoning and calls */
    struct model_engine_detok *detok;
    struct sched_token_probs *probs;/* per generated token when logprobs were asked for */
    int32_t n_probs, cap_probs, probs_sent;
    int32_t *ids;                   /* the generated ids (native: return_tokens or a stream) */
    int32_t n_ids, cap_ids, ids_sent;
    int32_t n_tokens;               /* generated so far */
    int32_t id_slot;                /* its sequence when it last produced a token */
    bool has_new_line;              /* a "\n" was generated */
    bool done, role_sent;
    bool truncated;                 /* stopped by the context limit (llama.cpp's `truncated`) */
    enum stop_type stop;
    struct sched_counts counts;
};

struct gen_job;

/* One prompt of the request: the scheduler request that runs it (the sink's owner). */
struct gen_part {
    struct gen_job *job;
    struct sched_req *handle;       /* NULL once it ended */
    int32_t *prompt;                /* its token ids (owned) */
    size_t n_prompt;
    int32_t base;                   /* its choice 0 is job->ch[base] */
    int32_t n_done;                 /* choices done */
    char *text;                     /* the prompt's text as the model reads it, made when first needed */
    size_t text_len;
    struct sched_token_probs *pprobs; /* echo with logprobs: prompt tokens 1.. (n_prompt - 1) */
    bool want_pprobs;               /* asked the scheduler for them */
};

struct gen_job {
    struct serving *srv;
    struct http_request *req;
    enum api_endpoint ep;
    bool infill;                    /* POST /infill: the body becomes a /completion body (infill.h) */
    int prepare_rc;                 /* job_prepare's outcome: 0, or an error described in err */
    struct api_error err;
    struct completion_params p;
    struct model_engine_sampling sp;
    struct model_engine_bias *bias; /* logit_bias, its texts' tokens included */
    size_t n_bias;
    struct model_engine_grammar *grammar; /* the request's compiled grammar (a reference), or NULL */
    int grammar_rc;                 /* job_compile's outcome: 0, or an error described in grammar_why */
    char grammar_why[200];
    bool parse;                     /* chat: the output is read for reasoning and tool calls */
    bool in_think;                  /* the prompt opened the reasoning block */
    struct tool_parse_opts topts;   /* how (points into srv and p) */
    char *tool_gbnf;                /* the tool calls' grammar text, or NULL */
    struct gen_part *parts;         /* one per prompt (chat and the typed APIs: one) */
    int32_t n_parts;
    int32_t n_choices;              /* n_parts x p.n: every choice of every part */
    int32_t *prompt;                /* parts[0]'s prompt (owned by it) */
    size_t n_prompt;
    struct gen_choice *ch;
    int n_done;
    bool dead;                      /* the stream refused a send: stop producing */
    char id[48];
    struct response_meta meta;
    char *piece;                    /* detokenizer output buffer */
    size_t piece_cap;
    int64_t seq;                    /* /v1/responses streams: the next event's sequence_number */
    struct responses_stream rst;    /* /v1/responses streams with tools: the output items */
    struct anthropic_stream ast;    /* /v1/messages streams with tools: the content blocks */
};

static void job_free(struct gen_job *job) {
    if (!job) return;
    if (job->ch)
        for (int i = 0; i < job->n_choices; i++) {
            stream_text_free(&job->ch[i].st);
            tool_stream_free(&job->ch[i].ts);
            model_engine_detok_free(job->ch[i].detok);
            free(job->ch[i].probs);
            free(job->ch[i].ids);
        }
    for (int32_t k = 0; job->parts && k < job->n_parts; k++) {
        free(job->parts[k].prompt);
        free(job->parts[k].text);
        free(job->parts[k].pprobs);
    }
    free(job->parts);
    free(job->ch);
    free(job->piece);
    free(job->bias);
    free(job->tool_gbnf);
    responses_stream_free(&job->rst);
    if (job->grammar) model_engine_grammar_release(job->grammar);
    completion_params_free(&job->p);
    free(job);
}

static int respond_error(struct serving *srv, struct http_request *req, const struct api_error *err) {
    char *json = req->error_shape == HTTP_ERRORS_ANTHROPIC ? anthropic_error_render(err) : api_error_render(err);
    int rc = serving_respond_json(srv, req, err->status, json ? json : "{}");
    free(json);
    return rc;
}

static int respond_err_code(struct serving *srv, struct http_request *req, int code, const char *param,
                            const char *msg) {
    struct api_error err;
    int status = api_err_status(code);
    api_error_set(&err, status, api_error_type(status), param, "%s", msg);
    return respond_error(srv, req, &err);
}

/* --- rendering ----------------------------------------------------------------------------- */

static enum stop_type stop_type_of(enum sched_stop r) {
    switch (r) {
    case SCHED_STOP_EOS: return STOP_TYPE_EOS;
    case SCHED_STOP_WORD: return STOP_TYPE_WORD;
    case SCHED_STOP_LIMIT:
    case SCHED_STOP_CONTEXT: return STOP_TYPE_LIMIT;
    }
    return STOP_TYPE_LIMIT;
}

/* render.h's token_probs for src[0..n); the caller frees *tops and the result. */
static struct token_probs *probs_of(const struct gen_job *job, const struct sched_token_probs *src, int32_t n,
                                    struct token_logprob **tops) {
    *tops = NULL;
    if (n <= 0) return NULL;
    struct token_probs *tp = calloc((size_t)n, sizeof *tp);
    struct token_logprob *top = calloc((size_t)n * SCHED_MAX_PROBS + 1, sizeof *top);
    if (!tp || !top) {
        free(tp);
        free(top);
        return NULL;
    }
    const struct model_engine *e = job->srv->engine;
    for (int32_t i = 0; i < n; i++) {
        const struct sched_token_probs *sp = &src[i];
        struct token_logprob *t = top + (size_t)i * SCHED_MAX_PROBS;
        tp[i].chosen.id = sp->token;
        tp[i].chosen.piece = model_engine_token_piece(e, sp->token, false, &tp[i].chosen.piece_len);
        tp[i].chosen.logprob = sp->logprob;
        int32_t n_top = sp->n_top < job->p.n_probs ? sp->n_top : job->p.n_probs;
        for (int32_t k = 0; k < n_top; k++) {
            t[k].id = sp->top_token[k];
            t[k].piece = model_engine_token_piece(e, t[k].id, false, &t[k].piece_len);
            t[k].logprob = sp->top_logprob[k];
        }
        tp[i].top = t;
        tp[i].n_top = (size_t)n_top;
    }
    *tops = top;
    return tp;
}

/* The same for tokens [from, to) of a choice. */
static struct token_probs *probs_view(const struct gen_job *job, const struct gen_choice *c, int32_t from,
                                      int32_t to, struct token_logprob **tops) {
    return probs_of(job, c->probs + from, to - from, tops);
}

/* echo with logprobs: the part's prompt tokens as token_probs, the first without a logprob
 * (render.h: prompt_probs); the caller frees *tops and the result. */
static struct token_probs *prompt_view(const struct gen_job *job, const struct gen_part *part,
                                       struct token_logprob **tops) {
    *tops = NULL;
    if (part->want_pprobs && !part->pprobs) return NULL; /* they could not be kept */
    struct sched_token_probs *all = calloc(part->n_prompt, sizeof *all);
    if (!all) return NULL;
    all[0].token = part->prompt[0];
    if (part->pprobs) memcpy(all + 1, part->pprobs, (part->n_prompt - 1) * sizeof *all);
    struct token_probs *tp = probs_of(job, all, (int32_t)part->n_prompt, tops);
    free(all);
    return tp;
}

static struct gen_part *part_of(const struct gen_job *job, int i) { return &job->parts[i / job->p.n]; }

/* The part's prompt as text: the pieces of its tokens joined (control tokens as their text),
 * what llama.cpp's "prompt" shows; made once. NULL when out of memory. */
static const char *part_text(const struct gen_job *job, struct gen_part *part, size_t *len) {
    if (!part->text) {
        const struct model_engine *e = job->srv->engine;
        size_t cap = 1, n = 0, k;
        for (size_t t = 0; t < part->n_prompt; t++) {
            model_engine_token_piece(e, part->prompt[t], true, &k);
            cap += k;
        }
        if (!(part->text = malloc(cap))) return NULL;
        for (size_t t = 0; t < part->n_prompt; t++) {
            const char *piece = model_engine_token_piece(e, part->prompt[t], true, &k);
            memcpy(part->text + n, piece, k);
            n += k;
        }
        part->text[n] = '\0';
        part->text_len = n;
    }
    *len = part->text_len;
    return part->text;
}

/* What echo puts before a completion: the prompt's text as it was given (token prompts: their
 * pieces). NULL when out of memory. */
static const char *echo_text(const struct gen_job *job, struct gen_part *part, size_t *len) {
    const struct completion_params *p = &job->p;
    const struct completion_prompt *given = &p->prompts[part - job->parts];
    if (given->text) {
        *len = given->text_len;
        return given->text;
    }
    return part_text(job, part, len);
}

static void result_of(const struct gen_job *job, int i, struct completion_result *r) {
    const struct gen_choice *c = &job->ch[i];
    *r = (struct completion_result){
        .index = i,
        .text = c->st.text ? c->st.text : "",
        .text_len = c->st.len,
        .tokens_predicted = c->counts.n_generated,
        .tokens_evaluated = c->counts.n_prompt ? c->counts.n_prompt : (int32_t)part_of(job, i)->n_prompt,
        .tokens_cached = c->counts.n_cached,
        .stop_type = c->done ? c->stop : STOP_TYPE_NONE,
        .stopping_word = c->stop == STOP_TYPE_WORD ? c->st.stopping_word : NULL,
        .truncated = c->done && c->truncated,
        .timings = {.cache_n = c->counts.n_cached,
                    .prompt_n = c->counts.n_prompt - c->counts.n_cached,
                    .prompt_ms = c->counts.prompt_ms,
                    .predicted_n = c->counts.n_generated,
                    .predicted_ms = c->counts.predicted_ms},
        .id_slot = c->id_slot,
        .has_new_line = c->has_new_line,
    };
}

static char *render_chunk(struct gen_job *job, int i, const char *text, size_t n, size_t offset, int32_t pfrom,
                          int32_t pto) {
    struct gen_choice *c = &job->ch[i];
    struct completion_result r;
    result_of(job, i, &r);
    r.text = text;
    r.text_len = n;
    r.text_offset = offset;
    r.tokens_predicted = c->done ? c->counts.n_generated : c->n_tokens;
    r.tokens = c->ids + c->ids_sent; /* the ids generated since the last chunk */
    r.n_tokens = (size_t)(c->n_ids - c->ids_sent);
    c->ids_sent = c->n_ids;
    if (c->done && job->p.endpoint == API_COMPLETION) r.prompt = part_text(job, part_of(job, i), &r.prompt_len);
    struct token_logprob *tops = NULL;
    struct token_probs *tp = job->meta.logprobs ? probs_view(job, c, pfrom, pto, &tops) : NULL;
    r.probs = tp;
    r.n_probs = tp ? (size_t)(pto - pfrom) : 0;
    char *json = NULL;
    switch (job->p.endpoint) {
    case API_COMPLETION: json = render_completion_chunk(&job->meta, &r); break;
    case API_OAI_COMPLETION: json = render_oai_completion_chunk(&job->meta, &r); break;
    case API_OAI_CHAT:
        json = render_oai_chat_chunk(&job->meta, &r, !c->role_sent);
        c->role_sent = true;
        break;
    default: break; /* the typed streams: typed_text */
    }
    free(tp);
    free(tops);
    return json;
}

/* A chat chunk of what tool_stream_feed made of the new text. */
static char *render_chunk_parsed(struct gen_job *job, int i, const struct tool_delta *d, size_t offset) {
    struct gen_choice *c = &job->ch[i];
    struct completion_result r;
    result_of(job, i, &r);
    r.text = d->content;
    r.text_len = d->content_len;
    r.text_offset = offset;
    r.tokens_predicted = c->done ? c->counts.n_generated : c->n_tokens;
    r.reasoning = d->reasoning;
    r.reasoning_len = d->reasoning_len;
    r.call_deltas = d->calls;
    r.n_call_deltas = d->n_calls;
    r.made_tool_calls = tool_stream_n_calls(&c->ts) > 0;
    struct token_logprob *tops = NULL;
    struct token_probs *tp = job->meta.logprobs ? probs_view(job, c, c->probs_sent, c->n_probs, &tops) : NULL;
    r.probs = tp;
    r.n_probs = tp ? (size_t)(c->n_probs - c->probs_sent) : 0;
    char *json = render_oai_chat_chunk(&job->meta, &r, !c->role_sent);
    c->role_sent = true;
    free(tp);
    free(tops);
    return json;
}

static void stream_send(struct gen_job *job, char *json) {
    if (!json || job->dead) {
        free(json);
        return;
    }
    if (http_sse_send(job->req, json, strlen(json)) < 0) job->dead = true;
    free(json);
}

/* echo in a stream: each choice of the part opens with the prompt's text (and, with logprobs,
 * its tokens' logprobs). */
static void send_echo(struct gen_job *job, struct gen_part *part) {
    for (int32_t i = part->base; i < part->base + job->p.n; i++) {
        struct completion_result r;
        result_of(job, i, &r);
        r.text = echo_text(job, part, &r.text_len);
        struct token_logprob *ptops = NULL;
        struct token_probs *pp = job->meta.logprobs ? prompt_view(job, part, &ptops) : NULL;
        r.prompt_probs = pp;
        r.n_prompt_probs = pp ? part->n_prompt : 0;
        if (r.text) stream_send(job, render_oai_completion_chunk(&job->meta, &r));
        free(pp);
        free(ptops);
    }
}

/* --- the typed event streams of /v1/responses and /v1/messages (one choice each) ----------- */

static bool typed_stream(const struct gen_job *job) {
    return job->p.endpoint == API_OAI_RESPONSES || job->p.endpoint == API_ANTHROPIC;
}

/* Send n events and free them; an event that ran out of memory ends the stream (dead). */
static void send_events(struct gen_job *job, struct sse_event *ev, int n) {
    for (int k = 0; k < n; k++) {
        if (!ev[k].data) job->dead = true;
        else if (!job->dead && http_sse_send_event(job->req, ev[k].name, ev[k].data, strlen(ev[k].data)) < 0)
            job->dead = true;
        free(ev[k].data);
    }
}

/* The events that open the stream: the response (message) and its empty output. */
static void typed_open(struct gen_job *job) {
    struct sse_event ev[SSE_EVENTS_MAX];
    bool resp = job->p.endpoint == API_OAI_RESPONSES; /* with parse: items or blocks open as they come */
    int n = resp && job->parse ? responses_tools_open(&job->seq, &job->meta, &job->p, ev)
            : resp             ? responses_stream_open(&job->seq, &job->meta, &job->p, ev)
            : job->parse       ? anthropic_tools_open(&job->meta, (int32_t)job->n_prompt, ev)
                               : anthropic_stream_open(&job->meta, (int32_t)job->n_prompt, ev);
    send_events(job, ev, n);
}

static void typed_text(struct gen_job *job, const char *text, size_t len) {
    struct sse_event ev[SSE_EVENTS_MAX];
    int n = job->p.endpoint == API_OAI_RESPONSES ? responses_stream_text(&job->seq, &job->meta, text, len, ev)
                                                 : anthropic_stream_text(text, len, ev);
    send_events(job, ev, n);
}

static void typed_close(struct gen_job *job, const struct completion_result *r) {
    struct sse_event ev[SSE_EVENTS_MAX];
    bool resp = job->p.endpoint == API_OAI_RESPONSES;
    int n = resp && job->parse ? responses_tools_close(&job->seq, &job->rst, &job->meta, &job->p, r, ev)
            : resp             ? responses_stream_close(&job->seq, &job->meta, &job->p, r, ev)
            : job->parse       ? anthropic_tools_close(&job->ast, r, ev)
                               : anthropic_stream_close(r, ev);
    send_events(job, ev, n);
}

static void typed_error(struct gen_job *job, const struct api_error *err) {
    struct sse_event ev[SSE_EVENTS_MAX];
    int n = job->p.endpoint == API_OAI_RESPONSES ? responses_stream_error(&job->seq, err, ev)
                                                 : anthropic_stream_error(err, ev);
    send_events(job, ev, n);
}

/* A typed stream read for tool calls: the events of what tool_stream_feed made of the new text. */
static void typed_parsed(struct gen_job *job, const struct tool_delta *d) {
    struct sse_event ev[SSE_EVENTS_MAX];
    bool resp = job->p.endpoint == API_OAI_RESPONSES;
    if (resp && d->reasoning_len)
        send_events(job, ev, responses_tools_reasoning(&job->seq, &job->rst, &job->meta, d->reasoning, d->reasoning_len, ev));
    send_events(job, ev, resp ? responses_tools_text(&job->seq, &job->rst, &job->meta, d->content, d->content_len, ev)
                              : anthropic_tools_text(&job->ast, d->content, d->content_len, ev));
    for (size_t k = 0; k < d->n_calls && !job->dead; k++) {
        const struct tool_call_delta *c = &d->calls[k];
        send_events(job, ev, resp ? responses_tools_call(&job->seq, &job->rst, &job->meta, c->id, c->name, c->args,
                                                         c->args_len, ev)
                                  : anthropic_tools_call(&job->ast, c->id, c->name, c->args, c->args_len, ev));
    }
}

/* Stream what became final in choice i (everything once it is done). */
static void stream_progress(struct gen_job *job, int i) {
    struct gen_choice *c = &job->ch[i];
    size_t offset = c->st.sent, n;
    const char *fresh = stream_text_take(&c->st, c->done, &n);
    if (typed_stream(job) && !job->parse) { /* the end is typed_close's, from job_finish */
        if (n > 0) typed_text(job, fresh, n);
        return;
    }
    if (job->parse) {
        struct tool_delta d;
        if (tool_stream_feed(&c->ts, fresh, n, c->done, &d) < 0) {
            job->dead = true; /* out of memory: the stream cannot go on truthfully */
            return;
        }
        if (typed_stream(job)) { /* the end is typed_close's, from job_finish */
            typed_parsed(job, &d);
            return;
        }
        if (d.content_len == 0 && d.reasoning_len == 0 && d.n_calls == 0 && c->n_probs == c->probs_sent && !c->done)
            return;
        stream_send(job, render_chunk_parsed(job, i, &d, offset));
        c->probs_sent = c->n_probs;
        return;
    }
    if (n == 0 && c->n_probs == c->probs_sent && !c->done) return;
    stream_send(job, render_chunk(job, i, fresh, n, offset, c->probs_sent, c->n_probs));
    c->probs_sent = c->n_probs;
}

/* All choices are done: the whole response, or the end of the stream. Frees the job. */
static void job_finish(struct gen_job *job) {
    struct serving *srv = job->srv;
    int n = job->n_choices;
    struct completion_result *rs = calloc((size_t)n, sizeof *rs);
    struct token_probs **tps = calloc((size_t)n, sizeof *tps);
    struct token_logprob **tops = calloc((size_t)n, sizeof *tops);
    /* chat read for reasoning and calls, whole: each choice's parse (its strings) */
    struct tool_parse *parsed = job->parse && !job->p.stream ? calloc((size_t)n, sizeof *parsed) : NULL;
    char **echoed = calloc((size_t)n, sizeof *echoed);
    struct token_probs **pps = calloc((size_t)n, sizeof *pps);
    struct token_logprob **ptops = calloc((size_t)n, sizeof *ptops);
    if (!rs || !tps || !tops || !echoed || !pps || !ptops || (job->parse && !job->p.stream && !parsed)) {
        if (job->p.stream) http_sse_end(job->req);
        else respond_err_code(srv, job->req, -ERR_NOMEM, NULL, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        result_of(job, i, &rs[i]);
        if (parsed && tool_parse_text(&job->topts, rs[i].text, rs[i].text_len, false, &parsed[i]) == 0) {
            rs[i].text = parsed[i].content ? parsed[i].content : "";
            rs[i].text_len = parsed[i].content_len;
            rs[i].content_null = !parsed[i].content;
            rs[i].reasoning = parsed[i].reasoning;
            rs[i].reasoning_len = parsed[i].reasoning_len;
            rs[i].tool_calls = parsed[i].calls;
            rs[i].n_tool_calls = parsed[i].n_calls;
            rs[i].made_tool_calls = parsed[i].n_calls > 0;
        }
        if (job->p.stream && job->parse) rs[i].made_tool_calls = tool_stream_n_calls(&job->ch[i].ts) > 0;
        if (job->p.endpoint == API_COMPLETION && !job->p.stream) {
            struct gen_choice *c = &job->ch[i];
            rs[i].tokens = c->ids;
            rs[i].n_tokens = job->p.return_tokens ? (size_t)c->n_ids : 0;
            rs[i].prompt = part_text(job, part_of(job, i), &rs[i].prompt_len);
        }
        if (job->p.echo && !job->p.stream) { /* the prompt as it was given, then the completion */
            size_t plen;
            const char *pt = echo_text(job, part_of(job, i), &plen);
            if (pt && (echoed[i] = malloc(plen + rs[i].text_len + 1))) {
                memcpy(echoed[i], pt, plen);
                memcpy(echoed[i] + plen, rs[i].text, rs[i].text_len);
                rs[i].text = echoed[i];
                rs[i].text_len += plen;
            }
        }
        if (job->p.echo && job->meta.logprobs && !job->p.stream) {
            rs[i].prompt_probs = pps[i] = prompt_view(job, part_of(job, i), &ptops[i]);
            rs[i].n_prompt_probs = pps[i] ? part_of(job, i)->n_prompt : 0;
            if (!pps[i]) {
                respond_err_code(srv, job->req, -ERR_NOMEM, NULL, "out of memory");
                goto done;
            }
        }
        if (job->meta.logprobs && !job->p.stream) {
            tps[i] = probs_view(job, &job->ch[i], 0, job->ch[i].n_probs, &tops[i]);
            rs[i].probs = tps[i];
            rs[i].n_probs = tps[i] ? (size_t)job->ch[i].n_probs : 0;
        }
    }
    if (job->p.stream) {
        if (typed_stream(job)) {
            typed_close(job, rs);
        } else if (job->p.endpoint != API_COMPLETION) {
            if (job->p.include_usage)
                stream_send(job, render_oai_usage_chunk(&job->meta, rs, (size_t)n, job->p.endpoint == API_OAI_CHAT));
            if (!job->dead && http_sse_send(job->req, "[DONE]", 6) < 0) job->dead = true;
        }
        serving_count(srv, job->dead ? 499 : 200); /* 499: the client went away mid-stream */
        http_sse_end(job->req);
    } else {
        char *json = NULL;
        switch (job->p.endpoint) {
        case API_COMPLETION: json = render_completion(&job->meta, rs, (size_t)n); break;
        case API_OAI_COMPLETION: json = render_oai_completion(&job->meta, rs, (size_t)n); break;
        case API_OAI_CHAT: json = render_oai_chat(&job->meta, rs, (size_t)n); break;
        case API_OAI_RESPONSES: json = render_response(&job->meta, &job->p, rs); break;
        case API_ANTHROPIC: json = render_anthropic_message(&job->meta, rs); break;
        case API_ANTHROPIC_COUNT: break; /* generates nothing */
        }
        if (json) serving_respond_json(srv, job->req, 200, json);
        else respond_err_code(srv, job->req, -ERR_NOMEM, NULL, "out of memory");
        free(json);
    }
done:
    if (parsed)
        for (int i = 0; i < n; i++) tool_parse_free(&parsed[i]);
    free(parsed);
    for (int i = 0; echoed && i < n; i++) free(echoed[i]);
    for (int i = 0; pps && ptops && i < n; i++) {
        free(pps[i]);
        free(ptops[i]);
    }
    free(echoed);
    free(pps);
    free(ptops);
    if (tps && tops)
        for (int i = 0; i < n; i++) {
            free(tps[i]);
            free(tops[i]);
        }
    free(tps);
    free(tops);
    free(rs);
    job_free(job);
}

/* --- the scheduler's sink ------------------------------------------------------------------ */

/* Keep a generated id (native: return_tokens, or a stream's "tokens"). */
static bool keep_id(struct gen_choice *c, int32_t token) {
    if (c->n_ids == c->cap_ids) {
        int32_t cap = c->cap_ids ? c->cap_ids * 2 : 16;
        int32_t *t = realloc(c->ids, sizeof *t * (size_t)cap);
        if (!t) return false;
        c->ids = t;
        c->cap_ids = cap;
    }
    c->ids[c->n_ids++] = token;
    return true;
}

static bool gen_on_token(void *owner, int32_t choice_in_part, int32_t token, const struct sched_token_probs *probs) {
    struct gen_part *part = owner;
    struct gen_job *job = part->job;
    int32_t choice = part->base + choice_in_part;
    struct gen_choice *c = &job->ch[choice];
    if (job->dead) return false;
    c->n_tokens++;
    c->id_slot = sched_req_seq(part->handle, choice_in_part);
    if (job->p.endpoint == API_COMPLETION && (job->p.return_tokens || job->p.stream) && !keep_id(c, token))
        return false;
    if (probs && job->meta.logprobs) {
        if (c->n_probs == c->cap_probs) {
            int32_t cap = c->cap_probs ? c->cap_probs * 2 : 16;
            struct sched_token_probs *t = realloc(c->probs, sizeof *t * (size_t)cap);
            if (!t) return false;
            c->probs = t;
            c->cap_probs = cap;
        }
        c->probs[c->n_probs++] = *probs;
    }
    int k = model_engine_detok_push(c->detok, token, job->piece, job->piece_cap);
    if (k > 0 && memchr(job->piece, '\n', (size_t)k)) c->has_new_line = true;
    if (k > 0 && stream_text_append(&c->st, job->piece, (size_t)k) < 0) return false;
    if (job->p.stream && !c->st.stopped) stream_progress(job, choice);
    return !c->st.stopped && !job->dead;
}

static void gen_on_done(void *owner, int32_t choice_in_part, enum sched_stop reason, const struct sched_counts *counts) {
    struct gen_part *part = owner;
    struct gen_job *job = part->job;
    int32_t choice = part->base + choice_in_part;
    struct gen_choice *c = &job->ch[choice];
    if (reason != SCHED_STOP_WORD) { /* the held bytes of an incomplete character */
        int k = model_engine_detok_flush(c->detok, job->piece, job->piece_cap);
        if (k > 0) stream_text_append(&c->st, job->piece, (size_t)k);
    }
    c->done = true;
    c->stop = stop_type_of(reason);
    c->truncated = reason == SCHED_STOP_CONTEXT;
    c->counts = *counts;
    if (job->p.stream) stream_progress(job, choice);
    if (++part->n_done == job->p.n) part->handle = NULL; /* its scheduler request has ended */
    if (++job->n_done == job->n_choices) job_finish(job);
}

/* Cancel the parts still running (marks: safe inside a sink callback). */
static void cancel_parts(struct gen_job *job) {
    for (int32_t k = 0; k < job->n_parts; k++)
        if (job->parts[k].handle) {
            sched_cancel_deferred(job->srv->sched, job->parts[k].handle);
            job->parts[k].handle = NULL;
        }
}

static void gen_on_error(void *owner, int err) {
    struct gen_part *part = owner;
    struct gen_job *job = part->job;
    part->handle = NULL;
    cancel_parts(job); /* one prompt failed: so does the request */
    struct api_error e;
    if (job->grammar && (err == -ERR_TOOBIG || err == -ERR_INVAL)) /* the matcher's bounds, or a dead end */
        api_error_set(&e, 400, "invalid_request_error", job->p.grammar_param, "%s: %s", job->p.grammar_param,
                      err == -ERR_TOOBIG ? "the grammar is too ambiguous to match past this point of the output"
                                         : "the grammar allows no token at this point of the output");
    else { /* a stream's head is sent: its error event says 500 */
        int status = job->p.stream ? 500 : api_err_status(err);
        api_error_set(&e, status, api_error_type(status), NULL, "generation failed: %s", err_str(err));
    }
    if (job->p.stream) {
        if (typed_stream(job)) typed_error(job, &e);
        else stream_send(job, api_error_render(&e));
        serving_count(job->srv, e.status);
        http_sse_end(job->req);
    } else {
        respond_error(job->srv, job->req, &e);
    }
    job_free(job);
}

/* echo with logprobs: the prompt's logprobs, before the first token. */
static void gen_on_prompt_probs(void *owner, const struct sched_token_probs *probs, int32_t n) {
    struct gen_part *part = owner;
    struct gen_job *job = part->job;
    if ((part->pprobs = malloc(sizeof *part->pprobs * (size_t)(n > 0 ? n : 1))))
        memcpy(part->pprobs, probs, sizeof *part->pprobs * (size_t)n);
    else job->dead = job->p.stream; /* a response without them would lie: a stream ends */
    if (job->p.stream) send_echo(job, part);
}

static const struct sched_sink gen_sink = {gen_on_token, gen_on_done, gen_on_error, gen_on_prompt_probs};

/* The connection died; gen_cancel_cb follows, maybe some loop iterations later (the server paces
 * them). Take the request out of the scheduler at once (a mark: no step built from now on holds its
 * sequences; the scheduler frees them at its next sweep); the job is freed in gen_cancel_cb. It may
 * run inside our own sink callbacks (a send that found the client gone). */
static void gen_abort_cb(struct http_request *req, void *data) {
    struct gen_job *job = data;
    struct serving *srv = job->srv;
    cancel_parts(job);
    if (srv->kick) srv->kick(srv->driver); /* the sweep frees its cells: waiting work may fit */
}

static void gen_cancel_cb(struct http_request *req, void *data) {
    struct gen_job *job = data;
    struct serving *srv = job->srv;
    for (int32_t k = 0; k < job->n_parts; k++)
        if (job->parts[k].handle) sched_cancel(srv->sched, job->parts[k].handle);
    serving_count(srv, 499);
    job_free(job);
    if (srv->kick) srv->kick(srv->driver);
}

/* --- request -> job ------------------------------------------------------------------------- */

static uint64_t next_seed(struct serving *srv) {
    uint64_t z = (srv->seed_state += 0x9e3779b97f4a7c15ull) ^ (uint64_t)time(NULL);
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    return (z ^ (z >> 29)) & 0xffffffffu;
}

/* err for an ERR_* code; returns the code. */
static int err_of_code(struct api_error *err, int code, const char *param, const char *msg) {
    int status = api_err_status(code);
    api_error_set(err, status, api_error_type(status), param, "%s", msg);
    return code;
}

/* One prompt as token ids into part. 0, or an error described in job->err. */
static int part_tokenize(struct gen_job *job, struct gen_part *part, const char *text, size_t len,
                         const int32_t *tokens, size_t n_tokens) {
    if (tokens) {
        part->prompt = malloc(sizeof *part->prompt * (n_tokens ? n_tokens : 1));
        if (!part->prompt) return err_of_code(&job->err, -ERR_NOMEM, NULL, "out of memory");
        memcpy(part->prompt, tokens, sizeof *part->prompt * n_tokens);
        part->n_prompt = n_tokens;
        return 0;
    }
    int rc = model_engine_tokenize(job->srv->engine, text, len, true, true, &part->prompt, &part->n_prompt);
    if (rc < 0) return err_of_code(&job->err, rc, "prompt", "tokenization failed");
    if (part->n_prompt == 0) return err_of_code(&job->err, -ERR_INVAL, "prompt", "the prompt has no tokens");
    return 0;
}

/* Every prompt as token ids into job->parts (job->prompt: the first). 0, or an error described
 * in job->err. */
static int job_tokenize(struct gen_job *job) {
    struct serving *srv = job->srv;
    struct completion_params *p = &job->p;
    job->n_parts = p->n_prompts > 1 ? (int32_t)p->n_prompts : 1;
    job->parts = calloc((size_t)job->n_parts, sizeof *job->parts);
    if (!job->parts) return err_of_code(&job->err, -ERR_NOMEM, NULL, "out of memory");
    int rc = 0;
    if (p->n_prompts > 1) {
        for (int32_t k = 0; rc == 0 && k < job->n_parts; k++)
            rc = part_tokenize(job, &job->parts[k], p->prompts[k].text, p->prompts[k].text_len, p->prompts[k].tokens,
                               p->prompts[k].n_tokens);
    } else if (p->chat.messages) { /* chat, Responses and Anthropic messages alike */
        char why[256], *chat = NULL;
        size_t len;
        rc = chat_prompt_render(&srv->chat, &p->chat, (int64_t)time(NULL), &chat, &len, why, sizeof why);
        if (rc < 0) return err_of_code(&job->err, rc == -ERR_NOMEM ? rc : -ERR_INVAL, "messages", why);
        const char *open = srv->tools.think_open; /* did the template open the reasoning block? */
        size_t e = len;
        while (e > 0 && (chat[e - 1] == ' ' || chat[e - 1] == '\n')) e--;
        job->in_think = open && e >= strlen(open) && memcmp(chat + e - strlen(open), open, strlen(open)) == 0;
        rc = part_tokenize(job, &job->parts[0], chat, len, NULL, 0);
        free(chat);
    } else {
        rc = part_tokenize(job, &job->parts[0], p->prompt_text, p->prompt_text_len, p->prompt_tokens,
                           p->n_prompt_tokens);
    }
    job->prompt = job->parts[0].prompt;
    job->n_prompt = job->parts[0].n_prompt;
    return rc;
}

/* logit_bias with its texts' tokens (each token of a text gets its bias) into job->bias. 0, or
 * an error described in job->err. */
static int job_bias(struct gen_job *job) {
    const struct completion_params *p = &job->p;
    size_t n = p->n_logit_bias;
    job->bias = malloc(sizeof *job->bias * (n + 1));
    if (!job->bias) return err_of_code(&job->err, -ERR_NOMEM, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) job->bias[i] = (struct model_engine_bias){p->logit_bias[i].token, p->logit_bias[i].bias};
    for (size_t t = 0; t < p->n_logit_bias_text; t++) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        int rc = model_engine_tokenize(job->srv->engine, p->logit_bias_text[t].text, p->logit_bias_text[t].len, false,
                                       false, &ids, &n_ids);
        if (rc < 0) return err_of_code(&job->err, rc, "logit_bias", "tokenization failed");
        struct model_engine_bias *grown = n + n_ids > MODEL_ENGINE_MAX_BIAS ? NULL
                                          : realloc(job->bias, sizeof *job->bias * (n + n_ids + 1));
        if (!grown) {
            free(ids);
            if (n + n_ids <= MODEL_ENGINE_MAX_BIAS) return err_of_code(&job->err, -ERR_NOMEM, NULL, "out of memory");
            api_error_set(&job->err, 400, "invalid_request_error", "logit_bias",
                          "logit_bias: more than %d tokens biased (texts count each of their tokens)",
                          MODEL_ENGINE_MAX_BIAS);
            return -ERR_INVAL;
        }
        job->bias = grown;
        for (size_t k = 0; k < n_ids; k++) job->bias[n++] = (struct model_engine_bias){ids[k], p->logit_bias_text[t].bias};
        free(ids);
    }
    job->n_bias = n;
    return 0;
}

static void job_sampling(struct gen_job *job, int32_t n_probs) {
    const struct completion_params *p = &job->p;
    job->sp = (struct model_engine_sampling){
        .temperature = p->temperature,
        .top_k = p->top_k,
        .top_p = p->top_p,
        .min_p = p->min_p,
        .repeat_penalty = p->repeat_penalty,
        .repeat_last_n = p->repeat_last_n,
        .presence_penalty = p->presence_penalty,
        .frequency_penalty = p->frequency_penalty,
        .logit_bias = job->n_bias ? job->bias : NULL,
        .n_logit_bias = (int32_t)job->n_bias,
        .n_probs = n_probs,
        .post_sampling_probs = p->post_sampling_probs,
        .grammar = job->grammar,
    };
}

/* Parse the body, check its token ids, tokenize the prompt: job->prepare_rc and job->err. On the
 * loop thread, or on the thread pool for a large body (it reads the request's body, the
 * configuration and the engine's immutable tokenizer; it writes only the job). */
static void job_prepare(void *data) {
    struct gen_job *job = data;
    struct serving *srv = job->srv;
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    lim.max_n = (int32_t)srv->cfg->max_n;
    lim.max_logit_bias = MODEL_ENGINE_MAX_BIAS;
    lim.defaults = &srv->defaults;
    const char *body = job->req->body;
    size_t body_len = job->req->body_len;
    char *infill_body = NULL;
    if (job->infill) {
        struct infill_config ic = {.n_batch = (int32_t)srv->cfg->batch_tokens, .n_predict = (int32_t)srv->cfg->n_predict,
                                   .n_ctx = srv->engine->n_ctx, .spm = srv->cfg->spm_infill};
        job->prepare_rc = infill_completion_body(srv->engine, &ic, body, body_len, &infill_body, &body_len, &job->err);
        if (job->prepare_rc < 0) return;
        body = infill_body;
    }
    int rc = completion_params_parse(&job->p, job->ep, body, body_len, &lim, &job->err);
    free(infill_body); /* the parameters keep copies of what they point to */
    if (rc == 0) rc = completion_params_check_tokens(&job->p, srv->engine->n_vocab, &job->err);
    if (rc == 0) rc = job_tokenize(job);
    if (rc == 0) rc = job_bias(job);
    job->prepare_rc = rc;
}

static void job_start(struct gen_job *job);

static void job_prepared(struct http_request *req, void *data, int status) {
    struct gen_job *job = data;
    if (status < 0) { /* the client left while the body was parsed */
        serving_count(job->srv, 499);
        job_free(job);
        return;
    }
    job_start(job);
}

static void generate(struct http_request *req, struct serving *srv, enum api_endpoint ep, bool infill) {
    if (serving_not_ready(srv, req)) return;
    struct gen_job *job = calloc(1, sizeof *job);
    if (!job) {
        respond_err_code(srv, req, -ERR_NOMEM, NULL, "out of memory");
        return;
    }
    job->srv = srv;
    job->req = req;
    job->ep = ep;
    job->infill = infill;
    if (req->body_len > srv->offload_bytes) {
        int rc = http_queue_work(req, job_prepare, job_prepared, job);
        if (rc == 0) return; /* job_prepared goes on */
        if (rc == -ERR_CANCELLED) {
            serving_count(srv, 499);
            job_free(job);
            return;
        }
    }
    job_prepare(job); /* a small body, or no thread for it: here */
    job_start(job);
}

/* Chat, /v1/responses and /v1/messages (the last keeps reasoning in the text): whether and how the output
 * is read for reasoning and tool calls, and the calls' grammar
 * (into p.grammar: "required" and a named tool from the start, "auto" lazily from the syntax's
 * opener; a tool schema the converter refuses is a 400 then, and leaves "auto" unconstrained). */
static int job_tools(struct gen_job *job, struct api_error *err) {
    struct serving *srv = job->srv;
    struct completion_params *p = &job->p;
    if (p->endpoint != API_OAI_CHAT && p->endpoint != API_OAI_RESPONSES && p->endpoint != API_ANTHROPIC) return 0;
    const struct tool_dialect *d = &srv->tools;
    bool tools = p->tool_choice != TOOL_CHOICE_NONE;
    bool extract = p->reasoning_format >= 0 ? p->reasoning_format > 0
                   : !(srv->cfg->reasoning_format && strcmp(srv->cfg->reasoning_format, "none") == 0);
    bool reasoning = extract && (d->think_open || d->format == TOOL_FORMAT_GPT_OSS);
    job->parse = tools || reasoning;
    job->topts = (struct tool_parse_opts){.dialect = d, .tools = tools, .reasoning = extract,
                                          .in_think = job->in_think, .tool_defs = p->chat.tools};
    if (!tools) return 0;
    char where[128], why[160];
    bool forced = p->tool_choice != TOOL_CHOICE_AUTO;
    int rc = tool_grammar(d, p->chat.tools, p->tool_choice == TOOL_CHOICE_NAMED ? p->tool_name : NULL,
                          p->parallel_tool_calls, !forced, job->in_think, &job->tool_gbnf, where, sizeof where, why,
                          sizeof why);
    if (rc == -ERR_NOMEM) return api_error_set(err, 500, "server_error", NULL, "out of memory");
    if (rc < 0) {
        if (!forced) return 0;
        return api_error_set(err, 400, "invalid_request_error", where, "%s: %s", where, why);
    }
    p->grammar = job->tool_gbnf;
    p->grammar_len = strlen(job->tool_gbnf);
    snprintf(p->grammar_param, sizeof p->grammar_param, "tools");
    return 0;
}

static void job_run(struct gen_job *job);

/* The grammar's compile on the thread pool (job_compiled follows on the loop): it reads the job's
 * grammar text and the engine's grammar cache (thread-safe); it writes only the job. */
static void job_compile(void *data) {
    struct gen_job *job = data;
    job->grammar_rc = model_engine_grammar_get(job->srv->engine, job->p.grammar, job->p.grammar_len, &job->grammar,
                                               job->grammar_why, sizeof job->grammar_why);
}

/* Loop thread: the grammar's compile (job->grammar_rc) is known; its error is the 400 that says
 * where it fails, else the job goes on. */
static void job_grammar_done(struct gen_job *job) {
    int rc = job->grammar_rc;
    if (rc == -ERR_TOOBIG && job->p.tool_choice == TOOL_CHOICE_AUTO) rc = 0; /* "auto" then stays free */
    if (rc < 0) {
        struct api_error err;
        api_error_set(&err, rc == -ERR_NOMEM ? 500 : 400, rc == -ERR_NOMEM ? "server_error" : "invalid_request_error",
                      job->p.grammar_param, "%s: %s", job->p.grammar_param, job->grammar_why);
        respond_error(job->srv, job->req, &err);
        job_free(job);
        return;
    }
    job_run(job);
}

static void job_compiled(struct http_request *req, void *data, int status) {
    struct gen_job *job = data;
    if (status < 0) { /* the client left while the grammar compiled */
        serving_count(job->srv, 499);
        job_free(job);
        return;
    }
    job_grammar_done(job);
}

/* Loop thread: a prepared job (or its error) on to its grammar, then the scheduler. A grammar the
 * engine's cache holds goes on at once; any other is compiled on the thread pool, since a small
 * grammar can take seconds to compile and the loop must keep answering (/health). */
static void job_start(struct gen_job *job) {
    struct serving *srv = job->srv;
    struct http_request *req = job->req;
    struct api_error err;
    int rc;
    if (job->prepare_rc < 0) {
        respond_error(srv, req, &job->err);
        job_free(job);
        return;
    }
    if ((rc = job_tools(job, &err)) < 0) {
        respond_error(srv, req, &err);
        job_free(job);
        return;
    }
    if (!job->p.grammar || model_engine_grammar_find(srv->engine, job->p.grammar, job->p.grammar_len, &job->grammar) == 0) {
        job_run(job);
        return;
    }
    rc = http_queue_work(req, job_compile, job_compiled, job);
    if (rc == 0) return; /* job_compiled goes on */
    if (rc == -ERR_CANCELLED) {
        serving_count(srv, 499);
        job_free(job);
        return;
    }
    job_compile(job); /* no thread for it: here */
    job_grammar_done(job);
}

/* Loop thread: a job with its compiled grammar (if any) to the scheduler. */
static void job_run(struct gen_job *job) {
    struct serving *srv = job->srv;
    struct http_request *req = job->req;
    enum api_endpoint ep = job->ep;
    struct api_error err;
    int rc;
    const struct completion_params *p = &job->p;
    int32_t max_prompt = sched_max_prompt_tokens(srv->sched);
    for (int32_t k = 0; k < job->n_parts; k++)
        if (job->parts[k].n_prompt > (size_t)max_prompt) { /* n_ctx: the context, one left to generate */
            api_error_exceed_context(&err, (int32_t)job->parts[k].n_prompt, srv->engine->n_ctx);
            respond_error(srv, req, &err);
            job_free(job);
            return;
        }
    job->n_choices = job->n_parts * p->n;
    job->ch = calloc((size_t)job->n_choices, sizeof *job->ch);
    job->piece_cap = model_engine_detok_buf_size(srv->engine);
    job->piece = malloc(job->piece_cap);
    if (!job->ch || !job->piece) {
        respond_err_code(srv, req, -ERR_NOMEM, NULL, "out of memory");
        job_free(job);
        return;
    }
    for (int i = 0; i < job->n_choices; i++) {
        job->ch[i].id_slot = -1;
        stream_text_init(&job->ch[i].st, p->stop, p->n_stop);
        job->ch[i].detok = model_engine_detok_new(srv->engine);
        if (!job->ch[i].detok) {
            respond_err_code(srv, req, -ERR_NOMEM, NULL, "out of memory");
            job_free(job);
            return;
        }
        if (job->parse) tool_stream_init(&job->ch[i].ts, &job->topts);
        if (job->parse && tool_format_needs_special(srv->tools.format))
            model_engine_detok_set_special(job->ch[i].detok, true); /* its markers are control tokens */
    }
    /* logprobs without alternatives still need the chosen token's: ask the sampler for one */
    int32_t n_probs = p->want_logprobs || p->n_probs > 0 ? (p->n_probs > 0 ? p->n_probs : 1) : 0;
    job_sampling(job, n_probs);
    if (job->grammar && job->tool_gbnf && job->p.tool_choice == TOOL_CHOICE_AUTO) job->sp.grammar_trigger = tool_format_trigger(srv->tools.format);

    api_random_id(job->id, sizeof job->id,
                  ep == API_OAI_CHAT ? "chatcmpl-" : ep == API_OAI_RESPONSES ? "resp_" : ep == API_ANTHROPIC ? "msg_" : "cmpl-",
                  24);
    job->meta = (struct response_meta){
        .id = job->id,
        .created = (int64_t)time(NULL),
        .model = p->model ? p->model : srv->model_name,
        .system_fingerprint = srv->fingerprint,
        .n_choices = job->n_choices,
        .logprobs = n_probs > 0,
        .include_usage = p->include_usage,
        .params = ep == API_COMPLETION || ep == API_OAI_COMPLETION ? p : NULL,
        .n_ctx = srv->engine->n_ctx,
        .n_per_prompt = job->n_parts > 1 ? p->n : 0,
    };
    uint64_t seed = p->seed_random ? next_seed(srv) : p->seed;
    rc = 0;
    for (int32_t k = 0; rc == 0 && k < job->n_parts; k++) {
        struct gen_part *part = &job->parts[k];
        part->job = job;
        part->base = k * p->n;
        struct sched_request sr = {
            .prompt = part->prompt,
            .n_prompt = (int32_t)part->n_prompt,
            .n_predict = p->n_predict,
            .n_choices = p->n,
            .seed = seed, /* every prompt of a batch samples as if it came alone */
            .n_probs = n_probs,
            .cache_prompt = p->cache_prompt,
            .cache_partition = serving_cache_partition(srv, req, p->cache_salt, p->cache_salt_len),
            .ignore_eos = p->ignore_eos,
            .sampler_params = &job->sp,
            .prompt_logprobs = part->want_pprobs = p->echo && n_probs > 0 && part->n_prompt >= 2,
            .draft_max = p->spec_n_max >= 0 ? p->spec_n_max : (int32_t)srv->cfg->draft_max,
            .draft_min = p->spec_n_min >= 0 ? p->spec_n_min : (int32_t)srv->cfg->draft_min,
            .draft_p_min = p->spec_p_min >= 0 ? p->spec_p_min : (float)srv->cfg->draft_p_min,
        };
        rc = sched_submit(srv->sched, &sr, &gen_sink, part, serving_now_ms(), &part->handle);
    }
    if (rc < 0) { /* the parts submitted before never ran: no callback came for them */
        for (int32_t k = 0; k < job->n_parts; k++)
            if (job->parts[k].handle) sched_cancel(srv->sched, job->parts[k].handle);
        if (rc == -ERR_BUSY) {
            http_add_header(req, "Retry-After", "1");
            respond_err_code(srv, req, rc, NULL, "the server is busy: too many requests wait for memory");
        } else if (rc == -ERR_TOOBIG) {
            respond_err_code(srv, req, -ERR_INVAL, "n", "more choices than the memory has sequences for");
        } else {
            respond_err_code(srv, req, rc, NULL, err_str(rc));
        }
        job_free(job);
        return;
    }
    if (p->stream) rc = http_sse_start(req, gen_cancel_cb, job);
    else http_on_cancel(req, gen_cancel_cb, job);
    if (rc == 0) http_on_abort(req, gen_abort_cb);
    if (rc == 0 && p->stream && typed_stream(job)) typed_open(job);
    for (int i = 0; rc == 0 && p->stream && ep == API_OAI_CHAT && i < job->n_choices; i++) /* role-only chunks first */
        stream_send(job, render_chunk(job, i, "", 0, 0, 0, 0));
    for (int32_t k = 0; rc == 0 && p->stream && p->echo && k < job->n_parts; k++) /* echo: the prompt first */
        if (!job->parts[k].want_pprobs) send_echo(job, &job->parts[k]); /* else with its logprobs */
    if (rc < 0) { /* the stream could not start: the request is finished (dead) unless -ERR_STATE */
        for (int32_t k = 0; k < job->n_parts; k++) sched_cancel(srv->sched, job->parts[k].handle);
        job_free(job);
        if (rc == -ERR_STATE) respond_err_code(srv, req, rc, NULL, "the event stream could not start");
        else serving_count(srv, 499);
    }
    if (srv->kick) srv->kick(srv->driver);
}

void serving_gen_slot(const void *owner, int32_t choice, struct slot_info *out) {
    const struct gen_part *part = owner;
    const struct gen_job *job = part->job;
    out->params = &job->p;
    out->n_predict = job->p.n_predict;
    out->index = part->base + choice;
    out->has_new_line = job->ch && job->ch[part->base + choice].has_new_line;
}

void serving_completion_handle(struct http_request *req, void *data) { generate(req, data, API_COMPLETION, false); }
void serving_infill_handle(struct http_request *req, void *data) { generate(req, data, API_COMPLETION, true); }
void serving_oai_completion_handle(struct http_request *req, void *data) { generate(req, data, API_OAI_COMPLETION, false); }
void serving_oai_chat_handle(struct http_request *req, void *data) { generate(req, data, API_OAI_CHAT, false); }
void serving_oai_responses_handle(struct http_request *req, void *data) { generate(req, data, API_OAI_RESPONSES, false); }
void serving_anthropic_messages_handle(struct http_request *req, void *data) { generate(req, data, API_ANTHROPIC, false); }

/* POST /v1/messages/count_tokens: the prompt /v1/messages would run, counted. */
void serving_anthropic_count_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    struct gen_job *job = calloc(1, sizeof *job);
    if (!job) {
        respond_err_code(srv, req, -ERR_NOMEM, NULL, "out of memory");
        return;
    }
    job->srv = srv;
    struct api_error err;
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    if (completion_params_parse(&job->p, API_ANTHROPIC_COUNT, req->body, req->body_len, &lim, &err) < 0)
        respond_error(srv, req, &err);
    else if (job_tokenize(job) < 0)
        respond_error(srv, req, &job->err);
    else {
        char *json = render_anthropic_count((int32_t)job->n_prompt);
        if (json) serving_respond_json(srv, req, 200, json);
        else respond_err_code(srv, req, -ERR_NOMEM, NULL, "out of memory");
        free(json);
    }
    job_free(job);
}
