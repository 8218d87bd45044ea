/* render.c: response bodies (see render.h). Built with json_pack, which fails as a whole (and
 * releases what it was given) when any part is NULL, so running out of memory anywhere yields
 * NULL rather than a body with fields silently missing. */
#include "api/render.h"

#include "api/errors.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ---- */

/* The sequence at s: > 0 the length of a valid character; < 0 minus the length of the maximal
 * invalid subpart (Unicode's "maximal subpart" rule: a valid prefix of a sequence counts as one);
 * *cut is set when the sequence was only invalid because the input ended. */
static int utf8_step(const unsigned char *s, size_t len, bool *cut) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    int need;
    *cut = false;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }            /* no surrogates */
    else if (c == 0xF0) { need = 3; lo = 0x90; }            /* no overlongs */
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }            /* nothing past U+10FFFF */
    else return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= len) {
            *cut = true;
            return -i;
        }
        if (s[i] < lo || s[i] > hi) return -i;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

bool utf8_valid(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    bool cut;
    for (size_t i = 0; i < len;) {
        int n = utf8_step(u + i, len - i, &cut);
        if (n < 0) return false;
        i += (size_t)n;
    }
    return true;
}

size_t utf8_complete_len(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    bool cut;
    for (size_t i = 0; i < len;) {
        int n = utf8_step(u + i, len - i, &cut);
        if (n < 0 && cut) return i;
        i += (size_t)(n < 0 ? -n : n);
    }
    return len;
}

/* A JSON string of s[0..len), invalid sequences replaced by U+FFFD; NULL when out of memory. */
static json_t *jstr(const char *s, size_t len) {
    if (!s) return json_string_nocheck("");
    if (utf8_valid(s, len)) return json_stringn_nocheck(s, len);
    if (len > (SIZE_MAX - 1) / 3) return NULL;
    char *buf = malloc(len * 3 + 1);   /* worst case: every byte becomes 3 */
    if (!buf) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t out = 0;
    bool cut;
    for (size_t i = 0; i < len;) {
        int n = utf8_step(u + i, len - i, &cut);
        if (n > 0) {
            memcpy(buf + out, s + i, (size_t)n);
            out += (size_t)n;
            i += (size_t)n;
        } else {
            memcpy(buf + out, "\xEF\xBF\xBD", 3);
            out += 3;
            i += (size_t)-n;
        }
    }
    json_t *j = json_stringn_nocheck(buf, out);
    free(buf);
    return j;
}

json_t *render_json_text(const char *s, size_t len) {
    return jstr(s, len);
}

static json_t *jcstr(const char *s) {
    return jstr(s, s ? strlen(s) : 0);
}

/* ---- small builders ---- */

static char *dump(json_t *root) {
    if (!root) return NULL;
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(root);
    return s;
}

/* render.h */
json_t *render_with(json_t *obj, const char *key, json_t *v) {
    if (!obj) {
        json_decref(v);
        return NULL;
    }
    if (json_object_set_new(obj, key, v) < 0) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* Append v to arr, consuming v; on failure arr is released and NULL returned. */
static json_t *push(json_t *arr, json_t *v) {
    if (!arr) {
        json_decref(v);
        return NULL;
    }
    if (json_array_append_new(arr, v) < 0) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

static double finite_logprob(float lp) {
    return isfinite(lp) ? lp : -9999.0;
}

static json_t *bytes_array(const char *s, size_t len) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++) a = push(a, json_integer((unsigned char)s[i]));
    return a;
}

static const char *stop_type_name(enum stop_type t) {
    switch (t) {
    case STOP_TYPE_EOS: return "eos";
    case STOP_TYPE_LIMIT: return "limit";
    case STOP_TYPE_WORD: return "word";
    case STOP_TYPE_NONE: break;
    }
    return "none";
}

static json_t *finish_reason(enum stop_type t) {
    switch (t) {
    case STOP_TYPE_EOS: case STOP_TYPE_WORD: return json_string("stop");
    case STOP_TYPE_LIMIT: return json_string("length");
    case STOP_TYPE_NONE: break;
    }
    return json_null();
}

static double per_second(int32_t n, double ms) {
    return ms > 0 && isfinite(ms) ? 1e3 * n / ms : 0.0;
}

static double per_token_ms(int32_t n, double ms) {
    return n > 0 && isfinite(ms) ? ms / n : 0.0;
}

static double finite_ms(double ms) {
    return isfinite(ms) ? ms : 0.0;
}

/* ---- llama.cpp native ---- */

