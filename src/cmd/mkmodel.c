/* mkmodel.c: ./uvlm mkmodel --out F --vocab V [--arch llama|qwen2|qwen3|phi3|gemma3|qwen35|mamba]
 *            [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N] [--head-dim N] [--n-ff N]
 *            [--type T] [--tied] [--ctx N] [--rope-base B] [--seed S] [--window N] (gemma3)
 *            [--d-inner N] [--d-state N] [--d-conv N] [--dt-rank N]   (these four: mamba)
 *            [--d-state N] [--d-conv N] [--dt-rank N] [--n-group N] [--n-rot N] (qwen35)
 * Writes a GGUF model of the given shape with random weights and the tokenizer.* metadata of the
 * GGUF file V (a vocab-only file such as ../shared/vocab/ggml-vocab-llama-spm.gguf), laid out as
 * the architecture's files are: qwen2 with q/k/v biases, qwen3 with q/k head norms and heads of
 * --head-dim (attention.key_length; default n_embd / n_head), phi3 with the fused attn_qkv and
 * ffn_up (gate and up), gemma3 with q/k head norms, norms after the attention and the feed-forward
 * and a sliding window of --window positions (default 512) on all but every 6th layer, qwen35 with
 * gated delta-net layers (--n-group q/k heads, --dt-rank v heads, all of --d-state dims, a conv of
 * --d-conv taps; model/deltanet.h) and a gated attention layer (query and gate from attn_q, q/k head
 * norms, rope on --n-rot dims) every 4th layer, each followed by post_attention_norm and the
 * feed-forward. T is one of
 * f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs, or q4_k_m (Q4_K,
 * with Q6_K for the output and, in the first and last eighth of the layers and every third
 * between, attn_v and ffn_down: the reference's mix). Matrices are quantized from F32 by
 * quant_from_float. A matrix whose rows are not a multiple of the type's block falls back (the
 * 256-element types: q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0, q2_k / q3_k / iq4_xs -> iq4_nl),
 * as the reference's quantizer does.
 *
 * The weights are scaled so that the logits are peaky (a few units apart, like trained models)
 * and every layer matters: uniform init with std 1/sqrt(n_in) for the matrices, and an output
 * scale of 4 on the logits. Mamba (model/mamba.h) keeps conv, A, D, norms and biases in F32 as the
 * reference's converter does; A = -exp(A_log) is drawn negative, the dt bias so that softplus(dt)
 * is small (slowly decaying state), and ssm_out 8x larger so each layer moves the residual stream
 * as much as the embedding does (the gated scan's outputs are small). */
#include "cmd/cmd.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "math/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mk {
    const char *arch;
    int32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    int32_t window; /* gemma3 */
    int32_t d_inner, d_state, d_conv, dt_rank; /* mamba; qwen35's delta nets (d_inner = dt_rank * d_state) */
    int32_t n_group, n_rot; /* qwen35 */
    float rope_base;
    bool tied;
    enum ggml_type type;
    bool q4_k_m;
    uint64_t rng;
};

static const struct { const char *name; enum ggml_type type; } type_names[] = {
    {"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0},
    {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1}, {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1},
    {"q4_k", GGML_TYPE_Q4_K}, {"q5_k", GGML_TYPE_Q5_K}, {"q6_k", GGML_TYPE_Q6_K}, {"q4_k_m", GGML_TYPE_Q4_K},
    {"q2_k", GGML_TYPE_Q2_K}, {"q3_k", GGML_TYPE_Q3_K}, {"iq4_nl", GGML_TYPE_IQ4_NL}, {"iq4_xs", GGML_TYPE_IQ4_XS},
};

static void mk_usage(FILE *out) {
    fprintf(out, "usage: uvlm mkmodel --out F --vocab V [--arch llama|qwen2|qwen3|phi3|gemma3|qwen35|mamba] [--n-embd 256]\n"
                 "         [--n-layer 4] [--n-head 8] [--n-head-kv 4] [--head-dim n_embd/n_head] [--n-ff 768]\n"
                 "         [--type f16] [--tied] [--ctx 4096]\n"
                 "         [--rope-base 10000] [--seed 1]\n"
                 "         gemma3: [--window 512] (its sliding window, on all but every 6th layer)\n"
                 "         mamba: [--d-inner 2*n_embd] [--d-state 16] [--d-conv 4] [--dt-rank n_embd/16]\n"
                 "         qwen35: [--d-state 128] [--d-conv 4] [--dt-rank 16] [--n-group 16] [--n-rot head_dim/4]\n"
                 "  types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs q4_k_m\n");
}

/* Uniform in [-1, 1) (xorshift64*). */
static float uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (float)((*s * 0x2545F4914F6CDD1Du) >> 40) * 0x1.0p-23f - 1.0f;
}

