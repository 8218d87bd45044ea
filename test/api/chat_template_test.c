/* chat_template_test.c: golden test against ../shared/chat/templates.jsonl (40 real templates,
 * two conversations each, byte-exact) plus the behaviour the golden file does not reach:
 * snprintf-style sizing, refused roles, names, and the families no shared template uses. */
#include "test.h"

#include "api/chat_template.h"
#include "common/err.h"
#include "gguf/gguf.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

/* The number of shared templates that match byte for byte today: the golden test fails if
 * fewer match, so support cannot regress silently. Raise it when a family is added. */
#define GOLDEN_MATCH_FLOOR 40

/* Which family each shared template must be detected as. A template missing from this table is
 * still checked for its output; one listed here with the wrong family fails. */
static const struct {
    const char *template_name, *family;
} golden_families[] = {
    {"Bielik-11B-v3.0-Instruct.jinja", "chatml"},
    {"ByteDance-Seed-OSS.jinja", "seed_oss"},
    {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "command-r"},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "command-r"},
    {"GLM-4.6.jinja", "chatglm4"},
    {"Kimi-K2-Instruct.jinja", "kimi-k2"},
    {"Kimi-K2-Thinking.jinja", "kimi-k2"},
    {"LFM2-8B-A1B.jinja", "chatml"},
    {"LFM2.5-8B-A1B.jinja", "chatml"},
    {"MiMo-VL.jinja", "chatml"},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral-v7"},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "chatml"},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "chatml"},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "chatml"},
    {"Qwen-QwQ-32B.jinja", "chatml"},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", "chatml"},
    {"Qwen-Qwen3-0.6B.jinja", "chatml"},
    {"Qwen3.5-4B.jinja", "chatml"},
    {"StepFun3.5-Flash.jinja", "chatml"},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek3"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek3"},
    {"deepseek-ai-DeepSeek-V3.1.jinja", "deepseek3"},
    {"deepseek-ai-DeepSeek-V4-Flash-0731.jinja", "deepseek3"},
    {"deepseek-ai-DeepSeek-V4.jinja", "deepseek3"},
    {"fireworks-ai-llama-3-firefunction-v2.jinja", "llama3"},
    {"google-gemma-2-2b-it.jinja", "gemma"},
    {"ibm-granite-granite-3.3-2B-Instruct.jinja", "granite"},
    {"ibm-granite-granite-4.0.jinja", "granite"},
    {"inclusionai-ling-3.0-flash.jinja", "bailing2"},
    {"llama-cpp-deepseek-r1.jinja", "deepseek3"},
    {"llama-cpp-rwkv-world.jinja", "rwkv-world"},
    {"meetkai-functionary-medium-v3.1.jinja", "llama3"},
    {"meetkai-functionary-medium-v3.2.jinja", "llama3"},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3"},
    {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral-v7"},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-v3-tekken"},
    {"openai-gpt-oss-120b.jinja", "gpt-oss"},
    {"unsloth-Apriel-1.5.jinja", "phi3"},
    {"upstage-Solar-Open-100B.jinja", "solar-open"},
};

/* The families the task requires, each by one template that must match. */
static const char *const required_templates[] = {
    "Qwen-Qwen2.5-7B-Instruct.jinja",            /* chatml / Qwen */
    "meta-llama-Llama-3.1-8B-Instruct.jinja",    /* Llama 3.x */
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja", /* Mistral */
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "google-gemma-2-2b-it.jinja",                /* Gemma */
    "unsloth-Apriel-1.5.jinja",                  /* Phi-3 format */
    "deepseek-ai-DeepSeek-V3.1.jinja",           /* DeepSeek */
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "ibm-granite-granite-3.3-2B-Instruct.jinja", /* Granite */
};

static const char *golden_family_of(const char *template_name) {
    for (size_t i = 0; i < sizeof golden_families / sizeof *golden_families; i++)
        if (!strcmp(golden_families[i].template_name, template_name)) return golden_families[i].family;
    return NULL;
}

/* Formats one conversation of the golden file; NULL-terminated copy of the prompt, or NULL. */
static char *format_conversation(enum chat_family fam, const json_t *conv) {
    const json_t *jmsgs = json_object_get(conv, "messages");
    size_t n = json_array_size(jmsgs);
    struct chat_message *msgs = calloc(n ? n : 1, sizeof *msgs);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(jmsgs, i);
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = json_string_value(json_object_get(m, "content"));
    }
    char *prompt = NULL;
    int len = chat_template_apply_alloc(fam, msgs, n,
                                        json_is_true(json_object_get(conv, "add_generation_prompt")),
                                        &prompt);
    free(msgs);
    return len < 0 ? NULL : prompt;
}

