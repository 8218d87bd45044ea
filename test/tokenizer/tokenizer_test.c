/* tokenizer_test.c: the shared vocabularies: every test vector reproduced exactly (golden),
 * decode(encode(x)) == x, special tokens, BOS/EOS and end-of-generation ids, long inputs. */
#include "tok_fixtures.h"

#include <pthread.h>

#define SEP "\n__ggml_vocab_test__\n"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

/* Checks every .inp test of one vocabulary against its .out line, and the round trip. */
static void check_vectors(struct test_case *t, const char *name) {
    VOCAB(tok, name);
    char rel[128];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    SHARED(inp_path, rel);
    size_t inp_len, out_len;
    char *inp = slurp(inp_path, &inp_len);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    SHARED(out_path, rel);
    char *outf = slurp(out_path, &out_len);
    CHECK(inp && outf);
    const char *p = inp, *sep, *line = outf;
    int n_tests = 0, bad = 0, bad_trip = 0;
    /* Each test ends at its separator, the last one maybe at the end of the file. */
    while ((sep = strstr(p, SEP)) || (*p && (sep = p + strlen(p)))) {
        int32_t *ids;
        size_t n;
        CHECK_EQ_INT(tokenizer_encode_alloc(tok, p, (size_t)(sep - p), false, false, &ids, &n), 0);
        /* The expected line: " id id ...\n". */
        const char *eol = strchr(line, '\n');
        CHECK(eol);
        size_t k = 0;
        bool same = true;
        for (const char *q = line; q < eol;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            if (k >= n || ids[k] != v) same = false;
            k++;
            q = end;
        }
        if (!same || k != n) {
            fprintf(stderr, "  %s test %d: \"%.*s\": got %zu ids, expected %zu\n", name, n_tests,
                    (int)(sep - p), p, n, k);
            bad++;
        }
        /* Every byte string is representable here (byte fallback / byte-level BPE). */
        char dec[4096];
        int64_t dl = tokenizer_decode(tok, ids, n, false, false, dec, sizeof dec);
        if (dl != sep - p || memcmp(dec, p, (size_t)dl)) {
            fprintf(stderr, "  %s test %d: decode gives \"%.*s\" for \"%.*s\"\n", name, n_tests,
                    (int)(dl < 0 ? 0 : dl), dec, (int)(sep - p), p);
            bad_trip++;
        }
        free(ids);
        line = eol + 1;
        p = *sep ? sep + strlen(SEP) : sep;
        n_tests++;
    }
    free(inp);
    free(outf);
    CHECK(n_tests >= 40);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(bad_trip, 0);
}

TEST(tokenizer_golden_llama_spm) { check_vectors(t, "llama-spm"); }
TEST(tokenizer_golden_phi_3) { check_vectors(t, "phi-3"); }
TEST(tokenizer_golden_gpt_2) { check_vectors(t, "gpt-2"); }
TEST(tokenizer_golden_llama_bpe) { check_vectors(t, "llama-bpe"); }
TEST(tokenizer_golden_qwen2) { check_vectors(t, "qwen2"); }
TEST(tokenizer_golden_deepseek_coder) { check_vectors(t, "deepseek-coder"); }
TEST(tokenizer_golden_refact) { check_vectors(t, "refact"); }
TEST(tokenizer_golden_gemma_4) { check_vectors(t, "gemma-4"); }
TEST(tokenizer_golden_qwen35) { check_vectors(t, "qwen35"); }

