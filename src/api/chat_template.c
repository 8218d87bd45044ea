/* chat_template.c: chat families detected from Jinja markers, formatted natively.
 *
 * Most families are one of two table shapes: "named" (the role's name is spelled out between two
 * markers: chatml, llama3, granite, ...) or "marked" (each role has its own opening and closing
 * markers: command-r, kimi-k2, deepseek3, mistral-v7). The rest have a rule of their own (system
 * folded into the first user turn, trimmed content, a default system turn) and a function each. */
#include "api/chat_template.h"

#include "common/err.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- output: snprintf-style, counts the full length, copies what fits ---- */

struct out {
    char *buf;
    size_t cap;   /* bytes available in buf, including the terminating NUL */
    size_t len;   /* full length so far (may exceed cap) */
};

static void put_n(struct out *o, const char *s, size_t n) {
    if (o->cap > 0 && o->len < o->cap - 1) {
        size_t room = o->cap - 1 - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void put(struct out *o, const char *s) { put_n(o, s, strlen(s)); }

/* Python's str.strip() on ASCII whitespace, as Jinja's `| trim` does. */
static void put_trimmed(struct out *o, const char *s) {
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[0])) s++, n--;
    while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
    put_n(o, s, n);
}

static void put_upper(struct out *o, const char *s) {
    for (; *s; s++) {
        char c = (char)toupper((unsigned char)*s);
        put_n(o, &c, 1);
    }
}

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_OTHER };

static enum role role_of(const char *role) {
    if (!strcmp(role, "system")) return ROLE_SYSTEM;
    if (!strcmp(role, "user")) return ROLE_USER;
    if (!strcmp(role, "assistant")) return ROLE_ASSISTANT;
    return ROLE_OTHER;
}

/* ---- "named" families: open + ROLE + mid + content + close ---- */

struct named_format {
    const char *preamble;        /* once, before the first message */
    const char *open, *mid, *close;
    const char *assistant_close; /* NULL: close */
    const char *generation;      /* the opening of the assistant's reply */
};

static int format_named(struct out *o, const struct named_format *f,
                        const struct chat_message *msgs, size_t n, bool gen) {
    if (f->preamble) put(o, f->preamble);
    for (size_t i = 0; i < n; i++) {
        bool assistant = role_of(msgs[i].role) == ROLE_ASSISTANT;
        put(o, f->open);
        put(o, msgs[i].role);
        put(o, f->mid);
        put(o, msgs[i].content);
        put(o, assistant && f->assistant_close ? f->assistant_close : f->close);
    }
    if (gen) put(o, f->generation);
    return 0;
}

static const struct named_format fmt_chatml = {
    NULL, "<|im_start|>", "\n", "<|im_end|>\n", NULL, "<|im_start|>assistant\n"};
static const struct named_format fmt_llama3 = {
    NULL, "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", NULL,
    "<|start_header_id|>assistant<|end_header_id|>\n\n"};
static const struct named_format fmt_phi3 = {
    NULL, "<|", "|>\n", "<|end|>\n", NULL, "<|assistant|>\n"};
static const struct named_format fmt_phi4 = {
    NULL, "<|im_start|>", "<|im_sep|>", "<|im_end|>", NULL, "<|im_start|>assistant<|im_sep|>"};
static const struct named_format fmt_zephyr = {
    NULL, "<|", "|>\n", "</s>\n", NULL, "<|assistant|>\n"};
static const struct named_format fmt_granite = {
    NULL, "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>\n", NULL,
    "<|start_of_role|>assistant<|end_of_role|>"};
static const struct named_format fmt_glm4 = {
    "[gMASK]<sop>", "<|", "|>\n", "", NULL, "<|assistant|>\n"};
static const struct named_format fmt_seed_oss = {
    NULL, "<seed:bos>", "\n", "<seed:eos>", NULL, "<seed:bos>assistant\n"};
static const struct named_format fmt_solar_open = {
    NULL, "<|begin|>", "<|content|>", "<|end|>", NULL, "<|begin|>assistant"};
/* Harmony without channels: a finished assistant reply ends with <|return|>. */
static const struct named_format fmt_gpt_oss = {
    NULL, "<|start|>", "<|message|>", "<|end|>", "<|return|>", "<|start|>assistant"};

/* ---- "marked" families: each role has its own markers; other roles are refused ---- */

struct marked_format {
    const char *open[3], *close[3];  /* indexed by ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT */
    const char *generation;
};

