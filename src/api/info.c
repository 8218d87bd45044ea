/* info.c: the serving endpoints that generate nothing: /health (stall detection, capacity
 * detail), /v1/models, /props, /slots, /metrics, /tokenize, /detokenize, /apply-template.
 * Everything here answers at once on the loop thread from the scheduler's counters (sched_stats
 * is safe while a step computes) and the engine's immutable tokenizer, except a large body's
 * tokens or template, which are computed off the loop (serving_respond_computed). */
#include "api/errors.h"
#include "api/metrics_text.h"
#include "api/params.h"
#include "api/render.h"
#include "api/serving.h"
#include "common/err.h"
#include "common/proc_self.h"
#include "sched/model_engine.h"
#include "sched/sched.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void respond_api_error(struct serving *srv, struct http_request *req, const struct api_error *err) {
    char *json = api_error_render(err);
    serving_respond_json(srv, req, err->status, json ? json : "{}");
    free(json);
}

/* GET /health: 503 {"status":"loading"} until the engine has started, 503 {"status":"draining"}
 * once the server drains, else {"status":"ok"} (200) or {"status":"stalled"} (503, sched.h's
 * stall detection); ?detail=1 adds the capacity counts. ROUTE_PUBLIC: no API key needed. */
void serving_health_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (req->draining || !srv->sched) {
        http_respond_json(req, 503, req->draining ? "{\"status\":\"draining\"}" : "{\"status\":\"loading\"}");
        return;
    }
    struct sched_stats st;
    char detail[8];
    bool want_detail =
        http_query(req, "detail", detail, sizeof detail) > 0 && strcmp(detail, "0") && strcmp(detail, "false");
    if (want_detail) sched_stats(srv->sched, serving_now_ms(), &st);
    else st.stalled = sched_stalled(srv->sched, serving_now_ms()); /* a load balancer's poll: cheap */
    json_t *body = json_pack("{s:s}", "status", st.stalled ? "stalled" : "ok");
    if (want_detail) {
        /* capacity for routing: counts only, never prompt or output text */
        json_object_set_new(body, "queue", json_integer(st.queued + st.preempted));
        json_object_set_new(body, "active_requests", json_integer(st.active_requests));
        json_object_set_new(body, "active_sequences", json_integer(st.active_seqs));
        json_object_set_new(body, "kv_cells_total", json_integer(st.cells_total));
        json_object_set_new(body, "kv_cells_free", json_integer(st.cells_total - st.cells_used));
        json_object_set_new(body, "tokens_per_second", json_real(st.tokens_per_s));
        json_object_set_new(body, "step_in_flight", json_boolean(st.step_in_flight));
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    http_respond_json(req, st.stalled ? 503 : 200, text ? text : "{\"status\":\"ok\"}");
    free(text);
}

static void model_info_of(const struct serving *srv, struct model_info *out) {
    const struct model_engine *e = srv->engine;
    *out = (struct model_info){
        .id = srv->model_name,
        .created = srv->created,
        .n_vocab = e->n_vocab,
        .n_ctx_train = e->n_ctx_train,
        .n_embd = e->n_embd,
        .n_params = 0,
        .size = e->weight_bytes,
    };
}

void serving_models_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    struct model_info mi;
    model_info_of(srv, &mi);
    char *json = render_models(&mi);
    serving_respond_json(srv, req, json ? 200 : 500, json ? json : "{}");
    free(json);
}

