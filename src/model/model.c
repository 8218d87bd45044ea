/* model.c: loading a GGUF model: general.architecture picks the implementation (model/arch.h);
 * for the transformer families, hyperparameters and the description of their computation
 * (struct transformer_desc) from metadata, weights checked against the shapes they imply. */
#include "model/arch.h"
#include "model/footprint.h"
#include "common/err.h"
#include "math/matmul.h"
#include "math/q8x16.h"
#include "math/quant.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The architectures this engine runs, as named by general.architecture, and what their
 * transformer computes beyond llama's (struct transformer_desc; mamba: its own, model/mamba.c). */
struct arch_info {
    const char *name;
    enum model_arch arch;
    const struct arch_impl *impl;
    enum rope_type rope;
    bool qkv_bias, qk_norm;
    bool scale_q;        /* the query scaled before attention (struct transformer_desc) */
    bool fused_gate_up;  /* ffn_up holds gate and up */
};

static const struct arch_info archs[] = {
    /*                                       rope       qkv_bias qk_norm scale_q fused_gate_up */
    {"llama", MODEL_ARCH_LLAMA, &llama_impl, ROPE_NORM, false,   false,  false,  false},
    {"qwen2", MODEL_ARCH_QWEN2, &llama_impl, ROPE_NEOX, true,    false,  false,  false},
    {"qwen3", MODEL_ARCH_QWEN3, &llama_impl, ROPE_NEOX, false,   true,   false,  false},
    {"phi3",  MODEL_ARCH_PHI3,  &llama_impl, ROPE_NEOX, false,   false,  true,   true},
    {"gemma3", MODEL_ARCH_GEMMA3, &llama_impl, ROPE_NEOX, false, true,   true,   false},
    {"qwen35", MODEL_ARCH_QWEN35, &llama_impl, ROPE_NEOX, false, true,   false,  false},
    {"mamba", MODEL_ARCH_MAMBA, &mamba_impl, ROPE_NORM, false,   false,  false,  false},
};

static int fail(char *why, size_t why_len, int code, const char *fmt, ...) {
    if (why && why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* "<arch>.<suffix>" as an integer, or dflt. */
static int64_t arch_int(const struct gguf_file *f, const char *arch, const char *suffix, int64_t dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_int(f, key, dflt);
}

static double arch_float(const struct gguf_file *f, const char *arch, const char *suffix, double dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_float(f, key, dflt);
}

struct loader {
    const struct gguf_file *f;
    char *why;
    size_t why_len;
    size_t bytes;
};

/* A matrix of n_out rows of n_in elements; optional ones may be absent (w->data stays NULL). */
static int get_matrix(struct loader *ld, struct model_weight *w, const char *name, int64_t n_in, int64_t n_out,
                      bool optional) {
    const struct gguf_tensor *t = gguf_find_tensor(ld->f, name);
    *w = (struct model_weight){0};
    if (!t) return optional ? 0 : fail(ld->why, ld->why_len, -ERR_FORMAT, "tensor '%s' is missing", name);
    if (t->n_dims != 2 || (int64_t)t->ne[0] != n_in || (int64_t)t->ne[1] != n_out)
        return fail(ld->why, ld->why_len, -ERR_FORMAT, "tensor '%s' is %llux%llu, expected %lldx%lld", name,
                    (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)n_in, (long long)n_out);
    if (!quant_supported(t->type) || ggml_row_size(t->type, (uint64_t)n_in) == 0) {
        const char *tn = ggml_type_info(t->type)->name;
        return fail(ld->why, ld->why_len, -ERR_UNSUPPORTED, "tensor '%s' has unsupported type %s", name,
                    tn ? tn : "?");
    }
    *w = (struct model_weight){.type = t->type, .data = t->data, .n_in = n_in, .n_out = n_out};
    ld->bytes += t->size;
    return 0;
}

/* A vector of n F32 values (norm weights, biases). */
static int get_vector(struct loader *ld, const float **v, const char *name, int64_t n, bool optional) {
    const struct gguf_tensor *t = gguf_find_tensor(ld->f, name);
    *v = NULL;
    if (!t) return optional ? 0 : fail(ld->why, ld->why_len, -ERR_FORMAT, "tensor '%s' is missing", name);
    if ((int64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]) != n)
        return fail(ld->why, ld->why_len, -ERR_FORMAT, "tensor '%s' has %llu elements, expected %lld", name,
                    (unsigned long long)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]), (long long)n);
    if (t->type != GGML_TYPE_F32)
        return fail(ld->why, ld->why_len, -ERR_UNSUPPORTED, "tensor '%s' must be f32", name);
    *v = t->data;
    ld->bytes += t->size;
    return 0;
}

