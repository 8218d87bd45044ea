/* embeddings.c: /v1/embeddings and /embedding (embeddings.h): the body parsed and rendered here,
 * and the handler: every input tokenized (off the loop for a large body, as completions), then
 * submitted to the scheduler as an embedding request, a few at a time per HTTP request so that a
 * batch of thousands neither fills the queue nor crowds out generation; the answer goes when the
 * last input is done.
 *
 * One struct embd_job per HTTP request, owned by it: freed once answered, or in the cancel
 * callback (which cancels its scheduler requests first).
 */
#include "api/embeddings.h"

#include "api/errors.h"
#include "api/render.h"
#include "api/serving.h"
#include "common/err.h"
#include "sched/model_engine.h"
#include "sched/sched.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Inputs of one HTTP request in the scheduler at once: enough to fill a step's batch with short
 * texts, few enough to leave the queue and the sequences to everyone else. */
#define EMBD_WINDOW 4

/* --- pooling names -------------------------------------------------------------------------- */

int embd_pooling_of(const char *name, int32_t model_pooling) {
    if (!name || !*name || !strcmp(name, "model")) {
        switch (model_pooling) { /* llama.cpp's numbers */
        case 1: return EMBD_POOL_MEAN;
        case 2: return EMBD_POOL_CLS;
        case 3: return EMBD_POOL_LAST;
        default: return EMBD_POOL_NONE;
        }
    }
    static const char *const names[] = {"none", "mean", "cls", "last"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

const char *embd_pooling_name(enum embd_pooling p) {
    static const char *const names[] = {"none", "mean", "cls", "last"};
    return (unsigned)p < 4 ? names[p] : "?";
}

/* --- parsing -------------------------------------------------------------------------------- */

void embd_request_free(struct embd_request *r) {
    free(r->inputs);
    free(r->id_store);
    free(r->model);
    json_decref(r->owned);
    memset(r, 0, sizeof *r);
}

static int bad(struct api_error *err, const char *param, const char *msg) {
    return api_error_set(err, 400, "invalid_request_error", param, "%s", msg);
}

/* An array of token ids? (non-empty, every element an integer) */
static bool is_ids(json_t *v) {
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!json_is_integer(x)) return false;
    return true;
}

int embd_request_parse(struct embd_request *r, bool native, const char *body, size_t len, struct api_error *err) {
    memset(r, 0, sizeof *r);
    r->normalize = 2;
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return bad(err, "", "the body must be a JSON object");
    }
    r->owned = root;
    const char *field = "input";
    json_t *in = json_object_get(root, "input");
    if ((!in || json_is_null(in)) && native) {
        field = "content";
        in = json_object_get(root, "content");
    }
    if (!in || json_is_null(in)) return bad(err, "input", "\"input\" or \"content\" must be provided");
    json_t *fmt = json_object_get(root, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
        if (!strcmp(f, "base64")) r->base64 = true;
        else if (strcmp(f, "float"))
            return bad(err, "encoding_format", "encoding_format must be \"float\" or \"base64\"");
    }
    json_t *norm = json_object_get(root, "embd_normalize");
    if (norm && !json_is_null(norm)) {
        if (!json_is_integer(norm) || json_integer_value(norm) < -1 || json_integer_value(norm) > 1000)
            return bad(err, "embd_normalize", "embd_normalize must be an integer from -1 to 1000");
        r->normalize = (int)json_integer_value(norm);
    }
    json_t *model = json_object_get(root, "model");
    if (json_is_string(model) && !(r->model = strdup(json_string_value(model)))) goto oom;

    /* the inputs: one string, one id array, or an array of either */
    size_t n = 1;
    bool list = json_is_array(in) && !is_ids(in);
    if (list) {
        n = json_array_size(in);
        if (n == 0) return bad(err, field, "the input is empty");
    }
    size_t n_ids = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = list ? json_array_get(in, i) : in;
        if (is_ids(x)) n_ids += json_array_size(x);
        else if (!json_is_string(x))
            return api_error_set(err, 400, "invalid_request_error", field,
                                 "%s%s must be a string, an array of token ids, or an array of these", field,
                                 list ? "[i]" : "");
    }
    r->inputs = calloc(n, sizeof *r->inputs);
    r->id_store = malloc((n_ids ? n_ids : 1) * sizeof *r->id_store);
    if (!r->inputs || !r->id_store) goto oom;
    r->n_inputs = n;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = list ? json_array_get(in, i) : in;
        struct embd_input *e = &r->inputs[i];
        if (json_is_string(x)) {
            e->text = json_string_value(x);
            e->text_len = json_string_length(x);
            if (e->text_len == 0) return bad(err, field, "Input content cannot be empty");
            continue;
        }
        size_t k;
        json_t *id;
        e->ids = r->id_store + o;
        json_array_foreach(x, k, id) {
            json_int_t v = json_integer_value(id);
            if (v < 0 || v > INT32_MAX) return bad(err, field, "token id out of range");
            r->id_store[o++] = (int32_t)v;
        }
        e->n_ids = json_array_size(x);
    }
    return 0;