/* {id, token, bytes, logprob} (+ top_logprobs when top is non-NULL). */
static json_t *native_token(const struct token_logprob *t) {
    return json_pack("{s:i, s:o, s:o, s:f}", "id", (int)t->id,
                     "token", jstr(t->piece, t->piece_len),
                     "bytes", bytes_array(t->piece, t->piece_len),
                     "logprob", finite_logprob(t->logprob));
}

/* {id, token, bytes, prob}: post_sampling_probs' form. */
static json_t *native_token_prob(const struct token_logprob *t) {
    return json_pack("{s:i, s:o, s:o, s:f}", "id", (int)t->id,
                     "token", jstr(t->piece, t->piece_len),
                     "bytes", bytes_array(t->piece, t->piece_len),
                     "prob", isfinite(t->logprob) ? exp((double)t->logprob) : 0.0);
}

/* [token(chosen) + {top_key: [token(alternative), ...]}, ...] for every generated token:
 * the native and the chat shapes differ only in how one token is written. */
static json_t *probs_array_as(const struct completion_result *r,
                              json_t *(*token)(const struct token_logprob *), const char *top_key) {
    json_t *all = json_array();
    for (size_t i = 0; all && i < r->n_probs; i++) {
        const struct token_probs *tp = &r->probs[i];
        json_t *top = json_array();
        for (size_t k = 0; top && k < tp->n_top; k++) top = push(top, token(&tp->top[k]));
        all = push(all, render_with(token(&tp->chosen), top_key, top));
    }
    return all;
}

static json_t *probs_array(const struct completion_result *r,
                           json_t *(*token)(const struct token_logprob *)) {
    return probs_array_as(r, token, "top_logprobs");
}

static json_t *token_ids(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) a = push(a, json_integer(ids[i]));
    return a;
}

static json_t *native_timings(const struct completion_timings *t) {
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}",
                     "cache_n", (int)t->cache_n,
                     "prompt_n", (int)t->prompt_n,
                     "prompt_ms", finite_ms(t->prompt_ms),
                     "prompt_per_token_ms", per_token_ms(t->prompt_n, t->prompt_ms),
                     "prompt_per_second", per_second(t->prompt_n, t->prompt_ms),
                     "predicted_n", (int)t->predicted_n,
                     "predicted_ms", finite_ms(t->predicted_ms),
                     "predicted_per_token_ms", per_token_ms(t->predicted_n, t->predicted_ms),
                     "predicted_per_second", per_second(t->predicted_n, t->predicted_ms));
}

static json_t *generation_params(const struct completion_params *d);

/* Only the fields of paths ("a/b": o.a.b), each named by its path; o is consumed. */
static json_t *pick_fields(json_t *o, const char *const *paths, size_t n) {
    json_t *out = o ? json_object() : NULL;
    for (size_t i = 0; out && i < n; i++) {
        const json_t *v = o;
        const char *p = paths[i];
        while (v && *p) {
            const char *slash = strchr(p, '/');
            size_t len = slash ? (size_t)(slash - p) : strlen(p);
            v = json_is_object(v) ? json_object_getn(v, p, len) : NULL;
            p += len + (slash ? 1 : 0);
        }
        if (v && paths[i][0]) out = render_with(out, paths[i], json_deep_copy(v));
    }
    json_decref(o);
    return out;
}

static json_t *native_object(const struct response_meta *meta, const struct completion_result *r) {
    const struct completion_params *rp = meta->params;
    json_t *o = json_pack("{s:i, s:o}", "index", (int)r->index, "content", jstr(r->text, r->text_len));
    if (rp) o = render_with(o, "tokens", token_ids(r->tokens, r->n_tokens));
    if (r->stop_type == STOP_TYPE_NONE) {
        o = render_with(o, "stop", json_false());
        if (rp) o = render_with(o, "id_slot", json_integer(r->id_slot));
        o = render_with(o, "tokens_predicted", json_integer(r->tokens_predicted));
        o = render_with(o, "tokens_evaluated", json_integer(r->tokens_evaluated));
    } else {
        if (rp) o = render_with(o, "id_slot", json_integer(r->id_slot));
        o = render_with(o, "stop", json_true());
        o = render_with(o, "model", jcstr(meta->model));
        o = render_with(o, "tokens_predicted", json_integer(r->tokens_predicted));
        o = render_with(o, "tokens_evaluated", json_integer(r->tokens_evaluated));
        if (rp) {
            json_t *gs = generation_params(rp);
            gs = render_with(gs, "n_ctx", json_integer(meta->n_ctx));
            o = render_with(o, "generation_settings", gs);
            o = render_with(o, "prompt", jstr(r->prompt, r->prompt_len));
            o = render_with(o, "has_new_line", json_boolean(r->has_new_line));
        }
        o = render_with(o, "truncated", json_boolean(r->truncated));
        o = render_with(o, "stop_type", json_string(stop_type_name(r->stop_type)));
        o = render_with(o, "stopping_word", jcstr(r->stop_type == STOP_TYPE_WORD ? r->stopping_word : ""));
        o = render_with(o, "tokens_cached", json_integer(r->tokens_cached));
        o = render_with(o, "timings", native_timings(&r->timings));
    }
    if (meta->logprobs)
        o = render_with(o, "completion_probabilities", rp && rp->post_sampling_probs
                                                          ? probs_array_as(r, native_token_prob, "top_probs")
                                                          : probs_array(r, native_token));
    if (rp && rp->n_response_fields && r->stop_type != STOP_TYPE_NONE)
        o = pick_fields(o, rp->response_fields, rp->n_response_fields);
    return o;
}