/* The rope scaling the metadata names (the reference's keys): none, or linear, whose factor
 * divides the positions (rope.scaling.factor, or the older rope.scale_linear; none given: 1).
 * Llama 3.1/3.2's scaling comes as the rope_freqs.weight tensor instead (load_weights). Any
 * other type (yarn, longrope, ...) or a magnitude factor is refused by name: it would change
 * the numbers this pass computes. */
static int read_rope_scaling(const struct gguf_file *f, const char *n, struct rope_desc *rd, char *why,
                             size_t why_len) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", n);
    struct gguf_str type = gguf_get_str(f, key);
    if (type.ptr && gguf_str_eq(type, "none")) return 0;
    if (type.ptr && !gguf_str_eq(type, "linear"))
        return fail(why, why_len, -ERR_UNSUPPORTED, "%s: rope scaling '%.*s' is not supported (supported: none, linear, "
                    "and Llama 3's rope_freqs)", n, (int)(type.len > 32 ? 32 : type.len), type.ptr);
    double factor = arch_float(f, n, "rope.scaling.factor", 0);
    if (factor == 0) factor = arch_float(f, n, "rope.scale_linear", 0);
    if (factor == 0) factor = 1;
    if (!(factor > 0)) return fail(why, why_len, -ERR_FORMAT, "%s: rope scaling factor %g is not positive", n, factor);
    rd->freq_scale = (float)(1.0 / factor);
    double attn_factor = arch_float(f, n, "rope.scaling.attn_factor", 1);
    if (attn_factor != 1)
        return fail(why, why_len, -ERR_UNSUPPORTED, "%s: rope.scaling.attn_factor %g is not supported", n, attn_factor);
    return 0;
}

/* Gemma 3 (the reference's gemma3 graph): embeddings x sqrt(n_embd), per-head q/k norms, q scaled
 * by 1/sqrt(head_dim) (1/sqrt(n_embd/n_head) for the 62-layer 27B: its query_pre_attn_scalar)
 * before its F16 rounding, GELU-gated feed-forward, a norm after the attention and after the
 * feed-forward (model_layer's post norms; the file's norm weights already hold Gemma's 1 + w).
 * Its sliding-window layers (model_layer_window) rotate with rope 1, base rope.freq_base_swa
 * (10000 when absent) and no scaling; the full-attention layers with rope 0, rope.freq_base and
 * the file's linear scaling. Without a window, the reference caps the logits instead
 * (final_logit_softcapping): not implemented, refused. */
static int gemma3_desc(const struct gguf_file *f, struct model_hparams *hp, char *why, size_t why_len) {
    const char *n = hp->arch_name;
    struct transformer_desc *tf = &hp->tf;
    tf->embd_scale = sqrtf((float)hp->n_embd);
    tf->act = FFN_GELU_TANH;
    tf->attn_scale = 1.0f / sqrtf((float)(hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim));
    if (arch_int(f, n, "attention.sliding_window", 0) <= 0) {
        if (arch_float(f, n, "final_logit_softcapping", 0) > 0)
            return fail(why, why_len, -ERR_UNSUPPORTED, "%s without a sliding window: final logit soft-capping is "
                        "not supported", n);
        return 0;
    }
    tf->n_rope = 2;
    tf->rope[1] = (struct rope_desc){.base = (float)arch_float(f, n, "rope.freq_base_swa", 10000.0),
                                     .freq_scale = 1.0f};
    if (!(tf->rope[1].base > 0)) return fail(why, why_len, -ERR_FORMAT, "%s: rope.freq_base_swa must be positive", n);
    return 0;
}

