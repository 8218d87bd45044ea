/* embeddings.h: POST /v1/embeddings (OpenAI) and POST /embedding, /embeddings (llama.cpp): texts
 * or token ids in, one vector per input out, made from the model's final hidden states (after
 * the output norm) pooled as --pooling says. Each input is an ordinary scheduler request
 * (sched.h's enum sched_embed): read in chunks beside generation, its cells freed at the end.
 * The parsing and rendering here are pure; the handler (embeddings.c) submits and collects.
 *
 * Request (unknown fields ignored):
 *   input          a string, an array of strings, an array of token ids (one input), or an array
 *                  of arrays of token ids; /embedding also takes it as `content`. Strings are
 *                  tokenized as prompts are (BOS as the vocabulary says, special tokens parsed).
 *                  An empty input is refused (400).
 *   encoding_format "float" (default) or "base64": the vector's float32 values, little endian,
 *                  in base64 (what the OpenAI SDKs ask for by default).
 *   embd_normalize llama.cpp's: 2 (default) L2 norm, -1 none, 0 max-abs scaled to int16 range,
 *                  1 taxicab, p > 2 the p-norm. Pooling none is never normalized (llama.cpp's).
 *   model          echoed back.
 * An input longer than the context: 400 exceed_context_size_error with n_prompt_tokens, n_ctx.
 *
 * Response, /v1/embeddings (OpenAI's shape):
 *   {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] | "b64"}],
 *    "model": ..., "usage": {"prompt_tokens": n, "total_tokens": n}}
 * /embedding (llama.cpp's): [{"index": i, "embedding": [[...]]}, ...]: one row with pooling, one
 * row per token without. Pooling none on /v1/embeddings: 400 (as llama.cpp).
 *
 *   struct embd_request r;  struct api_error err;
 *   if (embd_request_parse(&r, false, body, len, &err) < 0) ... 400 ...
 *   ... each r.inputs[i]: a string to tokenize (text) or token ids ...
 *   embd_normalize(vec, n_embd, r.normalize);
 *   char *json = embd_render_oai(&r, model, results, n_tokens_total);
 *   embd_request_free(&r);
 */
#ifndef UVLM_API_EMBEDDINGS_H
#define UVLM_API_EMBEDDINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/params.h"

enum embd_pooling { EMBD_POOL_NONE, EMBD_POOL_MEAN, EMBD_POOL_CLS, EMBD_POOL_LAST };

/* --pooling's value, with the model's <arch>.pooling_type (-1: none given) for "model".
 * Returns the pooling, or -1 for a name it does not know (config.c already refuses those). A
 * model asking for rank pooling (4: a reranker's classifier head) gets none. */
int embd_pooling_of(const char *name, int32_t model_pooling);
const char *embd_pooling_name(enum embd_pooling p);

/* One input: text (tokenize it) or token ids, as the request gave it (pointers into the parsed
 * request, which owns them). */
struct embd_input {
    const char *text;        /* NULL: ids */
    size_t text_len;
    const int32_t *ids;
    size_t n_ids;
};

struct embd_request {
    struct embd_input *inputs;
    size_t n_inputs;
    bool base64;
    int normalize;           /* embd_normalize */
    char *model;             /* the request's model (NULL: none given) */
    void *owned;             /* the parsed JSON the inputs point into */
    int32_t *id_store;       /* token ids of every input, back to back */
};

/* Parse a body (need not be NUL-terminated). native: /embedding (accepts `content`). 0, or
 * -ERR_INVAL with err naming the field, -ERR_NOMEM. embd_request_free in every case. */
int embd_request_parse(struct embd_request *r, bool native, const char *body, size_t len, struct api_error *err);
void embd_request_free(struct embd_request *r);

/* v[0..n) scaled as embd_normalize says (see above); a zero vector stays zero. */
void embd_normalize(float *v, int32_t n, int mode);

/* One input's result: n_rows rows of n_embd floats (normalized already), its prompt tokens. */
struct embd_result {
    const float *rows;
    int32_t n_rows, n_embd;
    int32_t n_tokens;
};

/* The response bodies (malloc'd JSON; NULL: out of memory). */
char *embd_render_oai(const struct embd_request *r, const char *model, const struct embd_result *res);
char *embd_render_native(const struct embd_request *r, const struct embd_result *res);

#endif
