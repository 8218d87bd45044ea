#include "common/config.h"
#include "common/err.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define F(field) offsetof(struct config, field)
#define KiB 1024LL
#define MiB (1024LL * 1024)
#define GiB (1024LL * 1024 * 1024)
#define HOUR_MS (3600LL * 1000)

const struct config_setting config_settings[] = {
    {"config", 0, CONFIG_STR, F(config_file), "", 0, 0, NULL,
     "read settings from this file (key = value lines; see conf/uvlm.conf)"},
    {"host", 0, CONFIG_STR, F(host), "127.0.0.1", 0, 0, NULL,
     "address to listen on (IPv4 or IPv6, e.g. 0.0.0.0 or ::1)"},
    {"port", 'p', CONFIG_INT, F(port), "8080", 0, 65535, NULL,
     "TCP port to listen on (0 picks a free one and logs it)"},
    {"model", 'm', CONFIG_STR, F(model), "", 0, 0, NULL,
     "GGUF model file to serve (empty: models/kjv-tiny-q8_0.gguf, shipped in the repository)"},
    {"alias", 'a', CONFIG_STR, F(alias), "", 0, 0, NULL,
     "the model id clients see in /v1/models, /props and every response (empty: the file name)"},
    /* the serving engine */
    {"kv-tokens", 0, CONFIG_INT, F(kv_tokens), "4096", 16, 1LL << 24, NULL,
     "KV cells shared by all sequences, whatever their type (kv-bytes sizes them by memory instead): "
     "the budget requests are admitted against; committed at load, which fails when they exceed the "
     "machine's available memory"},
    {"kv-bytes", 0, CONFIG_SIZE, F(kv_bytes), "0", 0, 1LL << 40, NULL,
     "the KV memory budget in bytes instead of kv-tokens (0: kv-tokens counts the cells): as many "
     "cells as K/V of the kv-type fit in (uvlm inspect shows the figure), so q8_0 cells hold about "
     "1.9x the tokens of f16 ones in the same memory"},
    {"kv-type", 0, CONFIG_STR, F(kv_type), "f16", 0, 0, "f16|q8_0",
     "type of the KV cells' K and V rows: f16, or q8_0 (blocks of 32 values with one f16 scale, "
     "34 bytes per 32 values: 17/32 of f16's memory, logits within a few percent; heads of a "
     "multiple of 32)"},
    {"kv-type-k", 0, CONFIG_STR, F(kv_type_k), "", 0, 0, "f16|q8_0",
     "type of the K rows alone (empty: kv-type)"},
    {"kv-type-v", 0, CONFIG_STR, F(kv_type_v), "", 0, 0, "f16|q8_0",
     "type of the V rows alone (empty: kv-type)"},
    {"batch-tokens", 0, CONFIG_INT, F(batch_tokens), "512", 1, 65536, NULL,
     "most tokens per step (decode tokens + prompt chunks)"},
    {"max-step-ms", 0, CONFIG_INT, F(max_step_ms), "100", 1, 600000, NULL,
     "step time target while requests wait: prompt chunks shrink to stay under it"},
    {"solo-step-ms", 0, CONFIG_INT, F(solo_step_ms), "100", 0, 600000, NULL,
     "step time target of a prompt read alone (at least max-step-ms; 0: the whole batch-tokens): "
     "a request arriving meanwhile waits at most about solo-step-ms + max-step-ms for its first token"},
    {"max-queue", 0, CONFIG_INT, F(max_queue), "64", 1, 1000000, NULL,
     "requests waiting for memory; beyond: 503 with Retry-After"},
    {"max-n", 0, CONFIG_INT, F(max_n), "16", 1, 64, NULL,
     "most choices per request (n / n_cmpl)"},
    {"threads", 't', CONFIG_INT, F(threads), "0", 0, 1024, NULL,
     "compute threads of the forward pass (0: all cores)"},
    {"compute-nice", 0, CONFIG_INT, F(compute_nice), "0", 0, 20, NULL,
     "0..19: the compute threads run this many nice levels below the loop thread (0: as its equals; "
     "a CPU-bound neighbour gets no more of a core than they do); 20: under the idle scheduling "
     "policy (SCHED_IDLE): the loop preempts them at once, and so does every other process, so "
     "generation gets only the CPU nothing else wants. The model loads at the loop's priority"},
    {"compute-yield-us", 0, CONFIG_INT, F(compute_yield_us), "200", 0, 100000, NULL,
     "under the idle policy (compute-nice 20), the compute threads offer their CPU (sched_yield) this "
     "often, in microseconds, so that a woken loop thread never waits for the scheduler's tick behind "
     "them (0: never); at a nice level they never do"},
    {"loop-slice-us", 0, CONFIG_INT, F(loop_slice_us), "500", 0, 100000, NULL,
     "time slice the loop thread asks the kernel for, in microseconds (Linux 6.12+: a thread with a "
     "shorter slice preempts other threads of its priority as soon as it wakes, and is preempted as "
     "often; 0: the kernel's default)"},
    {"max-seq-tokens", 0, CONFIG_INT, F(max_seq_tokens), "0", 0, 1LL << 24, NULL,
     "most tokens (prompt + generated) per sequence, below the model's context (0: the context)"},
    {"ctx-size", 'c', CONFIG_INT, F(ctx_size), "0", 0, 1LL << 24, NULL,
     "llama-server's name of max-seq-tokens: most tokens per sequence (0: the context); giving both "
     "with different values is an error"},
    {"parallel", 0, CONFIG_INT, F(parallel), "0", 0, 1 << 20, NULL,
     "what /props reports as total_slots, for clients that size their concurrency by it (llama-server's "
     "-np; uvlm admits by memory, not by slots; 0: the sequences that fit at full context in kv-tokens)"},
    {"max-seqs-recurrent", 0, CONFIG_INT, F(max_seqs_recurrent), "0", 0, 1 << 20, NULL,
     "recurrent (Mamba) and hybrid (Qwen3.5) models: recurrent sequence states held at once, live or "
     "cached; more requests take turns (0: one per sequence id, the larger of 64 and 4 x max-n)"},
    /* speculative decoding */
    {"model-draft", 0, CONFIG_STR, F(model_draft), "", 0, 0, NULL,
     "a small GGUF model with the same vocabulary that drafts tokens for the served model to verify "
     "several at once (speculative decoding); its KV cells are as many as kv-tokens"},
    {"draft-max", 0, CONFIG_INT, F(draft_max), "16", 0, 1024, NULL,
     "speculative decoding: most draft tokens verified per step (a request's speculative.n_max; at most "
     "15 are used; 0: off)"},
    {"draft-min", 0, CONFIG_INT, F(draft_min), "0", 0, 1024, NULL,
     "speculative decoding: a shorter draft is not verified (a request's speculative.n_min)"},
    {"draft-p-min", 0, CONFIG_FLOAT, F(draft_p_min), "0.75", 0, 1, NULL,
     "speculative decoding: the draft model stops where its next token's probability is below this "
     "(a request's speculative.p_min)"},
    {"draft-lookup", 0, CONFIG_BOOL, F(draft_lookup), "false", 0, 0, NULL,
     "speculative decoding without a draft model: drafts are the continuation of the latest earlier "
     "occurrence of a sequence's last tokens in its own prompt and output (prompt lookup)"},
    {"stall-timeout", 0, CONFIG_MS, F(stall_timeout_ms), "30s", 10, 24 * HOUR_MS, NULL,
     "/health says 503 stalled when queued work made no progress this long"},
    {"chat-template", 0, CONFIG_STR, F(chat_template), "", 0, 0, NULL,
     "format chats with this native family (chatml, llama3, mistral-v7, gemma, ...) instead of "
     "running the model's template; empty: run the template"},
    {"chat-template-file", 0, CONFIG_STR, F(chat_template_file), "", 0, 0, NULL,
     "run this Jinja chat template instead of the model's own (tokenizer.chat_template)"},
    {"reasoning-format", 0, CONFIG_STR, F(reasoning_format), "auto", 0, 0, "auto|none",
     "chat: reasoning blocks (<think>...</think> and the like) go to reasoning_content (auto) or stay in "
     "the content (none); a request's reasoning_format overrides it"},
    {"pooling", 0, CONFIG_STR, F(pooling), "model", 0, 0, "model|none|mean|cls|last",
     "how /v1/embeddings and /embedding pool a text's final hidden states into one vector: the mean "
     "over its tokens, the first (cls) or the last token's; none: /embedding gives every token's "
     "(/v1/embeddings refuses it); model: the model's <arch>.pooling_type, else none (llama.cpp's "
     "default for a model without it)"},
    {"spm-infill", 0, CONFIG_BOOL, F(spm_infill), "false", 0, 0, NULL,
     "/infill puts the suffix before the prefix (suffix-prefix-middle, what some code models were "
     "trained on) instead of prefix-suffix-middle"},
    {"allow-unknown-pretokenizer", 0, CONFIG_BOOL, F(allow_unknown_pretokenizer), "false", 0, 0, NULL,
     "load a model whose tokenizer.ggml.pre uvlm does not know, splitting its text as 'default' "
     "(tokens may differ from the model's; without it such a model is refused)"},
    /* what a request that omits them gets */
    {"seed", 's', CONFIG_INT, F(seed), "-1", -1, 4294967295LL, NULL,
     "sampling seed of requests without one (-1: a random seed per request)"},
    {"temp", 0, CONFIG_FLOAT, F(temp), "0.8", 0, 100, NULL,
     "temperature of requests without one (0: greedy)"},
    {"top-k", 0, CONFIG_INT, F(top_k), "40", 0, (1LL << 31) - 1, NULL,
     "top_k of requests without one (0: off)"},
    {"top-p", 0, CONFIG_FLOAT, F(top_p), "0.95", 0, 1, NULL,
     "top_p of requests without one (1: off)"},
    {"n-predict", 'n', CONFIG_INT, F(n_predict), "-1", -1, (1LL << 31) - 1, NULL,
     "most tokens generated for requests that set no n_predict / max_tokens (-1: until the end of "
     "generation or the context)"},
    {"api-key", 0, CONFIG_LIST, F(api_key), "", 0, 0, NULL,
     "require this key (Authorization: Bearer KEY or X-Api-Key: KEY); repeat or comma-separate "
     "for several; /health never needs it; an empty or blank value is refused"},
    {"cors-origin", 0, CONFIG_LIST, F(cors_origin), "localhost", 0, 0, NULL,
     "browser origins whose pages may read the answers (CORS): origins (http://app.example, "
     "http://app.example:* for any port), localhost (http(s) on localhost, 127.0.0.1, [::1], any "
     "port), * (any page of any site); empty: no CORS headers"},
    {"no-webui", 0, CONFIG_BOOL, F(no_webui), "false", 0, 0, NULL,
     "serve no chat page: GET / (and its /webui.js, /webui.css) answer 404"},
    {"max-body", 0, CONFIG_SIZE, F(max_body), "4M", 1, GiB, NULL,
     "largest request body accepted (413 above); 4M holds a chat request of a million characters, "
     "and a client without the API key is refused before its body is read"},
    {"max-header-bytes", 0, CONFIG_SIZE, F(max_header_bytes), "16k", 256, 16 * MiB, NULL,
     "largest request line + headers accepted (431 above)"},
    {"max-headers", 0, CONFIG_INT, F(max_headers), "64", 1, 10000, NULL,
     "most request headers accepted (431 above)"},
    {"max-connections", 0, CONFIG_INT, F(max_connections), "256", 1, 100000, NULL,
     "most open client connections (above: 503 and close, but for a few more that serve only "
     "GET /health, then close)"},
    {"idle-timeout", 0, CONFIG_MS, F(idle_timeout_ms), "30s", 10, 24 * HOUR_MS, NULL,
     "close a keep-alive connection idle this long"},
    {"header-timeout", 0, CONFIG_MS, F(header_timeout_ms), "10s", 10, 24 * HOUR_MS, NULL,
     "a request's line and headers must arrive within this of its first byte, and a new "
     "connection's first request within this of its opening (408 and close otherwise; a silent "
     "connection is closed)"},
    {"read-timeout", 0, CONFIG_MS, F(read_timeout_ms), "30s", 10, 24 * HOUR_MS, NULL,
     "a request's headers and body must arrive within this (408 and close otherwise)"},
    {"drain-timeout", 0, CONFIG_MS, F(drain_timeout_ms), "30s", 0, 24 * HOUR_MS, NULL,
     "on SIGTERM/SIGINT/SIGHUP, let in-flight requests finish this long, then exit"},
    {"sse-queue-bytes", 0, CONFIG_SIZE, F(sse_queue_bytes), "1M", 1024, GiB, NULL,
     "bytes a stream may have waiting for a slow client before it is closed and cancelled"},
    {"sse-ping", 0, CONFIG_MS, F(sse_ping_ms), "15s", 10, 24 * HOUR_MS, NULL,
     "interval of ': ping' comments on an event stream"},
    {"log-level", 0, CONFIG_STR, F(log_level), "info", 0, 0, "debug|info|warn|error|off",
     "least severe log lines written to stderr"},
    {"metrics-names", 0, CONFIG_STR, F(metrics_names), "uvlm", 0, 0, "uvlm|llamacpp",
     "GET /metrics: uvlm_* and process_* families; llamacpp: also llama.cpp server's llamacpp:* "
     "ones, for dashboards made for it"},
    {"debug-endpoints", 0, CONFIG_BOOL, F(debug_endpoints), "false", 0, 0, NULL,
     "debugging aid: expose /debug/stream, /debug/stats, /debug/slow-step, ... (never in production)"},
    {"debug-ready-delay", 0, CONFIG_MS, F(debug_ready_delay_ms), "0", 0, 24 * HOUR_MS, NULL,
     "debugging aid: stay 'loading' this long after start"},
};
const size_t config_n_settings = sizeof config_settings / sizeof *config_settings;