/* Qwen3.5 (the reference's qwen35 graph): gated delta-net layers (ssm.*: model/deltanet.h) and,
 * every few layers, gated full attention: wq gives each head's query and gate, q/k head norms,
 * the interleaved multi-section rope (rope.dimension_sections) on rope.dimension_count dims. A
 * text token's position is the same in the t, h and w sections, so that rope is NEOX rope at the
 * position wherever every rotated pair falls in one of them; a pair in the fourth section (which
 * turns by another position) is refused. */
static int qwen35_desc(const struct gguf_file *f, struct model_hparams *hp, char *why, size_t why_len) {
    const char *n = hp->arch_name;
    struct transformer_desc *tf = &hp->tf;
    tf->attn_gate = true;
    tf->dn = (struct delta_net_desc){
        .d_conv = (int32_t)arch_int(f, n, "ssm.conv_kernel", -1),
        .n_k_heads = (int32_t)arch_int(f, n, "ssm.group_count", -1),
        .n_v_heads = (int32_t)arch_int(f, n, "ssm.time_step_rank", -1),
        .head_dim = (int32_t)arch_int(f, n, "ssm.state_size", -1),
    };
    int64_t inner = arch_int(f, n, "ssm.inner_size", -1);
    const struct delta_net_desc *dn = &tf->dn;
    if (dn->d_conv < 1 || dn->d_conv > 64 || dn->n_k_heads < 1 || dn->n_v_heads < 1 || dn->head_dim < 1 ||
        dn->head_dim > 1024 || dn->n_v_heads % dn->n_k_heads || inner != (int64_t)dn->n_v_heads * dn->head_dim)
        return fail(why, why_len, -ERR_FORMAT, "%s: ssm.conv_kernel, group_count, time_step_rank, state_size and "
                    "inner_size (= time_step_rank x state_size) must describe the delta-net heads", n);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", n);
    const struct gguf_array *sec = gguf_get_arr(f, key);
    if (sec && sec->n >= 3) {
        int64_t s[4] = {0, 0, 0, 0}, sum = 0;
        for (uint64_t i = 0; i < 4 && i < sec->n; i++) sum += s[i] = gguf_arr_int(sec, i);
        for (int32_t p = 0; sum > 0 && p < hp->n_rot / 2; p++) {
            int64_t sector = p % sum;
            bool text = (sector % 3 == 0 && sector < 3 * s[0]) || (sector % 3 == 1 && sector < 3 * s[1]) ||
                        (sector % 3 == 2 && sector < 3 * s[2]);
            if (!text)
                return fail(why, why_len, -ERR_UNSUPPORTED, "%s: rope pair %d in the fourth rope section is not "
                            "supported", n, (int)p);
        }
    }
    return 0;
}

