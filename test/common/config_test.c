#include "test.h"
#include "common/config.h"
#include "common/err.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int load(struct config *cfg, char **env, char *msg, int argc, ...) {
    char *argv[32] = {"uvlm"};
    va_list ap;
    va_start(ap, argc);
    for (int i = 1; i <= argc; i++) argv[i] = va_arg(ap, char *);
    va_end(ap);
    return config_load(cfg, argc + 1, argv, env, msg, 256);
}

/* A config file in /tmp holding `text`; the path is written to path. */
static void write_file(char *path, const char *text) {
    strcpy(path, "/tmp/uvlm-config-test-XXXXXX");
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

TEST(config_defaults_parse) {
    struct config cfg;
    char msg[256];
    CHECK_EQ_INT(load(&cfg, NULL, msg, 0), 0);
    CHECK_EQ_STR(cfg.host, "127.0.0.1");
    CHECK_EQ_INT(cfg.port, 8080);
    CHECK_EQ_INT(cfg.max_body, 4 << 20);
    CHECK_EQ_INT(cfg.idle_timeout_ms, 30000);
    CHECK_EQ_INT(cfg.api_key.n, 0);
    CHECK(!cfg.debug_endpoints);
    config_free(&cfg);
}

TEST(config_flag_forms_units_and_lists) {
    struct config cfg;
    char msg[256];
    int rc = load(&cfg, NULL, msg, 13, "--port=9000", "-m", "x.gguf", "--max-body", "2k", "--drain-timeout",
                  "1.5s", "--api-key", "a, b", "--api-key=c", "--debug-endpoints", "--read-timeout", "250ms");
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(cfg.port, 9000);
    CHECK_EQ_STR(cfg.model, "x.gguf");
    CHECK_EQ_INT(cfg.max_body, 2048);
    CHECK_EQ_INT(cfg.drain_timeout_ms, 1500);
    CHECK_EQ_INT(cfg.read_timeout_ms, 250);
    CHECK_EQ_INT(cfg.api_key.n, 3);
    CHECK_EQ_STR(cfg.api_key.v[1], "b");
    CHECK_EQ_STR(cfg.api_key.v[2], "c");
    CHECK(cfg.debug_endpoints);
    config_free(&cfg);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--debug-endpoints", "false"), 0);
    CHECK(!cfg.debug_endpoints);
    config_free(&cfg);
}

TEST(config_precedence_flags_env_file_defaults) {
    char path[64], msg[256];
    write_file(path, "# comment\n  port = 1111\nhost=::1\nmax_connections = 7\napi-key = f1,f2\n\n");
    char cfg_env[96];
    snprintf(cfg_env, sizeof cfg_env, "UVLM_CONFIG=%s", path);
    char *env[] = {cfg_env, "UVLM_PORT=2222", "UVLM_API_KEY=e1", "OTHER=1", "UVLM_SHARED=/x", NULL};
    struct config cfg;
    CHECK_EQ_INT(load(&cfg, env, msg, 2, "--port", "3333"), 0);
    CHECK_EQ_INT(cfg.port, 3333);         /* flag */
    CHECK_EQ_INT(cfg.api_key.n, 1);       /* env replaces the file's list */
    CHECK_EQ_STR(cfg.api_key.v[0], "e1");
    CHECK_EQ_STR(cfg.host, "::1");        /* file */
    CHECK_EQ_INT(cfg.max_connections, 7); /* file */
    CHECK_EQ_INT(cfg.max_headers, 64);    /* default */
    config_free(&cfg);
    CHECK_EQ_INT(load(&cfg, env + 1, msg, 2, "--config", path), 0);
    CHECK_EQ_INT(cfg.port, 2222); /* env over file */
    config_free(&cfg);
    unlink(path);
}

TEST(config_errors_name_the_key) {
    struct config cfg;
    char msg[256], path[64];
    static const struct { const char *flag, *value, *named; } bad[] = {
        {"--port", "65536", "port"},     {"--port", "12x", "port"},
        {"--max-body", "3T", "max-body"}, {"--sse-ping", "-1s", "sse-ping"},
        {"--log-level", "loud", "log-level"}, {"--nope", "1", "--nope"},
        {"-z", "1", "-z"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = load(&cfg, NULL, msg, 2, bad[i].flag, bad[i].value);
        config_free(&cfg);
        CHECK_EQ_INT(rc, -ERR_INVAL);
        CHECK(strstr(msg, bad[i].named) != NULL);
    }
    CHECK_EQ_INT(load(&cfg, NULL, msg, 1, "--host"), -ERR_INVAL);
    CHECK(strstr(msg, "needs a value"));
    config_free(&cfg);
    char *env[] = {"UVLM_IDLE_TIMEOUT=soon", NULL};
    CHECK_EQ_INT(load(&cfg, env, msg, 0), -ERR_INVAL);
    CHECK(strstr(msg, "UVLM_IDLE_TIMEOUT"));
    config_free(&cfg);
    write_file(path, "port = 1\nmystery = 2\n");
    CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--config", path), -ERR_INVAL);
    CHECK(strstr(msg, "mystery") && strstr(msg, ":2"));
    config_free(&cfg);
    unlink(path);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--config", path), -ERR_IO);
    config_free(&cfg);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 1, "--help"), CONFIG_HELP);
    config_free(&cfg);
}