char *render_completion(const struct response_meta *meta, const struct completion_result *r,
                        size_t n) {
    if (n == 1 && meta->n_choices <= 1) return dump(native_object(meta, r));
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) a = push(a, native_object(meta, &r[i]));
    return dump(a);
}

char *render_completion_chunk(const struct response_meta *meta, const struct completion_result *r) {
    return dump(native_object(meta, r));
}

/* ---- OpenAI ---- */

/* The envelope every OpenAI object shares; choices is consumed. */
static json_t *oai_object(const struct response_meta *meta, const char *object, json_t *choices) {
    json_t *o = json_pack("{s:o, s:s, s:I, s:o}", "id", jcstr(meta->id), "object", object,
                          "created", (json_int_t)meta->created, "model", jcstr(meta->model));
    if (meta->system_fingerprint) o = render_with(o, "system_fingerprint", jcstr(meta->system_fingerprint));
    return render_with(o, "choices", choices);
}

static json_t *usage_of(const struct completion_result *r, size_t n, int32_t per_prompt) {
    json_int_t prompt = 0, cached = 0, completion = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || (per_prompt > 0 && r[i].index % per_prompt == 0)) { /* each prompt once */
            prompt += r[i].tokens_evaluated;
            cached += r[i].tokens_cached;
        }
        completion += r[i].tokens_predicted;
    }
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", prompt,
                     "completion_tokens", completion, "total_tokens", prompt + completion,
                     "prompt_tokens_details", "cached_tokens", cached);
}

/* /v1/completions logprobs: {tokens, token_logprobs, top_logprobs: [{piece: logprob}],
 * text_offset}. */
