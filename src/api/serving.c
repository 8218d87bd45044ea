/* serving.c: the serving state's lifecycle (init, the engine interface serving_ops, free), the
 * request policy the endpoints share (not ready, counting) and the route table. */
#include "api/serving.h"

#include "api/chat_prompt.h"
#include "api/errors.h"
#include "common/err.h"
#include "sched/model_engine.h"
#include "sched/sched.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double serving_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void serving_count(struct serving *srv, int status) {
    struct serving_metrics *m = &srv->metrics;
    m->requests_total++;
    for (int i = 0; i < m->n_status; i++)
        if (m->status[i] == status) {
            m->by_status[i]++;
            return;
        }
    if (m->n_status == SERVING_STATUS_SLOTS) return; /* more distinct statuses than we keep */
    m->status[m->n_status] = status;
    m->by_status[m->n_status++] = 1;
}

int serving_respond_json(struct serving *srv, struct http_request *req, int status, const char *json) {
    serving_count(srv, status);
    return http_respond_json(req, status, json);
}

/* FNV-1a over a tagged, length-prefixed field, so that no key and salt pair reads as another. */
static uint64_t hash_field(uint64_t h, char tag, const char *s, size_t n) {
    unsigned char head[1 + sizeof n];
    head[0] = (unsigned char)tag;
    memcpy(head + 1, &n, sizeof n);
    for (size_t i = 0; i < sizeof head; i++) h = (h ^ head[i]) * 0x100000001b3ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

uint64_t serving_cache_partition(const struct serving *srv, const struct http_request *req, const char *salt,
                                 size_t salt_len) {
    /* the router let the request in: with keys configured, the key it presents is one of them */
    const char *key = srv->cfg->api_key.n > 0 ? http_api_key(req) : NULL;
    if (!key && !salt) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    if (key) h = hash_field(h, 'k', key, strlen(key));
    if (salt) h = hash_field(h, 's', salt, salt_len);
    h ^= h >> 33; /* finalizer: every input bit reaches every output bit */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h ? h : 1;
}

bool serving_not_ready(struct serving *srv, struct http_request *req) {
    /* a request held by the server's pacing when a drain began arrived before it: it is served */
    if (srv->sched && (!req->draining || req->before_drain)) return false;
    char body[160];
    int status = 503;
    const char *msg = req->draining ? "Server is shutting down" : "Loading model";
    if (req->error_shape == HTTP_ERRORS_ANTHROPIC) api_error_json_anthropic(body, sizeof body, status, msg);
    else api_error_json(body, sizeof body, status, msg);
    serving_respond_json(srv, req, status, body);
    return true;
}

struct computed {
    struct serving *srv;
    const struct http_request *req;
    serving_compute_fn compute;
    char *json;
    int status;
};

static void computed_work(void *data) {
    struct computed *c = data;
    c->json = c->compute(c->srv, c->req, &c->status);
}

static void computed_respond(struct http_request *req, void *data, int status) {
    struct computed *c = data;
    if (status < 0) serving_count(c->srv, 499); /* the client left meanwhile */
    else if (c->json) serving_respond_json(c->srv, req, c->status, c->json);
    else serving_respond_json(c->srv, req, 500, "{\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    free(c->json);
    free(c);
}

void serving_respond_computed(struct serving *srv, struct http_request *req, serving_compute_fn compute) {
    struct computed *c = calloc(1, sizeof *c);
    if (!c) {
        serving_respond_json(srv, req, 500, "{\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}");
        return;
    }
    *c = (struct computed){.srv = srv, .req = req, .compute = compute};
    if (req->body_len > srv->offload_bytes) {
        int rc = http_queue_work(req, computed_work, computed_respond, c);
        if (rc == 0) return;
        if (rc == -ERR_CANCELLED) {
            computed_respond(req, c, rc);
            return;
        }
    }
    computed_work(c); /* a small body, or no thread for it: here */
    computed_respond(req, c, 0);
}

int serving_routes_add(struct router *r, struct serving *srv) {
    static const struct {
        const char *method, *path;
        http_handler_fn handle;
        unsigned flags;
    } routes[] = {
        {"GET", "/health", serving_health_handle, ROUTE_PUBLIC},
        {"GET", "/v1/health", serving_health_handle, ROUTE_PUBLIC},
        {"POST", "/completion", serving_completion_handle, 0},
        {"POST", "/completions", serving_completion_handle, 0},
        {"POST", "/infill", serving_infill_handle, 0},
        {"POST", "/v1/completions", serving_oai_completion_handle, 0},
        {"POST", "/v1/chat/completions", serving_oai_chat_handle, 0},
        {"POST", "/chat/completions", serving_oai_chat_handle, 0},
        {"POST", "/v1/responses", serving_oai_responses_handle, 0},
        {"POST", "/v1/messages", serving_anthropic_messages_handle, ROUTE_ANTHROPIC},
        {"POST", "/v1/messages/count_tokens", serving_anthropic_count_handle, ROUTE_ANTHROPIC},
        {"POST", "/v1/embeddings", serving_oai_embeddings_handle, 0},
        {"POST", "/embeddings", serving_embeddings_handle, 0},
        {"POST", "/embedding", serving_embeddings_handle, 0},
        {"GET", "/v1/models", serving_models_handle, 0},
        {"GET", "/v1/models/*", serving_model_handle, 0},
        {"GET", "/models", serving_models_handle, 0},
        {"GET", "/props", serving_props_handle, 0},
        {"GET", "/slots", serving_slots_handle, 0},
        {"GET", "/metrics", serving_metrics_handle, 0},
        {"POST", "/tokenize", serving_tokenize_handle, 0},
        {"POST", "/detokenize", serving_detokenize_handle, 0},
        {"POST", "/apply-template", serving_apply_template_handle, 0},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        int rc = router_add(r, routes[i].method, routes[i].path, routes[i].handle, srv, routes[i].flags);
        if (rc) return rc;
    }
    return 0;
}

/* --- lifecycle ------------------------------------------------------------------------------- */

/* SERVING_DEFAULT_MODEL from the working directory, else next to the binary (./uvlm or
 * build-check/uvlm in the repository). */
static void default_model_path(char *out, size_t cap) {
    snprintf(out, cap, "%s", SERVING_DEFAULT_MODEL);
    if (access(out, R_OK) == 0) return;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = '\0';
    char *dir = dirname(exe);
    for (int up = 0; up < 2; up++) {
        snprintf(out, cap, "%s/%s%s", dir, up ? "../" : "", SERVING_DEFAULT_MODEL);
        if (access(out, R_OK) == 0) return;
    }
    snprintf(out, cap, "%s", SERVING_DEFAULT_MODEL); /* the error names the expected place */
}

void serving_init(struct serving *srv, const struct config *cfg, const struct log *log) {
    memset(srv, 0, sizeof *srv);
    srv->cfg = cfg;
    srv->log = log;
    srv->seed_state = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
    srv->offload_bytes = SERVING_OFFLOAD_BYTES;
    srv->defaults = (struct params_defaults){.seed = cfg->seed, .temperature = (float)cfg->temp,
                                             .top_k = (int32_t)cfg->top_k, .top_p = (float)cfg->top_p,
                                             .n_predict = (int32_t)cfg->n_predict};
    if (*cfg->model) snprintf(srv->model_path, sizeof srv->model_path, "%s", cfg->model);
    else default_model_path(srv->model_path, sizeof srv->model_path);
}

void serving_free(struct serving *srv) {
    ASSERT(!srv->step);
    if (srv->sched) sched_destroy(srv->sched);
    srv->sched = NULL;
    model_engine_free(srv->engine);
    model_engine_free(srv->loaded);
    srv->engine = srv->loaded = NULL;
    chat_prompt_free(&srv->chat);
    free(srv->chat_template_text);
    srv->chat_template_text = NULL;
}

/* --- serving_ops ----------------------------------------------------------------------------- */

static int ops_load(void *engine) {
    struct serving *srv = engine;
    const struct config *cfg = srv->cfg;
    log_info(srv->log, "loading %s", srv->model_path);
    struct model_engine_config ec = {
        .path = srv->model_path,
        .kv_tokens = cfg->kv_tokens,
        .kv_bytes = cfg->kv_bytes,
        .kv_type_k = cfg->kv_type_k && *cfg->kv_type_k ? cfg->kv_type_k : cfg->kv_type,
        .kv_type_v = cfg->kv_type_v && *cfg->kv_type_v ? cfg->kv_type_v : cfg->kv_type,
        .batch_tokens = (int32_t)cfg->batch_tokens,
        .n_seq_max = (int32_t)(cfg->max_n * 4 > 64 ? cfg->max_n * 4 : 64),
        .max_seq_tokens = (int32_t)cfg->max_seq_tokens,
        .recurrent_states = (int32_t)cfg->max_seqs_recurrent,
        .n_threads = (int)cfg->threads,
        /* under the idle policy only (--compute-nice 20): at a nice level a yield hands the core to
         * any CPU-bound neighbour for its whole time slice (scripts/bench.d/52-neighbours) */
        .yield_us = cfg->compute_nice >= 20 ? cfg->compute_yield_us : 0,
        .allow_unknown_pretokenizer = cfg->allow_unknown_pretokenizer,
        .draft_path = *cfg->model_draft ? cfg->model_draft : NULL,
    };
    if (ec.draft_path) log_info(srv->log, "draft model %s", ec.draft_path);
    return model_engine_load(&srv->loaded, &ec, srv->load_why, sizeof srv->load_why);
}

/* The whole of a small file (--chat-template-file) as a NUL-terminated buffer, or NULL. */
static char *read_text_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            char *bigger = realloc(buf, cap = cap * 2 + 8192);
            if (!bigger) break;
            buf = bigger;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    bool ok = buf && !ferror(f) && feof(f);
    fclose(f);
    if (!ok) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* How chats become prompts (chat_prompt.h): --chat-template NAME, or the template of
 * --chat-template-file or of the model run as Jinja with the model's BOS and EOS. */
static int start_chat(struct serving *srv, const struct model_engine *e) {
    const struct config *cfg = srv->cfg;
    const struct log *lg = srv->log;
    struct chat_prompt_source src = {.forced = *cfg->chat_template ? cfg->chat_template : NULL,
                                     .origin = "the model"};
    src.text = model_engine_chat_template(e, &src.len);
    char *file_text = NULL;
    if (*cfg->chat_template_file && !src.forced) {
        if (!(file_text = read_text_file(cfg->chat_template_file, &src.len))) {
            log_error(lg, "--chat-template-file: cannot read %s", cfg->chat_template_file);
            return -ERR_IO;
        }
        src.text = file_text;
        src.origin = cfg->chat_template_file;
    }
    size_t bos_len, eos_len;
    const char *bos = model_engine_special_text(e, 0, &bos_len, &src.strip_bos);
    const char *eos = model_engine_special_text(e, 1, &eos_len, &src.strip_eos);
    char *bos_s = strndup(bos, bos_len), *eos_s = strndup(eos, eos_len);
    char warn[640], why[512];
    int rc = bos_s && eos_s ? 0 : -ERR_NOMEM;
    if (rc == 0) {
        src.bos = bos_s;
        src.eos = eos_s;
        rc = chat_prompt_init(&srv->chat, &src, warn, sizeof warn, why, sizeof why);
    }
    free(bos_s);
    free(eos_s);
    if (rc == 0 && src.text && !(srv->chat_template_text = strndup(src.text, src.len))) rc = -ERR_NOMEM;
    if (rc < 0) {
        log_error(lg, "%s%s", src.forced ? "--chat-template: " : "chat template: ", rc == -ERR_NOMEM ? "out of memory" : why);
    } else {
        if (warn[0]) log_warn(lg, "%s", warn);
        if (srv->chat.jinja) log_info(lg, "chat template: %s's, run as jinja", src.origin);
        else log_info(lg, "chat template: %s", chat_prompt_kind(&srv->chat));
        /* a forced family speaks its own syntax; a template shows its syntax by its markers */
        tool_dialect_detect(src.forced ? NULL : src.text, src.forced ? 0 : src.len, srv->chat.family, &srv->tools);
        log_info(lg, "tool calls: %s syntax%s%s", tool_format_name(srv->tools.format),
                 srv->tools.think_open ? ", reasoning in " : "", srv->tools.think_open ? srv->tools.think_open : "");
    }
    free(file_text);
    return rc;
}

static int ops_start(void *engine, int load_rc) {
    struct serving *srv = engine;
    const struct config *cfg = srv->cfg;
    const struct log *lg = srv->log;
    if (load_rc < 0) {
        log_error(lg, "loading %s: %s", srv->model_path, srv->load_why[0] ? srv->load_why : err_str(load_rc));
        return load_rc;
    }
    struct model_engine *e = srv->loaded;
    char line[512];
    model_engine_describe(e, line, sizeof line);
    log_info(lg, "model %s: %s", srv->model_path, line);
    if (e->tokenizer_warning[0]) log_warn(lg, "tokenizer: %s", e->tokenizer_warning);

    int rc = start_chat(srv, e);
    if (rc < 0) return rc;

    struct sched_config sc;
    sched_config_default(&sc);
    sc.n_ctx = e->n_ctx;
    sc.max_seq_tokens = (int32_t)cfg->max_seq_tokens;
    sc.max_outputs = e->max_outputs;
    sc.batch_tokens = (int32_t)cfg->batch_tokens;
    sc.max_step_ms = (double)cfg->max_step_ms;
    sc.solo_step_ms = (double)cfg->solo_step_ms;
    sc.max_queue = (int32_t)cfg->max_queue;
    sc.max_n = (int32_t)cfg->max_n;
    sc.stall_timeout_ms = (double)cfg->stall_timeout_ms;
    sc.spec_lookup = cfg->draft_lookup;
    if (sc.chunk_tokens > sc.batch_tokens) sc.chunk_tokens = sc.batch_tokens;
    rc = sched_create(&srv->sched, &sc, e->mem, model_engine_sched_ops(e), e);
    if (rc == 0) sched_set_hidden(srv->sched, e->n_embd, model_engine_hidden);
    if (rc < 0) {
        log_error(lg, "scheduler: %s", err_str(rc));
        return rc;
    }
    srv->engine = e;
    srv->loaded = NULL;
    srv->created = (int64_t)time(NULL);
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%s", srv->model_path);
    snprintf(srv->model_name, sizeof srv->model_name, "%s", *cfg->alias ? cfg->alias : basename(base));
    char what[PATH_MAX + 96]; /* what answers: the build, the model and the context it runs with */
    snprintf(what, sizeof what, "uvlm %s|%s|%lld|%d", __DATE__, srv->model_path, (long long)e->weight_bytes, (int)e->n_ctx);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *c = what; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    snprintf(srv->fingerprint, sizeof srv->fingerprint, "fp_%012llx", (unsigned long long)(h >> 16));
    return 0;
}

static bool ops_build_step(void *engine) {
    struct serving *srv = engine;
    double now = serving_now_ms();
    if (sched_build_step(srv->sched, now, &srv->step) <= 0) return false;
    srv->step_built_ms = now;
    srv->step_parts = 0;
    return true;
}

static void ops_compute_step(void *engine) {
    struct serving *srv = engine;
    sched_step_compute(srv->sched, srv->step);
}

static bool ops_complete_step(void *engine, int max_outputs) {
    struct serving *srv = engine;
    double now = serving_now_ms();
    if (srv->step_parts++ == 0)
        log_debug(srv->log, "step: %d tokens, %.1f ms", sched_step_batch(srv->step)->n_tokens, now - srv->step_built_ms);
    if (sched_step_complete_some(srv->sched, srv->step, now, max_outputs)) return true;
    srv->step = NULL;
    return false;
}

const struct serving_engine_ops serving_ops = {
    .load = ops_load,
    .start = ops_start,
    .build_step = ops_build_step,
    .compute_step = ops_compute_step,
    .complete_step = ops_complete_step,
};