TEST(config_request_defaults_and_llama_server_names) {
    struct config cfg;
    char msg[256];
    CHECK_EQ_INT(load(&cfg, NULL, msg, 0), 0);
    CHECK(cfg.seed == -1 && cfg.temp == 0.8 && cfg.top_k == 40 && cfg.top_p == 0.95 && cfg.n_predict == -1);
    CHECK(cfg.ctx_size == 0 && cfg.parallel == 0 && cfg.max_seq_tokens == 0);
    config_free(&cfg);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 13, "-s", "42", "--temperature", "0.25", "--top-k", "7", "--top-p=0.5",
                      "-n", "-1", "-c", "512", "-np", "4"), 0);
    CHECK(cfg.seed == 42 && cfg.temp == 0.25 && cfg.top_k == 7 && cfg.top_p == 0.5 && cfg.n_predict == -1);
    CHECK_EQ_INT(cfg.max_seq_tokens, 512); /* --ctx-size is the per-sequence limit */
    CHECK_EQ_INT(cfg.parallel, 4);
    config_free(&cfg);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 4, "--ctx-size", "512", "--max-seq-tokens", "512"), 0);
    config_free(&cfg);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 4, "--ctx-size", "512", "--max-seq-tokens", "256"), -ERR_INVAL);
    CHECK(strstr(msg, "ctx-size") && strstr(msg, "max-seq-tokens"));
    config_free(&cfg);
    char *env[] = {"UVLM_TEMP=0", "UVLM_N_PREDICT=9", NULL};
    CHECK_EQ_INT(load(&cfg, env, msg, 0), 0);
    CHECK(cfg.temp == 0 && cfg.n_predict == 9);
    config_free(&cfg);
    static const struct { const char *flag, *named; } bad[] = {
        {"--temp", "temp"}, {"--top-p", "top-p"}, {"--seed", "seed"},
    };
    static const char *const values[] = {"nan", "1.5", "-2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_EQ_INT(load(&cfg, NULL, msg, 2, bad[i].flag, values[i]), -ERR_INVAL);
        CHECK(strstr(msg, bad[i].named) != NULL);
        config_free(&cfg);
    }
    /* llama-server flags uvlm has no use for: refused with why, whatever their form */
    static const struct { const char *flag, *says; } refused[] = {
        {"-ngl", "GPU"}, {"--n-gpu-layers", "GPU"}, {"--gpu-layers=99", "GPU"}, {"-fa", "not needed"},
        {"--flash-attn", "not needed"}, {"--mlock", "not supported"}, {"--no-mmap", "not supported"},
        {"-cb", "continuously"}, {"-b", "--batch-tokens"}, {"-ub", "--batch-tokens"}, {"--jinja", "Jinja"},
        {"-hf", "--model"}, {"-v", "--log-level"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        CHECK_EQ_INT(load(&cfg, NULL, msg, 2, refused[i].flag, "1"), -ERR_INVAL);
        CHECK(strstr(msg, "llama-server") && strstr(msg, refused[i].says));
        config_free(&cfg);
    }
    CHECK_EQ_INT(load(&cfg, NULL, msg, 1, "-nope"), -ERR_INVAL);
    CHECK(strstr(msg, "unknown flag '-nope'") && !strstr(msg, "llama-server"));
    config_free(&cfg);
}

TEST(config_blank_api_key_is_refused_from_every_source) {
    struct config cfg;
    char msg[256], path[64];
    static const char *const blanks[] = {"", ",", " , ", "\t"};
    for (size_t i = 0; i < sizeof blanks / sizeof *blanks; i++) {
        CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--api-key", blanks[i]), -ERR_INVAL);
        CHECK(strstr(msg, "empty value for api-key") != NULL);
        config_free(&cfg);
    }
    CHECK_EQ_INT(load(&cfg, NULL, msg, 4, "--api-key", "k1", "--api-key", " "), -ERR_INVAL); /* one blank of two */
    config_free(&cfg);
    char *env[] = {"UVLM_API_KEY=", NULL};
    CHECK_EQ_INT(load(&cfg, env, msg, 0), -ERR_INVAL);
    CHECK(strstr(msg, "UVLM_API_KEY") != NULL);
    config_free(&cfg);
    write_file(path, "api-key = ,\n");
    CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--config", path), -ERR_INVAL);
    CHECK(strstr(msg, ":1") != NULL);
    config_free(&cfg);
    unlink(path);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--api-key", " k , "), 0); /* blanks around a key are trimmed */
    CHECK_EQ_INT(cfg.api_key.n, 1);
    CHECK_EQ_STR(cfg.api_key.v[0], "k");
    config_free(&cfg);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--cors-origin", ""), 0); /* other lists may be empty */
    config_free(&cfg);
}

TEST(config_usage_lists_every_setting) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_usage(f, "uvlm");
    fclose(f);
    for (size_t i = 0; i < config_n_settings; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s ", config_settings[i].name);
        CHECK(strstr(buf, flag));
    }
    CHECK(strstr(buf, "UVLM_MAX_BODY"));
    free(buf);
}