static json_t *legacy_logprobs(const struct completion_result *r) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = r->text_offset;
    for (size_t j = 0; j < r->n_prompt_probs + r->n_probs; j++) {
        bool prompt = j < r->n_prompt_probs;
        const struct token_probs *tp = prompt ? &r->prompt_probs[j] : &r->probs[j - r->n_prompt_probs];
        tokens = push(tokens, jstr(tp->chosen.piece, tp->chosen.piece_len));
        offs = push(offs, json_integer((json_int_t)off));
        off += tp->chosen.piece_len;
        if (prompt && j == 0) { /* the first prompt token: nothing before it to predict it */
            lps = push(lps, json_null());
            tops = push(tops, json_null());
            continue;
        }
        lps = push(lps, json_real(finite_logprob(tp->chosen.logprob)));
        json_t *top = json_object();
        for (size_t k = 0; top && k < tp->n_top; k++) {
            json_t *key = jstr(tp->top[k].piece, tp->top[k].piece_len);
            if (!key || json_object_set_new(top, json_string_value(key),
                                            json_real(finite_logprob(tp->top[k].logprob))) < 0) {
                json_decref(top);
                top = NULL;
            }
            json_decref(key);
        }
        tops = push(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *content_logprobs(const struct completion_result *r);

static json_t *oai_completion_choice(const struct response_meta *meta,
                                     const struct completion_result *r) {
    json_t *lp = !meta->logprobs ? json_null()
                 : meta->params && meta->params->logprobs_content ? content_logprobs(r)
                                                                  : legacy_logprobs(r);
    return json_pack("{s:o, s:i, s:o, s:o}", "text", jstr(r->text, r->text_len),
                     "index", (int)r->index, "logprobs", lp,
                     "finish_reason", finish_reason(r->stop_type));
}

char *render_oai_completion(const struct response_meta *meta, const struct completion_result *r,
                            size_t n) {
    json_t *choices = json_array();
    for (size_t i = 0; choices && i < n; i++) choices = push(choices, oai_completion_choice(meta, &r[i]));
    return dump(render_with(oai_object(meta, "text_completion", choices), "usage", usage_of(r, n, meta->n_per_prompt)));
}

static json_t *stream_usage_null(const struct response_meta *meta, json_t *o) {
    return meta->include_usage ? render_with(o, "usage", json_null()) : o;
}

char *render_oai_completion_chunk(const struct response_meta *meta,
                                  const struct completion_result *r) {
    json_t *choices = push(json_array(), oai_completion_choice(meta, r));
    return dump(stream_usage_null(meta, oai_object(meta, "text_completion", choices)));
}

/* Chat logprobs: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}. */
static json_t *chat_token(const struct token_logprob *t) {
    return json_pack("{s:o, s:f, s:o}", "token", jstr(t->piece, t->piece_len),
                     "logprob", finite_logprob(t->logprob),
                     "bytes", bytes_array(t->piece, t->piece_len));
}

static json_t *chat_logprobs(const struct completion_result *r) {
    return json_pack("{s:o}", "content", probs_array(r, chat_token));
}

/* /v1/completions asked the llama.cpp way (n_probs): {content: [{id, token, bytes, logprob,
 * top_logprobs}]}, its server's shape. */
static json_t *content_logprobs(const struct completion_result *r) {
    return json_pack("{s:o}", "content", probs_array(r, native_token));
}

static json_t *chat_choice(const struct response_meta *meta, const struct completion_result *r,
                           const char *body_key, json_t *body) {
    bool calls = r->made_tool_calls && (r->stop_type == STOP_TYPE_EOS || r->stop_type == STOP_TYPE_WORD);
    return json_pack("{s:i, s:o, s:o, s:o}", "index", (int)r->index, body_key, body,
                     "logprobs", meta->logprobs ? chat_logprobs(r) : json_null(),
                     "finish_reason", calls ? json_string("tool_calls") : finish_reason(r->stop_type));
}

/* {id?, type?, function: {name?, arguments}}: the whole call, or a stream's news of one. */
static json_t *tool_call_json(int index, const char *id, const char *name, const char *args, size_t args_len) {
    json_t *fn = json_object();
    if (name) fn = render_with(fn, "name", json_string(name));
    fn = render_with(fn, "arguments", jstr(args ? args : "", args_len));
    json_t *o = index >= 0 ? json_pack("{s:i}", "index", index) : json_object();
    if (id) o = render_with(render_with(o, "id", json_string(id)), "type", json_string("function"));
    return render_with(o, "function", fn);
}

char *render_oai_chat(const struct response_meta *meta, const struct completion_result *r,
                      size_t n) {
    json_t *choices = json_array();
    for (size_t i = 0; choices && i < n; i++) {
        json_t *message = json_pack("{s:s, s:o}", "role", "assistant",
                                    "content", r[i].content_null ? json_null() : jstr(r[i].text, r[i].text_len));
        if (r[i].reasoning) message = render_with(message, "reasoning_content", jstr(r[i].reasoning, r[i].reasoning_len));
        if (r[i].n_tool_calls) {
            json_t *calls = json_array();
            for (size_t k = 0; k < r[i].n_tool_calls; k++) {
                const struct tool_call *c = &r[i].tool_calls[k];
                calls = push(calls, tool_call_json(-1, c->id, c->name, c->args, c->args_len));
            }
            message = render_with(message, "tool_calls", calls);
        }
        choices = push(choices, chat_choice(meta, &r[i], "message", message));
    }
    return dump(render_with(oai_object(meta, "chat.completion", choices), "usage", usage_of(r, n, meta->n_per_prompt)));
}

char *render_oai_chat_chunk(const struct response_meta *meta, const struct completion_result *r,
                            bool with_role) {
    json_t *delta = json_object();
    if (with_role) delta = render_with(delta, "role", json_string("assistant"));
    if (r->reasoning_len > 0) delta = render_with(delta, "reasoning_content", jstr(r->reasoning, r->reasoning_len));
    if (r->text_len > 0) delta = render_with(delta, "content", jstr(r->text, r->text_len));
    else if (with_role) delta = render_with(delta, "content", json_null());
    if (r->n_call_deltas) {
        json_t *calls = json_array();
        for (size_t k = 0; k < r->n_call_deltas; k++) {
            const struct tool_call_delta *c = &r->call_deltas[k];
            calls = push(calls, tool_call_json(c->index, c->id, c->name, c->args, c->args_len));
        }
        delta = render_with(delta, "tool_calls", calls);
    }
    json_t *choices = push(json_array(), chat_choice(meta, r, "delta", delta));
    return dump(stream_usage_null(meta, oai_object(meta, "chat.completion.chunk", choices)));
}

char *render_oai_usage_chunk(const struct response_meta *meta, const struct completion_result *r,
                             size_t n, bool chat) {
    json_t *o = oai_object(meta, chat ? "chat.completion.chunk" : "text_completion", json_array());
    return dump(render_with(o, "usage", usage_of(r, n, meta->n_per_prompt)));
}

/* ---- tokens, models, errors ---- */

char *render_tokenize(const int32_t *ids, size_t n, const struct token_piece *pieces) {
    json_t *tokens = json_array();
    for (size_t i = 0; tokens && i < n; i++) {
        if (!pieces) {
            tokens = push(tokens, json_integer(ids[i]));
            continue;
        }
        const struct token_piece *pc = &pieces[i];
        json_t *piece = utf8_valid(pc->ptr, pc->len) ? jstr(pc->ptr, pc->len)
                                                     : bytes_array(pc->ptr, pc->len);
        tokens = push(tokens, json_pack("{s:i, s:o}", "id", (int)ids[i], "piece", piece));
    }
    return dump(json_pack("{s:o}", "tokens", tokens));
}

char *render_detokenize(const char *text, size_t len) {
    return dump(json_pack("{s:o}", "content", jstr(text, len)));
}

static json_t *model_object(const struct model_info *m) {
    json_t *meta = json_pack("{s:I, s:I, s:I, s:I, s:I}", "n_vocab", (json_int_t)m->n_vocab,
                             "n_ctx_train", (json_int_t)m->n_ctx_train,
                             "n_embd", (json_int_t)m->n_embd, "n_params", (json_int_t)m->n_params,
                             "size", (json_int_t)m->size);
    return json_pack("{s:o, s:s, s:I, s:s, s:o}", "id", jcstr(m->id), "object", "model",
                     "created", (json_int_t)m->created, "owned_by", "uvlm", "meta", meta);
}

char *render_models(const struct model_info *m) {
    return dump(json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(m)));
}

char *render_model(const struct model_info *m) {
    return dump(model_object(m));
}

/* The sampling chain (sampler/sampler.h), in llama.cpp's sampler names. */
static json_t *sampler_names(void) {
    return json_pack("[s, s, s, s, s]", "penalties", "top_k", "top_p", "min_p", "temperature");
}

/* A request's settings in the llama.cpp server's generation_settings / params shape. */
static json_t *generation_params(const struct completion_params *d) {
    json_t *stop = json_array();
    for (size_t i = 0; stop && i < d->n_stop; i++) stop = push(stop, jcstr(d->stop[i]));
    json_t *bias = json_array();
    for (size_t i = 0; bias && i < d->n_logit_bias; i++) /* a ban: the reference's lowest float */
        bias = push(bias, json_pack("{s:f, s:i}", "bias", isfinite(d->logit_bias[i].bias) ? (double)d->logit_bias[i].bias
                                                                                           : -3.4028234663852886e38,
                                    "token", (int)d->logit_bias[i].token));
    json_t *o = json_pack("{s:i, s:i, s:I, s:f, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}",
                          "n_predict", (int)d->n_predict, "max_tokens", (int)d->n_predict,
                          "seed", (json_int_t)(d->seed_random ? UINT32_MAX : d->seed),
                          "temperature", (double)d->temperature, "top_k", (int)d->top_k,
                          "top_p", (double)d->top_p, "min_p", (double)d->min_p, "typical_p", 1.0,
                          "repeat_last_n", (int)d->repeat_last_n,
                          "repeat_penalty", (double)d->repeat_penalty,
                          "presence_penalty", (double)d->presence_penalty,
                          "frequency_penalty", (double)d->frequency_penalty);
    o = render_with(o, "stop", stop);
    o = render_with(o, "logit_bias", bias);
    o = render_with(o, "grammar", jstr(d->grammar, d->grammar_len));
    o = render_with(o, "n_probs", json_integer(d->n_probs));
    o = render_with(o, "min_keep", json_integer(0));
    o = render_with(o, "n_keep", json_integer(0));
    o = render_with(o, "cache_prompt", json_boolean(d->cache_prompt));
    o = render_with(o, "ignore_eos", json_boolean(d->ignore_eos));
    o = render_with(o, "stream", json_boolean(d->stream));
    o = render_with(o, "n", json_integer(d->n));
    o = render_with(o, "post_sampling_probs", json_boolean(d->post_sampling_probs));
    return render_with(o, "samplers", sampler_names());
}

char *render_props(const struct props_info *pi) {
    json_t *settings = json_pack("{s:i, s:i, s:i, s:b, s:b, s:o, s:s, s:{s:b, s:b, s:i, s:i, s:s}}",
                                 "id", 0, "id_task", -1, "n_ctx", (int)pi->n_ctx, "speculative", 0,
                                 "is_processing", 0, "params", generation_params(pi->defaults), "prompt", "",
                                 "next_token", "has_next_token", 1, "has_new_line", 0,
                                 "n_remain", (int)pi->defaults->n_predict, "n_decoded", 0, "stopping_word", "");
    json_t *o = json_pack("{s:o, s:i, s:o, s:o, s:o, s:i, s:I, s:I, s:i, s:i}",
                          "default_generation_settings", settings, "total_slots", (int)pi->total_slots,
                          "model", jcstr(pi->model_alias),
                          "model_path", jcstr(pi->model_path), "model_alias", jcstr(pi->model_alias),
                          "n_ctx", (int)pi->n_ctx, "kv_tokens", (json_int_t)pi->kv_tokens,
                          "batch_tokens", (json_int_t)pi->batch_tokens,
                          "max_n", (int)pi->max_n, "n_vocab", (int)pi->n_vocab);
    o = render_with(o, "kv_bytes", json_integer(pi->kv_bytes));
    o = render_with(o, "kv_type_k", jcstr(pi->kv_type_k));
    o = render_with(o, "kv_type_v", jcstr(pi->kv_type_v));
    o = render_with(o, "chat_template", jcstr(pi->chat_template_text));
    o = render_with(o, "chat_template_kind", jcstr(pi->chat_template));
    o = render_with(o, "bos_token", jcstr(pi->bos_token));
    o = render_with(o, "eos_token", jcstr(pi->eos_token));
    o = render_with(o, "build_info", jcstr(pi->build_info));
    o = render_with(o, "modalities", json_pack("{s:b, s:b}", "vision", 0, "audio", 0));
    return dump(o);
}

char *render_slots(const struct slot_info *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        int32_t remain = s[i].n_predict < 0 ? -1 : s[i].n_predict - s[i].n_decoded;
        json_t *o = json_pack("{s:I, s:I, s:i, s:b, s:b}", "id", (json_int_t)s[i].id,
                              "id_task", (json_int_t)s[i].id_task, "n_ctx", (int)s[i].n_ctx,
                              "speculative", 0, "is_processing", s[i].is_processing);
        if (s[i].params) o = render_with(o, "params", generation_params(s[i].params));
        o = render_with(o, "next_token", json_pack("{s:b, s:b, s:i, s:i}", "has_next_token", s[i].is_processing,
                                                   "has_new_line", s[i].has_new_line, "n_remain", (int)remain,
                                                   "n_decoded", (int)s[i].n_decoded));
        o = render_with(o, "index", json_integer(s[i].index));
        o = render_with(o, "state", jcstr(s[i].state));
        o = render_with(o, "n_prompt_tokens", json_integer(s[i].n_prompt_tokens));
        o = render_with(o, "n_prompt_tokens_processed", json_integer(s[i].n_prompt_tokens_processed));
        o = render_with(o, "n_decoded", json_integer(s[i].n_decoded));
        o = render_with(o, "n_predict", json_integer(s[i].n_predict));
        o = render_with(o, "n_cells", json_integer(s[i].n_cells));
        a = push(a, o);
    }
    return dump(a);
}

char *api_error_render(const struct api_error *err) {
    json_t *e = json_pack("{s:i, s:o, s:s, s:o}", "code", err->status,
                          "message", jcstr(err->message),
                          "type", err->type ? err->type : api_error_type(err->status),
                          "param", err->param[0] ? jcstr(err->param) : json_null());
    if (err->type && strcmp(err->type, "exceed_context_size_error") == 0) {
        e = render_with(e, "n_prompt_tokens", json_integer(err->n_prompt_tokens));
        e = render_with(e, "n_ctx", json_integer(err->n_ctx));
    }
    return dump(json_pack("{s:o}", "error", e));
}
