/* tokenize.c: ./uvlm tokenize --model M [--file F] [--text T] [--add-special] [--parse-special]
 * Prints the token ids of a text, space-separated on one line (each id preceded by a space, as in
 * the ../shared/vocab .out files). With --file in the .inp format (tests separated by
 * "\n__ggml_vocab_test__\n", each test followed by one, the last one maybe by the end of the
 * file), one line per test, so that the output diffs against the .out file. Works with
 * vocabulary-only GGUF files. */
#include "cmd/cmd.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB_TEST_SEP "\n__ggml_vocab_test__\n"

static void tokenize_usage(FILE *out) {
    fprintf(out, "usage: uvlm tokenize --model M [--file F | --text T] [--add-special] [--parse-special]\n"
                 "  --file F   tests separated by \"\\n__ggml_vocab_test__\\n\": one line of ids per test\n"
                 "  --text T   one line of ids (default: the text on stdin when neither is given)\n");
}

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b = realloc(buf, cap * 2);
        if (!b) { free(buf); return NULL; }
        buf = b;
        cap *= 2;
    }
    *len = n;
    return buf;
}

static int print_ids(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
                     bool parse_special) {
    int32_t *ids;
    size_t n;
    int rc = tokenizer_encode_alloc(tok, text, len, add_special, parse_special, &ids, &n);
    if (rc < 0) {
        fprintf(stderr, "tokenize: %s\n", err_str(rc));
        return 1;
    }
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    putchar('\n');
    free(ids);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL;
    bool add_special = false, parse_special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { tokenize_usage(stdout); return 0; }
        else if (!strcmp(a, "--add-special")) add_special = true;
        else if (!strcmp(a, "--parse-special")) parse_special = true;
        else if (i + 1 < argc && (!strcmp(a, "--model") || !strcmp(a, "-m"))) model = argv[++i];
        else if (i + 1 < argc && (!strcmp(a, "--file") || !strcmp(a, "-f"))) file = argv[++i];
        else if (i + 1 < argc && (!strcmp(a, "--text") || !strcmp(a, "-t"))) text = argv[++i];
        else {
            fprintf(stderr, "tokenize: unknown or incomplete flag '%s'\n", a);
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model || (file && text)) {
        tokenize_usage(stderr);
        return 2;
    }
    struct gguf_file g;
    struct tokenizer *tok;
    char why[256];
    if (gguf_open(&g, model, why, sizeof why) < 0) {
        fprintf(stderr, "tokenize: %s: %s\n", model, why);
        return 1;
    }
    int rc = tokenizer_load(&tok, &g, why, sizeof why);
    gguf_close(&g);
    if (rc < 0) {
        fprintf(stderr, "tokenize: %s: %s\n", model, why);
        return 1;
    }
    if (why[0]) fprintf(stderr, "tokenize: %s\n", why);
    if (getenv("UVLM_VERBOSE"))
        fprintf(stderr, "tokenize: %d tokens, pre-tokenizer '%s', %.1f MiB\n", tokenizer_n_vocab(tok),
                tokenizer_pre_name(tok), (double)tokenizer_mem_size(tok) / (1 << 20));

    int status = 0;
    if (text) {
        status = print_ids(tok, text, strlen(text), add_special, parse_special);
    } else {
        FILE *f = file ? fopen(file, "rb") : stdin;
        size_t len = 0;
        char *buf = f ? read_all(f, &len) : NULL;
        if (f && f != stdin) fclose(f);
        if (!buf) {
            fprintf(stderr, "tokenize: cannot read %s\n", file ? file : "stdin");
            tokenizer_free(tok);
            return 1;
        }
        if (!file) {
            status = print_ids(tok, buf, len, add_special, parse_special);
        } else {
            const size_t sep_len = strlen(VOCAB_TEST_SEP);
            const char *p = buf, *end = buf + len, *sep;
            while (!status && (sep = memmem(p, (size_t)(end - p), VOCAB_TEST_SEP, sep_len))) {
                status = print_ids(tok, p, (size_t)(sep - p), add_special, parse_special);
                p = sep + sep_len;
            }
            /* a last test may end the file without its separator */
            if (!status && p < end) status = print_ids(tok, p, (size_t)(end - p), add_special, parse_special);
        }
        free(buf);
    }
    tokenizer_free(tok);
    return status;
}