enum source { SRC_DEFAULT, SRC_FILE, SRC_ENV, SRC_FLAG };
static const char *const source_names[] = {"default", "config file", "environment", "flag"};

static void fail(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *msg, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

static const char *own(struct config *cfg, const char *s, size_t n) {
    if (cfg->n_owned == cfg->cap_owned) {
        size_t cap = cfg->cap_owned ? 2 * cfg->cap_owned : 32;
        char **p = realloc(cfg->owned, cap * sizeof *p);
        if (!p) return NULL;
        cfg->owned = p;
        cfg->cap_owned = cap;
    }
    char *copy = malloc(n + 1);
    if (!copy) return NULL;
    memcpy(copy, s, n);
    copy[n] = '\0';
    cfg->owned[cfg->n_owned++] = copy;
    return copy;
}

/* "16M" -> 16 MiB; "1.5s" -> 1500 (ms); bare numbers are bytes / seconds. */
static int parse_scaled(const char *v, enum config_type type, long long *out) {
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || errno || !(x >= 0 && x <= 9e18)) return -ERR_INVAL; /* also nan and inf */
    double scale = 1;
    if (type == CONFIG_SIZE) {
        if (!*end) scale = 1;
        else if (!strcmp(end, "k") || !strcmp(end, "K")) scale = KiB;
        else if (!strcmp(end, "m") || !strcmp(end, "M")) scale = MiB;
        else if (!strcmp(end, "g") || !strcmp(end, "G")) scale = GiB;
        else return -ERR_INVAL;
    } else {
        if (!*end || !strcmp(end, "s")) scale = 1000;
        else if (!strcmp(end, "ms")) scale = 1;
        else if (!strcmp(end, "m")) scale = 60000;
        else if (!strcmp(end, "h")) scale = 3600000;
        else return -ERR_INVAL;
    }
    double r = x * scale;
    if (r > 9e18) return -ERR_INVAL;
    *out = (long long)(r + 0.5);
    return 0;
}