TEST(tokenizer_bos_eos_and_eog) {
    int32_t ids[16];
    VOCAB(spm, "llama-spm");
    CHECK(tokenizer_add_bos(spm) && !tokenizer_add_eos(spm));
    CHECK_EQ_INT(enc(spm, "Hello", true, false, ids, 16), 2);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(ids[1], 15043);
    CHECK_EQ_INT(enc(spm, "", true, false, ids, 16), 1); /* just BOS */
    CHECK(tokenizer_is_eog(spm, 2) && !tokenizer_is_eog(spm, 1));

    VOCAB(l3, "llama-bpe");
    CHECK_EQ_INT(tokenizer_bos(l3), 128000);
    CHECK_EQ_INT(enc(l3, "Hello", true, false, ids, 16), 2);
    CHECK_EQ_INT(ids[0], 128000);
    CHECK_EQ_INT(tokenizer_eot(l3), 128009);
    CHECK(tokenizer_is_eog(l3, 128009) && tokenizer_is_eog(l3, 128001) && !tokenizer_is_eog(l3, 128000));

    VOCAB(qw, "qwen2");
    CHECK(!tokenizer_add_bos(qw));
    CHECK_EQ_INT(enc(qw, "Hello", true, false, ids, 16), 1);
    CHECK(tokenizer_is_eog(qw, 151645) && tokenizer_is_eog(qw, 151643)); /* <|im_end|>, <|endoftext|> */
    CHECK_EQ_INT(tokenizer_find_token(qw, "<|im_end|>", 10), 151645);

    VOCAB(phi, "phi-3");
    CHECK(tokenizer_is_eog(phi, 32007) && tokenizer_is_eog(phi, 32000)); /* <|end|>, <|endoftext|> */
}

TEST(tokenizer_parse_special) {
    int32_t ids[32];
    VOCAB(l3, "llama-bpe");
    const char *s = "<|start_header_id|>user<|end_header_id|>";
    CHECK_EQ_INT(enc(l3, s, false, true, ids, 32), 3);
    CHECK_EQ_INT(ids[0], 128006);
    CHECK_EQ_INT(ids[2], 128007);
    long n = enc(l3, s, false, false, ids, 32); /* plain text without parse_special */
    CHECK(n > 3);
    for (long i = 0; i < n; i++) CHECK(ids[i] < 128000);

    VOCAB(qw, "qwen2"); /* user-defined tokens are found even without parse_special */
    CHECK_EQ_INT(enc(qw, "a[PAD151650]b", false, false, ids, 32), 3);
    CHECK_EQ_INT(ids[1], 151650);

    VOCAB(spm, "llama-spm"); /* after a special token the SPM space prefix comes again */
    CHECK_EQ_INT(enc(spm, "</s>Hello", false, true, ids, 32), 2);
    CHECK_EQ_INT(ids[0], 2);
    CHECK_EQ_INT(ids[1], 15043); /* "▁Hello" */

    VOCAB(phi, "phi-3"); /* Phi-3's special tokens swallow the whitespace after them */
    long a = enc(phi, "<|user|>\n  Hi", false, true, ids, 32);
    int32_t ids2[32];
    long b = enc(phi, "<|user|>Hi", false, true, ids2, 32);
    CHECK(a > 1 && a == b);
    CHECK(!memcmp(ids, ids2, (size_t)a * sizeof *ids));
}

TEST(tokenizer_pieces) {
    size_t len;
    VOCAB(spm, "llama-spm");
    const char *p = tokenizer_token_piece(spm, 15043, false, &len);
    CHECK(len == 6 && !memcmp(p, " Hello", 6));
    p = tokenizer_token_piece(spm, 3 + 0x41, false, &len); /* <0x41> */
    CHECK(len == 1 && p[0] == 'A');
    tokenizer_token_piece(spm, 1, false, &len); /* <s>: control, hidden */
    CHECK_EQ_INT(len, 0);
    p = tokenizer_token_piece(spm, 1, true, &len);
    CHECK(len == 3 && !memcmp(p, "<s>", 3));
    tokenizer_token_piece(spm, 99999, false, &len);
    CHECK_EQ_INT(len, 0);
    VOCAB(gpt, "gpt-2");
    p = tokenizer_token_piece(gpt, 995, false, &len); /* "Ġworld" */
    CHECK(len == 6 && !memcmp(p, " world", 6));
    p = tokenizer_token_text(gpt, 995, &len);
    CHECK(len == 7 && !memcmp(p, "\xC4\xA0world", 7));
    CHECK(tokenizer_max_piece(gpt) >= 6);
    CHECK(tokenizer_mem_size(gpt) > (1u << 20)); /* 50 K tokens and 50 K merges */
}