/* Whether layer i of n gets the Q4_K_M mix's Q6_K attn_v and ffn_down: the first and last eighth
 * of the layers and every third one between (TinyLlama's 22 layers: 10 of them), the layers the
 * reference's quantizer gives more bits, so that a Q4_K_M file here reads the bytes theirs do. */
static bool q4_k_m_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type a matrix gets: the requested one, the Q4_K_M exceptions, and the block fallbacks. */
static enum ggml_type matrix_type(const struct mk *mk, const char *name, uint64_t n_in) {
    enum ggml_type t = mk->type;
    int layer = -1;
    if (mk->q4_k_m && sscanf(name, "blk.%d.", &layer) == 1 && (strstr(name, "attn_v") || strstr(name, "ffn_down")) &&
        q4_k_m_more_bits(layer, mk->n_layer))
        t = GGML_TYPE_Q6_K;
    if (mk->q4_k_m && !strcmp(name, "output.weight")) t = GGML_TYPE_Q6_K;
    if (ggml_row_size(t, n_in) == 0) {
        t = t == GGML_TYPE_Q4_K ? GGML_TYPE_Q5_0 : t == GGML_TYPE_Q5_K ? GGML_TYPE_Q5_1
          : t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K || t == GGML_TYPE_IQ4_XS ? GGML_TYPE_IQ4_NL : GGML_TYPE_Q8_0;
        if (ggml_row_size(t, n_in) == 0) t = GGML_TYPE_F16;
    }
    return t;
}

struct tensor_plan {
    char name[96];
    uint64_t n_in, n_out;     /* n_out 1: a vector */
    enum ggml_type type;
    float scale;              /* values uniform in [-scale, scale); 0: all ones (norms) */
    float offset;             /* added to those values */
};

static int plan(const struct mk *mk, int32_t n_vocab, struct tensor_plan *p) {
    int n = 0;
    uint64_t e = (uint64_t)mk->n_embd, hd = (uint64_t)mk->head_dim;
    uint64_t nq = hd * (uint64_t)mk->n_head, nkv = hd * (uint64_t)mk->n_head_kv, ff = (uint64_t)mk->n_ff;
    float s3 = sqrtf(3.0f);  /* uniform [-a, a) has std a / sqrt(3) */
#define ADD(nm, in, out, sc) do { snprintf(p[n].name, sizeof p[n].name, "%s", nm); p[n].n_in = (in); \
        p[n].n_out = (out); p[n].scale = (sc); \
        p[n].type = (out) == 1 ? GGML_TYPE_F32 : matrix_type(mk, p[n].name, (in)); n++; } while (0)
    ADD("token_embd.weight", e, (uint64_t)n_vocab, s3);
    ADD("output_norm.weight", e, 1, 0);
    if (!mk->tied) ADD("output.weight", e, (uint64_t)n_vocab, 4 * s3 / sqrtf((float)e));
    bool mamba = !strcmp(mk->arch, "mamba");
    uint64_t di = (uint64_t)mk->d_inner, ds = (uint64_t)mk->d_state, dc = (uint64_t)mk->d_conv;
    uint64_t dr = (uint64_t)mk->dt_rank;
    for (int32_t l = 0; l < mk->n_layer && mamba; l++) {
        char nm[96];
#define SSM(suffix, in, out, sc, f32, off) do { snprintf(nm, sizeof nm, "blk.%d.%s", (int)l, suffix); \
        ADD(nm, in, out, sc); if (f32) p[n - 1].type = GGML_TYPE_F32; p[n - 1].offset = (off); } while (0)
        SSM("attn_norm.weight", e, 1, 0, true, 0);
        SSM("ssm_in.weight", e, 2 * di, s3 / sqrtf((float)e), false, 0);
        SSM("ssm_conv1d.weight", dc, di, s3 / sqrtf((float)dc), true, 0);
        SSM("ssm_conv1d.bias", di, 1, 0.1f, true, 0);
        SSM("ssm_x.weight", di, dr + 2 * ds, s3 / sqrtf((float)di), false, 0);
        SSM("ssm_dt.weight", dr, di, s3 / sqrtf((float)dr), false, 0);
        SSM("ssm_dt.bias", di, 1, 1.0f, true, -4.0f);
        SSM("ssm_a", ds, di, 0.75f, true, -1.25f);
        SSM("ssm_d", di, 1, 0, true, 0);
        SSM("ssm_out.weight", di, e, 8 * s3 / sqrtf((float)di), false, 0);