static int parse_bool(const char *v, bool *out) {
    static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) { *out = true; return 0; }
        if (!strcasecmp(v, no[i])) { *out = false; return 0; }
    }
    return -ERR_INVAL;
}

static int in_choices(const char *v, const char *choices) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return 1;
        p += len + (bar ? 1 : 0);
    }
    return 0;
}

/* Per-setting record of which source last set a list, so a higher source replaces it. */
struct load_state {
    enum source list_src[CONFIG_MAX_SETTINGS];
};

static int set_value(struct config *cfg, struct load_state *st, const struct config_setting *s,
                     const char *v, enum source src, char *msg, size_t msglen) {
    void *field = (char *)cfg + s->offset;
    long long n;
    switch (s->type) {
    case CONFIG_STR:
        /* an empty value where the default is empty leaves the setting unset */
        if (s->choices && !(!*v && !*s->def) && !in_choices(v, s->choices)) {
            fail(msg, msglen, "%s: bad value '%s' for %s (one of %s)", source_names[src], v, s->name, s->choices);
            return -ERR_INVAL;
        }
        if (!(*(const char **)field = own(cfg, v, strlen(v)))) return -ERR_NOMEM;
        return 0;
    case CONFIG_INT:
    case CONFIG_SIZE:
    case CONFIG_MS:
        if (s->type == CONFIG_INT) {
            char *end;
            errno = 0;
            n = strtoll(v, &end, 10);
            if (end == v || *end || errno) goto bad;
        } else if (parse_scaled(v, s->type, &n)) {
            goto bad;
        }
        if (n < s->min || n > s->max) {
            fail(msg, msglen, "%s: value '%s' for %s out of range [%lld, %lld]%s", source_names[src], v,
                 s->name, s->min, s->max, s->type == CONFIG_MS ? " ms" : s->type == CONFIG_SIZE ? " bytes" : "");
            return -ERR_INVAL;
        }
        *(long long *)field = n;
        return 0;
    case CONFIG_FLOAT: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x)) goto bad;
        if (x < (double)s->min || x > (double)s->max) {
            fail(msg, msglen, "%s: value '%s' for %s out of range [%lld, %lld]", source_names[src], v, s->name,
                 s->min, s->max);
            return -ERR_INVAL;
        }
        *(double *)field = x;
        return 0;
    }
    case CONFIG_BOOL:
        if (parse_bool(v, (bool *)field)) goto bad;
        return 0;
    case CONFIG_LIST: {
        struct config_list *l = field;
        size_t idx = (size_t)(s - config_settings);
        if (st->list_src[idx] != src) l->n = 0; /* a higher source replaces the list */
        st->list_src[idx] = src;
        int before = l->n;
        for (const char *p = v; *p;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            while (len && isspace((unsigned char)*p)) p++, len--;
            while (len && isspace((unsigned char)p[len - 1])) len--;
            if (len) {
                if (l->n == CONFIG_LIST_MAX) {
                    fail(msg, msglen, "%s: too many values for %s (at most %d)", source_names[src], s->name,
                         CONFIG_LIST_MAX);
                    return -ERR_INVAL;
                }
                if (!(l->v[l->n++] = own(cfg, p, len))) return -ERR_NOMEM;
            }
            p = comma ? comma + 1 : p + strlen(p);
        }
        /* an operator who names a key and gives only blanks meant one: refused, not read as no
         * key (which would serve every client without one) */
        if (src != SRC_DEFAULT && s->offset == F(api_key) && l->n == before) {
            fail(msg, msglen, "%s: empty value for %s (a key is needed; to serve without one, leave %s unset)",
                 source_names[src], s->name, s->name);
            return -ERR_INVAL;
        }
        return 0;
    }
    }