oom:
    api_error_set(err, 500, "server_error", "", "out of memory");
    return -ERR_NOMEM;
}

void embd_normalize(float *v, int32_t n, int mode) {
    double sum = 0;
    switch (mode) {
    case -1: return;
    case 0: /* the largest magnitude maps to int16's range */
        for (int32_t i = 0; i < n; i++) sum = fabs(v[i]) > sum ? fabs(v[i]) : sum;
        sum /= 32760.0;
        break;
    case 2:
        for (int32_t i = 0; i < n; i++) sum += (double)v[i] * v[i];
        sum = sqrt(sum);
        break;
    default:
        for (int32_t i = 0; i < n; i++) sum += pow(fabs(v[i]), mode);
        sum = pow(sum, 1.0 / mode);
        break;
    }
    float scale = sum > 0 ? (float)(1.0 / sum) : 0.0f;
    for (int32_t i = 0; i < n; i++) v[i] *= scale;
}

/* --- rendering ------------------------------------------------------------------------------ */

static json_t *floats(const float *v, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The float32 values, little endian, in base64 (RFC 4648, padded). */
static json_t *base64_floats(const float *v, int32_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t bytes = (size_t)n * 4;
    unsigned char *b = malloc(bytes + 1);
    char *out = malloc((bytes + 2) / 3 * 4 + 1);
    json_t *s = NULL;
    if (b && out) {
        for (int32_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++) b[i * 4 + k] = (unsigned char)(u >> (8 * k));
        }
        size_t o = 0;
        for (size_t i = 0; i < bytes; i += 3) {
            uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < bytes ? (uint32_t)b[i + 1] << 8 : 0) |
                         (i + 2 < bytes ? b[i + 2] : 0);
            out[o++] = tab[w >> 18 & 63];
            out[o++] = tab[w >> 12 & 63];
            out[o++] = i + 1 < bytes ? tab[w >> 6 & 63] : '=';
            out[o++] = i + 2 < bytes ? tab[w & 63] : '=';
        }
        out[o] = '\0';
        s = json_stringn(out, o);
    }
    free(b);
    free(out);
    return s;
}