/* GET /v1/models/{id}: the model object when id (percent-decoded) is the one served, else 404. */
void serving_model_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    const char *raw = req->path + strlen("/v1/models/");
    char id[sizeof srv->model_name + 1];
    size_t n = 0;
    for (const char *c = raw; *c && n + 1 < sizeof id; c++) {
        unsigned hex;
        if (c[0] == '%' && sscanf(c + 1, "%2x", &hex) == 1 && isxdigit((unsigned char)c[1]) &&
            isxdigit((unsigned char)c[2])) {
            id[n++] = (char)hex;
            c += 2;
        } else {
            id[n++] = *c;
        }
    }
    id[n] = '\0';
    if (strcmp(id, srv->model_name) != 0) {
        struct api_error err;
        api_error_set(&err, 404, "invalid_request_error", "model", "The model '%.120s' does not exist", id);
        respond_api_error(srv, req, &err);
        return;
    }
    struct model_info mi;
    model_info_of(srv, &mi);
    char *json = render_model(&mi);
    serving_respond_json(srv, req, json ? 200 : 500, json ? json : "{}");
    free(json);
}

/* The text of a special token, NUL-terminated, into buf ("" when there is none). */
static const char *special_text(const struct model_engine *e, int which, char *buf, size_t cap) {
    size_t len;
    bool added;
    const char *t = model_engine_special_text(e, which, &len, &added);
    snprintf(buf, cap, "%.*s", (int)len, t);
    return buf;
}

void serving_props_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    const struct model_engine *e = srv->engine;
    struct completion_params d;
    completion_params_defaults_with(&d, API_COMPLETION, &srv->defaults);
    /* the sequences that fit at full context, as llama.cpp's slots each hold one (--parallel overrides) */
    int64_t fit = e->n_ctx > 0 ? e->kv_tokens / e->n_ctx : 1;
    if (fit > e->n_seq_max) fit = e->n_seq_max;
    char bos[64], eos[64];
    struct props_info pi = {
        .model_path = srv->model_path,
        .model_alias = srv->model_name,
        .total_slots = (int32_t)(srv->cfg->parallel > 0 ? srv->cfg->parallel : fit > 0 ? fit : 1),
        .chat_template_text = srv->chat_template_text ? srv->chat_template_text : "",
        .bos_token = special_text(e, 0, bos, sizeof bos),
        .eos_token = special_text(e, 1, eos, sizeof eos),
        .batch_tokens = srv->cfg->batch_tokens,
        .n_ctx = e->n_ctx,
        .kv_tokens = e->kv_tokens,
        .kv_bytes = e->kv_bytes,
        .kv_type_k = e->kv_type_k,
        .kv_type_v = e->kv_type_v,
        .max_n = (int32_t)srv->cfg->max_n,
        .n_vocab = e->n_vocab,
        .chat_template = chat_prompt_kind(&srv->chat),
        .build_info = "uvlm " __DATE__,
        .defaults = &d,
    };
    char *json = render_props(&pi);
    serving_respond_json(srv, req, json ? 200 : 500, json ? json : "{}");
    free(json);
}

void serving_slots_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    int32_t n = sched_slots(srv->sched, NULL, 0);
    struct sched_slot *slots = calloc((size_t)n + 1, sizeof *slots);
    struct slot_info *info = calloc((size_t)n + 1, sizeof *info);
    char *json = NULL;
    if (slots && info) {
        n = sched_slots(srv->sched, slots, n);
        for (int32_t i = 0; i < n; i++) {
            const struct sched_slot *s = &slots[i];
            info[i] = (struct slot_info){
                .id = s->seq, .id_task = s->request_id, .n_ctx = srv->engine->n_ctx,
                .index = s->choice, .state = sched_seq_state_str(s->state),
                .is_processing = s->state != SCHED_QUEUED && s->state != SCHED_PREEMPTED,
                .n_prompt_tokens = s->n_prompt,
                .n_prompt_tokens_processed = s->n_prompt_done,
                .n_decoded = s->n_generated, .n_predict = -1, .n_cells = s->cells};
            if (s->owner) serving_gen_slot(s->owner, s->choice, &info[i]);
        }
        json = render_slots(info, (size_t)n);
    }
    free(slots);
    free(info);
    serving_respond_json(srv, req, json ? 200 : 500, json ? json : "{}");
    free(json);
}

/* --- /metrics (Prometheus text exposition) -------------------------------------------------- */

