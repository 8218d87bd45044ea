/* eval_logits.c: ./uvlm eval-logits --model M --prompts FILE [--topk K] [--n-gen N] [--threads T]
 *                                   [--kv-type f16|q8_0] [--allow-unknown-pretokenizer]
 * Writes to stdout the JSON of ../shared/reference/MODEL.json for this engine: per prompt
 * (prompts separated by "\n---\n", tokenized with add_special), the teacher-forced top-K logits
 * after every prompt token, then N greedy tokens with the top-K logits after each. Comparing it
 * field by field with the reference is how correctness is checked (test/e2e/test_eval_logits.py).
 * The forward pass runs in reference mode (forward_config.reference): the reference's arithmetic,
 * slower than serving. --kv-type q8_0 keeps K and V in Q8_0 cells (../shared/reference/
 * *-kvq8_0.json: the reference with such a cache). */
#include "cmd/cmd.h"
#include "common/err.h"
#include "model/eval.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROMPT_SEP "\n---\n"

static void eval_usage(FILE *out) {
    fprintf(out, "usage: uvlm eval-logits --model M --prompts FILE [--topk K] [--n-gen N] [--threads T]\n"
                 "                        [--kv-type f16|q8_0] [--allow-unknown-pretokenizer]\n"
                 "  prompts in FILE are separated by \"\\n---\\n\"; JSON on stdout (K 20, N 32 by default)\n");
}

/* The whole file, NUL-terminated, malloc'd. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = 0;
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

static void json_string(FILE *out, const char *s, size_t n) {
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c == '\r') fputs("\\r", out);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

struct rows_out {
    FILE *out;
    int32_t n_vocab, k, n_tokens;
    struct eval_topk *top;  /* [k] */
};

static void print_row(void *arg, int32_t index, const float *logits) {
    struct rows_out *r = arg;
    if (index == r->n_tokens) fputs("],\"greedy_topk\":[", r->out);  /* first greedy row */
    else if (index > 0) fputc(',', r->out);
    eval_topk(logits, r->n_vocab, r->k, r->top);
    fputc('[', r->out);
    for (int32_t i = 0; i < r->k; i++) fprintf(r->out, "%s[%d,%.6g]", i ? "," : "", r->top[i].id, r->top[i].logit);
    fputc(']', r->out);
}

static int eval_prompt(const struct model *m, const struct tokenizer *tok, struct forward_ctx *fc,
                       struct memory *mem, const char *text, size_t len, int32_t k, int32_t n_gen,
                       struct eval_topk *top, FILE *out) {
    int32_t *ids = NULL, *greedy = calloc((size_t)n_gen + 1, sizeof *greedy);
    size_t n = 0;
    int rc = greedy ? tokenizer_encode_alloc(tok, text, len, true, false, &ids, &n) : -ERR_NOMEM;
    if (rc == 0 && n == 0) rc = -ERR_INVAL;
    if (rc == 0) {
        fputs("{\"prompt\":", out);
        json_string(out, text, len);
        fputs(",\"tokens\":[", out);
        for (size_t i = 0; i < n; i++) fprintf(out, "%s%d", i ? "," : "", ids[i]);
        fputs("],\"prompt_topk\":[", out);
        struct rows_out r = {.out = out, .n_vocab = m->hp.n_vocab, .k = k, .n_tokens = (int32_t)n, .top = top};
        rc = eval_run(m, fc, mem, ids, (int32_t)n, fc->cfg.max_tokens, n_gen, greedy, print_row, &r);
        if (n_gen == 0) fputs("],\"greedy_topk\":[", out);
        fputs("],\"greedy\":[", out);
        for (int32_t i = 0; i < n_gen; i++) fprintf(out, "%s%d", i ? "," : "", greedy[i]);
        fputs("]}", out);
    }
    free(ids);
    free(greedy);
    return rc;
}

int cmd_eval_logits(int argc, char **argv) {
    const char *model_path = NULL, *prompts_path = NULL;
    int32_t k = 20, n_gen = 32, n_threads = 0;
    struct tokenizer_options topt = {0};
    enum kv_type kv_type = KV_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            eval_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--allow-unknown-pretokenizer")) {
            topt.allow_unknown_pretokenizer = true;
            continue;
        }
        if (!v) {
            eval_usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--prompts")) prompts_path = v;
        else if (!strcmp(a, "--topk")) k = atoi(v);
        else if (!strcmp(a, "--n-gen")) n_gen = atoi(v);
        else if (!strcmp(a, "--threads")) n_threads = atoi(v);
        else if (!strcmp(a, "--kv-type") && kv_type_parse(v, &kv_type) == 0) {}
        else {
            eval_usage(stderr);
            return 2;
        }
        i++;
    }
    if (!model_path || !prompts_path || k <= 0 || n_gen < 0) {
        eval_usage(stderr);
        return 2;
    }
    size_t len = 0;
    char *text = slurp(prompts_path, &len);
    if (!text) {
        fprintf(stderr, "eval-logits: cannot read %s\n", prompts_path);
        return 1;
    }
    char why[256];
    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    struct memory *mem = NULL;
    struct forward_ctx *fc = NULL;
    struct eval_topk *top = NULL;
    int status = 1, rc = model_load(&m, model_path, NULL, why, sizeof why);
    if (rc < 0) {
        fprintf(stderr, "eval-logits: %s: %s\n", model_path, why);
        goto done;
    }
    if (k > m->hp.n_vocab) k = m->hp.n_vocab;
    if ((rc = tokenizer_load_with(&tok, &m->file, &topt, why, sizeof why)) < 0) {
        fprintf(stderr, "eval-logits: tokenizer: %s\n", why);
        goto done;
    }
    if (why[0]) fprintf(stderr, "eval-logits: tokenizer: %s\n", why);
    /* One sequence; the longest prompt plus its generation must fit in the context. */
    int64_t n_ctx = (int64_t)len + 2 + n_gen;
    struct memory_config mc = {.n_cells = n_ctx, .n_seq_max = 1, .max_batch = (int32_t)n_ctx, .type_k = kv_type,
                               .type_v = kv_type};
    if ((rc = model_memory_create_with(m, &mc, &mem)) < 0 ||
        (rc = forward_ctx_create(&fc, m, &(struct forward_config){.max_tokens = 512, .n_ctx = n_ctx,
                                                                   .n_threads = n_threads, .reference = true})) < 0 ||
        !(top = malloc(sizeof *top * (size_t)k))) {
        fprintf(stderr, "eval-logits: %s\n", err_str(rc < 0 ? rc : -ERR_NOMEM));
        goto done;
    }
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    printf("{\"model\":");
    json_string(stdout, base, strlen(base));
    printf(",\"n_vocab\":%d,\"topk\":%d,\"cases\":[", m->hp.n_vocab, k);
    const char *p = text, *end = text + len;
    for (int i = 0; rc == 0; i++) {
        const char *sep = strstr(p, PROMPT_SEP);
        const char *stop = sep ? sep : end;
        if (i) putchar(',');
        rc = eval_prompt(m, tok, fc, mem, p, (size_t)(stop - p), k, n_gen, top, stdout);
        if (!sep) break;
        p = sep + strlen(PROMPT_SEP);
    }
    printf("]}\n");
    if (rc < 0) fprintf(stderr, "eval-logits: %s\n", err_str(rc));
    else status = 0;
done:
    free(top);
    forward_ctx_destroy(fc);
    memory_destroy(mem);
    tokenizer_free(tok);
    model_free(m);
    free(text);
    return status;
}