static char *dump(json_t *root) {
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

char *embd_render_oai(const struct embd_request *r, const char *model, const struct embd_result *res) {
    json_t *root = json_object(), *data = json_array();
    int64_t tokens = 0;
    bool ok = root && data;
    for (size_t i = 0; ok && i < r->n_inputs; i++) {
        tokens += res[i].n_tokens;
        json_t *v = r->base64 ? base64_floats(res[i].rows, res[i].n_embd) : floats(res[i].rows, res[i].n_embd);
        json_t *item = v ? json_pack("{s:s, s:I, s:o}", "object", "embedding", "index", (json_int_t)i, "embedding", v)
                         : NULL;
        ok = item && json_array_append_new(data, item) == 0;
    }
    if (!ok) {
        json_decref(root);
        json_decref(data);
        return NULL;
    }
    json_object_set_new(root, "object", json_string("list"));
    json_object_set_new(root, "data", data);
    json_object_set_new(root, "model", json_string(r->model ? r->model : model));
    json_object_set_new(root, "usage", json_pack("{s:I, s:I}", "prompt_tokens", (json_int_t)tokens,
                                                 "total_tokens", (json_int_t)tokens));
    return dump(root);
}

char *embd_render_native(const struct embd_request *r, const struct embd_result *res) {
    json_t *root = json_array();
    bool ok = root != NULL;
    for (size_t i = 0; ok && i < r->n_inputs; i++) {
        json_t *rows = json_array();
        for (int32_t k = 0; rows && k < res[i].n_rows; k++) {
            json_t *v = floats(res[i].rows + (size_t)k * (size_t)res[i].n_embd, res[i].n_embd);
            if (!v || json_array_append_new(rows, v) < 0) {
                json_decref(rows);
                rows = NULL;
            }
        }
        json_t *item = rows ? json_pack("{s:I, s:o}", "index", (json_int_t)i, "embedding", rows) : NULL;
        ok = item && json_array_append_new(root, item) == 0;
    }
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return dump(root);
}

/* --- the handler ---------------------------------------------------------------------------- */

struct embd_job;

/* One input's scheduler request (the sink's owner). */
struct embd_item {
    struct embd_job *job;
    struct sched_req *handle;  /* NULL when not submitted or ended */
    int32_t *tokens;
    size_t n_tokens;
    float *rows;               /* the result, normalized (NULL until on_embedding) */
    int32_t n_rows;
    bool done;
};

struct embd_job {
    struct serving *srv;
    struct http_request *req;
    bool native;
    enum embd_pooling pooling;
    struct embd_request r;
    struct api_error err;
    int prepare_rc;
    struct embd_item *items;
    size_t next, running, n_done; /* inputs submitted, in the scheduler, ended */
};

static void job_free(struct embd_job *job) {
    if (!job) return;
    for (size_t i = 0; job->items && i < job->r.n_inputs; i++) {
        free(job->items[i].tokens);
        free(job->items[i].rows);
    }
    free(job->items);
    embd_request_free(&job->r);
    free(job);
}

static void respond_err(struct embd_job *job, const struct api_error *err) {
    char *json = api_error_render(err);
    serving_respond_json(job->srv, job->req, err->status, json ? json : "{}");
    free(json);
}

/* Stop every input still in the scheduler. */
static void cancel_all(struct embd_job *job, bool deferred) {
    for (size_t i = 0; i < job->r.n_inputs; i++) {
        struct embd_item *it = &job->items[i];
        if (!it->handle) continue;
        if (deferred) sched_cancel_deferred(job->srv->sched, it->handle);
        else sched_cancel(job->srv->sched, it->handle);
        it->handle = NULL;
    }
    job->running = 0;
}

/* The job ends with an error while inputs may still run (called from sink callbacks too). */
static void job_fail(struct embd_job *job, int status, const char *msg) {
    struct api_error err;
    api_error_set(&err, status, api_error_type(status), "", "%s", msg);
    cancel_all(job, false);
    if (status == 503) http_add_header(job->req, "Retry-After", "1");
    respond_err(job, &err);
    job_free(job);
}

static void job_answer(struct embd_job *job) {
    struct serving *srv = job->srv;
    size_t n = job->r.n_inputs;
    struct embd_result *res = calloc(n, sizeof *res);
    char *json = NULL;
    if (res) {
        for (size_t i = 0; i < n; i++)
            res[i] = (struct embd_result){.rows = job->items[i].rows, .n_rows = job->items[i].n_rows,
                                          .n_embd = srv->engine->n_embd, .n_tokens = (int32_t)job->items[i].n_tokens};
        json = job->native ? embd_render_native(&job->r, res) : embd_render_oai(&job->r, srv->model_name, res);
    }
    if (json) serving_respond_json(srv, job->req, 200, json);
    else serving_respond_json(srv, job->req, 500, "{\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    free(json);
    free(res);
    job_free(job);
}

static const struct sched_sink embd_sink;
static void embd_on_embedding(void *owner, const float *rows, int32_t n_rows, int32_t n_embd);

/* Keep up to EMBD_WINDOW inputs in the scheduler. false: the job ended (answered or failed). */
static bool submit_more(struct embd_job *job) {
    static const enum sched_embed kinds[] = {SCHED_EMBED_ALL, SCHED_EMBED_MEAN, SCHED_EMBED_CLS, SCHED_EMBED_LAST};
    struct serving *srv = job->srv;
    bool submitted = false;
    while (job->running < EMBD_WINDOW && job->next < job->r.n_inputs) {
        struct embd_item *it = &job->items[job->next];
        struct sched_request sr = {.prompt = it->tokens, .n_prompt = (int32_t)it->n_tokens, .n_choices = 1,
                                   .embed = kinds[job->pooling], .on_embedding = embd_on_embedding};
        int rc = sched_submit(srv->sched, &sr, &embd_sink, it, serving_now_ms(), &it->handle);
        if (rc == -ERR_BUSY && job->running > 0) break; /* the next end tries again */
        if (rc < 0) {
            it->handle = NULL;
            job_fail(job, rc == -ERR_BUSY ? 503 : rc == -ERR_TOOBIG ? 400 : 500,
                     rc == -ERR_BUSY    ? "the server is busy: too many requests wait for memory"
                     : rc == -ERR_TOOBIG ? "the input does not fit in the memory"
                                         : err_str(rc));
            return false;
        }
        job->next++;
        job->running++;
        submitted = true;
    }
    if (submitted && srv->kick) srv->kick(srv->driver);
    return true;
}

static bool embd_on_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *probs) {
    return false; /* an embedding generates nothing */
}

static void embd_on_embedding(void *owner, const float *rows, int32_t n_rows, int32_t n_embd) {
    struct embd_item *it = owner;
    size_t n = (size_t)n_rows * (size_t)n_embd;
    it->rows = malloc(n * sizeof *it->rows);
    if (!it->rows) return; /* on_done sees no rows: the job fails */
    memcpy(it->rows, rows, n * sizeof *rows);
    it->n_rows = n_rows;
    if (it->job->pooling != EMBD_POOL_NONE) embd_normalize(it->rows, n_embd, it->job->r.normalize);
}

static void embd_on_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *counts) {
    struct embd_item *it = owner;
    struct embd_job *job = it->job;
    it->handle = NULL;
    it->done = true;
    job->running--;
    job->n_done++;
    if (!it->rows) {
        job_fail(job, 500, reason == SCHED_STOP_CONTEXT ? "the input did not fit in memory" : "out of memory");
        return;
    }
    if (job->n_done == job->r.n_inputs) {
        job_answer(job);
        return;
    }
    submit_more(job);
}

