/* apply_template.c: `uvlm apply-template`: print the prompt a chat template makes of messages.
 *
 *   uvlm apply-template --template-file tmpl.jinja --messages msgs.json > prompt.txt
 *   uvlm apply-template --model model.gguf --messages msgs.json
 *
 * The family is detected from the template text (a file, or the model's tokenizer.chat_template),
 * or forced with --chat-template NAME; with neither found it is chatml, with a warning. The prompt
 * is printed exactly, with no newline added, ending with the generation prompt unless
 * --no-generation-prompt. Exit 0, 1 when a file cannot be read, 2 on bad usage or bad JSON. */
#include "cmd/cmd.h"

#include "api/chat_json.h"
#include "api/chat_template.h"
#include "common/err.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void apply_template_usage(FILE *f) {
    fprintf(f,
            "usage: uvlm apply-template (--template-file FILE | --model GGUF) --messages FILE [FLAGS]\n"
            "  --template-file FILE    Jinja chat template text (as in tokenizer.chat_template)\n"
            "  --model GGUF            use the chat template of this model\n"
            "  --messages FILE         JSON array of {\"role\", \"content\"} (- for stdin)\n"
            "  --chat-template NAME    use this family instead of detecting it; one of:\n"
            "                          %s\n"
            "  --no-generation-prompt  do not end with the opening of the assistant's reply\n",
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

/* Sets *fam from --chat-template, --model or --template-file (printing the fallback warning)
 * and returns 0, or prints why not and returns the exit status: 1 unreadable file, 2 bad name. */
static int pick_family(const char *template_path, const char *model_path, const char *forced,
                       enum chat_family *fam) {
    char why[512];
    if (forced) {
        if (chat_family_resolve(forced, NULL, 0, fam, why, sizeof why) < 0) {
            fprintf(stderr, "uvlm apply-template: %s\n", why);
            return 2;
        }
        return 0;
    }
    if (model_path) {
        struct gguf_file f;
        if (gguf_open(&f, model_path, why, sizeof why) < 0) {
            fprintf(stderr, "uvlm apply-template: %s\n", why); /* why names the file */
            return 1;
        }
        struct gguf_str t = gguf_get_str(&f, CHAT_TEMPLATE_GGUF_KEY);
        chat_family_resolve(NULL, t.ptr, (size_t)t.len, fam, why, sizeof why);
        gguf_close(&f);
    } else {
        size_t len;
        char *text = slurp(template_path, &len);
        if (!text) return 1;
        chat_family_resolve(NULL, text, len, fam, why, sizeof why);
        free(text);
    }
    if (why[0]) fprintf(stderr, "uvlm apply-template: warning: %s\n", why);
    return 0;
}

int cmd_apply_template(int argc, char **argv) {
    const char *template_path = NULL, *model_path = NULL, *messages_path = NULL, *forced = NULL;
    bool generation_prompt = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            apply_template_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--template-file") && has_value) {
            template_path = argv[++i];
        } else if (!strcmp(a, "--model") && has_value) {
            model_path = argv[++i];
        } else if (!strcmp(a, "--messages") && has_value) {
            messages_path = argv[++i];
        } else if (!strcmp(a, "--chat-template") && has_value) {
            forced = argv[++i];
        } else if (!strcmp(a, "--no-generation-prompt")) {
            generation_prompt = false;
        } else {
            fprintf(stderr, "uvlm apply-template: unknown flag or missing value: %s\n", a);
            apply_template_usage(stderr);
            return 2;
        }
    }
    if (!messages_path || (template_path && model_path) || (!template_path && !model_path && !forced)) {
        fprintf(stderr, "uvlm apply-template: --messages and one of --template-file, --model or "
                        "--chat-template are required\n");
        apply_template_usage(stderr);
        return 2;
    }
    enum chat_family fam;
    int status = pick_family(template_path, model_path, forced, &fam);
    if (status) return status;

    size_t json_len;
    char *json = slurp(messages_path, &json_len);
    if (!json) return 1;
    struct chat_messages cm;
    char why[256] = "";
    int rc = chat_messages_parse(json, json_len, &cm, why, sizeof why);
    free(json);
    if (rc < 0) {
        fprintf(stderr, "uvlm apply-template: %s: %s\n", messages_path, why[0] ? why : err_str(rc));
        return 2;
    }

    char *prompt = NULL;
    int len = chat_template_apply_alloc(fam, cm.msgs, cm.n, generation_prompt, &prompt);
    chat_messages_free(&cm);
    if (len < 0) {
        fprintf(stderr, "uvlm apply-template: %s cannot format these messages: %s\n",
                chat_family_name(fam), err_str(len));
        return 2;
    }
    bool ok = fwrite(prompt, 1, (size_t)len, stdout) == (size_t)len && fflush(stdout) == 0;
    free(prompt);
    if (!ok) {
        perror("uvlm apply-template: stdout");
        return 1;
    }
    return 0;
}