#undef SSM
    }
    bool qwen35 = !strcmp(mk->arch, "qwen35");
    uint64_t ng = (uint64_t)mk->n_group, ch = (2 * ng + dr) * ds, vw = dr * ds;
    for (int32_t l = 0; l < mk->n_layer && qwen35; l++) {
        char nm[96];
#define Q35(suffix, in, out, sc, f32, off) do { snprintf(nm, sizeof nm, "blk.%d.%s", (int)l, suffix); \
        ADD(nm, in, out, sc); if (f32) p[n - 1].type = GGML_TYPE_F32; p[n - 1].offset = (off); } while (0)
        Q35("attn_norm.weight", e, 1, 0, true, 0);
        if ((l + 1) % 4) { /* a delta-net layer: decays of a few percent per token, beta near 1/2 */
            Q35("attn_qkv.weight", e, ch, s3 / sqrtf((float)e), false, 0);
            Q35("attn_gate.weight", e, vw, s3 / sqrtf((float)e), false, 0);
            Q35("ssm_beta.weight", e, dr, s3 / sqrtf((float)e), false, 0);
            Q35("ssm_alpha.weight", e, dr, s3 / sqrtf((float)e), false, 0);
            Q35("ssm_conv1d.weight", dc, ch, s3 / sqrtf((float)dc), true, 0);
            Q35("ssm_dt.bias", dr, 1, 1.0f, true, -3.0f);
            Q35("ssm_a", dr, 1, 0.5f, true, -1.0f);
            Q35("ssm_norm.weight", ds, 1, 0, true, 0);
            Q35("ssm_out.weight", vw, e, s3 / sqrtf((float)vw), false, 0);
        } else { /* gated attention: each head's query then its gate */
            Q35("attn_q.weight", e, 2 * nq, s3 / sqrtf((float)e), false, 0);
            Q35("attn_k.weight", e, nkv, s3 / sqrtf((float)e), false, 0);
            Q35("attn_v.weight", e, nkv, s3 / sqrtf((float)e), false, 0);
            Q35("attn_q_norm.weight", hd, 1, 0, true, 0);
            Q35("attn_k_norm.weight", hd, 1, 0, true, 0);
            Q35("attn_output.weight", nq, e, s3 / sqrtf((float)nq), false, 0);
        }
        Q35("post_attention_norm.weight", e, 1, 0, true, 0);
        Q35("ffn_gate.weight", e, ff, s3 / sqrtf((float)e), false, 0);
        Q35("ffn_up.weight", e, ff, s3 / sqrtf((float)e), false, 0);
        Q35("ffn_down.weight", ff, e, s3 / sqrtf((float)ff), false, 0);
#undef Q35
    }
    for (int32_t l = 0; l < mk->n_layer && !mamba && !qwen35; l++) {
        char nm[96];
#define LAYER(suffix, in, out, sc) do { snprintf(nm, sizeof nm, "blk.%d.%s", (int)l, suffix); ADD(nm, in, out, sc); } while (0)
        bool phi3 = !strcmp(mk->arch, "phi3");
        LAYER("attn_norm.weight", e, 1, 0);
        if (phi3) {
            LAYER("attn_qkv.weight", e, nq + 2 * nkv, s3 / sqrtf((float)e));
        } else {
            LAYER("attn_q.weight", e, nq, s3 / sqrtf((float)e));
            LAYER("attn_k.weight", e, nkv, s3 / sqrtf((float)e));
            LAYER("attn_v.weight", e, nkv, s3 / sqrtf((float)e));
        }
        bool gemma3 = !strcmp(mk->arch, "gemma3");
        if (!strcmp(mk->arch, "qwen3") || gemma3) {
            LAYER("attn_q_norm.weight", hd, 1, 0);
            LAYER("attn_k_norm.weight", hd, 1, 0);
        }
        if (!strcmp(mk->arch, "qwen2")) {
            LAYER("attn_q.bias", nq, 1, 0.1f);
            LAYER("attn_k.bias", nkv, 1, 0.1f);
            LAYER("attn_v.bias", nkv, 1, 0.1f);
        }
        LAYER("attn_output.weight", nq, e, s3 / sqrtf((float)nq));
        if (gemma3) LAYER("post_attention_norm.weight", e, 1, 0);
        LAYER("ffn_norm.weight", e, 1, 0);
        if (phi3) {
            LAYER("ffn_up.weight", e, 2 * ff, s3 / sqrtf((float)e));
        } else {
            LAYER("ffn_gate.weight", e, ff, s3 / sqrtf((float)e));
            LAYER("ffn_up.weight", e, ff, s3 / sqrtf((float)e));
        }
        LAYER("ffn_down.weight", ff, e, s3 / sqrtf((float)ff));
        if (gemma3) LAYER("post_ffw_norm.weight", e, 1, 0);
#undef LAYER
    }