static void embd_on_error(void *owner, int err) {
    struct embd_item *it = owner;
    it->handle = NULL;
    it->job->running--;
    job_fail(it->job, 500, err_str(err));
}

static const struct sched_sink embd_sink = {.on_token = embd_on_token, .on_done = embd_on_done, .on_error = embd_on_error};

/* The connection died: no more steps for its inputs (see generate.c's gen_abort_cb). */
static void embd_abort_cb(struct http_request *req, void *data) {
    struct embd_job *job = data;
    cancel_all(job, true);
    if (job->srv->kick) job->srv->kick(job->srv->driver);
}

static void embd_cancel_cb(struct http_request *req, void *data) {
    struct embd_job *job = data;
    struct serving *srv = job->srv;
    cancel_all(job, false);
    serving_count(srv, 499);
    job_free(job);
    if (srv->kick) srv->kick(srv->driver);
}

/* Parse and tokenize (the loop thread, or the thread pool for a large body: it reads only the
 * request, the configuration and the engine's tokenizer, and writes only the job). */
static void job_prepare(void *data) {
    struct embd_job *job = data;
    struct serving *srv = job->srv;
    int rc = embd_request_parse(&job->r, job->native, job->req->body, job->req->body_len, &job->err);
    if (rc == 0 && !(job->items = calloc(job->r.n_inputs, sizeof *job->items))) {
        api_error_set(&job->err, 500, "server_error", "", "out of memory");
        rc = -ERR_NOMEM;
    }
    for (size_t i = 0; rc == 0 && i < job->r.n_inputs; i++) {
        const struct embd_input *in = &job->r.inputs[i];
        struct embd_item *it = &job->items[i];
        it->job = job;
        if (in->text) {
            rc = model_engine_tokenize(srv->engine, in->text, in->text_len, true, true, &it->tokens, &it->n_tokens);
            if (rc < 0) api_error_set(&job->err, 500, "server_error", "", "tokenization failed");
            else if (it->n_tokens == 0)
                rc = api_error_set(&job->err, 400, "invalid_request_error", "input", "input %zu has no tokens", i);
            continue;
        }
        for (size_t k = 0; k < in->n_ids; k++)
            if (in->ids[k] >= srv->engine->n_vocab)
                rc = api_error_set(&job->err, 400, "invalid_request_error", "input",
                                   "input %zu: token id %d out of range", i, (int)in->ids[k]);
        if (rc == 0 && !(it->tokens = malloc(in->n_ids * sizeof *it->tokens))) {
            api_error_set(&job->err, 500, "server_error", "", "out of memory");
            rc = -ERR_NOMEM;
        }
        if (rc == 0) memcpy(it->tokens, in->ids, in->n_ids * sizeof *it->tokens);
        it->n_tokens = in->n_ids;
    }
    job->prepare_rc = rc;
}

