/* apply_template.c: `uvlm apply-template`: print the prompt a chat template makes of messages.
 *
 *   uvlm apply-template --template-file tmpl.jinja --messages msgs.json [--tools tools.json] > prompt.txt
 *   uvlm apply-template --model model.gguf --messages msgs.json
 *
 * The template (a file, or the model's tokenizer.chat_template) runs as Jinja, as the server
 * runs it (api/chat_prompt.h): for a template file with BOS "<s>" and EOS "</s>" and a leading
 * BOS cut, as a tokenizer that adds BOS itself needs; for --model with the model's own tokens and
 * its tokenizer's rule (as the server renders for that model); --native formats
 * with the family detected in the template instead, and --chat-template NAME with that family.
 * A template that cannot be run falls back to its detected family (chatml when none) with a
 * warning. The prompt is printed exactly, with no newline added. Exit 0, 1 when a file cannot be
 * read, 2 on bad usage, bad JSON or a conversation the template refuses. */
#include "cmd/cmd.h"

#include "api/chat_prompt.h"
#include "common/err.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void apply_template_usage(FILE *f) {
    fprintf(f,
            "usage: uvlm apply-template (--template-file FILE | --model GGUF) --messages FILE [FLAGS]\n"
            "  --template-file FILE    Jinja chat template text (as in tokenizer.chat_template)\n"
            "  --model GGUF            use the chat template of this model\n"
            "  --messages FILE         JSON array of {\"role\", \"content\", ...} (- for stdin)\n"
            "  --tools FILE            JSON array of OpenAI tools for the template to describe\n"
            "  --kwargs JSON           chat_template_kwargs: extra template variables, a JSON object\n"
            "  --native                format with the family detected in the template, not running it\n"
            "  --chat-template NAME    format with this family instead; one of:\n"
            "                          %s\n"
            "  --no-generation-prompt  do not end with the opening of the assistant's reply\n"
            "  --continue              continue the assistant's last message instead of closing it\n",
            chat_family_names());
}

