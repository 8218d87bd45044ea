/* infill.h: fill-in-the-middle, POST /infill as the llama.cpp server defines it (what editor
 * plugins such as llama.vim and llama.vscode call): the code before and after the cursor, and
 * other files of the project as context, become one prompt made with the model's FIM tokens
 * (model_engine_fim: GGUF metadata, else the tokens found by their text); the rest of the request
 * is /completion's, and so is the answer (streaming too).
 *
 * Request (beside /completion's fields; unknown fields ignored):
 *   input_prefix   required: the text before the cursor (a string, or an array of token ids and
 *                  strings, as the reference's "mixed" prompts)
 *   input_suffix   required: the text after it (the same forms)
 *   input_extra    optional: an array of {"text": string, "filename"?: string} chunks
 *   prompt         optional string: text inserted after the prefix (special tokens parsed)
 *
 * The prompt, in the reference's repo-level order (PSM: prefix-suffix-middle):
 *   [FIM_REP "myproject\n"] ([FIM_SEP filename "\n"] | "\n\n--- snippet ---\n\n") chunk_text ...
 *   [FIM_SEP "filename\n"]                                 (the extra context: its tail is kept)
 *   [BOS] FIM_PRE prefix prompt FIM_SUF suffix FIM_MID     (BOS when the vocabulary adds it)
 * SPM order (spm, --spm-infill) swaps the two: [BOS] FIM_SUF suffix FIM_PRE prefix prompt FIM_MID.
 * Budgets, as the reference's: the prefix keeps its last min(n, 3*(n_batch/4)) tokens, the
 * suffix its first min(n, max(0, n_batch/4 - (2 + prompt tokens))), the extra context its last
 * min(n, max(0, n_ctx - n_batch - 2*n_predict)) tokens. A model without FIM prefix, suffix or
 * middle tokens gets a 400 naming those it lacks.
 *
 *   struct infill_config cfg = {.n_batch = 512, .n_predict = -1, .n_ctx = e->n_ctx};
 *   char *body; size_t len; struct api_error err;
 *   if (infill_completion_body(e, &cfg, req_body, req_len, &body, &len, &err) < 0) ... 400 err ...
 *   ... completion_params_parse(&p, API_COMPLETION, body, len, ...); free(body);
 */
#ifndef UVLM_API_INFILL_H
#define UVLM_API_INFILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/params.h"

struct model_engine;

struct infill_config {
    int32_t n_batch;   /* the reference's n_batch: the prefix and suffix budget (--batch-tokens) */
    int32_t n_predict; /* the server's default n_predict (-1: none) for the extra context budget */
    int32_t n_ctx;     /* the sequence's context */
    bool spm;          /* suffix-prefix-middle order instead of prefix-suffix-middle (--spm-infill) */
};

/* One chunk of input_extra, its text as given (not owned). */
struct infill_chunk {
    const char *filename; /* "tmp" when the request gives none */
    size_t filename_len;
    const char *text;
    size_t text_len;
};

/* What the prompt is made of: prefix and suffix already tokens, the chunks as text. */
struct infill_input {
    const int32_t *prefix, *suffix, *prompt;
    size_t n_prefix, n_suffix, n_prompt;
    const struct infill_chunk *extra;
    size_t n_extra;
};

/* 0 when the model has FIM prefix, suffix and middle tokens; else -ERR_UNSUPPORTED with err a 400
 * ("Infill is not supported by this model: prefix token is missing. ..."). */
int infill_check_model(const struct model_engine *e, struct api_error *err);

/* The prompt's tokens into *out (malloc'd, the caller frees it). 0, -ERR_NOMEM. */
int infill_assemble(const struct model_engine *e, const struct infill_config *cfg, const struct infill_input *in,
                    int32_t **out, size_t *n_out);

/* The /completion body that runs an /infill body: the same object with "prompt" the assembled
 * token ids and the infill fields removed, into *out (malloc'd, NUL-terminated). 0, -ERR_INVAL
 * (err names the field), -ERR_UNSUPPORTED (the model has no FIM tokens), -ERR_NOMEM. */
int infill_completion_body(const struct model_engine *e, const struct infill_config *cfg, const char *body,
                           size_t len, char **out, size_t *out_len, struct api_error *err);

#endif