static int read_hparams(const struct gguf_file *f, struct model_hparams *hp, char *why, size_t why_len) {
    struct gguf_str a = gguf_get_str(f, "general.architecture");
    if (!a.ptr) return fail(why, why_len, -ERR_FORMAT, "general.architecture is missing");
    const struct arch_info *ai = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
        if (gguf_str_eq(a, archs[i].name)) ai = &archs[i];
    if (!ai)
        return fail(why, why_len, -ERR_UNSUPPORTED,
                    "architecture '%.*s' is not supported (supported: llama, qwen2, qwen3, phi3, gemma3, qwen35, mamba)",
                    (int)(a.len > 64 ? 64 : a.len), a.ptr);
    const char *n = ai->name;
    if (ai->impl->load) { /* the family reads its own hyperparameters */
        *hp = (struct model_hparams){.arch = ai->arch, .arch_name = ai->name, .impl = ai->impl};
        return 0;
    }
    *hp = (struct model_hparams){
        .arch = ai->arch,
        .arch_name = ai->name,
        .n_embd = (int32_t)arch_int(f, n, "embedding_length", -1),
        .n_layer = (int32_t)arch_int(f, n, "block_count", -1),
        .n_head = (int32_t)arch_int(f, n, "attention.head_count", -1),
        .n_ff = (int32_t)arch_int(f, n, "feed_forward_length", -1),
        .n_ctx_train = (int32_t)arch_int(f, n, "context_length", 2048),
        .rms_eps = (float)arch_float(f, n, "attention.layer_norm_rms_epsilon", 1e-5),
        .impl = ai->impl,
    };
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_ff <= 0 || hp->n_ctx_train <= 0)
        return fail(why, why_len, -ERR_FORMAT, "%s: embedding_length, block_count, attention.head_count, "
                    "feed_forward_length and context_length must be present and positive", n);
    hp->n_head_kv = (int32_t)arch_int(f, n, "attention.head_count_kv", hp->n_head);
    hp->head_dim = (int32_t)arch_int(f, n, "attention.key_length", hp->n_embd / hp->n_head);
    int64_t vlen = arch_int(f, n, "attention.value_length", hp->head_dim);
    hp->n_rot = (int32_t)arch_int(f, n, "rope.dimension_count", hp->head_dim);
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
        return fail(why, why_len, -ERR_FORMAT, "%s: %d heads is not a multiple of %d kv heads", n, hp->n_head,
                    hp->n_head_kv);
    if (hp->head_dim <= 0 || vlen != hp->head_dim)
        return fail(why, why_len, -ERR_UNSUPPORTED, "%s: key length %d and value length %lld must be equal", n,
                    hp->head_dim, (long long)vlen);
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return fail(why, why_len, -ERR_FORMAT, "%s: rope.dimension_count %d does not fit head size %d", n, hp->n_rot,
                    hp->head_dim);
    struct transformer_desc *tf = &hp->tf;
    *tf = (struct transformer_desc){
        .rope_type = ai->rope,
        .n_rope = 1,
        .rope[0] = {.base = (float)arch_float(f, n, "rope.freq_base", 10000.0), .freq_scale = 1.0f},
        .act = FFN_SILU,
        .embd_scale = 1.0f,
        .attn_scale = 1.0f / sqrtf((float)hp->head_dim),
        .qkv_bias = ai->qkv_bias,
        .qk_norm = ai->qk_norm,
        .scale_q = ai->scale_q,
        .fused_gate_up = ai->fused_gate_up,
    };
    if (!(hp->rms_eps > 0) || !(tf->rope[0].base > 0))
        return fail(why, why_len, -ERR_FORMAT, "%s: rms epsilon and rope base must be positive", n);
    int rc = read_rope_scaling(f, n, &tf->rope[0], why, why_len);
    if (rc == 0 && ai->arch == MODEL_ARCH_GEMMA3) rc = gemma3_desc(f, hp, why, why_len);
    if (rc == 0 && ai->arch == MODEL_ARCH_QWEN35) rc = qwen35_desc(f, hp, why, why_len);
    return rc;
}

/* Rows [r0, r0 + n) of w as a matrix of their own: a part of a fused tensor (each row's bytes
 * stand alone, so a part multiplies exactly as a separate tensor would). */
static struct model_weight weight_rows(const struct model_weight *w, int64_t r0, int64_t n) {
    size_t row = ggml_row_size(w->type, (uint64_t)w->n_in);
    return (struct model_weight){.type = w->type, .data = (const char *)w->data + (size_t)r0 * row, .n_in = w->n_in,
                                 .n_out = n};
}

/* Layer i's q, k and v: attn_q/k/v, or the fused attn_qkv (q rows, then k, then v; phi3). */
static int get_qkv(struct loader *ld, struct model_layer *L, int32_t i, struct model_hparams *hp) {
    int64_t e = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim, nkv = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", (int)i);
    if (gguf_find_tensor(ld->f, name)) {
        struct model_weight qkv;
        int rc = get_matrix(ld, &qkv, name, e, nq + 2 * nkv, false);
        if (rc < 0) return rc;
        L->wq = weight_rows(&qkv, 0, nq);
        L->wk = weight_rows(&qkv, nq, nkv);
        L->wv = weight_rows(&qkv, nq + nkv, nkv);
        hp->tf.fused_qkv = true;
        return 0;
    }
    int rc;
    snprintf(name, sizeof name, "blk.%d.attn_q.weight", (int)i);
    if ((rc = get_matrix(ld, &L->wq, name, e, hp->tf.attn_gate ? 2 * nq : nq, false)) < 0) return rc;
    snprintf(name, sizeof name, "blk.%d.attn_k.weight", (int)i);
    if ((rc = get_matrix(ld, &L->wk, name, e, nkv, false)) < 0) return rc;
    snprintf(name, sizeof name, "blk.%d.attn_v.weight", (int)i);
    return get_matrix(ld, &L->wv, name, e, nkv, false);
}

