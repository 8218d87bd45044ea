/* main.c: ./uvlm [SUBCOMMAND] [FLAGS]. With no subcommand (or a flag first) it serves.
 * The only place in uvlm that exits the process. */
#include "cmd/cmd.h"
#include "common/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out);

static int cmd_help(int argc, char **argv) {
    usage(stdout);
    return 0;
}

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct subcommand subcommands[] = {
    /* one line per subcommand: {"name", cmd_name, "what it does"}, */
    {"help", cmd_help, "list the subcommands"},
    {"serve", cmd_serve, "run the HTTP server (the default; uvlm --help for its flags)"},
    {"tokenize", cmd_tokenize, "print the token ids of a text (--model M --text T | --file F)"},
    {"apply-template", cmd_apply_template, "print the prompt a chat template makes of JSON messages"},
    {"generate", cmd_generate, "generate text from one prompt, then print tok/s (--model M --prompt P)"},
    {"eval-logits", cmd_eval_logits, "top-K logits of prompts and greedy runs as reference JSON"},
    {"mkmodel", cmd_mkmodel, "write a random-weight GGUF of any supported architecture, shape and weight type"},
    {"inspect", cmd_inspect, "what a GGUF model is and the memory serving it takes, from its metadata"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: uvlm [SUBCOMMAND] [FLAGS]   (uvlm SUBCOMMAND --help for its flags)\n\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof *subcommands; i++)
        fprintf(out, "  %-14s %s\n", subcommands[i].name, subcommands[i].help);
}

/* Debian's OpenBLAS 0.3.21 picks its Haswell kernels on AVX-512 CPUs it does not know (Zen 4/5);
 * its SkylakeX kernels run sgemm about 1.8x faster there. The library reads OPENBLAS_CORETYPE when
 * it loads, before main(), so the only way to set it is to re-exec ourselves once. On AVX-512 CPUs
 * we want SkylakeX even when the environment inherited another value (some images export Haswell
 * for every program); UVLM_OPENBLAS_CORETYPE overrides the choice: a core name, or "keep" to use
 * OPENBLAS_CORETYPE as inherited. */
static void openblas_pick_core(char **argv) {
    const char *want = getenv("UVLM_OPENBLAS_CORETYPE");
    if (!want) {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx512f")) return;
        want = "SkylakeX";
    }
    if (!strcmp(want, "keep")) return;
    const char *have = getenv("OPENBLAS_CORETYPE");
    if (have && !strcmp(have, want)) return; /* already set: also what stops the re-exec looping */
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv); /* returns only on failure: carry on with the inherited kernels */
}

int main(int argc, char **argv) {
    openblas_pick_core(argv);
    const char *name = argc > 1 ? argv[1] : NULL;
    /* `uvlm [serve] --help-markdown`: the server's flag table for README.md (make flags-table) */
    int first = name && !strcmp(name, "serve") ? 2 : 1;
    if (argc == first + 1 && !strcmp(argv[first], "--help-markdown")) {
        config_usage_markdown(stdout);
        return 0;
    }
    if (!name || name[0] == '-') /* no arguments, or flags only: serve, argv[0] = program */
        return cmd_serve(argc, argv);
    for (size_t i = 0; i < sizeof subcommands / sizeof *subcommands; i++)
        if (!strcmp(name, subcommands[i].name))
            return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "uvlm: unknown subcommand '%s'\n", name);
    usage(stderr);
    return 2;
}