TEST(tokenizer_encode_reports_needed_count) {
    VOCAB(spm, "llama-spm");
    int32_t ids[2] = {-7, -7};
    size_t n;
    const char *s = "Hello world, hello again";
    CHECK_EQ_INT(tokenizer_encode(spm, s, strlen(s), false, false, ids, 1, &n), -ERR_TOOBIG);
    CHECK(n > 2);
    CHECK_EQ_INT(ids[0], 15043);
    CHECK_EQ_INT(ids[1], -7); /* nothing written past n_max */
    CHECK_EQ_INT(tokenizer_encode(spm, "", 0, false, false, NULL, 0, &n), 0); /* no tokens, no array */
    CHECK_EQ_INT(n, 0);
    int32_t *all;
    CHECK_EQ_INT(tokenizer_encode_alloc(spm, "", 0, false, false, &all, &n), 0);
    CHECK(n == 0 && all == NULL);
}

TEST(tokenizer_decode_reports_short_buffer) {
    VOCAB(gpt, "gpt-2");
    int32_t ids[8];
    long n = enc(gpt, "Hello world", false, false, ids, 8);
    CHECK_EQ_INT(n, 2);
    char buf[16];
    memset(buf, 'x', sizeof buf);
    CHECK_EQ_INT(tokenizer_decode(gpt, ids, 2, false, false, buf, 7), -ERR_TOOBIG);
    CHECK(!memcmp(buf, "Hello wx", 8)); /* the first 7 bytes, nothing past them */
    CHECK_EQ_INT(tokenizer_decode(gpt, ids, 2, false, false, buf, 11), 11);
}

/* 200 KB of one letter: one 200 K-character word for BPE, one sequence for SPM. A quadratic merge
 * loop would take minutes here; the heap takes milliseconds. */
TEST(tokenizer_long_run_of_one_letter) {
    size_t len = 200 * 1024;
    char *s = malloc(len);
    CHECK(s);
    memset(s, 'a', len);
    for (size_t v = 0; v < N_SHARED_VOCABS; v++) {
        VOCAB(tok, shared_vocabs[v]);
        int32_t *ids;
        size_t n;
        CHECK_EQ_INT(tokenizer_encode_alloc(tok, s, len, false, false, &ids, &n), 0);
        CHECK(n > 0 && n < len / 2); /* real merges happened */
        char *dec = malloc(len + 16);
        int64_t dl = tokenizer_decode(tok, ids, n, false, false, dec, len + 16);
        CHECK_EQ_INT(dl, (int64_t)len);
        CHECK(!memcmp(dec, s, len));
        free(dec);
        free(ids);
    }
    free(s);
}

struct thread_arg {
    const struct tokenizer *tok;
    const char *text;
    int32_t ids[256];
    size_t n;
    int rc;
};

static void *encode_many(void *p) {
    struct thread_arg *a = p;
    for (int i = 0; i < 200 && a->rc == 0; i++) {
        int32_t ids[256];
        size_t n;
        a->rc = tokenizer_encode(a->tok, a->text, strlen(a->text), true, true, ids, 256, &n);
        if (i == 0) { memcpy(a->ids, ids, sizeof ids); a->n = n; }
        else if (n != a->n || memcmp(ids, a->ids, n * sizeof *ids)) a->rc = -1;
    }
    return NULL;
}

TEST(tokenizer_encode_from_several_threads) {
    VOCAB(tok, "qwen2");
    struct thread_arg args[3] = {
        {tok, "<|im_start|>user\nHello, y'all! How are you 😁 ?我想在apple工作1314151天～<|im_end|>", {0}, 0, 0},
        {tok, "   Hello\n\n\n  world 3333 ... ", {0}, 0, 0},
        {tok, "\xF0\x9F\xA6\x99 llamas, \xC3\x84pfel", {0}, 0, 0},
    };
    pthread_t th[3];
    for (int i = 0; i < 3; i++) CHECK(pthread_create(&th[i], NULL, encode_many, &args[i]) == 0);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(args[i].rc, 0);
        CHECK(args[i].n > 3);
    }
}

#include "tokenizer/internal.h"