bad:
    fail(msg, msglen, "%s: bad value '%s' for %s", source_names[src], v, s->name);
    return -ERR_INVAL;
}

/* Setting by name; '_' and '-' are the same so that file keys may use either. */
static const struct config_setting *find(const char *name, size_t len) {
    for (size_t i = 0; i < config_n_settings; i++) {
        const char *s = config_settings[i].name;
        if (strlen(s) != len) continue;
        size_t j = 0;
        while (j < len && (s[j] == name[j] || (s[j] == '-' && name[j] == '_'))) j++;
        if (j == len) return &config_settings[i];
    }
    return NULL;
}

static const struct config_setting *find_alias(char c) {
    for (size_t i = 0; i < config_n_settings; i++)
        if (config_settings[i].alias && config_settings[i].alias == c) return &config_settings[i];
    return NULL;
}

static void env_name(const struct config_setting *s, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "UVLM_");
    for (const char *p = s->name; *p && n + 1 < cap; p++)
        out[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[n] = '\0';
}

static int load_file(struct config *cfg, struct load_state *st, const char *path, char *msg, size_t msglen) {
    /* O_NONBLOCK: a FIFO named here must not block the start; only a regular file is read */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fail(msg, msglen, "config: cannot open '%s': %s", path, strerror(errno));
        return -ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) { /* a directory, /dev/zero, a FIFO */
        fail(msg, msglen, "config: '%s' is not a regular file", path);
        close(fd);
        return -ERR_INVAL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        fail(msg, msglen, "config: cannot read '%s'", path);
        return -ERR_IO;
    }
    char line[4096];
    int lineno = 0, rc = 0;
    for (;;) {
        memset(line, 0xff, sizeof line); /* fgets' terminator is then the last NUL in the buffer */
        if (rc || !fgets(line, sizeof line, f)) break;
        lineno++;
        char *p = line, *end = line + strlen(line);
        if (memrchr(line, '\0', sizeof line) != end) {
            fail(msg, msglen, "%s:%d: the line holds a NUL byte", path, lineno);
            rc = -ERR_INVAL;
            break;
        }
        if (end > line && end[-1] != '\n' && !feof(f)) { /* buffer full: a longer line, or exactly this? */
            int next = getc(f);
            if (next != '\n' && next != EOF) { /* never read the rest as a line of its own */
                fail(msg, msglen, "%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 1);
                rc = -ERR_INVAL;
                break;
            }
        }
        while (end > p && isspace((unsigned char)end[-1])) *--end = '\0';
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#' || *p == ';') continue;
        char *eq = strchr(p, '=');
        char *k_end = eq ? eq : end;
        while (k_end > p && isspace((unsigned char)k_end[-1])) k_end--;
        const struct config_setting *s = find(p, (size_t)(k_end - p));
        if (!eq || !s || !strcmp(s->name, "config")) {
            *k_end = '\0';
            fail(msg, msglen, "%s:%d: %s '%s'", path, lineno, !eq ? "expected key = value, got" : "unknown key", p);
            rc = -ERR_INVAL;
            break;
        }
        char *v = eq + 1;
        while (isspace((unsigned char)*v)) v++;
        rc = set_value(cfg, st, s, v, SRC_FILE, msg, msglen);
        if (rc) {
            char inner[256];
            snprintf(inner, sizeof inner, "%s", msg);
            fail(msg, msglen, "%s:%d: %s", path, lineno, inner);
        }
    }
    fclose(f);
    return rc;
}