static void put_hist(struct metrics_text *mt, const char *name, const char *help, const struct sched_stats *st,
                     enum sched_hist_kind kind) {
    int n;
    const double *bounds = sched_hist_bounds(kind, &n);
    struct metrics_histogram h = {bounds, st->hist[kind].counts, (size_t)n, st->hist[kind].sum};
    metrics_text_histogram(mt, name, help, &h);
}

/* The standard process collector's families (what client libraries export as process_*). */
static void put_process(struct metrics_text *mt) {
    struct proc_self ps;
    if (proc_self_read(&ps) != 0) return; /* no /proc: the families are left out, not faked */
    metrics_text_counter(mt, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                         ps.cpu_seconds);
    metrics_text_gauge(mt, "process_resident_memory_bytes", "Resident memory size in bytes.",
                       (double)ps.resident_bytes);
    metrics_text_gauge(mt, "process_virtual_memory_bytes", "Virtual memory size in bytes.", (double)ps.virtual_bytes);
    metrics_text_gauge(mt, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                       ps.start_time_seconds);
    metrics_text_gauge(mt, "process_open_fds", "Number of open file descriptors.", (double)ps.open_fds);
    metrics_text_gauge(mt, "process_max_fds", "Maximum number of open file descriptors.", (double)ps.max_fds);
}

/* llama.cpp server's families (--metrics-names llamacpp), from the same counters: its "slots" are
 * uvlm's sequences, its llama_decode calls uvlm's steps. */
static void put_llamacpp(struct metrics_text *mt, const struct sched_stats *st) {
    double prompt_s = st->prompt_ms / 1e3, decode_s = st->decode_ms / 1e3;
    metrics_text_counter(mt, "llamacpp:prompt_tokens_total", "Number of prompt tokens processed.",
                         (double)st->prompt_tokens);
    metrics_text_counter(mt, "llamacpp:prompt_seconds_total", "Prompt process time", prompt_s);
    metrics_text_counter(mt, "llamacpp:tokens_predicted_total", "Number of generation tokens processed.",
                         (double)st->generated_tokens);
    metrics_text_counter(mt, "llamacpp:tokens_predicted_seconds_total", "Predict process time", decode_s);
    metrics_text_counter(mt, "llamacpp:n_decode_total", "Total number of llama_decode() calls", (double)st->steps);
    metrics_text_gauge(mt, "llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
                       prompt_s > 0 ? (double)st->prompt_tokens / prompt_s : 0);
    metrics_text_gauge(mt, "llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s.",
                       decode_s > 0 ? (double)st->generated_tokens / decode_s : 0);
    metrics_text_gauge(mt, "llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.",
                       st->cells_total > 0 ? (double)st->cells_used / (double)st->cells_total : 0);
    metrics_text_gauge(mt, "llamacpp:kv_cache_tokens", "KV-cache tokens.", (double)st->cells_used);
    metrics_text_gauge(mt, "llamacpp:requests_processing", "Number of requests processing.",
                       (double)st->active_requests);
    metrics_text_gauge(mt, "llamacpp:requests_deferred", "Number of requests deferred.", (double)st->queued);
    metrics_text_gauge(mt, "llamacpp:n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
                       st->steps > 0 ? (double)st->step_seqs / (double)st->steps : 0);
}