/* The whole of a file ("-": stdin) as a NUL-terminated buffer; NULL with a message on failure. */
static char *slurp(const char *path, size_t *len_out) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        perror(path);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - 1 - len, f);
        if (len < cap - 1) break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    bool failed = !buf || ferror(f);
    if (f != stdin) fclose(f);
    if (failed) {
        fprintf(stderr, "uvlm apply-template: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    *len_out = len;
    return buf;
}

/* A JSON file's value, or NULL (printed why) with *status 1 (unreadable) or 2 (bad JSON). */
static json_t *load_json(const char *path, int *status) {
    size_t len;
    char *text = slurp(path, &len);
    if (!text) {
        *status = 1;
        return NULL;
    }
    json_error_t jerr;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    free(text);
    if (!v) {
        fprintf(stderr, "uvlm apply-template: %s: bad JSON at line %d column %d: %s\n", path, jerr.line, jerr.column,
                jerr.text);
        *status = 2;
    }
    return v;
}

struct opts {
    const char *template_path, *model_path, *messages_path, *tools_path, *kwargs, *forced;
    bool generation_prompt, native, cont;
};

/* The template text and BOS/EOS (from the file or the model) into a chat_prompt. 0, or the exit
 * status (its reason printed). */
static int load_prompt(const struct opts *o, struct chat_prompt *cp) {
    struct chat_prompt_source src = {.forced = o->forced, .bos = "<s>", .eos = "</s>", .strip_bos = true};
    char *text = NULL, why[512], warn[640];
    struct gguf_file f;
    struct tokenizer *tok = NULL;
    char *bos = NULL, *eos = NULL;
    bool gguf_open_ok = false;
    if (!o->forced && o->model_path) {
        if (gguf_open(&f, o->model_path, why, sizeof why) < 0) {
            fprintf(stderr, "uvlm apply-template: %s\n", why); /* why names the file */
            return 1;
        }
        gguf_open_ok = true;
        struct gguf_str t = gguf_get_str(&f, CHAT_TEMPLATE_GGUF_KEY);
        src.text = t.ptr;
        src.len = (size_t)t.len;
        src.origin = o->model_path;
        if (tokenizer_load(&tok, &f, why, sizeof why) == 0) {
            size_t n;
            int32_t b = tokenizer_bos(tok), e = tokenizer_eos(tok);
            const char *p = b >= 0 ? tokenizer_token_piece(tok, b, true, &n) : "";
            bos = strndup(p, b >= 0 ? n : 0);
            p = e >= 0 ? tokenizer_token_piece(tok, e, true, &n) : "";
            eos = strndup(p, e >= 0 ? n : 0);
            src.bos = bos;
            src.eos = eos;
            src.strip_bos = b >= 0 && tokenizer_add_bos(tok);
            src.strip_eos = e >= 0 && tokenizer_add_eos(tok);
        }
    } else if (!o->forced) {
        if (!(text = slurp(o->template_path, &src.len))) return 1;
        src.text = text;
        src.origin = o->template_path;
    }
    int rc;
    if (o->native && src.text) {
        enum chat_family fam;
        chat_family_resolve(NULL, src.text, src.len, &fam, warn, sizeof warn);
        rc = chat_prompt_init(cp, &(struct chat_prompt_source){.forced = chat_family_name(fam)}, NULL, 0, why,
                              sizeof why);
    } else {
        rc = chat_prompt_init(cp, &src, warn, sizeof warn, why, sizeof why);
    }
    if (gguf_open_ok) gguf_close(&f);
    tokenizer_free(tok);
    free(bos);
    free(eos);
    free(text);
    if (rc < 0) {
        fprintf(stderr, "uvlm apply-template: %s\n", rc == -ERR_NOMEM ? "out of memory" : why);
        return 2;
    }
    if (warn[0]) fprintf(stderr, "uvlm apply-template: warning: %s\n", warn);
    return 0;
}

int cmd_apply_template(int argc, char **argv) {
    struct opts o = {.generation_prompt = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            apply_template_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--template-file") && has_value) {
            o.template_path = argv[++i];
        } else if (!strcmp(a, "--model") && has_value) {
            o.model_path = argv[++i];
        } else if (!strcmp(a, "--messages") && has_value) {
            o.messages_path = argv[++i];
        } else if (!strcmp(a, "--tools") && has_value) {
            o.tools_path = argv[++i];
        } else if (!strcmp(a, "--kwargs") && has_value) {
            o.kwargs = argv[++i];
        } else if (!strcmp(a, "--chat-template") && has_value) {
            o.forced = argv[++i];
        } else if (!strcmp(a, "--native")) {
            o.native = true;
        } else if (!strcmp(a, "--no-generation-prompt")) {
            o.generation_prompt = false;
        } else if (!strcmp(a, "--continue")) {
            o.cont = true;
        } else {
            fprintf(stderr, "uvlm apply-template: unknown flag or missing value: %s\n", a);
            apply_template_usage(stderr);
            return 2;
        }
    }
    if (!o.messages_path || (o.template_path && o.model_path) || (!o.template_path && !o.model_path && !o.forced)) {
        fprintf(stderr, "uvlm apply-template: --messages and one of --template-file, --model or "
                        "--chat-template are required\n");
        apply_template_usage(stderr);
        return 2;
    }
    struct chat_prompt cp;
    int status = load_prompt(&o, &cp);
    if (status) return status;

    json_t *messages = load_json(o.messages_path, &status), *tools = NULL, *kwargs = NULL;
    if (messages && o.tools_path) tools = load_json(o.tools_path, &status);
    if (messages && (!o.tools_path || tools) && o.kwargs) {
        kwargs = json_loads(o.kwargs, 0, NULL);
        if (!json_is_object(kwargs)) {
            fprintf(stderr, "uvlm apply-template: --kwargs: expected a JSON object\n");
            status = 2;
        }
    }
    char *prompt = NULL;
    size_t len = 0;
    if (!status) {
        struct chat_request req = {messages, tools, kwargs, o.generation_prompt, o.cont ? 1 : -1};
        char why[512];
        int rc = chat_prompt_render(&cp, &req, (int64_t)time(NULL), &prompt, &len, why, sizeof why);
        if (rc < 0) {
            fprintf(stderr, "uvlm apply-template: %s\n", rc == -ERR_NOMEM ? "out of memory" : why);
            status = rc == -ERR_NOMEM ? 1 : 2;
        }
    }
    json_decref(messages);
    json_decref(tools);
    json_decref(kwargs);
    chat_prompt_free(&cp);
    if (status) return status;
    bool ok = fwrite(prompt, 1, len, stdout) == len && fflush(stdout) == 0;
    free(prompt);
    if (!ok) {
        perror("uvlm apply-template: stdout");
        return 1;
    }
    return 0;
}