/* llama-server's flags: the spellings that mean a uvlm setting, and the reasons uvlm refuses the
 * others, so that a command line written for it fails with what to change. */
static const struct { const char *flag, *setting; } llama_spellings[] = {
    {"-np", "parallel"}, {"--temperature", "temp"}, {"--predict", "n-predict"},
};
static const struct { const char *flags, *why; } llama_refused[] = {
    {" -ngl --n-gpu-layers --gpu-layers -sm --split-mode -ts --tensor-split -mg --main-gpu -dev --device ",
     "uvlm runs on the CPU, there is no GPU to offload to (drop the flag)"},
    {" -fa --flash-attn ", "not needed, uvlm's attention has no alternative to switch on (drop the flag)"},
    {" --mlock --no-mmap --mmap -lm --load-mode ", "not supported, uvlm maps the model file and keeps it in "
     "memory by itself (drop the flag)"},
    {" -cb --cont-batching -nocb --no-cont-batching ", "not needed, uvlm always batches continuously (drop the flag)"},
    {" --metrics --slots --no-slots ", "not needed, /metrics and /slots are always served (drop the flag)"},
    {" --jinja --no-jinja ", "not needed, the model's chat template runs as Jinja by default (--chat-template NAME "
     "picks a built-in format instead)"},
    {" -b --batch-size -ub --ubatch-size ", "use --batch-tokens (most tokens per step)"},
    {" -tb --threads-batch ", "use --threads (one pool computes prompts and generation)"},
    {" -ctk --cache-type-k -ctv --cache-type-v ", "not supported, the KV cache keeps the model's own precision"},
    {" -hf -hfr --hf-repo -hff --hf-file -mu --model-url ", "not supported, uvlm loads a local GGUF file "
     "(--model PATH)"},
    {" -v --verbose --log-verbose -lv --verbosity --log-verbosity --log-disable ", "use --log-level "
     "(debug, info, warn, error, off)"},
    {" --embedding --embeddings --reranking --rerank --lora --lora-scaled -md --model-draft --mmproj ",
     "not supported by uvlm"},
};