TEST(chat_template_golden_shared_templates) {
    SHARED(path, "chat/templates.jsonl");
    FILE *f = fopen(path, "r");
    CHECK(f);
    char *line = NULL;
    size_t line_cap = 0;
    int total = 0, matched = 0, unsupported = 0, wrong = 0, required_ok = 0;
    char unsupported_names[4096] = "";
    while (getline(&line, &line_cap, f) > 0) {
        json_error_t jerr;
        json_t *tmpl = json_loads(line, 0, &jerr);
        if (!tmpl) {
            fprintf(stderr, "  bad line %d in %s: %s\n", total + 1, path, jerr.text);
            wrong++;
            continue;
        }
        total++;
        const char *name = json_string_value(json_object_get(tmpl, "name"));
        const char *text = json_string_value(json_object_get(tmpl, "template"));
        enum chat_family fam = chat_template_detect(text);
        const char *want_family = golden_family_of(name);
        bool ok = fam != CHAT_UNKNOWN;
        if (!ok) {
            unsupported++;
            strncat(unsupported_names, " ", sizeof unsupported_names - strlen(unsupported_names) - 1);
            strncat(unsupported_names, name, sizeof unsupported_names - strlen(unsupported_names) - 1);
        } else if (want_family && strcmp(want_family, chat_family_name(fam))) {
            fprintf(stderr, "  %s: detected as %s, expected %s\n", name, chat_family_name(fam), want_family);
            ok = false;
            wrong++;
        }
        const json_t *convs = json_object_get(tmpl, "conversations");
        for (size_t c = 0; ok && c < json_array_size(convs); c++) {
            const json_t *conv = json_array_get(convs, c);
            const char *expected = json_string_value(json_object_get(conv, "expected"));
            char *got = format_conversation(fam, conv);
            if (!got || !expected || strcmp(got, expected)) {
                fprintf(stderr, "  %s (%s) conversation %zu:\n    got      \"%s\"\n    expected \"%s\"\n",
                        name, chat_family_name(fam), c, got ? got : "(error)", expected);
                ok = false;
                wrong++;
            }
            free(got);
        }
        if (ok) {
            matched++;
            for (size_t r = 0; r < sizeof required_templates / sizeof *required_templates; r++)
                required_ok += !strcmp(name, required_templates[r]);
        }
        json_decref(tmpl);
    }
    free(line);
    fclose(f);
    printf("  chat templates: %d of %d shared templates match byte for byte; %d unsupported:%s\n",
           matched, total, unsupported, unsupported ? unsupported_names : " (none)");
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(required_ok, (int)(sizeof required_templates / sizeof *required_templates));
    CHECK(matched >= GOLDEN_MATCH_FLOOR);
}

/* ---- behaviour beyond the golden file ---- */