/* strtod takes "nan" and "inf": neither is a size or a duration (nan would reach a cast to
 * long long, which is undefined). */
TEST(config_nan_and_inf_are_bad_values) {
    const char *bad[][2] = {{"--max-body", "nan"}, {"--idle-timeout", "NaN"}, {"--max-body", "inf"},
                            {"--drain-timeout", "-nan"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct config cfg;
        char msg[256];
        CHECK_EQ_INT(load(&cfg, NULL, msg, 2, bad[i][0], bad[i][1]), -ERR_INVAL);
        if (!strstr(msg, "bad value")) fprintf(stderr, "  %s %s: %s\n", bad[i][0], bad[i][1], msg);
        CHECK(strstr(msg, "bad value"));
        config_free(&cfg);
    }
}

/* A line longer than the reader's buffer is refused, naming file and line; it is never split
 * into two lines (here the tail of a comment would have set the port). */
TEST(config_file_line_too_long_is_an_error) {
    struct config cfg;
    char msg[256], path[64];
    static char text[8192];
    size_t n = (size_t)sprintf(text, "port = 1\n#");
    memset(text + n, ' ', 4094);
    strcpy(text + n + 4094, "port = 9\n");
    write_file(path, text);
    int rc = load(&cfg, NULL, msg, 2, "--config", path);
    CHECK_EQ_INT(rc, -ERR_INVAL);
    CHECK(strstr(msg, path) && strstr(msg, ":2:") && strstr(msg, "longer than"));
    config_free(&cfg);
    unlink(path);
    /* a line of 4095 bytes still fits: followed by a newline, or last in the file without one */
    for (int last = 0; last < 2; last++) {
        char *p = text;
        if (last) p += sprintf(p, "port = 9\n");
        *p++ = '#';
        memset(p, 'x', 4094);
        strcpy(p + 4094, last ? "" : "\nport = 9\n");
        write_file(path, text);
        CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--config", path), 0);
        CHECK_EQ_INT(cfg.port, 9);
        config_free(&cfg);
        unlink(path);
    }
}

/* Only a regular file is read: a directory, /dev/zero (endless NULs), a FIFO (would block the
 * start) and a file with a NUL byte are errors that name the file. */
TEST(config_file_must_be_a_regular_text_file) {
    struct config cfg;
    char msg[256], path[64];
    const char *bad[4] = {"/tmp", "/dev/zero", "/dev/null", NULL};
    char fifo[] = "/tmp/uvlm-config-fifo-XXXXXX";
    CHECK(mkdtemp(fifo));
    char fifo_path[64];
    snprintf(fifo_path, sizeof fifo_path, "%s/f", fifo);
    CHECK_EQ_INT(mkfifo(fifo_path, 0600), 0);
    bad[3] = fifo_path;
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--config", bad[i]), -ERR_INVAL);
        CHECK(strstr(msg, bad[i]) && strstr(msg, "not a regular file"));
        config_free(&cfg);
    }
    unlink(fifo_path);
    rmdir(fifo);
    static const char text[] = "port = 1\nport\0 = 2\n";
    FILE *f = fopen(strcpy(path, "/tmp/uvlm-config-nul.conf"), "wb");
    CHECK(f && fwrite(text, 1, sizeof text - 1, f) == sizeof text - 1);
    fclose(f);
    CHECK_EQ_INT(load(&cfg, NULL, msg, 2, "--config", path), -ERR_INVAL);
    CHECK(strstr(msg, ":2:") && strstr(msg, "NUL"));
    config_free(&cfg);
    unlink(path);
}

/* --help-markdown: a header, then one row per setting in table order, each with its flag,
 * variable and range; a config file cannot name another one, so --config has no file key. */
TEST(config_usage_markdown_one_row_per_setting) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ASSERT(f);
    config_usage_markdown(f);
    fclose(f);
    int rows = 0;
    for (const char *line = text; *line; rows++) {
        const char *nl = strchr(line, '\n');
        CHECK(nl && line[0] == '|' && nl[-1] == '|');
        if (!nl) break;
        if (rows >= 2) {
            const struct config_setting *s = &config_settings[rows - 2];
            char flag[64];
            snprintf(flag, sizeof flag, "`--%s` |", s->name);
            CHECK(strstr(line, flag) && strstr(line, flag) < nl);
        }
        line = nl + 1;
    }
    CHECK_EQ_INT(rows, (long long)config_n_settings + 2);
    CHECK(strstr(text, "| `--config` | - | `UVLM_CONFIG` |"));
    CHECK(strstr(text, "| `-p`, `--port` | `port` | `UVLM_PORT` | `8080` | 0..65535 |"));
    CHECK(strstr(text, "| `UVLM_MAX_HEADER_BYTES` | `16k` | 256..16M bytes |"));
    CHECK(strstr(text, "| `UVLM_DRAIN_TIMEOUT` | `30s` | 0..24h |"));
    CHECK(strstr(text, "| debug, info, warn, error, off |"));
    free(text);
}