#undef ADD
    return n;
}

/* Biases are vectors with a nonzero scale; norms are all ones. */
static int write_tensor(struct gguf_writer *w, struct mk *mk, const struct tensor_plan *t, float *row, void *q) {
    uint64_t n_rows = t->n_out, n_in = t->n_in;
    if (n_rows == 1) {
        for (uint64_t i = 0; i < n_in; i++) row[i] = t->scale == 0 ? 1.0f : t->offset + t->scale * uniform(&mk->rng);
        gguf_writer_write(w, row, n_in * sizeof(float));
        return w->err;
    }
    size_t rs = ggml_row_size(t->type, n_in);
    for (uint64_t r = 0; r < n_rows && !w->err; r++) {
        for (uint64_t i = 0; i < n_in; i++) row[i] = t->offset + t->scale * uniform(&mk->rng);
        quant_from_float(t->type, row, q, (int64_t)n_in);
        gguf_writer_write(w, q, rs);
    }
    return w->err;
}

static int parse(struct mk *mk, const char **out, const char **vocab, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tied")) {
            mk->tied = true;
            continue;
        }
        if (!v) return -1;
        i++;
        if (!strcmp(a, "--out")) *out = v;
        else if (!strcmp(a, "--vocab")) *vocab = v;
        else if (!strcmp(a, "--arch")) mk->arch = v;
        else if (!strcmp(a, "--n-embd")) mk->n_embd = atoi(v);
        else if (!strcmp(a, "--n-layer")) mk->n_layer = atoi(v);
        else if (!strcmp(a, "--n-head")) mk->n_head = atoi(v);
        else if (!strcmp(a, "--n-head-kv")) mk->n_head_kv = atoi(v);
        else if (!strcmp(a, "--head-dim")) mk->head_dim = atoi(v);
        else if (!strcmp(a, "--window")) mk->window = atoi(v);
        else if (!strcmp(a, "--n-ff")) mk->n_ff = atoi(v);
        else if (!strcmp(a, "--ctx")) mk->n_ctx = atoi(v);
        else if (!strcmp(a, "--rope-base")) mk->rope_base = strtof(v, NULL);
        else if (!strcmp(a, "--seed")) mk->rng = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--d-inner")) mk->d_inner = atoi(v);
        else if (!strcmp(a, "--d-state")) mk->d_state = atoi(v);
        else if (!strcmp(a, "--d-conv")) mk->d_conv = atoi(v);
        else if (!strcmp(a, "--dt-rank")) mk->dt_rank = atoi(v);
        else if (!strcmp(a, "--n-group")) mk->n_group = atoi(v);
        else if (!strcmp(a, "--n-rot")) mk->n_rot = atoi(v);
        else if (!strcmp(a, "--type")) {
            size_t k = 0;
            while (k < sizeof type_names / sizeof *type_names && strcmp(type_names[k].name, v)) k++;
            if (k == sizeof type_names / sizeof *type_names) return -1;
            mk->type = type_names[k].type;
            mk->q4_k_m = !strcmp(v, "q4_k_m");
        } else return -1;
    }
    if (!strcmp(mk->arch, "mamba")) { /* defaults of the Mamba papers' shapes */
        if (mk->d_inner == 0) mk->d_inner = 2 * mk->n_embd;
        if (mk->d_state == 0) mk->d_state = 16;
        if (mk->dt_rank == 0) mk->dt_rank = (mk->n_embd + 15) / 16;
        return *out && *vocab && mk->n_embd > 0 && mk->n_layer > 0 && mk->d_inner > 0 && mk->d_state > 0 &&
               mk->d_conv > 0 && mk->dt_rank > 0 && mk->n_ctx > 0 ? 0 : -1;
    }
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "phi3", "gemma3", "qwen35"};
    bool known = false;
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) known = known || !strcmp(mk->arch, archs[i]);
    if (mk->head_dim == 0 && mk->n_head > 0 && mk->n_embd % mk->n_head == 0) mk->head_dim = mk->n_embd / mk->n_head;
    if (!strcmp(mk->arch, "qwen35")) { /* defaults of Qwen3.5's delta nets */
        if (mk->d_state == 0) mk->d_state = 128;
        if (mk->dt_rank == 0) mk->dt_rank = 16;
        if (mk->n_group == 0) mk->n_group = mk->dt_rank;
        if (mk->n_rot == 0) mk->n_rot = mk->head_dim / 4 / 2 * 2;
        mk->d_inner = mk->dt_rank * mk->d_state;
        if (mk->n_group <= 0 || mk->dt_rank % mk->n_group || mk->n_rot <= 0 || mk->n_rot > mk->head_dim ||
            mk->n_rot % 2 || mk->d_conv <= 0 || mk->d_state <= 0)
            return -1;
    }
    bool ok = *out && *vocab && known && mk->n_embd > 0 && mk->n_layer > 0 && mk->n_head > 0 && mk->n_head_kv > 0 &&
              mk->n_head % mk->n_head_kv == 0 && mk->head_dim > 0 && mk->head_dim % 2 == 0 && mk->n_ff > 0 &&
              mk->n_ctx > 0 && mk->rope_base > 0 && mk->window >= 0;
    return ok ? 0 : -1;
}

