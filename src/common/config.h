/* config.h: every server setting, from one table (config.c: `config_settings`).
 *
 * A setting has one name used everywhere: the flag `--NAME value` (or `--NAME=value`, or a
 * one-letter alias `-m value`), the config-file key `NAME = value`, and the environment
 * variable `UVLM_NAME` (upper case, '-' -> '_'). Precedence, highest first:
 *     flags  >  environment (UVLM_*)  >  --config FILE  >  defaults
 * A list setting (e.g. --api-key) may be given several times or comma-separated; a source
 * that sets a list replaces what lower sources set. An unknown flag or file key is an error;
 * unknown UVLM_* environment variables are not (the tests use UVLM_BIN, UVLM_SHARED).
 * The file: one `NAME = value` per line, '#' or ';' starts a comment line, blank lines are
 * skipped; a line longer than 4095 bytes is an error naming the file and line.
 *
 * Value types: STR (optionally one of `choices` "a|b|c"), INT (with min/max), FLOAT (a finite
 * decimal number within min/max), SIZE (bytes, with
 * an optional k/M/G suffix, binary), MS (a duration stored in milliseconds: "30s", "500ms",
 * "2m", a bare number is seconds), BOOL (true/false/1/0/yes/no/on/off; a bare flag means true),
 * LIST (up to CONFIG_LIST_MAX strings).
 *
 * Flags of llama.cpp's llama-server that mean a uvlm setting are read as it (-np: --parallel,
 * --temperature: --temp, --predict: --n-predict); the ones uvlm has no use for are refused with
 * the reason (-ngl: there is no GPU; -fa: attention needs no switch; ...), so that a command line
 * written for llama-server fails with a message saying what to drop. --ctx-size is
 * --max-seq-tokens under llama-server's name: giving both with different values is an error.
 *
 * To add a setting: add a field to struct config and one row to the table in config.c (its
 * default is text, parsed and validated like any other value). --help prints the table.
 *
 *   struct config cfg;
 *   char msg[256];
 *   int rc = config_load(&cfg, argc, argv, environ, msg, sizeof msg);
 *   if (rc < 0) { fprintf(stderr, "uvlm: %s\n", msg); return 2; }   // names the bad key
 *   if (rc == CONFIG_HELP) { config_usage(stdout, argv[0]); return 0; }
 *   ... cfg.port, cfg.api_key.n ...
 *   config_free(&cfg);
 *
 * Strings in a loaded config are owned by it and live until config_free.
 */
#ifndef UVLM_CONFIG_H
#define UVLM_CONFIG_H

#include <stdio.h>
#include <stddef.h>
#include <stdbool.h>

#define CONFIG_LIST_MAX 16
#define CONFIG_MAX_SETTINGS 128 /* rows in the table (asserted) */

struct config_list {
    int n;
    const char *v[CONFIG_LIST_MAX];
};

struct config {
    /* listening */
    const char *host;
    long long port;
    /* model and serving engine */
    const char *model;
    const char *alias;          /* the model id responses report (empty: the file name) */
    /* serving engine */
    long long kv_tokens, batch_tokens, max_step_ms, max_queue, max_n, threads, compute_nice, loop_slice_us, max_seq_tokens;
    long long solo_step_ms, compute_yield_us;
    long long stall_timeout_ms;
    long long max_seqs_recurrent; /* states of a recurrent or hybrid model (0: one per sequence id) */
    long long ctx_size;         /* llama-server's -c: resolved into max_seq_tokens by config_load */
    long long parallel;         /* what /props reports as total_slots (0: computed) */
    /* defaults of the requests that omit them (params.h: struct params_defaults) */
    long long seed;             /* -1: random */
    double temp, top_p;
    long long top_k, n_predict;
    /* speculative decoding */
    const char *model_draft;    /* draft model file (empty: none) */
    long long draft_max, draft_min;
    double draft_p_min;
    bool draft_lookup;          /* prompt-lookup drafts without a draft model */
    long long kv_bytes;         /* KV memory budget (0: kv_tokens counts the cells) */
    const char *kv_type, *kv_type_k, *kv_type_v; /* "f16" / "q8_0"; the last two "" = kv_type */
    const char *chat_template;
    const char *chat_template_file;
    const char *reasoning_format; /* "auto" or "none": the chat requests' default */
    const char *pooling;        /* embeddings: model|none|mean|cls|last (model: its metadata's) */
    bool spm_infill;            /* /infill prompts suffix first (SPM) instead of prefix first (PSM) */
    bool allow_unknown_pretokenizer;
    /* security */
    struct config_list api_key;
    struct config_list cors_origin;
    bool no_webui;              /* no chat page at GET / */
    /* limits and timeouts */
    long long max_body;         /* bytes */
    long long max_header_bytes; /* bytes, request line + headers */
    long long max_headers;      /* count */
    long long max_connections;
    long long idle_timeout_ms;  /* keep-alive connection with no request */
    long long header_timeout_ms; /* request line + headers must arrive within */
    long long read_timeout_ms;  /* whole request (headers + body) must arrive within */
    long long drain_timeout_ms;
    long long sse_queue_bytes;  /* per stream write-queue bound */
    long long sse_ping_ms;
    /* logging */
    const char *log_level;
    const char *metrics_names;  /* "uvlm" or "llamacpp" (/metrics adds llama.cpp's names) */
    /* debugging aids */
    bool debug_endpoints;
    long long debug_ready_delay_ms;
    /* where the settings came from (--config) */
    const char *config_file;

    /* owned storage for the strings above */
    char **owned;
    size_t n_owned, cap_owned;
};

enum config_type { CONFIG_STR, CONFIG_INT, CONFIG_SIZE, CONFIG_MS, CONFIG_BOOL, CONFIG_LIST, CONFIG_FLOAT };

struct config_setting {
    const char *name;    /* flag/file key; env is UVLM_ + upper(name) */
    char alias;          /* one-letter flag alias or 0 */
    enum config_type type;
    size_t offset;       /* of the field in struct config */
    const char *def;     /* default, as text */
    long long min, max;  /* INT/SIZE/MS/FLOAT range (a FLOAT field is a double) */
    const char *choices; /* STR: "a|b|c" or NULL */
    const char *help;
};

extern const struct config_setting config_settings[];
extern const size_t config_n_settings;

#define CONFIG_HELP 1

/* Fill *cfg from defaults, the --config file, `env` (NULL-terminated "KEY=VALUE" strings, may be
 * NULL) and argv[1..argc). argv[0] is the program name. Returns 0, CONFIG_HELP when --help/-h was
 * given (cfg is then unusable), or -ERR_INVAL / -ERR_IO with a message naming the key in `msg`.
 * cfg must be config_free()d in every case. */
int config_load(struct config *cfg, int argc, char **argv, char **env, char *msg, size_t msglen);
void config_free(struct config *cfg);

/* Print the flags table (name, alias, default, env, help). */
void config_usage(FILE *out, const char *prog);

/* Print the same table as Markdown: one row per setting with its flag (and alias), config-file
 * key, UVLM_* variable, default, accepted values and help. `uvlm --help-markdown` prints it;
 * `make flags-table` copies it into README.md, and test/e2e/test_docs.py checks that copy. */
void config_usage_markdown(FILE *out);

#endif