/* Layer i's gate and up: ffn_gate and ffn_up, or (tf.fused_gate_up) ffn_up alone holding the
 * gate's rows then up's (the reference's swiglu of one product: act on the first half). */
static int get_gate_up(struct loader *ld, struct model_layer *L, int32_t i, const struct model_hparams *hp) {
    char name[96];
    int rc;
    snprintf(name, sizeof name, "blk.%d.ffn_up.weight", (int)i);
    if (hp->tf.fused_gate_up) {
        struct model_weight both;
        if ((rc = get_matrix(ld, &both, name, hp->n_embd, 2 * (int64_t)hp->n_ff, false)) < 0) return rc;
        L->w_gate = weight_rows(&both, 0, hp->n_ff);
        L->w_up = weight_rows(&both, hp->n_ff, hp->n_ff);
        return 0;
    }
    if ((rc = get_matrix(ld, &L->w_up, name, hp->n_embd, hp->n_ff, false)) < 0) return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", (int)i);
    return get_matrix(ld, &L->w_gate, name, hp->n_embd, hp->n_ff, false);
}

/* Is layer i of a qwen35 model a delta-net layer? attention.recurrent_layers when the file has
 * it, else all but every full_attention_interval-th (4 by default). */
static bool qwen35_recurrent(const struct gguf_file *f, const char *n, int32_t i) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", n);
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (kv && kv->type == GGUF_ARRAY && kv->v.arr.type == GGUF_BOOL && (uint64_t)i < kv->v.arr.n)
        return gguf_arr_int(&kv->v.arr, (uint64_t)i) != 0;
    int64_t interval = arch_int(f, n, "full_attention_interval", 4);
    return interval > 0 && (i + 1) % interval != 0;
}

/* A qwen35 layer: a delta-net or a gated attention, then the FFN after post_attention_norm. */
static int qwen35_layer(struct loader *ld, struct model_hparams *hp, struct model_layer *L, int32_t i) {
    int64_t e = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim;
    const struct delta_net_desc *dn = &hp->tf.dn;
    int64_t ch = (int64_t)(2 * dn->n_k_heads + dn->n_v_heads) * dn->head_dim, vw = (int64_t)dn->n_v_heads * dn->head_dim;
    char name[96];
    int rc;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, (int)i), name)
    L->recurrent = qwen35_recurrent(ld->f, hp->arch_name, i);
    if ((rc = get_vector(ld, &L->attn_norm, NAME("attn_norm.weight"), e, false)) < 0 ||
        (rc = get_vector(ld, &L->ffn_norm, NAME("post_attention_norm.weight"), e, false)) < 0 ||
        (rc = get_gate_up(ld, L, i, hp)) < 0 ||
        (rc = get_matrix(ld, &L->w_down, NAME("ffn_down.weight"), hp->n_ff, e, false)) < 0)
        return rc;
    if (!L->recurrent) {
        if ((rc = get_qkv(ld, L, i, hp)) < 0 ||
            (rc = get_matrix(ld, &L->wo, NAME("attn_output.weight"), nq, e, false)) < 0 ||
            (rc = get_vector(ld, &L->q_norm, NAME("attn_q_norm.weight"), hp->head_dim, false)) < 0 ||
            (rc = get_vector(ld, &L->k_norm, NAME("attn_k_norm.weight"), hp->head_dim, false)) < 0)
            return rc;
        return 0;
    }
    if ((rc = get_matrix(ld, &L->w_qkv, NAME("attn_qkv.weight"), e, ch, false)) < 0 ||
        (rc = get_matrix(ld, &L->w_z, NAME("attn_gate.weight"), e, vw, false)) < 0 ||
        (rc = get_matrix(ld, &L->w_beta, NAME("ssm_beta.weight"), e, dn->n_v_heads, false)) < 0 ||
        (rc = get_matrix(ld, &L->w_alpha, NAME("ssm_alpha.weight"), e, dn->n_v_heads, false)) < 0 ||
        (rc = get_matrix(ld, &L->ssm_out, NAME("ssm_out.weight"), vw, e, false)) < 0 ||
        (rc = get_vector(ld, &L->conv_w, NAME("ssm_conv1d.weight"), ch * dn->d_conv, false)) < 0 ||
        (rc = get_vector(ld, &L->dt_bias, NAME("ssm_dt.bias"), dn->n_v_heads, false)) < 0 ||
        (rc = get_vector(ld, &L->ssm_a, NAME("ssm_a"), dn->n_v_heads, false)) < 0 ||
        (rc = get_vector(ld, &L->ssm_norm, NAME("ssm_norm.weight"), dn->head_dim, false)) < 0)
        return rc;