int cmd_mkmodel(int argc, char **argv) {
    struct mk mk = {.arch = "llama", .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4, .n_ff = 768,
                    .n_ctx = 4096, .rope_base = 10000, .type = GGML_TYPE_F16, .rng = 1, .d_conv = 4,
                    .window = 512};
    const char *out = NULL, *vocab_path = NULL;
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        mk_usage(stdout);
        return 0;
    }
    if (parse(&mk, &out, &vocab_path, argc, argv) < 0) {
        mk_usage(stderr);
        return 2;
    }
    if (mk.rng == 0) mk.rng = 1;  /* xorshift needs a nonzero state */
    char why[256];
    struct gguf_file vocab;
    if (gguf_open(&vocab, vocab_path, why, sizeof why) < 0) {
        fprintf(stderr, "mkmodel: %s: %s\n", vocab_path, why);
        return 1;
    }
    const struct gguf_array *toks = gguf_get_arr(&vocab, "tokenizer.ggml.tokens");
    if (!toks || toks->n == 0 || toks->n > INT32_MAX) {
        fprintf(stderr, "mkmodel: %s has no tokenizer.ggml.tokens\n", vocab_path);
        gguf_close(&vocab);
        return 1;
    }
    int32_t n_vocab = (int32_t)toks->n;
    struct gguf_writer w;
    gguf_writer_init(&w);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", mk.arch, suffix), key)
    gguf_writer_set_str(&w, "general.architecture", mk.arch);
    gguf_writer_set_str(&w, "general.name", "uvlm mkmodel random weights");
    gguf_writer_set_u32(&w, KEY("context_length"), (uint32_t)mk.n_ctx);
    gguf_writer_set_u32(&w, KEY("embedding_length"), (uint32_t)mk.n_embd);
    gguf_writer_set_u32(&w, KEY("block_count"), (uint32_t)mk.n_layer);
    if (!strcmp(mk.arch, "mamba")) {
        gguf_writer_set_u32(&w, KEY("ssm.conv_kernel"), (uint32_t)mk.d_conv);
        gguf_writer_set_u32(&w, KEY("ssm.inner_size"), (uint32_t)mk.d_inner);
        gguf_writer_set_u32(&w, KEY("ssm.state_size"), (uint32_t)mk.d_state);
        gguf_writer_set_u32(&w, KEY("ssm.time_step_rank"), (uint32_t)mk.dt_rank);
    } else {
        gguf_writer_set_u32(&w, KEY("feed_forward_length"), (uint32_t)mk.n_ff);
        gguf_writer_set_u32(&w, KEY("attention.head_count"), (uint32_t)mk.n_head);
        gguf_writer_set_u32(&w, KEY("attention.head_count_kv"), (uint32_t)mk.n_head_kv);
        gguf_writer_set_f32(&w, KEY("rope.freq_base"), mk.rope_base);
        if (!strcmp(mk.arch, "gemma3")) gguf_writer_set_u32(&w, KEY("attention.sliding_window"), (uint32_t)mk.window);
        if (!strcmp(mk.arch, "qwen35")) {
            gguf_writer_set_u32(&w, KEY("ssm.conv_kernel"), (uint32_t)mk.d_conv);
            gguf_writer_set_u32(&w, KEY("ssm.state_size"), (uint32_t)mk.d_state);
            gguf_writer_set_u32(&w, KEY("ssm.group_count"), (uint32_t)mk.n_group);
            gguf_writer_set_u32(&w, KEY("ssm.time_step_rank"), (uint32_t)mk.dt_rank);
            gguf_writer_set_u32(&w, KEY("ssm.inner_size"), (uint32_t)mk.d_inner);
            gguf_writer_set_u32(&w, KEY("full_attention_interval"), 4);
            gguf_writer_set_u32(&w, KEY("rope.dimension_count"), (uint32_t)mk.n_rot);
            /* the interleaved rope's sections (t, h, w, other), as Qwen3.5's files hold them (the
             * reference's loader requires the key): pair p in section p % 3, 11, 11, 10 of 32 */
            const int32_t pairs = mk.n_rot / 2, sections[4] = {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0};
            gguf_writer_set_arr_i32(&w, KEY("rope.dimension_sections"), sections, 4);
        }
        if (mk.head_dim * mk.n_head != mk.n_embd) {
            gguf_writer_set_u32(&w, KEY("attention.key_length"), (uint32_t)mk.head_dim);
            gguf_writer_set_u32(&w, KEY("attention.value_length"), (uint32_t)mk.head_dim);
        }
    }
    gguf_writer_set_f32(&w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
#undef KEY
    for (uint64_t i = 0; i < vocab.n_kv; i++) {
        struct gguf_str k = vocab.kv[i].key;
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) gguf_writer_copy_kv(&w, &vocab.kv[i]);
    }
    int n_plan = 4 + 14 * mk.n_layer;
    struct tensor_plan *p = calloc((size_t)n_plan, sizeof *p);
    uint64_t max_in = (uint64_t)(mk.n_ff > mk.n_embd ? mk.n_ff : mk.n_embd);
    if ((uint64_t)mk.head_dim * (uint64_t)mk.n_head > max_in) max_in = (uint64_t)mk.head_dim * (uint64_t)mk.n_head;
    if ((uint64_t)mk.d_inner > max_in) max_in = (uint64_t)mk.d_inner;
    float *row = malloc(max_in * sizeof *row);
    void *q = malloc(max_in * sizeof(float));
    int rc = -ERR_NOMEM;
    if (p && row && q) {
        n_plan = plan(&mk, n_vocab, p);
        for (int i = 0; i < n_plan; i++) gguf_writer_add_tensor(&w, p[i].name, p[i].type, p[i].n_in, p[i].n_out);
        rc = gguf_writer_begin(&w, out);
        for (int i = 0; i < n_plan && rc == 0; i++) rc = write_tensor(&w, &mk, &p[i], row, q);
    }
    int frc = gguf_writer_finish(&w);
    if (rc == 0) rc = frc;
    free(p);
    free(row);
    free(q);
    gguf_close(&vocab);
    if (rc < 0) {
        fprintf(stderr, "mkmodel: writing %s: %s\n", out, err_str(rc));
        return 1;
    }
    if (!strcmp(mk.arch, "mamba"))
        fprintf(stderr, "mkmodel: wrote %s (mamba, n_embd %d, %d layers, d_inner %d, d_state %d, d_conv %d, "
                "dt_rank %d, vocab %d, %s)\n", out, mk.n_embd, mk.n_layer, mk.d_inner, mk.d_state, mk.d_conv,
                mk.dt_rank, n_vocab, ggml_type_info(mk.type)->name);
    else
        fprintf(stderr, "mkmodel: wrote %s (%s, n_embd %d, %d layers, %d/%d heads of %d, n_ff %d, vocab %d, %s%s)\n",
                out, mk.arch, mk.n_embd, mk.n_layer, mk.n_head, mk.n_head_kv, mk.head_dim, mk.n_ff, n_vocab,
                ggml_type_info(mk.type)->name, mk.q4_k_m ? " (q4_k_m mix)" : "");
    return 0;
}