void serving_metrics_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    struct sched_stats st;
    sched_stats(srv->sched, serving_now_ms(), &st);
    const struct serving_metrics *m = &srv->metrics;
    struct metrics_text mt;
    metrics_text_init(&mt);
    metrics_text_counter(&mt, "uvlm_requests_total", "Requests answered by the serving endpoints.",
                         (double)m->requests_total);
    metrics_text_family(&mt, "uvlm_requests_by_status_total", "counter",
                        "Requests by HTTP status (499: the client went away).");
    for (int i = 0; i < m->n_status; i++) {
        char code[16];
        snprintf(code, sizeof code, "%d", m->status[i]);
        metrics_text_sample(&mt, "uvlm_requests_by_status_total", "status", code, (double)m->by_status[i]);
    }
    metrics_text_family(&mt, "uvlm_requests_finished_total", "counter",
                        "Generations finished, by reason: eos, limit (n_predict), word (a stop string), "
                        "context; a request with n choices counts once per choice.");
    for (int r = 0; r <= SCHED_STOP_CONTEXT; r++)
        metrics_text_sample(&mt, "uvlm_requests_finished_total", "reason", sched_stop_str((enum sched_stop)r),
                            (double)st.choices_done[r]);
    metrics_text_counter(&mt, "uvlm_requests_failed_total", "Requests that failed in the engine (500).",
                         (double)st.requests_failed);
    metrics_text_counter(&mt, "uvlm_requests_rejected_total", "Requests refused because the queue was full (503).",
                         (double)st.requests_rejected);
    metrics_text_counter(&mt, "uvlm_requests_cancelled_total", "Requests cancelled (the client went away).",
                         (double)st.requests_cancelled);
    metrics_text_counter(&mt, "uvlm_prompt_tokens_total", "Prompt tokens run through the model (cached excluded).",
                         (double)st.prompt_tokens);
    metrics_text_counter(&mt, "uvlm_cached_prompt_tokens_total", "Prompt tokens reused from shared or cached cells.",
                         (double)st.cached_tokens);
    metrics_text_counter(&mt, "uvlm_generated_tokens_total", "Tokens generated.", (double)st.generated_tokens);
    metrics_text_counter(&mt, "uvlm_prompt_seconds_total", "Step time spent on prompt tokens.", st.prompt_ms / 1e3);
    metrics_text_counter(&mt, "uvlm_decode_seconds_total", "Step time spent on decode tokens.", st.decode_ms / 1e3);
    metrics_text_gauge(&mt, "uvlm_kv_cells_capacity",
                       "KV cells in the pool (--kv-tokens; states of a recurrent model).", (double)st.cells_total);
    metrics_text_gauge(&mt, "uvlm_kv_cells_used", "KV cells holding at least one sequence.", (double)st.cells_used);
    /* bytes: a q8_0 cell (--kv-type) takes 17/32 of an f16 one, so cells alone do not say memory */
    double kv_bytes = (double)srv->engine->kv_bytes;
    metrics_text_gauge(&mt, "uvlm_kv_bytes_capacity",
                       "Bytes of the KV memory (K/V of every cell and their bookkeeping; --kv-tokens or --kv-bytes).",
                       kv_bytes);
    metrics_text_gauge(&mt, "uvlm_kv_bytes_used", "Bytes of the KV memory in the cells in use (capacity x used / cells).",
                       st.cells_total > 0 ? kv_bytes * (double)st.cells_used / (double)st.cells_total : 0);
    metrics_text_gauge(&mt, "uvlm_kv_cells_live", "KV cells held by running sequences (a prefix they share with "
                       "the prompt cache included).", (double)st.cells_live);
    metrics_text_gauge(&mt, "uvlm_kv_cells_cached", "KV cells held by the prompt cache alone (evicted first when "
                       "memory is needed).", (double)st.cells_cached);
    metrics_text_gauge(&mt, "uvlm_recurrent_states_capacity", "Recurrent sequence states of a recurrent or hybrid "
                       "model (--max-seqs-recurrent; 0 without recurrent layers).", (double)st.states_total);
    metrics_text_gauge(&mt, "uvlm_recurrent_states_used", "Recurrent states held, by running sequences and the "
                       "prompt cache.", (double)st.states_used);
    metrics_text_gauge(&mt, "uvlm_recurrent_states_live", "Recurrent states held by running sequences.",
                       (double)st.states_live);
    metrics_text_gauge(&mt, "uvlm_queue_length", "Requests waiting for admission.", (double)st.queued);
    metrics_text_gauge(&mt, "uvlm_preempted_sequences", "Preempted sequences waiting to resume.", (double)st.preempted);
    metrics_text_gauge(&mt, "uvlm_active_requests", "Requests admitted and not finished.", (double)st.active_requests);
    metrics_text_gauge(&mt, "uvlm_active_sequences", "Sequences holding or about to hold cells.", (double)st.active_seqs);
    metrics_text_gauge(&mt, "uvlm_cached_sequences", "Prompt-cache entries.", (double)st.cached_seqs);
    metrics_text_counter(&mt, "uvlm_preemptions_total", "Sequences preempted: for memory, or to take turns on recurrent states.", (double)st.preemptions);
    metrics_text_counter(&mt, "uvlm_cache_evictions_total", "Prompt-cache entries evicted.", (double)st.cache_evictions);
    metrics_text_counter(&mt, "uvlm_steps_total", "Forward steps run.", (double)st.steps);
    metrics_text_counter(&mt, "uvlm_step_sequences_total",
                         "Sequences in forward steps, summed over steps (per step: the batch's width).",
                         (double)st.step_seqs);
    metrics_text_gauge(&mt, "uvlm_tokens_per_second", "Generated tokens per second over the last seconds.",
                       st.tokens_per_s);
    metrics_text_gauge(&mt, "uvlm_stalled", "1 while /health reports stalled.", st.stalled ? 1 : 0);
    /* the scheduler's buckets in ms, the last one +inf */
    double bounds[SCHED_STEP_HIST_BUCKETS - 1];
    uint64_t counts[SCHED_STEP_HIST_BUCKETS];
    for (int i = 0; i < SCHED_STEP_HIST_BUCKETS; i++) {
        if (i < SCHED_STEP_HIST_BUCKETS - 1) bounds[i] = sched_step_hist_bounds_ms[i] / 1e3;
        counts[i] = (uint64_t)st.step_hist[i];
    }
    struct metrics_histogram h = {bounds, counts, SCHED_STEP_HIST_BUCKETS - 1, (st.prompt_ms + st.decode_ms) / 1e3};
    metrics_text_histogram(&mt, "uvlm_step_seconds", "Duration of forward steps.", &h);
    /* per request (sched.h: enum sched_hist_kind says when each is observed) */
    put_hist(&mt, "uvlm_time_to_first_token_seconds", "Time from a request's arrival to its first token.", &st,
             SCHED_HIST_TTFT);
    put_hist(&mt, "uvlm_inter_token_latency_seconds", "Time between two consecutive tokens of one choice.", &st,
             SCHED_HIST_ITL);
    put_hist(&mt, "uvlm_e2e_request_latency_seconds", "Time from a finished request's arrival to its last token.",
             &st, SCHED_HIST_E2E);
    put_hist(&mt, "uvlm_request_queue_time_seconds", "Time a finished request waited for admission.", &st,
             SCHED_HIST_QUEUE);
    put_hist(&mt, "uvlm_request_prefill_time_seconds", "Time from a finished request's admission to its first token.",
             &st, SCHED_HIST_PREFILL);
    put_hist(&mt, "uvlm_request_decode_time_seconds", "Time from a finished request's first token to its last.",
             &st, SCHED_HIST_DECODE);
    put_hist(&mt, "uvlm_request_prompt_tokens", "Prompt length of finished requests (cached tokens included).", &st,
             SCHED_HIST_PROMPT_TOKENS);
    put_hist(&mt, "uvlm_request_generation_tokens", "Tokens generated by finished requests (all choices).", &st,
             SCHED_HIST_GEN_TOKENS);
    put_process(&mt);
    if (srv->cfg->metrics_names && !strcmp(srv->cfg->metrics_names, "llamacpp")) put_llamacpp(&mt, &st);
    if (metrics_text_failed(&mt)) {
        serving_respond_json(srv, req, 500, "{}");
    } else {
        serving_count(srv, 200);
        http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", mt.buf, mt.len);
    }
    metrics_text_free(&mt);
}