#undef NAME
    return 0;
}

static int load_weights(struct model *m, char *why, size_t why_len) {
    struct model_hparams *hp = &m->hp;
    struct transformer_desc *tf = &hp->tf;
    struct loader ld = {.f = &m->file, .why = why, .why_len = why_len};
    const struct gguf_tensor *te = gguf_find_tensor(&m->file, "token_embd.weight");
    if (!te) return fail(why, why_len, -ERR_FORMAT, "tensor 'token_embd.weight' is missing");
    hp->n_vocab = (int32_t)te->ne[1];
    if (hp->n_vocab <= 0 || te->ne[1] > INT32_MAX) return fail(why, why_len, -ERR_FORMAT, "bad vocabulary size");
    int rc;
    int64_t e = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim, nkv = (int64_t)hp->n_head_kv * hp->head_dim;
    if ((rc = get_matrix(&ld, &m->token_embd, "token_embd.weight", e, hp->n_vocab, false)) < 0) return rc;
    size_t embd_bytes = ld.bytes;
    ld.bytes = 0; /* the embedding is read one row per token, not whole */
    if ((rc = get_vector(&ld, &m->output_norm, "output_norm.weight", e, false)) < 0) return rc;
    if ((rc = get_matrix(&ld, &m->output, "output.weight", e, hp->n_vocab, true)) < 0) return rc;
    hp->tied_output = m->output.data == NULL;
    if (hp->tied_output) {
        m->output = m->token_embd;
        ld.bytes += embd_bytes;
    }
    /* Llama 3.1/3.2's rope scaling: a divisor of each pair's angle, every layer. Phi-3.5's
     * long/short factors (longrope) depend on the context and scale the angles' magnitude:
     * not implemented, so refused rather than computed without. */
    if ((rc = get_vector(&ld, &hp->tf.rope[0].factors, "rope_freqs.weight", hp->n_rot / 2, true)) < 0) return rc;
    if (gguf_find_tensor(&m->file, "rope_factors_long.weight") || gguf_find_tensor(&m->file, "rope_factors_short.weight"))
        return fail(why, why_len, -ERR_UNSUPPORTED, "%s: rope scaling 'longrope' (rope_factors_long/short) is not "
                    "supported", hp->arch_name);
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return fail(why, why_len, -ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < hp->n_layer; i++) {
        struct model_layer *L = &m->layers[i];
        if (hp->arch == MODEL_ARCH_QWEN35) {
            if ((rc = qwen35_layer(&ld, hp, L, i)) < 0) return rc;
            continue;
        }
        char name[96];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, (int)i), name)
        if ((rc = get_vector(&ld, &L->attn_norm, NAME("attn_norm.weight"), e, false)) < 0 ||
            (rc = get_qkv(&ld, L, i, hp)) < 0 ||
            (rc = get_matrix(&ld, &L->wo, NAME("attn_output.weight"), nq, e, false)) < 0 ||
            (rc = get_vector(&ld, &L->bq, NAME("attn_q.bias"), nq, !tf->qkv_bias)) < 0 ||
            (rc = get_vector(&ld, &L->bk, NAME("attn_k.bias"), nkv, !tf->qkv_bias)) < 0 ||
            (rc = get_vector(&ld, &L->bv, NAME("attn_v.bias"), nkv, !tf->qkv_bias)) < 0 ||
            (rc = get_vector(&ld, &L->q_norm, NAME("attn_q_norm.weight"), hp->head_dim, !tf->qk_norm)) < 0 ||
            (rc = get_vector(&ld, &L->k_norm, NAME("attn_k_norm.weight"), hp->head_dim, !tf->qk_norm)) < 0 ||
            (rc = get_vector(&ld, &L->ffn_norm, NAME("ffn_norm.weight"), e, false)) < 0 ||
            (rc = get_gate_up(&ld, L, i, hp)) < 0 ||
            (rc = get_matrix(&ld, &L->w_down, NAME("ffn_down.weight"), hp->n_ff, e, false)) < 0)
            return rc;
        /* Gemma's norms after the attention and the feed-forward, its sliding-window layers */
        bool gemma = hp->arch == MODEL_ARCH_GEMMA3;
        if ((rc = get_vector(&ld, &L->attn_post_norm, NAME("post_attention_norm.weight"), e, !gemma)) < 0 ||
            (rc = get_vector(&ld, &L->ffn_post_norm, NAME("post_ffw_norm.weight"), e, !gemma)) < 0)
            return rc;
        L->window = gemma ? model_layer_window(&m->file, hp->arch_name, i) : 0;
        L->rope = L->window > 0 && tf->n_rope > 1 ? 1 : 0;