static void job_start(struct embd_job *job) {
    struct serving *srv = job->srv;
    if (job->prepare_rc < 0) {
        respond_err(job, &job->err);
        job_free(job);
        return;
    }
    struct api_error err;
    if (job->pooling == EMBD_POOL_NONE && !job->native) {
        api_error_set(&err, 400, "invalid_request_error", "",
                      "Pooling type 'none' is not OAI compatible. Please use a different pooling type");
        respond_err(job, &err);
        job_free(job);
        return;
    }
    int32_t max_prompt = sched_max_prompt_tokens(srv->sched);
    for (size_t i = 0; i < job->r.n_inputs; i++)
        if (job->items[i].n_tokens > (size_t)max_prompt) {
            api_error_exceed_context(&err, (int32_t)job->items[i].n_tokens, max_prompt);
            respond_err(job, &err);
            job_free(job);
            return;
        }
    http_on_cancel(job->req, embd_cancel_cb, job);
    http_on_abort(job->req, embd_abort_cb);
    submit_more(job);
}

static void job_prepared(struct http_request *req, void *data, int status) {
    struct embd_job *job = data;
    if (status < 0) { /* the client left while the body was parsed */
        serving_count(job->srv, 499);
        job_free(job);
        return;
    }
    job_start(job);
}

static void embeddings(struct http_request *req, struct serving *srv, bool native) {
    if (serving_not_ready(srv, req)) return;
    struct embd_job *job = calloc(1, sizeof *job);
    if (!job) {
        serving_respond_json(srv, req, 500, "{\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}");
        return;
    }
    job->srv = srv;
    job->req = req;
    job->native = native;
    job->pooling = (enum embd_pooling)embd_pooling_of(srv->cfg->pooling, model_engine_pooling(srv->engine));
    if ((int)job->pooling < 0) job->pooling = EMBD_POOL_NONE; /* config.c refuses other names */
    if (req->body_len > srv->offload_bytes) {
        int rc = http_queue_work(req, job_prepare, job_prepared, job);
        if (rc == 0) return;
        if (rc == -ERR_CANCELLED) {
            serving_count(srv, 499);
            job_free(job);
            return;
        }
    }
    job_prepare(job);
    job_start(job);
}

void serving_oai_embeddings_handle(struct http_request *req, void *data) { embeddings(req, data, false); }
void serving_embeddings_handle(struct http_request *req, void *data) { embeddings(req, data, true); }
