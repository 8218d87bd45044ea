/* infill.c: the /infill prompt (infill.h): the request's parts tokenized, put in the reference's
 * order around the model's FIM tokens, and handed on as a /completion body. */
#include "api/infill.h"

#include "common/err.h"
#include "sched/model_engine.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing token list; err sticks (the first -ERR_NOMEM). */
struct toks {
    int32_t *v;
    size_t n, cap;
    int err;
};

static void toks_put(struct toks *t, const int32_t *ids, size_t n) {
    if (t->err || n == 0) return;
    if (t->n + n > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->n + n) cap *= 2;
        int32_t *v = realloc(t->v, cap * sizeof *v);
        if (!v) {
            t->err = -ERR_NOMEM;
            return;
        }
        t->v = v;
        t->cap = cap;
    }
    memcpy(t->v + t->n, ids, n * sizeof *ids);
    t->n += n;
}

static void toks_put1(struct toks *t, int32_t id) { toks_put(t, &id, 1); }

/* Text as plain tokens: no BOS, special tokens' text stays text (the reference's tokenize_mixed
 * and common_tokenize(..., false, false)). */
static void toks_text(struct toks *t, const struct model_engine *e, const char *text, size_t len) {
    if (t->err || len == 0) return;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = model_engine_tokenize(e, text, len, false, false, &ids, &n);
    if (rc < 0) t->err = rc;
    else toks_put(t, ids, n);
    free(ids);
}

int infill_check_model(const struct model_engine *e, struct api_error *err) {
    static const char *const what[3] = {"prefix", "suffix", "middle"};
    char missing[128] = "";
    size_t o = 0;
    for (int k = 0; k < 3; k++)
        if (model_engine_fim(e, (enum model_engine_fim)k) < 0)
            o += (size_t)snprintf(missing + o, sizeof missing - o, "%s%s token is missing.", o ? " " : "", what[k]);
    if (!o) return 0;
    api_error_set(err, 400, "not_supported_error", "", "Infill is not supported by this model: %s", missing);
    return -ERR_UNSUPPORTED;
}

