/* tokenize_bench.c: tokenization speed on 1 MB of English-like text (generated deterministically)
 * and on 200 KB of one letter, for each shared vocabulary. Run by scripts/bench.d/20-tokenize.
 *   tokenize_bench VOCAB_DIR */
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Words, numbers and punctuation from a fixed LCG: the same megabyte on every run. */
static char *english(size_t len) {
    static const char *const words[] = {
        "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
        "by", "on", "not", "he", "I", "this", "are", "or", "his", "from", "at", "which", "but",
        "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
        "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
        "language", "model", "server", "tokenizer", "inference", "quickly", "government",
        "information", "understanding", "Wednesday", "London", "don't", "it's", "we'll"};
    char *s = malloc(len + 32);
    size_t o = 0;
    uint64_t x = 42;
    while (o < len) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(x >> 33);
        if (r % 17 == 0) o += (size_t)sprintf(s + o, "%u", r % 10000);
        else {
            const char *w = words[r % (sizeof words / sizeof *words)];
            size_t n = strlen(w);
            memcpy(s + o, w, n);
            if (r % 11 == 0) s[o] = (char)(s[o] & ~0x20);
            o += n;
        }
        unsigned p = (r >> 8) % 23;
        s[o++] = p == 0 ? ',' : p == 1 ? '.' : ' ';
        if (p < 2) s[o++] = ' ';
        if (p == 2) s[o++] = '\n';
    }
    s[len] = 0;
    return s;
}

static void run(const struct tokenizer *tok, const char *name, const char *what, const char *text, size_t len) {
    double best = 1e9;
    size_t n = 0;
    for (int rep = 0; rep < 3; rep++) {
        int32_t *ids;
        double t0 = now();
        if (tokenizer_encode_alloc(tok, text, len, false, false, &ids, &n) < 0) {
            printf("%s: encode failed\n", name);
            return;
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
        free(ids);
    }
    printf("tokenize %-10s %-14s %7.2f MB/s %10.0f tokens/s  (%zu bytes -> %zu tokens in %.3f s)\n", name,
           what, (double)len / best / 1e6, (double)n / best, len, n, best);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "../shared/vocab";
    static const char *const vocabs[] = {"llama-spm", "phi-3",  "gpt-2",   "llama-bpe", "qwen2",
                                         "deepseek-coder", "refact", "gemma-4", "qwen35"};
    size_t len = 1 << 20, run_len = 200 * 1024;
    char *text = english(len), *letters = malloc(run_len);
    memset(letters, 'a', run_len);
    int status = 0;
    for (size_t i = 0; i < sizeof vocabs / sizeof *vocabs; i++) {
        char path[1024], why[256];
        snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, vocabs[i]);
        struct gguf_file f;
        struct tokenizer *tok;
        double t0 = now();
        if (gguf_open(&f, path, why, sizeof why) < 0 || tokenizer_load(&tok, &f, why, sizeof why) < 0) {
            printf("%s: %s\n", path, why);
            status = 1;
            continue;
        }
        gguf_close(&f);
        printf("load     %-10s %8.3f s (%d tokens)\n", vocabs[i], now() - t0, tokenizer_n_vocab(tok));
        run(tok, vocabs[i], "1MB-english", text, len);
        run(tok, vocabs[i], "200KB-one-char", letters, run_len);
        tokenizer_free(tok);
    }
    free(text);
    free(letters);
    return status;
}