/* SPM merges word by word when the vocabulary allows it (spm.c): that must give exactly what one
 * pass over the whole text gives. Compared on every .inp file's whole text, for both SPM vocabs. */
TEST(tokenizer_spm_word_split_matches_whole_text_merge) {
    const char *names[] = {"llama-spm", "phi-3"};
    for (size_t v = 0; v < 2; v++) {
        VOCAB(tok, names[v]);
        CHECK(tok->spm_word_split);
        for (size_t f = 0; f < N_SHARED_VOCABS; f++) {
            char rel[128];
            snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", shared_vocabs[f]);
            SHARED(path, rel);
            size_t len;
            char *text = slurp(path, &len);
            CHECK(text);
            int32_t *a, *b;
            size_t na, nb;
            CHECK_EQ_INT(tokenizer_encode_alloc(tok, text, len, false, false, &a, &na), 0);
            tok->spm_word_split = false; /* test-only: the one-pass path */
            int rc = tokenizer_encode_alloc(tok, text, len, false, false, &b, &nb);
            tok->spm_word_split = true;
            CHECK_EQ_INT(rc, 0);
            CHECK_EQ_INT(na, nb);
            CHECK(!memcmp(a, b, na * sizeof *a));
            free(a);
            free(b);
            free(text);
        }
    }
}

/* The special tokens of the families added with their pre-tokenizers, as the reference sets them. */
TEST(tokenizer_specials_of_new_families) {
    int32_t ids[32];
    VOCAB(g4, "gemma-4"); /* BOS always (the reference overrides add_bos_token) */
    CHECK(tokenizer_add_bos(g4));
    CHECK_EQ_INT(tokenizer_bos(g4), 2);
    CHECK_EQ_INT(enc(g4, "Hello", true, false, ids, 32), 2);
    CHECK_EQ_INT(ids[0], 2);
    CHECK_EQ_INT(ids[1], 9259);
    CHECK(tokenizer_is_eog(g4, 1) && tokenizer_is_eog(g4, 106) && tokenizer_is_eog(g4, 50)); /* <eos> <turn|> <|tool_response> */
    CHECK(!tokenizer_is_eog(g4, 212) && !tokenizer_is_control(g4, 212)); /* </s> is text here */
    /* <|tool_response> is user-defined in the file but an end marker: only parse_special finds it */
    long n = enc(g4, "a<|tool_response>b", false, false, ids, 32);
    CHECK(n > 3);
    for (long i = 0; i < n; i++) CHECK(ids[i] != 50);
    CHECK_EQ_INT(enc(g4, "a<|tool_response>b", false, true, ids, 32), 3);
    CHECK_EQ_INT(ids[1], 50);
    size_t len;
    const char *p = tokenizer_token_piece(g4, 236743, false, &len); /* "▁" */
    CHECK(len == 1 && p[0] == ' ');
    p = tokenizer_token_piece(g4, 248, false, &len); /* <0x0A> */
    CHECK(len == 1 && p[0] == '\n');
    CHECK_EQ_STR(tokenizer_pre_name(g4), "gemma4");

    VOCAB(dsc, "deepseek-coder"); /* the fill-in-the-middle markers count as control */
    CHECK(tokenizer_add_bos(dsc) && tokenizer_bos(dsc) == 32013 && tokenizer_is_eog(dsc, 32014));
    const char *fim = "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>";
    CHECK_EQ_INT(enc(dsc, fim, false, true, ids, 32), 1);
    CHECK_EQ_INT(ids[0], 32016);
    n = enc(dsc, fim, false, false, ids, 32);
    CHECK(n > 1);

    VOCAB(rf, "refact"); /* fill-in-the-middle pad and repository markers end generation */
    CHECK(tokenizer_is_eog(rf, 0) && tokenizer_is_eog(rf, 4) && tokenizer_is_eog(rf, 18));
    CHECK(!tokenizer_is_eog(rf, 1));

    VOCAB(q35, "qwen35");
    CHECK(!tokenizer_add_bos(q35) && tokenizer_is_eog(q35, 151645));
    CHECK_EQ_STR(tokenizer_pre_name(q35), "qwen35");
}