int infill_assemble(const struct model_engine *e, const struct infill_config *cfg, const struct infill_input *in,
                    int32_t **out, size_t *n_out) {
    int32_t pre = model_engine_fim(e, MODEL_ENGINE_FIM_PRE), suf = model_engine_fim(e, MODEL_ENGINE_FIM_SUF);
    int32_t mid = model_engine_fim(e, MODEL_ENGINE_FIM_MID), rep = model_engine_fim(e, MODEL_ENGINE_FIM_REP);
    int32_t sep = model_engine_fim(e, MODEL_ENGINE_FIM_SEP);
    *out = NULL;
    *n_out = 0;

    /* the other files: the repository's name, then each chunk after its file separator */
    struct toks extra = {0};
    if (rep >= 0) {
        toks_put1(&extra, rep);
        toks_text(&extra, e, "myproject\n", 10);
    }
    for (size_t i = 0; i < in->n_extra; i++) {
        const struct infill_chunk *c = &in->extra[i];
        if (sep >= 0) {
            toks_put1(&extra, sep);
            char *name = malloc(c->filename_len + 2);
            if (!name) {
                extra.err = -ERR_NOMEM;
                break;
            }
            memcpy(name, c->filename, c->filename_len);
            name[c->filename_len] = '\n';
            toks_text(&extra, e, name, c->filename_len + 1);
            free(name);
        } else {
            static const char snippet[] = "\n\n--- snippet ---\n\n";
            toks_text(&extra, e, snippet, sizeof snippet - 1);
        }
        toks_text(&extra, e, c->text, c->text_len);
    }
    if (sep >= 0) { /* the file being edited */
        toks_put1(&extra, sep);
        toks_text(&extra, e, "filename\n", 9);
    }

    /* budgets: prefix to suffix 3:1 within a batch, the rest of the context for the extra */
    int64_t n_batch = cfg->n_batch, n_prompt = (int64_t)in->n_prompt;
    size_t prefix_take = in->n_prefix < (size_t)(3 * (n_batch / 4)) ? in->n_prefix : (size_t)(3 * (n_batch / 4));
    int64_t suffix_room = n_batch / 4 - (2 + n_prompt);
    if (suffix_room < 0) suffix_room = 0;
    size_t suffix_take = in->n_suffix < (size_t)suffix_room ? in->n_suffix : (size_t)suffix_room;
    int64_t extra_room = (int64_t)cfg->n_ctx - n_batch - 2 * (int64_t)cfg->n_predict;
    if (extra_room < 0) extra_room = 0;
    size_t extra_take = extra.n < (size_t)extra_room ? extra.n : (size_t)extra_room;

    struct toks prefix = {0}, suffix = {0}, all = {0};
    toks_put1(&prefix, pre);
    if (prefix_take) toks_put(&prefix, in->prefix + in->n_prefix - prefix_take, prefix_take); /* its end */
    toks_put(&prefix, in->prompt, in->n_prompt);
    toks_put1(&suffix, suf);
    toks_put(&suffix, in->suffix, suffix_take); /* its start */

    if (extra_take) toks_put(&all, extra.v + extra.n - extra_take, extra_take); /* the extra's end */
    bool add_bos;
    int32_t bos = model_engine_bos(e, &add_bos);
    if (add_bos) toks_put1(&all, bos);
    const struct toks *first = cfg->spm ? &suffix : &prefix, *second = cfg->spm ? &prefix : &suffix;
    toks_put(&all, first->v, first->n);
    toks_put(&all, second->v, second->n);
    toks_put1(&all, mid);

    int rc = extra.err ? extra.err : prefix.err ? prefix.err : suffix.err ? suffix.err : all.err;
    free(extra.v);
    free(prefix.v);
    free(suffix.v);
    if (rc < 0) {
        free(all.v);
        return rc;
    }
    *out = all.v;
    *n_out = all.n;
    return 0;
}

/* input_prefix / input_suffix: a string, or an array of token ids and strings. */
static int mixed_tokens(const struct model_engine *e, json_t *v, const char *name, struct toks *t,
                        struct api_error *err) {
    if (json_is_string(v)) {
        toks_text(t, e, json_string_value(v), json_string_length(v));
        return t->err;
    }
    if (!json_is_array(v))
        return api_error_set(err, 400, "invalid_request_error", name, "\"%s\" must be a string or an array", name);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (json_is_integer(x)) {
            json_int_t id = json_integer_value(x);
            if (id < 0 || id >= e->n_vocab)
                return api_error_set(err, 400, "invalid_request_error", name, "%s[%zu]: token id %lld out of range",
                                     name, i, (long long)id);
            toks_put1(t, (int32_t)id);
        } else if (json_is_string(x)) {
            toks_text(t, e, json_string_value(x), json_string_length(x));
        } else {
            return api_error_set(err, 400, "invalid_request_error", name,
                                 "%s[%zu] must be a token id or a string", name, i);
        }
    }
    return t->err;
}

static int oom(struct api_error *err) {
    api_error_set(err, 500, "server_error", "", "out of memory");
    return -ERR_NOMEM;
}

