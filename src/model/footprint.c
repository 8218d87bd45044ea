/* footprint.c: a model's memory from its metadata (see footprint.h). */
#include "model/footprint.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "math/matmul.h"
#include "memory/kv.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* "<arch>.<suffix>" of layer il: a scalar, or element il of a per-layer array; dflt if absent. */
static int64_t layer_int(const struct gguf_file *f, const char *arch, const char *suffix, int32_t il, int64_t dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return dflt;
    if (kv->type == GGUF_ARRAY) {
        const struct gguf_array *a = &kv->v.arr;
        if (a->type == GGUF_STRING || a->type == GGUF_FLOAT32 || a->type == GGUF_FLOAT64 || (uint64_t)il >= a->n)
            return dflt;
        return gguf_arr_int(a, (uint64_t)il);
    }
    return gguf_get_int(f, key, dflt);
}

static int64_t arch_int(const struct gguf_file *f, const char *arch, const char *suffix, int64_t dflt) {
    return layer_int(f, arch, suffix, 0, dflt);
}

/* Whether layer il keeps a recurrent state rather than K/V cells. */
static bool layer_recurrent(const struct gguf_file *f, const char *arch, int32_t il, bool ssm, bool attention) {
    if (!ssm) return false;
    if (!attention) return true; /* Mamba: every layer */
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", arch);
    const struct gguf_array *a = gguf_get_arr(f, key);
    if (a && a->type == GGUF_BOOL && (uint64_t)il < a->n) return gguf_arr_int(a, (uint64_t)il) != 0;
    int64_t every = arch_int(f, arch, "full_attention_interval", 0);
    return every > 0 && (il + 1) % every != 0;
}

/* The families with sliding-window layers, and their pattern when the file names none. */
static const struct { const char *arch; int32_t pattern; } swa_families[] = {{"gemma3", 6}};

int32_t model_layer_window(const struct gguf_file *f, const char *arch, int32_t il) {
    int32_t pattern = -1;
    for (size_t i = 0; i < sizeof swa_families / sizeof *swa_families; i++)
        if (!strcmp(arch, swa_families[i].arch)) pattern = swa_families[i].pattern;
    int64_t window = arch_int(f, arch, "attention.sliding_window", 0);
    if (pattern < 0 || window <= 0 || window > INT32_MAX) return 0;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (kv && kv->type == GGUF_ARRAY) {
        const struct gguf_array *a = &kv->v.arr;
        bool swa = a->type == GGUF_BOOL && (uint64_t)il < a->n && gguf_arr_int(a, (uint64_t)il) != 0;
        return swa ? (int32_t)window : 0;
    }
    if (kv) pattern = (int32_t)gguf_get_int(f, key, pattern);
    /* N = 0: every layer windowed; N = 1: none (the reference's set_swa_pattern) */
    bool swa = pattern == 0 || (pattern > 0 && il % pattern < pattern - 1);
    return swa ? (int32_t)window : 0;
}