#undef NAME
    }
    m->weight_bytes = ld.bytes;
    return 0;
}

/* model_options.serving_layout: each Q8_0, Q5_0, Q4_K and Q6_K matrix the forward pass
 * multiplies by (the output once when it is the embedding too) rewritten in place into
 * q8x16.h's layouts. `lookup`: the matrix is also the token embedding, whose rows are read one
 * by one (Q6_K's layout has no row lookup: it stays). A tensor not on a 32-byte boundary
 * (general.alignment below 32) keeps the file's layout. */
static int rewrite_x16(struct model *m, struct model_weight *w, bool lookup, char *why, size_t why_len) {
    int rc;
    if ((uintptr_t)w->data % 32) return 0;
    enum ggml_type to;
    if (w->type == GGML_TYPE_Q8_0) {
        rc = q8x16_repack((void *)w->data, w->n_in, w->n_out);
        to = UVLM_TYPE_Q8_0_X16;
    } else if (w->type == GGML_TYPE_Q5_0) {
        rc = q5x16_repack((void *)w->data, w->n_in, w->n_out);
        to = UVLM_TYPE_Q5_0_X16;
    } else if (w->type == GGML_TYPE_Q4_K) {
        rc = q4kx16_repack((void *)w->data, w->n_in, w->n_out);
        to = UVLM_TYPE_Q4_K_X16;
    } else if (w->type == GGML_TYPE_Q6_K && !lookup) {
        rc = q6kx16_repack((void *)w->data, w->n_in, w->n_out);
        to = UVLM_TYPE_Q6_K_X16;
    } else {
        return 0;
    }
    if (rc < 0) return fail(why, why_len, -ERR_NOMEM, "out of memory");
    w->type = to;
    m->serving_layout = true;
    return 0;
}

static int serving_layout(struct model *m, char *why, size_t why_len) {
    int rc = rewrite_x16(m, &m->output, m->output.data == m->token_embd.data, why, why_len);
    for (int32_t i = 0; rc == 0 && i < m->hp.n_layer; i++) {
        struct model_layer *L = &m->layers[i];
        struct model_weight *w[] = {&L->wq,    &L->wk,  &L->wv,     &L->wo,      &L->w_gate, &L->w_up,
                                    &L->w_down, &L->w_qkv, &L->w_z, &L->w_beta, &L->w_alpha, &L->ssm_out};
        for (size_t k = 0; rc == 0 && k < sizeof w / sizeof w[0]; k++) rc = rewrite_x16(m, w[k], false, why, why_len);
    }
    if (m->output.data == m->token_embd.data) m->token_embd = m->output; /* tied (or one tensor named twice) */
    return rc;
}

