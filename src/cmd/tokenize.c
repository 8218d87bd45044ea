/* tokenize.c: ./uvlm tokenize --model M [--file F] [--text T] [--add-special] [--parse-special]
 *                              [--allow-unknown-pretokenizer]
 *            ./uvlm tokenize --split PRE [--file F] [--text T]
 * Prints the token ids of a text, space-separated on one line (each id preceded by a space, as in
 * the ../shared/vocab .out files). With --file in the .inp format (tests separated by
 * "\n__ggml_vocab_test__\n", each test followed by one, the last one maybe by the end of the
 * file), one line per test, so that the output diffs against the .out file. Works with
 * vocabulary-only GGUF files. --split prints instead the words the pre-tokenizer PRE (a
 * tokenizer.ggml.pre name) cuts each text into, as a JSON array of strings: no model needed. */
#include "cmd/cmd.h"
#include "gguf/gguf.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB_TEST_SEP "\n__ggml_vocab_test__\n"

static void tokenize_usage(FILE *out) {
    fprintf(out, "usage: uvlm tokenize --model M [--file F | --text T] [--add-special] [--parse-special]\n"
                 "                     [--allow-unknown-pretokenizer]\n"
                 "       uvlm tokenize --split PRE [--file F | --text T]\n"
                 "  --file F   tests separated by \"\\n__ggml_vocab_test__\\n\": one line of ids per test\n"
                 "  --text T   one line of ids (default: the text on stdin when neither is given)\n"
                 "  --allow-unknown-pretokenizer  load a vocabulary whose tokenizer.ggml.pre uvlm does not\n"
                 "             know, splitting its text as 'default' (other tokens than the model's)\n"
                 "  --split PRE  print the words the pre-tokenizer PRE (a tokenizer.ggml.pre name) cuts\n"
                 "             each text into, as a JSON array of strings, instead of token ids\n");
}

/* The text as a JSON string: quotes, backslashes and control characters escaped. */
static void put_json_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* The words of one text, by the pre-tokenizer alone (malformed UTF-8 reads as U+FFFD). */
static int print_words(enum pretok kind, const char *text, size_t len) {
    uint32_t *cps = malloc((len + 1) * sizeof *cps), *ends = malloc((len + 1) * sizeof *ends);
    uint32_t *scratch = malloc((len + 1) * sizeof *scratch);
    uint16_t *fl = malloc((len + 1) * sizeof *fl);
    char *utf8 = malloc(4 * len + 1);
    if (!cps || !ends || !scratch || !fl || !utf8) {
        free(cps), free(ends), free(scratch), free(fl), free(utf8);
        fprintf(stderr, "tokenize: out of memory\n");
        return 1;
    }
    size_t n = 0;
    for (size_t off = 0, adv; off < len; off += adv, n++) {
        cps[n] = utf8_decode(text + off, len - off, &adv);
        fl[n] = (uint16_t)ucp_flags(cps[n]);
    }
    size_t n_words = pretok_split(kind, cps, fl, n, ends, scratch);
    putchar('[');
    for (size_t w = 0, c = 0; w < n_words; w++) {
        size_t k = 0;
        for (; c < ends[w]; c++) k += utf8_encode(cps[c], utf8 + k);
        if (w) putchar(',');
        put_json_string(utf8, k);
    }
    printf("]\n");
    free(cps), free(ends), free(scratch), free(fl), free(utf8);
    return 0;
}

/* One input: ids by the tokenizer, or words by the pre-tokenizer alone (tok NULL). */
struct job {
    const struct tokenizer *tok;
    enum pretok split;
    bool add_special, parse_special;
};

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

static int print_ids(const struct job *j, const char *text, size_t len) {
    if (!j->tok) return print_words(j->split, text, len);
    int32_t *ids;
    size_t n;
    int rc = tokenizer_encode_alloc(j->tok, text, len, j->add_special, j->parse_special, &ids, &n);
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
    const char *model = NULL, *file = NULL, *text = NULL, *split = NULL;
    struct job j = {0};
    struct tokenizer_options opt = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { tokenize_usage(stdout); return 0; }
        else if (!strcmp(a, "--add-special")) j.add_special = true;
        else if (!strcmp(a, "--parse-special")) j.parse_special = true;
        else if (!strcmp(a, "--allow-unknown-pretokenizer")) opt.allow_unknown_pretokenizer = true;
        else if (i + 1 < argc && (!strcmp(a, "--model") || !strcmp(a, "-m"))) model = argv[++i];
        else if (i + 1 < argc && (!strcmp(a, "--file") || !strcmp(a, "-f"))) file = argv[++i];
        else if (i + 1 < argc && (!strcmp(a, "--text") || !strcmp(a, "-t"))) text = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--split")) split = argv[++i];
        else {
            fprintf(stderr, "tokenize: unknown or incomplete flag '%s'\n", a);
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model == !split || (file && text)) {
        tokenize_usage(stderr);
        return 2;
    }
    struct tokenizer *tok = NULL;
    if (split) {
        const struct pretok_info *pi = pretok_lookup(split, strlen(split));
        if (!pi) {
            fprintf(stderr, "tokenize: '%s' is not a pre-tokenizer uvlm knows\n", split);
            return 2;
        }
        j.split = pi->kind;
    } else {
        struct gguf_file g;
        char why[256];
        if (gguf_open(&g, model, why, sizeof why) < 0) {
            fprintf(stderr, "tokenize: %s: %s\n", model, why);
            return 1;
        }
        int rc = tokenizer_load_with(&tok, &g, &opt, why, sizeof why);
        gguf_close(&g);
        if (rc < 0) {
            fprintf(stderr, "tokenize: %s: %s\n", model, why);
            return 1;
        }
        if (why[0]) fprintf(stderr, "tokenize: %s\n", why);
        if (getenv("UVLM_VERBOSE"))
            fprintf(stderr, "tokenize: %d tokens, pre-tokenizer '%s', %.1f MiB\n", tokenizer_n_vocab(tok),
                    tokenizer_pre_name(tok), (double)tokenizer_mem_size(tok) / (1 << 20));
        j.tok = tok;
    }

    int status = 0;
    if (text) {
        status = print_ids(&j, text, strlen(text));
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
            status = print_ids(&j, buf, len);
        } else {
            const size_t sep_len = strlen(VOCAB_TEST_SEP);
            const char *p = buf, *end = buf + len, *sep;
            while (!status && (sep = memmem(p, (size_t)(end - p), VOCAB_TEST_SEP, sep_len))) {
                status = print_ids(&j, p, (size_t)(sep - p));
                p = sep + sep_len;
            }
            /* a last test may end the file without its separator */
            if (!status && p < end) status = print_ids(&j, p, (size_t)(end - p));
        }
        free(buf);
    }
    tokenizer_free(tok);
    return status;
}