/* The setting a llama-server spelling means, or NULL; *why gets the reason for one uvlm refuses. */
static const struct config_setting *llama_flag(const char *flag, size_t len, const char **why) {
    char padded[72];
    *why = NULL;
    if (len + 3 > sizeof padded) return NULL;
    for (size_t i = 0; i < sizeof llama_spellings / sizeof *llama_spellings; i++)
        if (strlen(llama_spellings[i].flag) == len && !strncmp(llama_spellings[i].flag, flag, len))
            return find(llama_spellings[i].setting, strlen(llama_spellings[i].setting));
    snprintf(padded, sizeof padded, " %.*s ", (int)len, flag);
    for (size_t i = 0; i < sizeof llama_refused / sizeof *llama_refused; i++)
        if (strstr(llama_refused[i].flags, padded)) *why = llama_refused[i].why;
    return NULL;
}

/* One pass over argv; with apply=0 only --config and --help are looked at (and every flag is
 * checked to exist), with apply=1 the values are set. */
static int scan_flags(struct config *cfg, struct load_state *st, int argc, char **argv, int apply,
                      const char **config_path, char *msg, size_t msglen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const struct config_setting *s = NULL;
        const char *v = NULL;
        char shown[128];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return CONFIG_HELP;
        const char *why = NULL;
        if (a[0] == '-' && a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            s = find(name, len);
            if (!s) s = llama_flag(a, len + 2, &why);
            if (eq) v = eq + 1;
            snprintf(shown, sizeof shown, "--%.*s", (int)len, name);
        } else if (a[0] == '-' && a[1] && !a[2]) {
            s = find_alias(a[1]);
            if (!s) s = llama_flag(a, 2, &why);
            snprintf(shown, sizeof shown, "%s", a);
        } else if (a[0] == '-' && isalpha((unsigned char)a[1])) { /* llama-server's -ngl, -np, ... */
            s = llama_flag(a, strlen(a), &why);
            snprintf(shown, sizeof shown, "%.100s", a);
            if (!s && !why) {
                fail(msg, msglen, "unknown flag '%s'", shown);
                return -ERR_INVAL;
            }
        } else {
            fail(msg, msglen, "unexpected argument '%s'", a);
            return -ERR_INVAL;
        }
        if (!s) {
            if (why) fail(msg, msglen, "'%s' is a llama-server flag uvlm does not take: %s", shown, why);
            else fail(msg, msglen, "unknown flag '%s'", shown);
            return -ERR_INVAL;
        }
        if (!v) {
            int next_is_value = i + 1 < argc && (argv[i + 1][0] != '-' || !argv[i + 1][1] ||
                                                 isdigit((unsigned char)argv[i + 1][1]));
            if (s->type == CONFIG_BOOL) {
                bool b;
                v = next_is_value && !parse_bool(argv[i + 1], &b) ? argv[++i] : "true";
            } else if (i + 1 < argc) {
                v = argv[++i];
            } else {
                fail(msg, msglen, "flag '%s' needs a value", shown);
                return -ERR_INVAL;
            }
        }
        if (!apply) {
            if (s->offset == offsetof(struct config, config_file)) *config_path = v;
            continue;
        }
        int rc = set_value(cfg, st, s, v, SRC_FLAG, msg, msglen);
        if (rc) return rc;
    }
    return 0;
}