int model_load(struct model **out, const char *path, const struct model_options *opt, char *why, size_t why_len) {
    struct model *m = calloc(1, sizeof *m);
    if (!m) return fail(why, why_len, -ERR_NOMEM, "out of memory");
    int rc = gguf_open_resident(&m->file, path, why, why_len);
    if (rc < 0) {
        free(m);
        return rc;
    }
    if ((rc = read_hparams(&m->file, &m->hp, why, why_len)) < 0 ||
        (rc = m->hp.impl->load ? m->hp.impl->load(m, why, why_len) : load_weights(m, why, why_len)) < 0 ||
        (opt && opt->serving_layout && !m->hp.impl->load && m->file.resident && q8x16_supported() &&
         (rc = serving_layout(m, why, why_len)) < 0)) {
        model_free(m);
        return rc;
    }
    if ((rc = gguf_seal(&m->file)) < 0) {
        snprintf(why, why_len, "%s: making the weights read-only: %s", path, strerror(errno));
        model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void model_free(struct model *m) {
    if (!m) return;
    if (m->hp.impl && m->hp.impl->unload) m->hp.impl->unload(m);
    free(m->layers);
    gguf_close(&m->file);
    free(m);
}

int model_memory_create(const struct model *m, int64_t n_cells, int32_t n_seq_max, struct memory **out) {
    return model_memory_create_batches(m, n_cells, n_seq_max, n_cells < INT32_MAX ? (int32_t)n_cells : INT32_MAX, out);
}

int model_memory_create_batches(const struct model *m, int64_t n_cells, int32_t n_seq_max, int32_t max_batch,
                                struct memory **out) {
    struct memory_config mc = {.n_cells = n_cells, .n_seq_max = n_seq_max, .max_batch = max_batch};
    return model_memory_create_with(m, &mc, out);
}

int model_memory_create_with(const struct model *m, const struct memory_config *mc, struct memory **out) {
    if (mc->max_batch < 1) return -ERR_INVAL;
    return m->hp.impl->memory_create(m, mc, out);
}

bool model_memory_counts_states(const struct model *m) { return m->hp.impl->memory_counts_states; }

int32_t model_pooling_type(const struct model *m) {
    char key[96];
    snprintf(key, sizeof key, "%s.pooling_type", m->hp.arch_name);
    int64_t v = gguf_get_int(&m->file, key, -1);
    return v >= 0 && v <= 4 ? (int32_t)v : -1;
}

const char *model_chat_template(const struct model *m, size_t *len) {
    struct gguf_str s = gguf_get_str(&m->file, "tokenizer.chat_template");
    *len = s.ptr ? s.len : 0;
    return s.ptr;
}

int forward_ctx_create(struct forward_ctx **out, const struct model *m, const struct forward_config *cfg) {
    struct forward_config c = *cfg;
    if (c.max_tokens <= 0) return -ERR_INVAL;
    if (c.max_outputs <= 0 || c.max_outputs > c.max_tokens) c.max_outputs = c.max_tokens;
    if (c.n_ctx <= 0) c.n_ctx = m->hp.n_ctx_train;
    if (c.n_threads <= 0) c.n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (c.n_threads <= 0) c.n_threads = 1;
    if (c.reference && m->serving_layout) return -ERR_INVAL;
    int rc = m->hp.impl->ctx_create(out, m, &c);
    if (rc == 0) (*out)->impl = m->hp.impl;
    return rc;
}

void forward_ctx_destroy(struct forward_ctx *fc) {
    if (fc) fc->impl->ctx_destroy(fc);
}

size_t forward_ctx_bytes(const struct forward_ctx *fc) { return fc->impl->ctx_bytes(fc); }

int model_forward(const struct model *m, struct forward_ctx *fc, struct memory *mem, const struct batch *b) {
    return m->hp.impl->forward(m, fc, mem, b);
}

bool model_prompts_on_amx(const struct model *m) { return m->serving_layout && compute_amx(); }
