/* generate.c: the completion endpoints (POST /completion and /infill, /v1/completions,
 * /v1/chat/completions, /v1/responses, /v1/messages): request -> tokens -> sched_submit, and the
 * scheduler's sink callbacks -> text (the engine's streaming detokenizer, stop strings) -> JSON
 * bodies or SSE events (the typed events of responses.h and anthropic.h for the last two).
 *
 * One struct gen_job per request, owned by the request: freed when the last choice is done (the
 * response is then finished), on the scheduler's on_error, or in the HTTP cancel callback (which
 * cancels the scheduler request first). A body over srv->offload_bytes is parsed and its prompt
 * tokenized off the loop (http_queue_work: job_prepare on the server's thread pool, then
 * job_prepared on the loop thread, which frees the job if the client left meanwhile). The
 * scheduler's stop conditions are EOS, n_predict and the context; stop strings are matched on the
 * text (stream_text.h) and end a choice by returning false from on_token; a stop string, or its
 * possible start, never reaches a streaming client.
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
    struct model_engine_detok *detok;
    struct sched_token_probs *probs;/* per generated token when logprobs were asked for */
    int32_t n_probs, cap_probs, probs_sent;
    int32_t n_tokens;               /* generated so far */
    bool done, role_sent;
    bool truncated;                 /* stopped by the context limit (llama.cpp's `truncated`) */
    enum stop_type stop;
    struct sched_counts counts;
};

struct gen_job {
    struct serving *srv;
    struct http_request *req;
    enum api_endpoint ep;
    bool infill;                    /* POST /infill: the body becomes a /completion body (infill.h) */
    int prepare_rc;                 /* job_prepare's outcome: 0, or an error described in err */
    struct api_error err;
    struct sched_req *handle;       /* NULL once the scheduler request ended */
    struct completion_params p;
    struct model_engine_sampling sp;
    struct model_engine_bias *bias;
    struct model_engine_grammar *grammar; /* the request's compiled grammar (a reference), or NULL */
    int32_t *prompt;
    size_t n_prompt;
    struct gen_choice *ch;
    int n_done;
    bool dead;                      /* the stream refused a send: stop producing */
    char id[48];
    struct response_meta meta;
    char *piece;                    /* detokenizer output buffer */
    size_t piece_cap;
    int64_t seq;                    /* /v1/responses streams: the next event's sequence_number */
};