int config_load(struct config *cfg, int argc, char **argv, char **env, char *msg, size_t msglen) {
    memset(cfg, 0, sizeof *cfg);
    struct load_state st;
    memset(&st, 0, sizeof st);
    ASSERT(config_n_settings <= sizeof st.list_src / sizeof *st.list_src);
    msg[0] = '\0';
    int rc;
    for (size_t i = 0; i < config_n_settings; i++)
        if ((rc = set_value(cfg, &st, &config_settings[i], config_settings[i].def, SRC_DEFAULT, msg, msglen)))
            return rc;

    const char *config_path = NULL;
    if ((rc = scan_flags(cfg, &st, argc, argv, 0, &config_path, msg, msglen))) return rc;

    /* environment: collected first so that UVLM_CONFIG can name the file */
    const char *env_values[CONFIG_MAX_SETTINGS] = {0};
    for (size_t i = 0; env && i < config_n_settings; i++) {
        char name[80];
        env_name(&config_settings[i], name, sizeof name);
        size_t n = strlen(name);
        for (char **e = env; *e; e++)
            if (!strncmp(*e, name, n) && (*e)[n] == '=') env_values[i] = *e + n + 1;
    }
    size_t config_idx = 0; /* "config" is row 0 */
    if (!config_path && env_values[config_idx]) config_path = env_values[config_idx];
    if (config_path && *config_path) {
        if ((rc = load_file(cfg, &st, config_path, msg, msglen))) return rc;
    }
    for (size_t i = 0; i < config_n_settings; i++) {
        if (!env_values[i]) continue;
        if ((rc = set_value(cfg, &st, &config_settings[i], env_values[i], SRC_ENV, msg, msglen))) {
            char inner[256], name[80];
            snprintf(inner, sizeof inner, "%s", msg);
            env_name(&config_settings[i], name, sizeof name);
            fail(msg, msglen, "%s (%s)", inner, name);
            return rc;
        }
    }
    if ((rc = scan_flags(cfg, &st, argc, argv, 1, &config_path, msg, msglen))) return rc;
    if (cfg->ctx_size) { /* llama-server's name of the per-sequence limit */
        if (cfg->max_seq_tokens && cfg->max_seq_tokens != cfg->ctx_size) {
            fail(msg, msglen, "ctx-size %lld and max-seq-tokens %lld disagree: they are one setting, give one",
                 cfg->ctx_size, cfg->max_seq_tokens);
            return -ERR_INVAL;
        }
        cfg->max_seq_tokens = cfg->ctx_size;
    }
    return 0;
}

