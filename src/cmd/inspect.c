/* inspect.c: ./uvlm inspect FILE [--kv-tokens N] [--batch-tokens N] [--kv-type f16|q8_0]
 * What a GGUF model is, from its metadata alone (the file is mapped, no weight is read): the
 * architecture and its shape, the tensors' types, the tokenizer and its special tokens, the chat
 * template family the server would use, the context, and the memory a server with these
 * --kv-tokens / --batch-tokens / --kv-type would take (model/footprint.h: the estimate the server checks
 * before it loads) against what the machine has available. One "key: value" line per fact. */
#include "api/chat_template.h"
#include "cmd/cmd.h"
#include "common/err.h"
#include "common/hugemem.h"
#include "gguf/gguf.h"
#include "model/footprint.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The server's defaults (common/config.c): the memory figures match a server started without flags. */
enum { DEFAULT_KV_TOKENS = 4096, DEFAULT_BATCH_TOKENS = 512, DEFAULT_SEQ_MAX = 64 };

static void inspect_usage(FILE *out) {
    fprintf(out, "usage: uvlm inspect FILE [--kv-tokens N (%d)] [--batch-tokens N (%d)] [--kv-type f16|q8_0 (f16)]\n"
                 "  prints the model's architecture, shapes, tensor types, tokenizer, chat template family,\n"
                 "  context and the memory a server with these settings would take; reads metadata only\n",
            DEFAULT_KV_TOKENS, DEFAULT_BATCH_TOKENS);
}

static long long parse_count(const char *v) {
    char *end;
    long long n = strtoll(v, &end, 10);
    return end != v && !*end && n > 0 && n <= (1LL << 24) ? n : -1;
}

static void print_tensor_types(const struct gguf_file *f) {
    uint64_t count[GGML_TYPE_COUNT + 1] = {0};
    size_t bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        enum ggml_type t = f->tensors[i].type;
        count[t < GGML_TYPE_COUNT ? t : GGML_TYPE_COUNT]++;
        bytes += f->tensors[i].size;
    }
    char sz[24];
    printf("tensors: %llu, %s\n", (unsigned long long)f->n_tensors, footprint_size(bytes, sz));
    printf("tensor types:%s", f->n_tensors ? "" : " none");
    /* most frequent first */
    for (bool first = true;;) {
        int best = -1;
        for (int t = 0; t <= GGML_TYPE_COUNT; t++)
            if (count[t] && (best < 0 || count[t] > count[best])) best = t;
        if (best < 0) break;
        const char *name = best < GGML_TYPE_COUNT ? ggml_type_info((uint32_t)best)->name : NULL;
        printf("%s %llu %s", first ? "" : ",", (unsigned long long)count[best], name ? name : "unknown");
        count[best] = 0;
        first = false;
    }
    printf("\n");
}

static void print_token(const struct tokenizer *tok, const char *what, int32_t id) {
    if (id < 0) {
        printf(" %s -", what);
        return;
    }
    size_t len;
    const char *text = tokenizer_token_text(tok, id, &len);
    printf(" %s %d '%.*s'", what, id, (int)(len > 40 ? 40 : len), text);
}

static void print_tokenizer(const struct gguf_file *f) {
    struct gguf_str model = gguf_get_str(f, "tokenizer.ggml.model"), pre = gguf_get_str(f, "tokenizer.ggml.pre");
    if (!model.ptr) {
        printf("tokenizer: none\n");
        return;
    }
    struct tokenizer *tok;
    char why[256];
    int rc = tokenizer_load_with(&tok, f, &(struct tokenizer_options){.allow_unknown_pretokenizer = true}, why,
                                 sizeof why);
    if (rc < 0) {
        printf("tokenizer: %.*s, not loadable: %s\n", (int)model.len, model.ptr, why);
        return;
    }
    printf("tokenizer: %.*s, pre %s%.*s%s, %d tokens\n", (int)model.len, model.ptr, pre.ptr ? "'" : "-",
           pre.ptr ? (int)pre.len : 0, pre.ptr ? pre.ptr : "", pre.ptr ? "'" : "", tokenizer_n_vocab(tok));
    if (pre.ptr && !pretok_lookup(pre.ptr, pre.len) && !gguf_str_eq(model, "gemma4"))
        printf("pre-tokenizer: unknown to uvlm: the server refuses this model unless --allow-unknown-pretokenizer\n");
    printf("special tokens:");
    print_token(tok, "bos", tokenizer_bos(tok));
    print_token(tok, "eos", tokenizer_eos(tok));
    print_token(tok, "eot", tokenizer_eot(tok));
    printf("; adds bos %s, eos %s\n", tokenizer_add_bos(tok) ? "yes" : "no", tokenizer_add_eos(tok) ? "yes" : "no");
    printf("end of generation:");
    int32_t n_eog = 0, n_control = 0;
    for (int32_t id = 0; id < tokenizer_n_vocab(tok); id++) {
        n_control += tokenizer_is_control(tok, id);
        if (!tokenizer_is_eog(tok, id) || n_eog++ >= 8) continue;
        size_t len;
        const char *text = tokenizer_token_text(tok, id, &len);
        printf("%s %d '%.*s'", n_eog > 1 ? "," : "", id, (int)(len > 40 ? 40 : len), text);
    }
    printf("%s\ncontrol tokens: %d\n", n_eog > 8 ? ", ..." : n_eog ? "" : " none", n_control);
    tokenizer_free(tok);
}