static int format_marked(struct out *o, const struct marked_format *f,
                         const struct chat_message *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        enum role r = role_of(msgs[i].role);
        if (r == ROLE_OTHER) return -ERR_INVAL;
        put(o, f->open[r]);
        put(o, msgs[i].content);
        put(o, f->close[r]);
    }
    if (gen) put(o, f->generation);
    return 0;
}

static const struct marked_format fmt_command_r = {
    {"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {"<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"};
static const struct marked_format fmt_kimi_k2 = {
    {"<|im_system|>system<|im_middle|>", "<|im_user|>user<|im_middle|>",
     "<|im_assistant|>assistant<|im_middle|>"},
    {"<|im_end|>", "<|im_end|>", "<|im_end|>"},
    "<|im_assistant|>assistant<|im_middle|>"};
/* The system prompt is bare text ahead of the first turn. */
static const struct marked_format fmt_deepseek3 = {
    {"", "<｜User｜>", "<｜Assistant｜>"},
    {"\n\n", "", "<｜end▁of▁sentence｜>"},
    "<｜Assistant｜>"};
/* The reply follows [/INST] directly: the generation prompt is empty. */
static const struct marked_format fmt_mistral_v7 = {
    {"[SYSTEM_PROMPT] ", "[INST] ", " "},
    {"[/SYSTEM_PROMPT]", "[/INST]", "</s>"},
    ""};

/* ---- families with a rule of their own ---- */

/* Mistral v1/v3/v3-tekken: the system prompt opens the next [INST] block, ahead of the user's
 * text. They differ only in spaces around the markers and whether replies are trimmed. */
static int format_mistral(struct out *o, enum chat_family fam,
                          const struct chat_message *msgs, size_t n, bool gen) {
    const char *lead = fam == CHAT_MISTRAL_V1 ? " " : "";
    const char *trail = fam == CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    bool in_inst = false;
    for (size_t i = 0; i < n; i++) {
        enum role r = role_of(msgs[i].role);
        if (r == ROLE_OTHER) return -ERR_INVAL;
        if (r != ROLE_ASSISTANT && !in_inst) {
            put(o, lead), put(o, "[INST]"), put(o, trail);
            in_inst = true;
        }
        if (r == ROLE_SYSTEM) {
            put(o, msgs[i].content), put(o, "\n\n");
        } else if (r == ROLE_USER) {
            put(o, msgs[i].content), put(o, lead), put(o, "[/INST]");
            in_inst = false;
        } else {
            put(o, trail);
            if (fam == CHAT_MISTRAL_V3) put_trimmed(o, msgs[i].content);
            else put(o, msgs[i].content);
            put(o, "</s>");
        }
    }
    (void)gen; /* the reply follows [/INST] directly */
    return 0;
}

/* Llama 2: "[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] reply </s>", each later turn opened
 * by "<s>" (the first BOS comes from the tokenizer). */
static int format_llama2(struct out *o, const struct chat_message *msgs, size_t n, bool gen) {
    bool in_inst = false, first_turn = true;
    for (size_t i = 0; i < n; i++) {
        enum role r = role_of(msgs[i].role);
        if (r == ROLE_OTHER) return -ERR_INVAL;
        if (r != ROLE_ASSISTANT && !in_inst) {
            put(o, first_turn ? "[INST] " : "<s>[INST] ");
            in_inst = true;
            first_turn = false;
        }
        if (r == ROLE_SYSTEM) {
            put(o, "<<SYS>>\n"), put(o, msgs[i].content), put(o, "\n<</SYS>>\n\n");
        } else if (r == ROLE_USER) {
            put_trimmed(o, msgs[i].content), put(o, " [/INST]");
            in_inst = false;
        } else {
            put(o, " "), put_trimmed(o, msgs[i].content), put(o, " </s>");
        }
    }
    (void)gen;
    return 0;
}

/* Gemma: no system turn; system text opens the next user turn, followed by a blank line (a
 * system message with no user message after it makes a user turn of its own). The assistant is
 * "model", and user and model text is trimmed. */
static int format_gemma(struct out *o, const struct chat_message *msgs, size_t n, bool gen) {
    bool user_open = false; /* "<start_of_turn>user\n" written, system text in it, no user text */
    for (size_t i = 0; i < n; i++) {
        enum role r = role_of(msgs[i].role);
        if (r == ROLE_OTHER) return -ERR_INVAL;
        if (r == ROLE_ASSISTANT && user_open) put(o, "<end_of_turn>\n"), user_open = false;
        if (!user_open) put(o, r == ROLE_ASSISTANT ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
        if (r == ROLE_SYSTEM) {
            put(o, msgs[i].content), put(o, "\n\n");
            user_open = true;
            continue;
        }
        put_trimmed(o, msgs[i].content);
        put(o, "<end_of_turn>\n");
        user_open = false;
    }
    if (user_open) put(o, "<end_of_turn>\n");
    if (gen) put(o, "<start_of_turn>model\n");
    return 0;
}

/* Text before "<|channel>" in each part of s split at "<channel|>": a reply without its thought
 * channels (Gemma 4's strip_thinking), then trimmed. */
static int put_without_thinking(struct out *o, const char *s) {
    static const char open[] = "<|channel>", close[] = "<channel|>";
    char *kept = malloc(strlen(s) + 1); /* what is left is never longer */
    if (!kept) return -ERR_NOMEM;
    size_t len = 0;
    for (const char *p = s; p;) {
        const char *end = strstr(p, close);
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *ch = memmem(p, n, open, sizeof open - 1);
        memcpy(kept + len, p, ch ? (size_t)(ch - p) : n);
        len += ch ? (size_t)(ch - p) : n;
        p = end ? end + sizeof close - 1 : NULL;
    }
    kept[len] = '\0';
    put_trimmed(o, kept);
    free(kept);
    return 0;
}

/* Gemma 4 with thinking on (enable_thinking, as the model's own template runs, chat_jinja.h): a
 * system turn opening with <|think|>, holding a first system (or developer) message's text; every
 * other message a turn of its role as written, the assistant's named "model" and its thought
 * channels left out; text trimmed. */
static int format_gemma4(struct out *o, const struct chat_message *msgs, size_t n, bool gen) {
    size_t i = 0;
    put(o, "<|turn>system\n<|think|>");
    if (n > 0 && (!strcmp(msgs[0].role, "system") || !strcmp(msgs[0].role, "developer")))
        put_trimmed(o, msgs[i++].content);
    put(o, "<turn|>\n");
    for (; i < n; i++) {
        bool assistant = role_of(msgs[i].role) == ROLE_ASSISTANT;
        put(o, "<|turn>"), put(o, assistant ? "model" : msgs[i].role), put(o, "\n");
        if (!assistant) put_trimmed(o, msgs[i].content);
        else if (put_without_thinking(o, msgs[i].content) < 0) return -ERR_NOMEM;
        put(o, "<turn|>\n");
    }
    if (gen) put(o, "<|turn>model\n");
    return 0;
}

/* Bailing (Ling/Ring): <role>NAME</role>content<|role_end|>, the user is HUMAN and other roles
 * are upper-cased. Bailing2 starts with a "detailed thinking off" system turn when the
 * conversation has no system prompt of its own. */
static int format_bailing(struct out *o, enum chat_family fam,
                          const struct chat_message *msgs, size_t n, bool gen) {
    if (fam == CHAT_BAILING2 && (n == 0 || role_of(msgs[0].role) != ROLE_SYSTEM))
        put(o, "<role>SYSTEM</role>detailed thinking off<|role_end|>");
    for (size_t i = 0; i < n; i++) {
        put(o, "<role>");
        if (role_of(msgs[i].role) == ROLE_USER) put(o, "HUMAN");
        else put_upper(o, msgs[i].role);
        put(o, "</role>"), put(o, msgs[i].content), put(o, "<|role_end|>");
    }
    if (gen) put(o, "<role>ASSISTANT</role>");
    return 0;
}

/* RWKV World: plain "Role: text" paragraphs; user and assistant text trimmed. */
static int format_rwkv_world(struct out *o, const struct chat_message *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        switch (role_of(msgs[i].role)) {
        case ROLE_SYSTEM: put(o, "System: "), put(o, msgs[i].content); break;
        case ROLE_USER: put(o, "User: "), put_trimmed(o, msgs[i].content); break;
        case ROLE_ASSISTANT: put(o, "Assistant: "), put_trimmed(o, msgs[i].content); break;
        case ROLE_OTHER: return -ERR_INVAL;
        }
        put(o, "\n\n");
    }
    if (gen) put(o, "Assistant:");
    return 0;
}

/* ---- names ---- */

static const char *const family_names[CHAT_FAMILY_COUNT_] = {
    [CHAT_UNKNOWN] = "unknown",
    [CHAT_CHATML] = "chatml",
    [CHAT_LLAMA2] = "llama2",
    [CHAT_LLAMA3] = "llama3",
    [CHAT_MISTRAL_V1] = "mistral-v1",
    [CHAT_MISTRAL_V3] = "mistral-v3",
    [CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_MISTRAL_V7] = "mistral-v7",
    [CHAT_GEMMA] = "gemma",
    [CHAT_GEMMA4] = "gemma4",
    [CHAT_PHI3] = "phi3",
    [CHAT_PHI4] = "phi4",
    [CHAT_ZEPHYR] = "zephyr",
    [CHAT_DEEPSEEK3] = "deepseek3",
    [CHAT_GRANITE] = "granite",
    [CHAT_COMMAND_R] = "command-r",
    [CHAT_GLM4] = "chatglm4",
    [CHAT_KIMI_K2] = "kimi-k2",
    [CHAT_SEED_OSS] = "seed_oss",
    [CHAT_BAILING] = "bailing",
    [CHAT_BAILING2] = "bailing2",
    [CHAT_GPT_OSS] = "gpt-oss",
    [CHAT_SOLAR_OPEN] = "solar-open",
    [CHAT_RWKV_WORLD] = "rwkv-world",
};

const char *chat_family_name(enum chat_family fam) {
    if ((unsigned)fam >= CHAT_FAMILY_COUNT_) return "unknown";
    return family_names[fam];
}

enum chat_family chat_family_by_name(const char *name) {
    if (!name) return CHAT_UNKNOWN;
    for (int f = CHAT_UNKNOWN + 1; f < CHAT_FAMILY_COUNT_; f++)
        if (!strcmp(name, family_names[f])) return (enum chat_family)f;
    return CHAT_UNKNOWN;
}

const char *chat_family_names(void) {
    return "chatml llama2 llama3 mistral-v1 mistral-v3 mistral-v3-tekken mistral-v7 gemma gemma4 phi3 "
           "phi4 zephyr deepseek3 granite command-r chatglm4 kimi-k2 seed_oss bailing bailing2 "
           "gpt-oss solar-open rwkv-world";
}

/* ---- detection ---- */

struct text {
    const char *p;
    size_t n;
};

static bool has(struct text t, const char *marker) {
    return memmem(t.p, t.n, marker, strlen(marker)) != NULL;
}

/* Order matters: markers of specific formats come before the generic ones they may contain
 * (a Phi-4 or Hermes template also says <|im_start|>; GLM says <|assistant|>). */
enum chat_family chat_template_detect_n(const char *template_text, size_t len) {
    if (!template_text) return CHAT_UNKNOWN;
    struct text t = {template_text, len};
    if (has(t, "<|im_system|>") && has(t, "<|im_middle|>")) return CHAT_KIMI_K2;
    if (has(t, "<seed:bos>")) return CHAT_SEED_OSS;
    if (has(t, "<|START_OF_TURN_TOKEN|>")) return CHAT_COMMAND_R;
    if (has(t, "[gMASK]")) return CHAT_GLM4;
    if (has(t, "<role>") && has(t, "<|role_end|>"))
        return has(t, "detailed thinking") ? CHAT_BAILING2 : CHAT_BAILING;
    if (has(t, "<|start|>") && has(t, "<|message|>")) return CHAT_GPT_OSS;
    if (has(t, "<|begin|>") && has(t, "<|content|>")) return CHAT_SOLAR_OPEN;
    if (has(t, "<|start_of_role|>")) return CHAT_GRANITE;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return CHAT_LLAMA3;
    if (has(t, "<｜User｜>") && has(t, "<｜Assistant｜>")) return CHAT_DEEPSEEK3;
    if (has(t, "[SYSTEM_PROMPT]")) return CHAT_MISTRAL_V7;
    if (has(t, "[INST]")) {
        if (has(t, "<<SYS>>")) return CHAT_LLAMA2;
        if (has(t, "\"[INST]\"") || has(t, "'[INST]'")) return CHAT_MISTRAL_V3_TEKKEN;
        if (has(t, "\" [INST]") || has(t, "' [INST]")) return CHAT_MISTRAL_V1;
        return CHAT_MISTRAL_V3;
    }
    if (has(t, "<|turn>") && has(t, "<turn|>")) return CHAT_GEMMA4;
    if (has(t, "<start_of_turn>")) return CHAT_GEMMA;
    if (has(t, "<|im_sep|>")) return CHAT_PHI4;
    if (has(t, "<|im_start|>")) return CHAT_CHATML;
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) return CHAT_PHI3;
    if (has(t, "<|assistant|>") && (has(t, "eos_token") || has(t, "</s>"))) return CHAT_ZEPHYR;
    if (has(t, "rwkv-world") || (has(t, "'User: '") && has(t, "'Assistant:'"))) return CHAT_RWKV_WORLD;
    return CHAT_UNKNOWN;
}

enum chat_family chat_template_detect(const char *template_text) {
    return chat_template_detect_n(template_text, template_text ? strlen(template_text) : 0);
}

int chat_family_resolve(const char *forced, const char *template_text, size_t len,
                        enum chat_family *fam, char *why, size_t why_cap) {
    if (why && why_cap > 0) why[0] = '\0';
    if (forced) {
        *fam = chat_family_by_name(forced);
        if (*fam != CHAT_UNKNOWN) return 0;
        if (why && why_cap > 0)
            snprintf(why, why_cap, "unknown chat template '%s'; known: %s", forced, chat_family_names());
        return -ERR_INVAL;
    }
    *fam = template_text && len > 0 ? chat_template_detect_n(template_text, len) : CHAT_UNKNOWN;
    if (*fam == CHAT_UNKNOWN) {
        *fam = CHAT_CHATML;
        if (why && why_cap > 0)
            snprintf(why, why_cap, "%s; using chatml (--chat-template NAME chooses another)",
                     template_text && len > 0 ? "no known chat family in the model's chat template"
                                              : "the model has no chat template");
    }
    return 0;
}

/* ---- apply ---- */

static int format(struct out *o, enum chat_family fam, const struct chat_message *msgs, size_t n,
                  bool gen) {
    switch (fam) {
    case CHAT_UNKNOWN:
    case CHAT_CHATML: return format_named(o, &fmt_chatml, msgs, n, gen);
    case CHAT_LLAMA3: return format_named(o, &fmt_llama3, msgs, n, gen);
    case CHAT_PHI3: return format_named(o, &fmt_phi3, msgs, n, gen);
    case CHAT_PHI4: return format_named(o, &fmt_phi4, msgs, n, gen);
    case CHAT_ZEPHYR: return format_named(o, &fmt_zephyr, msgs, n, gen);
    case CHAT_GRANITE: return format_named(o, &fmt_granite, msgs, n, gen);
    case CHAT_GLM4: return format_named(o, &fmt_glm4, msgs, n, gen);
    case CHAT_SEED_OSS: return format_named(o, &fmt_seed_oss, msgs, n, gen);
    case CHAT_SOLAR_OPEN: return format_named(o, &fmt_solar_open, msgs, n, gen);
    case CHAT_GPT_OSS: return format_named(o, &fmt_gpt_oss, msgs, n, gen);
    case CHAT_COMMAND_R: return format_marked(o, &fmt_command_r, msgs, n, gen);
    case CHAT_KIMI_K2: return format_marked(o, &fmt_kimi_k2, msgs, n, gen);
    case CHAT_DEEPSEEK3: return format_marked(o, &fmt_deepseek3, msgs, n, gen);
    case CHAT_MISTRAL_V7: return format_marked(o, &fmt_mistral_v7, msgs, n, gen);
    case CHAT_MISTRAL_V1:
    case CHAT_MISTRAL_V3:
    case CHAT_MISTRAL_V3_TEKKEN: return format_mistral(o, fam, msgs, n, gen);
    case CHAT_LLAMA2: return format_llama2(o, msgs, n, gen);
    case CHAT_GEMMA: return format_gemma(o, msgs, n, gen);
    case CHAT_GEMMA4: return format_gemma4(o, msgs, n, gen);
    case CHAT_BAILING:
    case CHAT_BAILING2: return format_bailing(o, fam, msgs, n, gen);
    case CHAT_RWKV_WORLD: return format_rwkv_world(o, msgs, n, gen);
    case CHAT_FAMILY_COUNT_: break;
    }
    return -ERR_INVAL;
}

int chat_template_apply(enum chat_family fam, const struct chat_message *msgs, size_t n,
                        bool add_generation_prompt, char *out, size_t out_cap) {
    ASSERT(out || out_cap == 0);
    ASSERT(msgs || n == 0);
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) return -ERR_INVAL;
    struct out o = {out, out_cap, 0};
    int rc = format(&o, fam, msgs, n, add_generation_prompt);
    if (out_cap > 0) out[o.len < out_cap ? o.len : out_cap - 1] = '\0';
    if (rc < 0) return rc;
    if (o.len > INT_MAX) return -ERR_TOOBIG;
    return (int)o.len;
}

int chat_template_apply_alloc(enum chat_family fam, const struct chat_message *msgs, size_t n,
                              bool add_generation_prompt, char **out) {
    int len = chat_template_apply(fam, msgs, n, add_generation_prompt, NULL, 0);
    if (len < 0) return len;
    char *buf = malloc((size_t)len + 1);
    if (!buf) return -ERR_NOMEM;
    int again = chat_template_apply(fam, msgs, n, add_generation_prompt, buf, (size_t)len + 1);
    ASSERT(again == len);
    *out = buf;
    return len;
}