/* --- tokens and templates ------------------------------------------------------------------- */
/* Each is computed from the request alone (serving_respond_computed): off the loop for a large
 * body. */

/* The error body of err, with its status. */
static char *error_json(const struct api_error *err, int *status) {
    *status = err->status;
    return api_error_render(err);
}

static char *tokenize_compute(struct serving *srv, const struct http_request *req, int *status) {
    struct tokenize_params p;
    struct api_error err;
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    if (tokenize_params_parse(&p, req->body, req->body_len, &lim, &err) < 0) return error_json(&err, status);
    const struct model_engine *e = srv->engine;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = model_engine_tokenize(e, p.content, p.content_len, p.add_special, p.parse_special, &ids, &n);
    struct token_piece *pieces = rc == 0 && p.with_pieces ? calloc(n + 1, sizeof *pieces) : NULL;
    if (rc == 0 && p.with_pieces && !pieces) rc = -ERR_NOMEM;
    char *json;
    if (rc < 0) {
        *status = 500;
        json = strdup("{\"error\":{\"code\":500,\"message\":\"tokenization failed\",\"type\":\"server_error\"}}");
    } else {
        for (size_t i = 0; pieces && i < n; i++) pieces[i].ptr = model_engine_token_piece(e, ids[i], true, &pieces[i].len);
        *status = 200;
        json = render_tokenize(ids, n, pieces);
    }
    free(pieces);
    free(ids);
    tokenize_params_free(&p);
    return json;
}