static void job_free(struct gen_job *job) {
    if (!job) return;
    if (job->ch)
        for (int i = 0; i < job->p.n; i++) {
            stream_text_free(&job->ch[i].st);
            model_engine_detok_free(job->ch[i].detok);
            free(job->ch[i].probs);
        }
    free(job->ch);
    free(job->piece);
    free(job->prompt);
    free(job->bias);
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

/* render.h's token_probs for tokens [from, to) of a choice; the caller frees *tops and the result. */
static struct token_probs *probs_view(const struct gen_job *job, const struct gen_choice *c, int32_t from,
                                      int32_t to, struct token_logprob **tops) {
    int32_t n = to - from;
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
        const struct sched_token_probs *sp = &c->probs[from + i];
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

static void result_of(const struct gen_job *job, int i, struct completion_result *r) {
    const struct gen_choice *c = &job->ch[i];
    *r = (struct completion_result){
        .index = i,
        .text = c->st.text ? c->st.text : "",
        .text_len = c->st.len,
        .tokens_predicted = c->counts.n_generated,
        .tokens_evaluated = c->counts.n_prompt ? c->counts.n_prompt : (int32_t)job->n_prompt,
        .tokens_cached = c->counts.n_cached,
        .stop_type = c->done ? c->stop : STOP_TYPE_NONE,
        .stopping_word = c->stop == STOP_TYPE_WORD ? c->st.stopping_word : NULL,
        .truncated = c->done && c->truncated,
        .timings = {.prompt_n = c->counts.n_prompt - c->counts.n_cached,
                    .prompt_ms = c->counts.prompt_ms,
                    .predicted_n = c->counts.n_generated,
                    .predicted_ms = c->counts.predicted_ms},
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

static void stream_send(struct gen_job *job, char *json) {
    if (!json || job->dead) {
        free(json);
        return;
    }
    if (http_sse_send(job->req, json, strlen(json)) < 0) job->dead = true;
    free(json);
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
    int n = job->p.endpoint == API_OAI_RESPONSES ? responses_stream_open(&job->seq, &job->meta, &job->p, ev)
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
    int n = job->p.endpoint == API_OAI_RESPONSES ? responses_stream_close(&job->seq, &job->meta, &job->p, r, ev)
                                                 : anthropic_stream_close(r, ev);
    send_events(job, ev, n);
}

static void typed_error(struct gen_job *job, const struct api_error *err) {
    struct sse_event ev[SSE_EVENTS_MAX];
    int n = job->p.endpoint == API_OAI_RESPONSES ? responses_stream_error(&job->seq, err, ev)
                                                 : anthropic_stream_error(err, ev);
    send_events(job, ev, n);
}

/* Stream what became final in choice i (everything once it is done). */
static void stream_progress(struct gen_job *job, int i) {
    struct gen_choice *c = &job->ch[i];
    size_t offset = c->st.sent, n;
    const char *fresh = stream_text_take(&c->st, c->done, &n);
    if (typed_stream(job)) { /* the end is typed_close's, from job_finish */
        if (n > 0) typed_text(job, fresh, n);
        return;
    }
    if (n == 0 && c->n_probs == c->probs_sent && !c->done) return;
    stream_send(job, render_chunk(job, i, fresh, n, offset, c->probs_sent, c->n_probs));
    c->probs_sent = c->n_probs;
}

/* All choices are done: the whole response, or the end of the stream. Frees the job. */
static void job_finish(struct gen_job *job) {
    struct serving *srv = job->srv;
    int n = job->p.n;
    struct completion_result *rs = calloc((size_t)n, sizeof *rs);
    struct token_probs **tps = calloc((size_t)n, sizeof *tps);
    struct token_logprob **tops = calloc((size_t)n, sizeof *tops);
    if (!rs || !tps || !tops) {
        if (job->p.stream) http_sse_end(job->req);
        else respond_err_code(srv, job->req, -ERR_NOMEM, NULL, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        result_of(job, i, &rs[i]);
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
    if (tps)
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

static bool gen_on_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *probs) {
    struct gen_job *job = owner;
    struct gen_choice *c = &job->ch[choice];
    if (job->dead) return false;
    c->n_tokens++;
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
    if (k > 0 && stream_text_append(&c->st, job->piece, (size_t)k) < 0) return false;
    if (job->p.stream && !c->st.stopped) stream_progress(job, choice);
    return !c->st.stopped && !job->dead;
}

static void gen_on_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *counts) {
    struct gen_job *job = owner;
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
    if (++job->n_done == job->p.n) {
        job->handle = NULL; /* the scheduler request has ended */
        job_finish(job);
    }
}

static void gen_on_error(void *owner, int err) {
    struct gen_job *job = owner;
    job->handle = NULL;
    char msg[128];
    snprintf(msg, sizeof msg, "generation failed: %s", err_str(err));
    if (job->p.stream) {
        struct api_error e;
        api_error_set(&e, 500, "server_error", NULL, "%s", msg);
        if (typed_stream(job)) typed_error(job, &e);
        else stream_send(job, api_error_render(&e));
        serving_count(job->srv, 500);
        http_sse_end(job->req);
    } else {
        respond_err_code(job->srv, job->req, err, NULL, msg);
    }
    job_free(job);
}

static const struct sched_sink gen_sink = {gen_on_token, gen_on_done, gen_on_error};

/* The connection died; gen_cancel_cb follows, maybe some loop iterations later (the server paces
 * them). Take the request out of the scheduler at once (a mark: no step built from now on holds its
 * sequences; the scheduler frees them at its next sweep); the job is freed in gen_cancel_cb. It may
 * run inside our own sink callbacks (a send that found the client gone). */
static void gen_abort_cb(struct http_request *req, void *data) {
    struct gen_job *job = data;
    struct serving *srv = job->srv;
    if (!job->handle) return;
    sched_cancel_deferred(srv->sched, job->handle);
    job->handle = NULL;
    if (srv->kick) srv->kick(srv->driver); /* the sweep frees its cells: waiting work may fit */
}

static void gen_cancel_cb(struct http_request *req, void *data) {
    struct gen_job *job = data;
    struct serving *srv = job->srv;
    if (job->handle) sched_cancel(srv->sched, job->handle);
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

/* The prompt as token ids into job->prompt. 0, or an error described in job->err. */
static int job_tokenize(struct gen_job *job) {
    struct serving *srv = job->srv;
    struct completion_params *p = &job->p;
    if (p->prompt_tokens) {
        job->prompt = malloc(sizeof *job->prompt * (p->n_prompt_tokens ? p->n_prompt_tokens : 1));
        if (!job->prompt) return err_of_code(&job->err, -ERR_NOMEM, NULL, "out of memory");
        memcpy(job->prompt, p->prompt_tokens, sizeof *job->prompt * p->n_prompt_tokens);
        job->n_prompt = p->n_prompt_tokens;
        return 0;
    }
    char *chat = NULL;
    const char *text = p->prompt_text;
    size_t len = p->prompt_text_len;
    if (p->chat.messages) { /* chat, Responses and Anthropic messages alike */
        char why[256];
        int rc = chat_prompt_render(&srv->chat, &p->chat, (int64_t)time(NULL), &chat, &len, why, sizeof why);
        if (rc < 0) return err_of_code(&job->err, rc == -ERR_NOMEM ? rc : -ERR_INVAL, "messages", why);
        text = chat;
    }
    int rc = model_engine_tokenize(srv->engine, text, len, true, true, &job->prompt, &job->n_prompt);
    free(chat);
    if (rc < 0) return err_of_code(&job->err, rc, "prompt", "tokenization failed");
    if (job->n_prompt == 0) return err_of_code(&job->err, -ERR_INVAL, "prompt", "the prompt has no tokens");
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
        .logit_bias = job->bias,
        .n_logit_bias = job->bias ? (int32_t)p->n_logit_bias : 0,
        .n_probs = n_probs,
        .grammar = job->grammar,
    };
    if (job->bias)
        for (size_t i = 0; i < p->n_logit_bias; i++)
            job->bias[i] = (struct model_engine_bias){p->logit_bias[i].token, p->logit_bias[i].bias};
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
    const char *body = job->req->body;
    size_t body_len = job->req->body_len;
    char *infill_body = NULL;
    if (job->infill) {
        struct infill_config ic = {.n_batch = (int32_t)srv->cfg->batch_tokens, .n_predict = -1,
                                   .n_ctx = srv->engine->n_ctx, .spm = srv->cfg->spm_infill};
        job->prepare_rc = infill_completion_body(srv->engine, &ic, body, body_len, &infill_body, &body_len, &job->err);
        if (job->prepare_rc < 0) return;
        body = infill_body;
    }
    int rc = completion_params_parse(&job->p, job->ep, body, body_len, &lim, &job->err);
    free(infill_body); /* the parameters keep copies of what they point to */
    if (rc == 0) rc = completion_params_check_tokens(&job->p, srv->engine->n_vocab, &job->err);
    if (rc == 0) rc = job_tokenize(job);
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

/* Loop thread: a prepared job (or its error) to the scheduler. */
static void job_start(struct gen_job *job) {
    struct serving *srv = job->srv;
    struct http_request *req = job->req;
    enum api_endpoint ep = job->ep;
    struct api_error err;
    int rc;
    if (job->prepare_rc < 0) {
        respond_error(srv, req, &job->err);
        job_free(job);
        return;
    }
    if (job->p.grammar) { /* compiled once per text (the engine's cache), refused with where it fails */
        char why[200];
        rc = model_engine_grammar_get(srv->engine, job->p.grammar, job->p.grammar_len, &job->grammar, why, sizeof why);
        if (rc < 0) {
            api_error_set(&err, rc == -ERR_NOMEM ? 500 : 400, rc == -ERR_NOMEM ? "server_error" : "invalid_request_error",
                          job->p.grammar_param, "%s: %s", job->p.grammar_param, why);
            respond_error(srv, req, &err);
            job_free(job);
            return;
        }
    }
    const struct completion_params *p = &job->p;
    int32_t max_prompt = sched_max_prompt_tokens(srv->sched);
    if (job->n_prompt > (size_t)max_prompt) {
        api_error_exceed_context(&err, (int32_t)job->n_prompt, max_prompt);
        respond_error(srv, req, &err);
        job_free(job);
        return;
    }
    job->ch = calloc((size_t)p->n, sizeof *job->ch);
    job->piece_cap = model_engine_detok_buf_size(srv->engine);
    job->piece = malloc(job->piece_cap);
    job->bias = p->n_logit_bias ? calloc(p->n_logit_bias, sizeof *job->bias) : NULL;
    if (!job->ch || !job->piece || (p->n_logit_bias && !job->bias)) {
        respond_err_code(srv, req, -ERR_NOMEM, NULL, "out of memory");
        job_free(job);
        return;
    }
    for (int i = 0; i < p->n; i++) {
        stream_text_init(&job->ch[i].st, p->stop, p->n_stop);
        job->ch[i].detok = model_engine_detok_new(srv->engine);
        if (!job->ch[i].detok) {
            respond_err_code(srv, req, -ERR_NOMEM, NULL, "out of memory");
            job_free(job);
            return;
        }
    }
    /* logprobs without alternatives still need the chosen token's: ask the sampler for one */
    int32_t n_probs = p->want_logprobs || p->n_probs > 0 ? (p->n_probs > 0 ? p->n_probs : 1) : 0;
    job_sampling(job, n_probs);

    api_random_id(job->id, sizeof job->id,
                  ep == API_OAI_CHAT ? "chatcmpl-" : ep == API_OAI_RESPONSES ? "resp_" : ep == API_ANTHROPIC ? "msg_" : "cmpl-",
                  24);
    job->meta = (struct response_meta){
        .id = job->id,
        .created = (int64_t)time(NULL),
        .model = p->model ? p->model : srv->model_name,
        .system_fingerprint = srv->fingerprint,
        .n_choices = p->n,
        .logprobs = n_probs > 0,
        .include_usage = p->include_usage,
    };
    struct sched_request sr = {
        .prompt = job->prompt,
        .n_prompt = (int32_t)job->n_prompt,
        .n_predict = p->n_predict,
        .n_choices = p->n,
        .seed = p->seed_random ? next_seed(srv) : p->seed,
        .n_probs = n_probs,
        .cache_prompt = p->cache_prompt,
        .cache_partition = serving_cache_partition(srv, req, p->cache_salt, p->cache_salt_len),
        .ignore_eos = p->ignore_eos,
        .sampler_params = &job->sp,
    };
    rc = sched_submit(srv->sched, &sr, &gen_sink, job, serving_now_ms(), &job->handle);
    if (rc < 0) {
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
    for (int i = 0; rc == 0 && p->stream && ep == API_OAI_CHAT && i < p->n; i++) /* role-only chunks first */
        stream_send(job, render_chunk(job, i, "", 0, 0, 0, 0));
    if (rc < 0) { /* the stream could not start: the request is finished (dead) unless -ERR_STATE */
        sched_cancel(srv->sched, job->handle);
        job_free(job);
        if (rc == -ERR_STATE) respond_err_code(srv, req, rc, NULL, "the event stream could not start");
        else serving_count(srv, 499);
    }
    if (srv->kick) srv->kick(srv->driver);
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