static const struct chat_message conversation[] = {
    {"system", "S"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who?"}};
#define N_CONV (sizeof conversation / sizeof *conversation)

/* Formats `conversation` in the family called `name` into a static buffer. */
static const char *formatted(const char *name, bool gen) {
    static char buf[1024];
    int len = chat_template_apply(chat_family_by_name(name), conversation, N_CONV, gen, buf, sizeof buf);
    return len < 0 || (size_t)len >= sizeof buf ? NULL : buf;
}

TEST(chat_template_sizes_like_snprintf) {
    int full = chat_template_apply(CHAT_CHATML, conversation, N_CONV, true, NULL, 0);
    CHECK(full > 0);
    char *big = malloc((size_t)full + 1);
    CHECK_EQ_INT(chat_template_apply(CHAT_CHATML, conversation, N_CONV, true, big, (size_t)full + 1), full);
    CHECK_EQ_INT(strlen(big), full);
    char small[10];
    memset(small, 'x', sizeof small);
    CHECK_EQ_INT(chat_template_apply(CHAT_CHATML, conversation, N_CONV, true, small, sizeof small), full);
    CHECK_EQ_INT(strlen(small), sizeof small - 1); /* cut, and still terminated */
    CHECK(!memcmp(small, big, sizeof small - 1));
    char *alloc = NULL;
    CHECK_EQ_INT(chat_template_apply_alloc(CHAT_CHATML, conversation, N_CONV, true, &alloc), full);
    CHECK_EQ_STR(alloc, big);
    free(alloc);
    free(big);
}

TEST(chat_template_empty_conversation_is_the_generation_prompt) {
    char buf[64];
    CHECK_EQ_INT(chat_template_apply(CHAT_LLAMA3, NULL, 0, false, buf, sizeof buf), 0);
    CHECK_EQ_STR(buf, "");
    CHECK(chat_template_apply(CHAT_LLAMA3, NULL, 0, true, buf, sizeof buf) > 0);
    CHECK_EQ_STR(buf, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(chat_template_refuses_what_it_cannot_express) {
    char buf[256];
    struct chat_message null_content[] = {{"user", NULL}};
    CHECK_EQ_INT(chat_template_apply(CHAT_CHATML, null_content, 1, true, buf, sizeof buf), -ERR_INVAL);
    struct chat_message tool[] = {{"user", "q"}, {"tool", "42"}};
    /* a role-per-marker family has no marker for "tool" */
    CHECK_EQ_INT(chat_template_apply(CHAT_COMMAND_R, tool, 2, true, buf, sizeof buf), -ERR_INVAL);
    CHECK_EQ_INT(chat_template_apply(CHAT_GEMMA, tool, 2, true, buf, sizeof buf), -ERR_INVAL);
    CHECK_EQ_INT(chat_template_apply(CHAT_MISTRAL_V3_TEKKEN, tool, 2, true, buf, sizeof buf), -ERR_INVAL);
    /* a family that spells roles out passes it through */
    CHECK(chat_template_apply(CHAT_CHATML, tool, 2, false, buf, sizeof buf) > 0);
    CHECK_EQ_STR(buf, "<|im_start|>user\nq<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n");
    CHECK_EQ_INT(chat_template_apply(CHAT_FAMILY_COUNT_, tool, 1, true, buf, sizeof buf), -ERR_INVAL);
}

TEST(chat_template_unknown_formats_as_chatml) {
    char a[512], b[512];
    CHECK(chat_template_apply(CHAT_UNKNOWN, conversation, N_CONV, true, a, sizeof a) > 0);
    CHECK(chat_template_apply(CHAT_CHATML, conversation, N_CONV, true, b, sizeof b) > 0);
    CHECK_EQ_STR(a, b);
}

TEST(chat_template_names_round_trip) {
    const char *names = chat_family_names();
    for (int f = CHAT_UNKNOWN + 1; f < CHAT_FAMILY_COUNT_; f++) {
        const char *name = chat_family_name((enum chat_family)f);
        CHECK(strcmp(name, "unknown"));
        CHECK_EQ_INT(chat_family_by_name(name), f);
        /* listed in chat_family_names() as a whole word */
        size_t len = strlen(name);
        const char *at = names;
        while ((at = strstr(at, name)) && !((at == names || at[-1] == ' ') && (at[len] == ' ' || !at[len])))
            at++;
        CHECK(at);
    }
    CHECK_EQ_INT(chat_family_by_name("no-such-format"), CHAT_UNKNOWN);
    CHECK_EQ_INT(chat_family_by_name(NULL), CHAT_UNKNOWN);
    CHECK_EQ_STR(chat_family_name(CHAT_UNKNOWN), "unknown");
    CHECK_EQ_STR(chat_family_name((enum chat_family)999), "unknown");
}

TEST(chat_template_detect_edges) {
    CHECK_EQ_INT(chat_template_detect(NULL), CHAT_UNKNOWN);
    CHECK_EQ_INT(chat_template_detect(""), CHAT_UNKNOWN);
    CHECK_EQ_INT(chat_template_detect("{% for m in messages %}{{ m.content }}{% endfor %}"), CHAT_UNKNOWN);
    /* a length-bounded buffer: the marker past len is not seen */
    const char *text = "{{ '<|im_start|>' }}";
    CHECK_EQ_INT(chat_template_detect_n(text, 8), CHAT_UNKNOWN);
    CHECK_EQ_INT(chat_template_detect_n(text, strlen(text)), CHAT_CHATML);
    /* families not among the shared templates */
    CHECK_EQ_INT(chat_template_detect("{{ bos_token + '[INST] ' + '<<SYS>>\\n' }}"), CHAT_LLAMA2);
    CHECK_EQ_INT(chat_template_detect("{{ '<|im_start|>' + role + '<|im_sep|>' }}"), CHAT_PHI4);
    CHECK_EQ_INT(chat_template_detect("{{ '<|user|>\\n' + content + eos_token }}{{ '<|assistant|>' }}"),
                 CHAT_ZEPHYR);
    CHECK_EQ_INT(chat_template_detect("{{ ' [INST] ' + content + ' [/INST]' }}"), CHAT_MISTRAL_V1);
    CHECK_EQ_INT(chat_template_detect("{{ '[INST] ' + content + '[/INST]' }}"), CHAT_MISTRAL_V3);
    CHECK_EQ_INT(chat_template_detect("{{ '<role>HUMAN</role>' + c + '<|role_end|>' }}"), CHAT_BAILING);
}

/* The expected strings below are what each model's own Jinja template renders for
 * `conversation`, without the leading BOS (the tokenizer adds it). */
static const struct {
    const char *family;
    bool generation_prompt;
    const char *expected;
} beyond_shared[] = {
    {"llama2", true, "[INST] <<SYS>>\nS\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who? [/INST]"},
    {"phi4", true,
     "<|im_start|>system<|im_sep|>S<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|>"
     "<|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who?<|im_end|>"
     "<|im_start|>assistant<|im_sep|>"},
    {"zephyr", true,
     "<|system|>\nS</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho?</s>\n"
     "<|assistant|>\n"},
    {"mistral-v1", true, " [INST] S\n\nHello [/INST] Hi there</s> [INST] Who? [/INST]"},
    {"mistral-v3", true, "[INST] S\n\nHello[/INST] Hi there</s>[INST] Who?[/INST]"},
    {"bailing", true,
     "<role>SYSTEM</role>S<|role_end|><role>HUMAN</role>Hello<|role_end|>"
     "<role>ASSISTANT</role>Hi there<|role_end|><role>HUMAN</role>Who?<|role_end|>"
     "<role>ASSISTANT</role>"},
    /* without the generation prompt a conversation ends after its last turn */
    {"gpt-oss", false,
     "<|start|>system<|message|>S<|end|><|start|>user<|message|>Hello<|end|>"
     "<|start|>assistant<|message|>Hi there<|return|><|start|>user<|message|>Who?<|end|>"},
};

TEST(chat_template_families_beyond_the_shared_file) {
    for (size_t i = 0; i < sizeof beyond_shared / sizeof *beyond_shared; i++)
        CHECK_EQ_STR(formatted(beyond_shared[i].family, beyond_shared[i].generation_prompt),
                     beyond_shared[i].expected);
}

TEST(chat_template_gemma_folds_system_into_user) {
    char buf[256];
    struct chat_message lone_system[] = {{"system", "S"}};
    CHECK(chat_template_apply(CHAT_GEMMA, lone_system, 1, true, buf, sizeof buf) > 0);
    CHECK_EQ_STR(buf, "<start_of_turn>user\nS\n\n<end_of_turn>\n<start_of_turn>model\n");
    struct chat_message two_systems[] = {{"system", "A"}, {"system", "B"}, {"user", "  q \n"}};
    CHECK(chat_template_apply(CHAT_GEMMA, two_systems, 3, false, buf, sizeof buf) > 0);
    CHECK_EQ_STR(buf, "<start_of_turn>user\nA\n\nB\n\nq<end_of_turn>\n");
}

/* Gemma 4 (the template in ../shared/models/gemma3-q8_0.gguf): the expected prompts are what
 * that template renders under a Jinja engine (jinja2 3.1, bos_token stripped, enable_thinking
 * true as chat_jinja.h gives it), for a first system or developer message (in the system turn),
 * a later one (a turn like any other), other roles as written, the assistant's thought channel
 * left out of its reply, trimmed text, with and without the generation prompt. */
TEST(chat_template_gemma4_as_its_jinja_renders) {
    static const struct chat_message c1[] = {{"user", "Hello"}};
    static const struct chat_message c2[] = {{"system", "  You are brief. "}, {"user", "Hello\n"},
                                             {"assistant", "<|channel>thought\nhmm<channel|>Hi there "},
                                             {"user", "Who are you?"}};
    static const struct chat_message c3[] = {{"developer", "Rules."}, {"user", "a"}, {"assistant", " b "},
                                             {"tool", " c "}};
    static const struct chat_message c4[] = {{"user", "x"}, {"system", "late system"}};
    static const struct {
        const struct chat_message *msgs;
        size_t n;
        const char *with_gen, *without;
    } cases[] = {
        {c1, 1,
         "<|turn>system\n<|think|><turn|>\n"
         "<|turn>user\nHello<turn|>\n"
         "<|turn>model\n",
         "<|turn>system\n<|think|><turn|>\n"
         "<|turn>user\nHello<turn|>\n"},
        {c2, 4,
         "<|turn>system\n<|think|>You are brief.<turn|>\n"
         "<|turn>user\nHello<turn|>\n"
         "<|turn>model\nHi there<turn|>\n"
         "<|turn>user\nWho are you?<turn|>\n"
         "<|turn>model\n",
         "<|turn>system\n<|think|>You are brief.<turn|>\n"
         "<|turn>user\nHello<turn|>\n"
         "<|turn>model\nHi there<turn|>\n"
         "<|turn>user\nWho are you?<turn|>\n"},
        {c3, 4,
         "<|turn>system\n<|think|>Rules.<turn|>\n"
         "<|turn>user\na<turn|>\n"
         "<|turn>model\nb<turn|>\n"
         "<|turn>tool\nc<turn|>\n"
         "<|turn>model\n",
         "<|turn>system\n<|think|>Rules.<turn|>\n"
         "<|turn>user\na<turn|>\n"
         "<|turn>model\nb<turn|>\n"
         "<|turn>tool\nc<turn|>\n"},
        {c4, 2,
         "<|turn>system\n<|think|><turn|>\n"
         "<|turn>user\nx<turn|>\n"
         "<|turn>system\nlate system<turn|>\n"
         "<|turn>model\n",
         "<|turn>system\n<|think|><turn|>\n"
         "<|turn>user\nx<turn|>\n"
         "<|turn>system\nlate system<turn|>\n"},
    };
    char buf[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(chat_template_apply(CHAT_GEMMA4, cases[i].msgs, cases[i].n, true, buf, sizeof buf) > 0);
        CHECK_EQ_STR(buf, cases[i].with_gen);
        CHECK(chat_template_apply(CHAT_GEMMA4, cases[i].msgs, cases[i].n, false, buf, sizeof buf) > 0);
        CHECK_EQ_STR(buf, cases[i].without);
    }
    CHECK_EQ_INT(chat_template_detect("{{ '<|turn>' + role + '\\n' }}{{ '<turn|>' }}"), CHAT_GEMMA4);
    CHECK_EQ_INT(chat_family_by_name("gemma4"), CHAT_GEMMA4);
}

TEST(chat_template_rwkv_trims_turns) {
    char buf[256];
    struct chat_message msgs[] = {{"user", "  hi \n"}, {"assistant", "\tyo "}};
    CHECK(chat_template_apply(CHAT_RWKV_WORLD, msgs, 2, true, buf, sizeof buf) > 0);
    CHECK_EQ_STR(buf, "User: hi\n\nAssistant: yo\n\nAssistant:");
}

TEST(chat_template_bailing2_keeps_own_system) {
    char buf[256];
    struct chat_message msgs[] = {{"system", "S"}, {"user", "q"}};
    CHECK(chat_template_apply(CHAT_BAILING2, msgs, 2, true, buf, sizeof buf) > 0);
    CHECK_EQ_STR(buf, "<role>SYSTEM</role>S<|role_end|><role>HUMAN</role>q<|role_end|><role>ASSISTANT</role>");
}

TEST(chat_template_resolve_forced_detected_fallback) {
    enum chat_family fam = CHAT_UNKNOWN;
    char why[512];
    const char *gemma = "{{ '<start_of_turn>user\\n' }}";
    CHECK_EQ_INT(chat_family_resolve("llama3", gemma, strlen(gemma), &fam, why, sizeof why), 0);
    CHECK_EQ_INT(fam, CHAT_LLAMA3); /* forcing wins over the model's own template */
    CHECK_EQ_STR(why, "");
    CHECK_EQ_INT(chat_family_resolve("nope", gemma, strlen(gemma), &fam, why, sizeof why), -ERR_INVAL);
    CHECK(strstr(why, "nope") && strstr(why, "chatml"));
    CHECK_EQ_INT(chat_family_resolve(NULL, gemma, strlen(gemma), &fam, why, sizeof why), 0);
    CHECK_EQ_INT(fam, CHAT_GEMMA);
    CHECK_EQ_STR(why, "");
    CHECK_EQ_INT(chat_family_resolve(NULL, "{{ x }}", 7, &fam, why, sizeof why), 0);
    CHECK_EQ_INT(fam, CHAT_CHATML);
    CHECK(strstr(why, "no known chat family"));
    CHECK_EQ_INT(chat_family_resolve(NULL, NULL, 0, &fam, NULL, 0), 0);
    CHECK_EQ_INT(fam, CHAT_CHATML);
}

/* The templates shipped inside the shared GGUF files, read as the loader will read them. */
static enum chat_family gguf_family(struct test_case *t, const char *rel, bool *has_template) {
    const char *path = shared_path(t, rel);
    if (!path) return CHAT_FAMILY_COUNT_;
    struct gguf_file f;
    char why[256];
    if (gguf_open(&f, path, why, sizeof why) < 0) {
        fprintf(stderr, "  %s\n", why);
        return CHAT_FAMILY_COUNT_;
    }
    struct gguf_str text = gguf_get_str(&f, CHAT_TEMPLATE_GGUF_KEY);
    *has_template = text.len > 0;
    enum chat_family fam;
    chat_family_resolve(NULL, text.ptr, (size_t)text.len, &fam, NULL, 0);
    gguf_close(&f);
    return fam;
}

TEST(chat_template_detects_shared_gguf_templates) {
    static const struct {
        const char *file;
        enum chat_family fam;
        bool has_template;
    } cases[] = {
        {"models/qwen2-q8_0.gguf", CHAT_CHATML, true},
        {"vocab/ggml-vocab-phi-3.gguf", CHAT_PHI3, true},
        {"models/kjv-tiny-q8_0.gguf", CHAT_CHATML, false}, /* no template: the chatml fallback */
        {"models/gemma3-q8_0.gguf", CHAT_GEMMA4, true},    /* its vocabulary's: Gemma 4's */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool has = !cases[i].has_template;
        enum chat_family fam = gguf_family(t, cases[i].file, &has);
        if (t->skipped) return; /* shared data missing: said so by shared_path */
        CHECK_EQ_INT(fam, cases[i].fam);
        CHECK_EQ_INT(has, cases[i].has_template);
    }
}

/* Every family, on many small random conversations: the sizing contract holds at every buffer
 * size (same length returned, output a NUL-terminated prefix of the full prompt), errors do not
 * depend on the buffer, and the user's text always reaches the prompt. */
TEST(chat_template_every_family_sizes_consistently) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    static const char *const contents[] = {"", "hi", "  padded \n", "two\nlines", "\xc3\xa9t\xc3\xa9",
                                           "<|im_end|>"};
    uint32_t rng = 12345;
    char full[2048], cut[2048];
    for (int f = CHAT_UNKNOWN; f < CHAT_FAMILY_COUNT_; f++) {
        for (int round = 0; round < 40; round++) {
            struct chat_message msgs[6];
            size_t n = (size_t)(round % 7); /* 0..6 messages */
            for (size_t i = 0; i < n; i++) {
                rng = rng * 1664525u + 1013904223u;
                msgs[i].role = roles[(rng >> 8) % 4];
                msgs[i].content = contents[(rng >> 16) % 6];
            }
            bool gen = round & 1;
            int len = chat_template_apply((enum chat_family)f, msgs, n, gen, full, sizeof full);
            CHECK_EQ_INT(chat_template_apply((enum chat_family)f, msgs, n, gen, NULL, 0), len);
            if (len < 0) {
                CHECK_EQ_INT(len, -ERR_INVAL); /* only a role the family cannot express */
                continue;
            }
            CHECK((size_t)len < sizeof full);
            CHECK_EQ_INT(strlen(full), len);
            size_t caps[] = {1, 2, (size_t)len / 2 + 1, (size_t)len, (size_t)len + 1};
            for (size_t c = 0; c < sizeof caps / sizeof *caps; c++) {
                if (caps[c] == 0) continue; /* an empty prompt: nothing to cut */
                memset(cut, 'x', sizeof cut);
                CHECK_EQ_INT(chat_template_apply((enum chat_family)f, msgs, n, gen, cut, caps[c]), len);
                size_t kept = caps[c] - 1 < (size_t)len ? caps[c] - 1 : (size_t)len;
                CHECK_EQ_INT(strlen(cut), kept);
                CHECK(!memcmp(cut, full, kept));
                CHECK(cut[caps[c]] == 'x'); /* nothing written past the buffer */
            }
            for (size_t i = 0; i < n; i++)
                if (!strcmp(msgs[i].role, "user") && !strcmp(msgs[i].content, "two\nlines"))
                    CHECK(strstr(full, "two\nlines"));
        }
    }
}