void serving_tokenize_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    serving_respond_computed(srv, req, tokenize_compute);
}

static char *detokenize_compute(struct serving *srv, const struct http_request *req, int *status) {
    struct detokenize_params p;
    struct api_error err;
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    if (detokenize_params_parse(&p, req->body, req->body_len, &lim, &err) < 0 ||
        detokenize_params_check_tokens(&p, srv->engine->n_vocab, &err) < 0) {
        detokenize_params_free(&p);
        return error_json(&err, status);
    }
    /* the pieces as they are, joined, as the reference does: a first piece keeps its leading
     * space (decoding a whole sequence would drop it), control tokens give their text */
    size_t cap = 1, n = 0;
    for (size_t i = 0; i < p.n_tokens; i++) {
        size_t len;
        model_engine_token_piece(srv->engine, p.tokens[i], true, &len);
        cap += len;
    }
    char *buf = malloc(cap);
    for (size_t i = 0; buf && i < p.n_tokens; i++) {
        size_t len;
        const char *piece = model_engine_token_piece(srv->engine, p.tokens[i], true, &len);
        memcpy(buf + n, piece, len);
        n += len;
    }
    *status = 200;
    char *json = buf ? render_detokenize(buf, n) : NULL;
    free(buf);
    detokenize_params_free(&p);
    return json;
}

void serving_detokenize_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    serving_respond_computed(srv, req, detokenize_compute);
}

static char *apply_template_compute(struct serving *srv, const struct http_request *req, int *status) {
    struct completion_params p;
    struct api_error err;
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    if (chat_template_params_parse(&p, req->body, req->body_len, &lim, &err) < 0)
        return error_json(&err, status);
    char *prompt = NULL, *json = NULL, why[256];
    size_t n;
    int rc = chat_prompt_render(&srv->chat, &p.chat, (int64_t)time(NULL), &prompt, &n, why, sizeof why);
    if (rc < 0) {
        api_error_set(&err, rc == -ERR_NOMEM ? 500 : 400, rc == -ERR_NOMEM ? "server_error" : "invalid_request_error",
                      "messages", "%s", why);
        json = error_json(&err, status);
    } else {
        json_t *v = json_pack("{s:s%}", "prompt", prompt, n);
        json = v ? json_dumps(v, JSON_COMPACT) : NULL;
        json_decref(v);
        *status = 200;
    }
    free(prompt);
    completion_params_free(&p);
    return json;
}

void serving_apply_template_handle(struct http_request *req, void *data) {
    struct serving *srv = data;
    if (serving_not_ready(srv, req)) return;
    serving_respond_computed(srv, req, apply_template_compute);
}