void config_free(struct config *cfg) {
    for (size_t i = 0; i < cfg->n_owned; i++) free(cfg->owned[i]);
    free(cfg->owned);
    cfg->owned = NULL;
    cfg->n_owned = cfg->cap_owned = 0;
}

void config_usage(FILE *out, const char *prog) {
    static const char *const type_names[] = {"STR", "N", "SIZE", "TIME", "[BOOL]", "LIST", "X"};
    fprintf(out, "usage: %s [serve] [FLAGS]\n\n"
                 "Every flag is also a config-file key (--config FILE, `key = value`) and an environment\n"
                 "variable UVLM_KEY. Precedence: flags > environment > config file > defaults.\n"
                 "SIZE takes k/M/G suffixes; TIME takes ms/s/m/h (a bare number is seconds).\n\n",
            prog);
    for (size_t i = 0; i < config_n_settings; i++) {
        const struct config_setting *s = &config_settings[i];
        char flag[64], env[80];
        if (s->alias) snprintf(flag, sizeof flag, "-%c, --%s %s", s->alias, s->name, type_names[s->type]);
        else snprintf(flag, sizeof flag, "    --%s %s", s->name, type_names[s->type]);
        env_name(s, env, sizeof env);
        fprintf(out, "  %-32s %s\n", flag, s->help);
        fprintf(out, "  %-32s default: %s%s%s  env: %s\n", "", *s->def ? s->def : "(none)",
                s->choices ? "  one of: " : "", s->choices ? s->choices : "", env);
    }
    fprintf(out, "  %-32s %s\n", "-h, --help", "print this and exit");
    fprintf(out, "  %-32s %s\n", "    --help-markdown", "print this table as Markdown (README.md's flag table) and exit");
}

/* A size in bytes or a duration in ms the way a user would write it: "16M", "30s", "24h". */
static void fmt_amount(char *out, size_t cap, long long v, enum config_type type) {
    static const struct { long long unit; const char *suffix; } sizes[] = {
        {GiB, "G"}, {MiB, "M"}, {KiB, "k"}}, times[] = {{HOUR_MS, "h"}, {60000, "m"}, {1000, "s"}};
    const bool size = type == CONFIG_SIZE;
    for (size_t i = 0; v && i < 3; i++) {
        long long unit = size ? sizes[i].unit : times[i].unit;
        if (v % unit == 0) {
            snprintf(out, cap, "%lld%s", v / unit, size ? sizes[i].suffix : times[i].suffix);
            return;
        }
    }
    snprintf(out, cap, "%lld%s", v, size || !v ? "" : "ms");
}

/* Text for a Markdown table cell: '|' would end the cell. */
static void md_cell(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}

void config_usage_markdown(FILE *out) {
    fprintf(out, "| flag | config key | environment | default | values | what |\n"
                 "| --- | --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < config_n_settings; i++) {
        const struct config_setting *s = &config_settings[i];
        char env[80], lo[32], hi[32];
        env_name(s, env, sizeof env);
        fputs("| ", out);
        if (s->alias) fprintf(out, "`-%c`, ", s->alias);
        fprintf(out, "`--%s` | ", s->name);
        if (s->offset == offsetof(struct config, config_file)) fputs("- | ", out); /* a file names no file */
        else fprintf(out, "`%s` | ", s->name);
        fprintf(out, "`%s` | %s%s%s | ", env, *s->def ? "`" : "", *s->def ? s->def : "(none)", *s->def ? "`" : "");
        switch (s->type) {
        case CONFIG_STR:
            if (!s->choices) {
                fputs("text", out);
                break;
            }
            for (const char *p = s->choices; *p; p++) {
                if (*p == '|') fputs(", ", out);
                else fputc(*p, out);
            }
            break;
        case CONFIG_INT:
        case CONFIG_FLOAT: fprintf(out, "%lld..%lld", s->min, s->max); break;
        case CONFIG_SIZE:
        case CONFIG_MS:
            fmt_amount(lo, sizeof lo, s->min, s->type);
            fmt_amount(hi, sizeof hi, s->max, s->type);
            fprintf(out, "%s..%s%s", lo, hi, s->type == CONFIG_SIZE ? " bytes" : "");
            break;
        case CONFIG_BOOL: fputs("true, false", out); break;
        case CONFIG_LIST: fputs("comma-separated list", out); break;
        }
        fputs(" | ", out);
        md_cell(out, s->help);
        fputs(" |\n", out);
    }
}