static void print_chat_template(const struct gguf_file *f) {
    struct gguf_str t = gguf_get_str(f, CHAT_TEMPLATE_GGUF_KEY);
    if (!t.ptr) {
        printf("chat template: none (the server uses chatml)\n");
        return;
    }
    enum chat_family fam = chat_template_detect_n(t.ptr, t.len);
    if (fam == CHAT_UNKNOWN) printf("chat template: unknown family (the server uses chatml; --chat-template picks one)\n");
    else printf("chat template: %s\n", chat_family_name(fam));
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    long long kv_tokens = DEFAULT_KV_TOKENS, batch_tokens = DEFAULT_BATCH_TOKENS;
    enum kv_type kv_type = KV_F16;
    bool bad_type = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            inspect_usage(stdout);
            return 0;
        }
        if (i + 1 < argc && !strcmp(a, "--kv-tokens")) kv_tokens = parse_count(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--batch-tokens")) batch_tokens = parse_count(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--kv-type")) bad_type = kv_type_parse(argv[++i], &kv_type) < 0;
        else if (a[0] != '-' && !path) path = a;
        else {
            inspect_usage(stderr);
            return 2;
        }
    }
    if (!path || kv_tokens < 0 || batch_tokens < 0 || bad_type) {
        inspect_usage(stderr);
        return 2;
    }
    struct gguf_file f;
    char why[512];
    if (gguf_open(&f, path, why, sizeof why) < 0) {
        fprintf(stderr, "inspect: %s\n", why);
        return 1;
    }
    char sz[5][24];
    printf("file: %s, %s (%zu bytes), GGUF v%u, %llu keys\n", path, footprint_size(f.size, sz[0]), f.size, f.version,
           (unsigned long long)f.n_kv);
    struct gguf_str name = gguf_get_str(&f, "general.name");
    if (name.ptr) printf("name: %.*s\n", (int)(name.len > 120 ? 120 : name.len), name.ptr);
    struct model_footprint fp;
    struct footprint_config fc = {.kv_tokens = kv_tokens, .batch_tokens = (int32_t)batch_tokens,
                                  .n_seq_max = DEFAULT_SEQ_MAX, .type_k = kv_type, .type_v = kv_type};
    int rc = model_footprint(&f, &fc, &fp, why, sizeof why);
    if (rc < 0) {
        struct gguf_str arch = gguf_get_str(&f, "general.architecture");
        printf("architecture: %.*s\nshape: unknown (%s)\n", arch.ptr ? (int)arch.len : 1, arch.ptr ? arch.ptr : "-", why);
    } else {
        const struct model_shape *s = &fp.shape;
        printf("architecture: %s\n", s->arch);
        printf("shape: n_embd %d, layers %d", s->n_embd, s->n_layer);
        if (s->n_head) {
            printf(", heads %d, kv heads %d, head dim %d", s->n_head, s->n_head_kv, s->head_dim_k);
            if (s->head_dim_v != s->head_dim_k) printf(" (values %d)", s->head_dim_v);
        }
        if (s->n_ff) printf(", n_ff %d", s->n_ff);
        printf(", vocab %d\n", s->n_vocab);
        if (s->n_recurrent_layers)
            printf("layers: %d attention, %d recurrent (inner %d, state %d, conv %d: %s per sequence)\n",
                   s->n_attn_layers, s->n_recurrent_layers, s->ssm_inner, s->ssm_state, s->ssm_conv,
                   footprint_size(s->state_bytes, sz[0]));
        if (s->n_swa_layers > 0)
            printf("sliding window: %d positions on %d of %d attention layers\n", s->sliding_window,
                   s->n_swa_layers, s->n_attn_layers);
        else if (s->sliding_window > 0)
            printf("sliding window: %d (not used by this architecture)\n", s->sliding_window);
    }
    print_tensor_types(&f);
    print_tokenizer(&f);
    print_chat_template(&f);
    if (rc == 0 && !f.n_tensors) {
        printf("context: %lld trained\nmemory: no weights in this file (a vocabulary or metadata only)\n",
               (long long)fp.shape.n_ctx_train);
    } else if (rc == 0) {
        printf("context: %lld trained; a sequence gets %lld at --kv-tokens %lld\n", (long long)fp.shape.n_ctx_train,
               (long long)fp.n_ctx, kv_tokens);
        printf("memory at --kv-tokens %lld --batch-tokens %lld: weights %s + KV %s", kv_tokens, batch_tokens,
               footprint_size(fp.weights, sz[0]), footprint_size(fp.kv, sz[1]));
        if (fp.n_cells && fp.n_swa_cells)
            printf(" (%lld cells, %lld in the sliding-window layers%s", (long long)fp.n_cells,
                   (long long)fp.n_swa_cells, fp.n_states ? ", " : ")");
        else if (fp.n_cells) printf(" (%lld cells%s", (long long)fp.n_cells, fp.n_states ? ", " : ")");
        if (fp.n_states) printf("%s%lld recurrent states)", fp.n_cells ? "" : " (", (long long)fp.n_states);
        printf(" + buffers %s = %s\n", footprint_size(fp.buffers, sz[2]), footprint_size(fp.total, sz[3]));
        if (fp.shape.kv_cell_bytes)
            printf("kv cell: %llu bytes (%s K and V over %d attention layers)\n",
                   (unsigned long long)fp.shape.kv_cell_bytes, kv_type_name(kv_type), fp.shape.n_attn_layers);
        printf("memory bytes: weights %llu, kv %llu, buffers %llu, total %llu\n", (unsigned long long)fp.weights,
               (unsigned long long)fp.kv, (unsigned long long)fp.buffers, (unsigned long long)fp.total);
        int64_t avail = hugemem_available();
        if (avail < 0) printf("available: unknown\n");
        else
            printf("available: %s: %s\n", footprint_size((uint64_t)avail, sz[4]),
                   model_footprint_fits(&fp, avail, why, sizeof why) == 0 ? "fits" : "does not fit, the server refuses it");
    }
    gguf_close(&f);
    return 0;
}