static int read_shape(const struct gguf_file *f, const struct footprint_config *cfg, struct model_shape *s, char *why,
                      size_t why_len) {
    memset(s, 0, sizeof *s);
    struct gguf_str a = gguf_get_str(f, "general.architecture");
    if (!a.ptr || a.len == 0 || a.len >= sizeof s->arch) {
        snprintf(why, why_len, "general.architecture is missing");
        return -ERR_FORMAT;
    }
    memcpy(s->arch, a.ptr, a.len);
    const char *arch = s->arch;
    s->n_layer = (int32_t)arch_int(f, arch, "block_count", 0);
    s->n_embd = (int32_t)arch_int(f, arch, "embedding_length", 0);
    s->n_ctx_train = arch_int(f, arch, "context_length", 2048);
    s->n_head = (int32_t)arch_int(f, arch, "attention.head_count", 0);
    s->sliding_window = (int32_t)arch_int(f, arch, "attention.sliding_window", 0);
    const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    const struct gguf_array *toks = gguf_get_arr(f, "tokenizer.ggml.tokens");
    s->n_vocab = te ? (int32_t)te->ne[1] : toks ? (int32_t)toks->n : (int32_t)arch_int(f, arch, "vocab_size", 0);
    if (s->n_layer <= 0 || s->n_embd <= 0 || s->n_vocab <= 0 || s->n_ctx_train <= 0) {
        snprintf(why, why_len, "%s: block_count, embedding_length, context_length or the vocabulary is missing", arch);
        return -ERR_FORMAT;
    }
    bool attention = s->n_head > 0;
    int64_t conv = arch_int(f, arch, "ssm.conv_kernel", 0), inner = arch_int(f, arch, "ssm.inner_size", 0);
    int64_t state = arch_int(f, arch, "ssm.state_size", 0), groups = arch_int(f, arch, "ssm.group_count", 0);
    bool ssm = conv > 0 && inner > 0 && state > 0;
    if (ssm) {
        s->ssm_inner = (int32_t)inner;
        s->ssm_state = (int32_t)state;
        s->ssm_conv = (int32_t)conv;
    }
    if (attention) {
        s->head_dim_k = (int32_t)arch_int(f, arch, "attention.key_length", s->n_embd / s->n_head);
        s->head_dim_v = (int32_t)arch_int(f, arch, "attention.value_length", s->head_dim_k);
    }
    /* a recurrent layer's state: the convolution's last conv-1 inputs of its channels (the inner
     * width, plus the grouped B and C of a gated delta net) and the inner x state matrix, in F32 */
    uint64_t layer_state = ssm ? 4 * (uint64_t)((conv - 1) * (inner + 2 * groups * state) + inner * state) : 0;
    for (int32_t il = 0; il < s->n_layer; il++) {
        int64_t ff = layer_int(f, arch, "feed_forward_length", il, 0);
        if (ff > s->n_ff) s->n_ff = (int32_t)ff;
        if (layer_recurrent(f, arch, il, ssm, attention)) {
            s->n_recurrent_layers++;
            s->state_bytes += layer_state;
            continue;
        }
        if (!attention) continue;
        int64_t kv_heads = layer_int(f, arch, "attention.head_count_kv", il, s->n_head);
        if (kv_heads > s->n_head_kv) s->n_head_kv = (int32_t)kv_heads;
        s->n_attn_layers++;
        uint64_t cell = (uint64_t)kv_heads * (kv_type_row_bytes(cfg->type_k, s->head_dim_k) +
                                              kv_type_row_bytes(cfg->type_v, s->head_dim_v));
        s->kv_cell_bytes += cell;
        if (model_layer_window(f, arch, il) > 0) {
            s->n_swa_layers++;
            s->kv_cell_bytes_swa += cell;
        }
    }
    return 0;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* The forward pass's buffers for steps of T tokens with O rows of logits, as the architectures
 * size them (model/llama.c, model/mamba.c), the compute scratch (math/matmul.c) and sampling. */
static uint64_t buffers_bytes(const struct gguf_file *f, const struct model_shape *s, uint64_t T, uint64_t O,
                              uint64_t ctx, uint64_t threads) {
    uint64_t E = (uint64_t)s->n_embd, V = (uint64_t)s->n_vocab, ff = (uint64_t)s->n_ff, floats, ints = 0;
    uint64_t max_rows = max_u64(T, O), max_in = max_u64(E, ff); /* the matmuls' rows */
    if (s->n_attn_layers > 0) {
        uint64_t hd = (uint64_t)s->head_dim_k, nq = (uint64_t)s->n_head * hd, nkv = (uint64_t)s->n_head_kv * hd;
        uint64_t group = s->n_head_kv ? (uint64_t)(s->n_head / s->n_head_kv) : 1;
        uint64_t rot = (uint64_t)arch_int(f, s->arch, "rope.dimension_count", (int64_t)hd);
        uint64_t att_rows = group * min_u64(T, 64), slots = min_u64(threads, 8) * 96;
        uint64_t qg_rows = max_u64(max_u64(slots, att_rows), threads);
        floats = T * (3 * E + 2 * nq + 2 * nkv + 2 * ff + rot) /* activations */
                 + ctx * 2 * nkv                                   /* one sequence's K and V in F32 */
                 + min_u64((uint64_t)s->n_head * 8 * ctx, max_u64((uint64_t)s->n_head * ctx, 1u << 21))
                 + qg_rows * (2 * hd + ctx) + qg_rows * hd / 2;   /* attention scores and rows */
        ints = T * (6 + 2 * (uint64_t)s->n_head_kv) + ctx * 3 + 16 * ctx + T * 8;
        max_in = max_u64(max_in, nq);
    } else { /* recurrent layers (Mamba) */
        uint64_t inner = (uint64_t)arch_int(f, s->arch, "ssm.inner_size", 0);
        uint64_t state = (uint64_t)arch_int(f, s->arch, "ssm.state_size", 0);
        uint64_t rank = (uint64_t)arch_int(f, s->arch, "ssm.time_step_rank", 0);
        floats = T * (2 * E + 5 * inner + 2 * rank + 2 * state);
        max_in = max_u64(E, inner);
    }
    floats += O * (E + V); /* the rows that want logits, and their logits */
    /* the matmuls' scratch: activations quantized (F16 at most) and in the 16-row layouts' blocks;
     * from 32 rows on also F32 rows, packed Q8_0 pairs and a weight tile per thread */
    uint64_t compute = max_rows * ((max_in * 2 + 63) / 64 * 64) + max_rows * (max_in / 32) * 44;
    if (max_rows >= 32) {
        uint64_t tile_rows = min_u64(max_u64((8u << 20) / 4 / max_in, 64), 512);
        compute += max_rows * max_in * 6 + threads * tile_rows * max_in * 4;
    }
    if (compute_amx()) compute += compute_amx_bytes((int)threads, (int64_t)max_rows, (int64_t)max_in);
    uint64_t sampling = V * 16;
    return 4 * (floats + ints) + compute + sampling;
}

int model_footprint(const struct gguf_file *f, const struct footprint_config *cfg, struct model_footprint *out,
                    char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    int rc = read_shape(f, cfg, &out->shape, why, why_len);
    if (rc < 0) return rc;
    const struct model_shape *s = &out->shape;
    int64_t n_ctx = s->n_ctx_train;
    if (cfg->kv_tokens > 0 && cfg->kv_tokens < n_ctx) n_ctx = cfg->kv_tokens;
    if (cfg->max_seq_tokens > 0 && cfg->max_seq_tokens < n_ctx) n_ctx = cfg->max_seq_tokens;
    out->n_ctx = n_ctx;
    int32_t n_seq = cfg->n_seq_max > 0 ? cfg->n_seq_max : 1;
    if (s->n_attn_layers > 0) {
        out->n_cells = cfg->kv_tokens;
        /* per cell: K/V, position, free count, placement, and the sequence bit set; per sequence:
         * largest position, largest released one, cell count (memory/kv.c) */
        uint64_t book = 12 + 8 * (uint64_t)((n_seq + 63) / 64);
        out->kv += (uint64_t)out->n_cells * (s->kv_cell_bytes - s->kv_cell_bytes_swa + book) + 16 * (uint64_t)n_seq;
        if (s->n_swa_layers > 0) { /* their own pool (memory/split.h), and the layer map */
            out->n_swa_cells = kv_window_cells(cfg->kv_tokens, n_seq, s->sliding_window,
                                               cfg->batch_tokens > 0 ? cfg->batch_tokens : 512);
            out->kv += (uint64_t)out->n_swa_cells * (s->kv_cell_bytes_swa + book) + 16 * (uint64_t)n_seq +
                       5 * (uint64_t)s->n_layer;
        }
    }
    if (s->n_recurrent_layers > 0) { /* states of their own budget, a hybrid's as a recurrent model's */
        bool own_budget = cfg->recurrent_states > 0 && cfg->recurrent_states < n_seq;
        out->n_states = own_budget ? cfg->recurrent_states : n_seq;
        out->kv += (uint64_t)out->n_states * s->state_bytes;
        if (s->n_attn_layers > 0) out->kv += 5 * (uint64_t)s->n_layer; /* the split's layer map */
    }
    uint64_t T = cfg->batch_tokens > 0 ? (uint64_t)cfg->batch_tokens : 512;
    uint64_t O = min_u64((uint64_t)n_seq + (uint64_t)(cfg->extra_outputs > 0 ? cfg->extra_outputs : 0), T);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    out->weights = f->size;
    out->buffers = buffers_bytes(f, s, T, O, (uint64_t)n_ctx, cores > 0 ? (uint64_t)cores : 1);
    out->total = out->weights + out->kv + out->buffers;
    return 0;
}

int model_footprint_of_path(const char *path, const struct footprint_config *cfg, struct model_footprint *out,
                            char *why, size_t why_len) {
    struct gguf_file f;
    int rc = gguf_open(&f, path, why, why_len);
    if (rc < 0) return rc;
    rc = model_footprint(&f, cfg, out, why, why_len);
    gguf_close(&f);
    return rc;
}

int model_footprint_kv_cells(const char *path, const struct footprint_config *cfg, uint64_t kv_bytes, int64_t *cells,
                             char *why, size_t why_len) {
    struct gguf_file f;
    int rc = gguf_open(&f, path, why, why_len);
    if (rc < 0) return rc;
    struct footprint_config c = *cfg;
    struct model_footprint fp;
    int64_t lo = 15, hi = (int64_t)1 << 24; /* kv grows with the cells: the last that fits */
    while (rc == 0 && lo < hi) {
        c.kv_tokens = (lo + hi + 1) / 2;
        rc = model_footprint(&f, &c, &fp, why, why_len);
        if (rc == 0 && fp.kv <= kv_bytes) lo = c.kv_tokens;
        else hi = c.kv_tokens - 1;
    }
    gguf_close(&f);
    *cells = lo < 16 ? 0 : lo;
    return rc;
}

const char *footprint_size(uint64_t bytes, char out[24]) {
    if (bytes >= (1ull << 30)) snprintf(out, 24, "%.2f GiB", (double)bytes / (1ull << 30));
    else if (bytes >= (1u << 20)) snprintf(out, 24, "%.1f MiB", (double)bytes / (1 << 20));
    else snprintf(out, 24, "%.1f KiB", (double)bytes / 1024);
    return out;
}

int model_footprint_fits(const struct model_footprint *fp, int64_t available, char *why, size_t why_len) {
    if (available < 0 || fp->total <= (uint64_t)available) return 0;
    char t[24], w[24], k[24], b[24], a[24];
    /* name what to lower: the part that needs the most */
    const char *advice = fp->kv >= fp->weights && fp->kv >= fp->buffers ? "lower --kv-tokens"
                         : fp->weights >= fp->buffers ? "a smaller model or a smaller weight type"
                                                      : "lower --batch-tokens";
    char what[64] = "";
    if (fp->n_cells) snprintf(what, sizeof what, " for %lld cells", (long long)fp->n_cells);
    if (fp->n_states)
        snprintf(what + strlen(what), sizeof what - strlen(what), "%s %lld recurrent states",
                 fp->n_cells ? " and" : " for", (long long)fp->n_states);
    snprintf(why, why_len,
             "the model needs %s (weights %s + KV %s%s + buffers %s), more than the %s the machine has "
             "available: %s",
             footprint_size(fp->total, t), footprint_size(fp->weights, w), footprint_size(fp->kv, k), what,
             footprint_size(fp->buffers, b), footprint_size((uint64_t)available, a), advice);
    return -ERR_NOMEM;
}