int infill_completion_body(const struct model_engine *e, const struct infill_config *cfg, const char *body,
                           size_t len, char **out, size_t *out_len, struct api_error *err) {
    *out = NULL;
    *out_len = 0;
    int rc = infill_check_model(e, err);
    if (rc < 0) return rc;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return api_error_set(err, 400, "invalid_request_error", "", "the body must be a JSON object");
    }
    json_t *prompt = json_object_get(root, "prompt"), *extra = json_object_get(root, "input_extra");
    json_t *prefix_v = json_object_get(root, "input_prefix"), *suffix_v = json_object_get(root, "input_suffix");
    struct toks prefix = {0}, suffix = {0}, ptoks = {0};
    struct infill_chunk *chunks = NULL;
    size_t n_chunks = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    rc = 0;
    if (prompt && !json_is_null(prompt) && !json_is_string(prompt))
        rc = api_error_set(err, 400, "invalid_request_error", "prompt", "\"prompt\" must be a string");
    else if (!prefix_v)
        rc = api_error_set(err, 400, "invalid_request_error", "input_prefix", "\"input_prefix\" is required");
    else if (!suffix_v)
        rc = api_error_set(err, 400, "invalid_request_error", "input_suffix", "\"input_suffix\" is required");
    else if (extra && !json_is_null(extra) && !json_is_array(extra))
        rc = api_error_set(err, 400, "invalid_request_error", "input_extra",
                           "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}");
    if (rc == 0 && json_is_array(extra) && json_array_size(extra) > 0) {
        n_chunks = json_array_size(extra);
        if (!(chunks = calloc(n_chunks, sizeof *chunks))) rc = oom(err);
        for (size_t i = 0; rc == 0 && i < n_chunks; i++) {
            json_t *c = json_array_get(extra, i);
            json_t *text = json_is_object(c) ? json_object_get(c, "text") : NULL;
            json_t *name = json_is_object(c) ? json_object_get(c, "filename") : NULL;
            if (!json_is_string(text))
                rc = api_error_set(err, 400, "invalid_request_error", "input_extra",
                                   "input_extra[%zu] must contain a \"text\" field with a string value", i);
            else if (name && !json_is_string(name))
                rc = api_error_set(err, 400, "invalid_request_error", "input_extra",
                                   "input_extra[%zu]'s \"filename\" field must be a string", i);
            else
                chunks[i] = (struct infill_chunk){
                    .filename = name ? json_string_value(name) : "tmp",
                    .filename_len = name ? json_string_length(name) : 3,
                    .text = json_string_value(text),
                    .text_len = json_string_length(text),
                };
        }
    }
    if (rc == 0) rc = mixed_tokens(e, prefix_v, "input_prefix", &prefix, err);
    if (rc == 0) rc = mixed_tokens(e, suffix_v, "input_suffix", &suffix, err);
    if (rc == 0 && json_is_string(prompt) && json_string_length(prompt) > 0) {
        int32_t *p = NULL;
        size_t n = 0;
        rc = model_engine_tokenize(e, json_string_value(prompt), json_string_length(prompt), false, true, &p, &n);
        if (rc == 0) toks_put(&ptoks, p, n);
        free(p);
        if (rc == 0) rc = ptoks.err;
    }
    if (rc == -ERR_NOMEM) oom(err);
    if (rc == 0) {
        struct infill_input in = {.prefix = prefix.v, .n_prefix = prefix.n, .suffix = suffix.v, .n_suffix = suffix.n,
                                  .prompt = ptoks.v, .n_prompt = ptoks.n, .extra = chunks, .n_extra = n_chunks};
        if ((rc = infill_assemble(e, cfg, &in, &ids, &n_ids)) < 0) oom(err);
    }
    /* the same body with the assembled tokens as its prompt (the strings above live in root) */
    json_t *arr = rc == 0 ? json_array() : NULL;
    if (rc == 0 && !arr) rc = oom(err);
    for (size_t i = 0; rc == 0 && i < n_ids; i++)
        if (json_array_append_new(arr, json_integer(ids[i])) < 0) rc = oom(err);
    if (rc == 0) {
        free(chunks);
        chunks = NULL;
        json_object_del(root, "input_prefix");
        json_object_del(root, "input_suffix");
        json_object_del(root, "input_extra");
        if (json_object_set_new(root, "prompt", arr) < 0) rc = oom(err);
        arr = NULL;
    }
    if (rc == 0) {
        *out = json_dumps(root, JSON_COMPACT);
        if (!*out) rc = oom(err);
        else *out_len = strlen(*out);
    }
    json_decref(arr);
    json_decref(root);
    free(chunks);
    free(ids);
    free(prefix.v);
    free(suffix.v);
    free(ptoks.v);
    return rc;
}
