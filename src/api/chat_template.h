/* chat_template.h: turn a conversation into the prompt text a chat model was trained on,
 * without a Jinja engine.
 *
 * A GGUF model ships its chat format as Jinja text in `tokenizer.chat_template`. uvlm does not
 * run Jinja: it recognises the model family from marker strings in that text
 * (chat_template_detect) and formats the conversation natively (chat_template_apply). The
 * formats are byte-for-byte what a reference server produces for the same family (golden test:
 * test/api/chat_template_test.c against ../shared/chat/templates.jsonl).
 *
 * Who decides the family: `--chat-template NAME` forces one (chat_family_by_name); otherwise the
 * loader detects it from the model's template; when nothing matches (CHAT_UNKNOWN) the caller
 * falls back to chatml and logs a warning once, at load. chat_family_resolve does all three.
 *
 * BOS: no family writes the tokenizer's BOS token ("<s>", "<|begin_of_text|>", ...) at the start
 * of the prompt: the tokenizer adds it (add_special). Tokens inside the text (e.g. "<|im_start|>")
 * must be tokenized with parse_special so they become their special ids.
 *
 * Roles: "system", "user" and "assistant" work in every family. Families whose format spells the
 * role name out (chatml, llama3, granite, phi3, ...) also pass any other role ("tool") through
 * as written; families with one marker per role refuse other roles with -ERR_INVAL.
 *
 *   struct chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hello"}};
 *   enum chat_family fam = chat_template_detect(template_text);
 *   if (fam == CHAT_UNKNOWN) { log_warn("unknown chat template: using chatml"); fam = CHAT_CHATML; }
 *   char *prompt;
 *   int len = chat_template_apply_alloc(fam, msgs, 2, true, &prompt);   // or: size with
 *   if (len < 0) return len;                                            // apply(..., NULL, 0)
 *   ... tokenize prompt[0..len) ...
 *   free(prompt);
 *
 * This module has no I/O and no JSON: any layer can call it with plain strings. Reading messages
 * from JSON is in api/chat_json.h.
 */
#ifndef UVLM_API_CHAT_TEMPLATE_H
#define UVLM_API_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

/* The GGUF metadata key that holds a model's Jinja chat template. */
#define CHAT_TEMPLATE_GGUF_KEY "tokenizer.chat_template"

/* The formats. Names (chat_family_name / chat_family_by_name) are in brackets; where a reference
 * server knows the same format its name is the same, so `--chat-template` values carry over. */
enum chat_family {
    CHAT_UNKNOWN = 0,    /* detection found no family: callers use CHAT_CHATML and warn */
    CHAT_CHATML,         /* [chatml] <|im_start|>role\n...<|im_end|>\n : Qwen, Hermes, LFM2, Nemotron... */
    CHAT_LLAMA2,         /* [llama2] [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] : Llama 2, TinyLlama-1.0 */
    CHAT_LLAMA3,         /* [llama3] <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_MISTRAL_V1,     /* [mistral-v1] " [INST] ... [/INST] reply</s>" */
    CHAT_MISTRAL_V3,     /* [mistral-v3] "[INST] ...[/INST] reply</s>" (reply trimmed) */
    CHAT_MISTRAL_V3_TEKKEN, /* [mistral-v3-tekken] "[INST]...[/INST]reply</s>": Mistral Nemo */
    CHAT_MISTRAL_V7,     /* [mistral-v7] [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST]: Small 3.x */
    CHAT_GEMMA,          /* [gemma] <start_of_turn>user\n...<end_of_turn>\n, system folded into user */
    CHAT_GEMMA4,         /* [gemma4] <|turn>role\n...<turn|>\n, thinking on (<|think|> in the system turn) */
    CHAT_PHI3,           /* [phi3] <|role|>\n...<|end|>\n : Phi-3, Apriel */
    CHAT_PHI4,           /* [phi4] <|im_start|>role<|im_sep|>...<|im_end|> */
    CHAT_ZEPHYR,         /* [zephyr] <|role|>\n...</s>\n : Zephyr, TinyLlama-chat */
    CHAT_DEEPSEEK3,      /* [deepseek3] <｜User｜>...<｜Assistant｜>...<｜end▁of▁sentence｜>: V3, R1 */
    CHAT_GRANITE,        /* [granite] <|start_of_role|>role<|end_of_role|>...<|end_of_text|>\n */
    CHAT_COMMAND_R,      /* [command-r] <|START_OF_TURN_TOKEN|><|USER_TOKEN|>...<|END_OF_TURN_TOKEN|> */
    CHAT_GLM4,           /* [chatglm4] [gMASK]<sop><|role|>\n... : GLM-4.x */
    CHAT_KIMI_K2,        /* [kimi-k2] <|im_user|>user<|im_middle|>...<|im_end|> */
    CHAT_SEED_OSS,       /* [seed_oss] <seed:bos>role\n...<seed:eos> : ByteDance Seed-OSS */
    CHAT_BAILING,        /* [bailing] <role>HUMAN</role>...<|role_end|> : Ling/Ring 1.x */
    CHAT_BAILING2,       /* [bailing2] bailing + "detailed thinking off" system default: Ling 2/3 */
    CHAT_GPT_OSS,        /* [gpt-oss] <|start|>role<|message|>...<|end|> (Harmony, no channels) */
    CHAT_SOLAR_OPEN,     /* [solar-open] <|begin|>role<|content|>...<|end|> : Upstage Solar Open */
    CHAT_RWKV_WORLD,     /* [rwkv-world] "User: ...\n\nAssistant: ...\n\n" */
    CHAT_FAMILY_COUNT_
};

struct chat_message {
    const char *role;     /* "system", "user", "assistant", or (where the family allows) other */
    const char *content;  /* UTF-8, NUL-terminated; copied into the prompt as is */
};

/* The family whose markers appear in a Jinja template, or CHAT_UNKNOWN (also for NULL).
 * The _n form takes a length (GGUF strings are not NUL-terminated) and may contain NULs. */
enum chat_family chat_template_detect(const char *template_text);
enum chat_family chat_template_detect_n(const char *template_text, size_t len);

/* The family called NAME (the bracketed names above, case-sensitive), or CHAT_UNKNOWN. */
enum chat_family chat_family_by_name(const char *name);
/* The name of a family ("unknown" for CHAT_UNKNOWN); never NULL. */
const char *chat_family_name(enum chat_family fam);
/* All the names, space-separated, for usage and error messages ("chatml llama2 ..."). */
const char *chat_family_names(void);

/* The family a model uses, decided once at load: `forced` (a --chat-template NAME) when not NULL,
 * else the family detected in the model's template text (NULL or len 0 when it has none), else
 * chatml. Returns 0 and sets *fam, or -ERR_INVAL for an unknown forced name (why then lists
 * the names). why gets the warning to log when it fell back to chatml, else "" (may be NULL). */
int chat_family_resolve(const char *forced, const char *template_text, size_t len,
                        enum chat_family *fam, char *why, size_t why_cap);

/* Formats msgs[0..n) in family fam (CHAT_UNKNOWN formats as chatml) and, when
 * add_generation_prompt, the opening of the assistant's reply, into out.
 * snprintf-style: writes at most out_cap bytes including a terminating NUL (out may be NULL when
 * out_cap is 0) and returns the full length of the prompt, not counting the NUL. A return
 * >= out_cap means the output was cut: call again with a buffer of return + 1 bytes.
 * Errors: -ERR_INVAL for a NULL role or content or a role the family cannot express,
 * -ERR_TOOBIG if the prompt would be longer than INT_MAX. Does not allocate. */
int chat_template_apply(enum chat_family fam, const struct chat_message *msgs, size_t n,
                        bool add_generation_prompt, char *out, size_t out_cap);

/* The same into a new NUL-terminated buffer *out (the caller frees it; untouched on error).
 * Returns the length, -ERR_NOMEM, or apply's errors. */
int chat_template_apply_alloc(enum chat_family fam, const struct chat_message *msgs, size_t n,
                              bool add_generation_prompt, char **out);

#endif
