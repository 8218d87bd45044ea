/* params_test.c: every request field accepted with its value, every bad input refused with a 400
 * naming the field. */
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "api/params.h"
#include "common/err.h"

static int parse(struct completion_params *p, enum api_endpoint ep, const char *body,
                 struct api_error *err) {
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    return completion_params_parse(p, ep, body, strlen(body), &lim, err);
}

TEST(params_native_defaults) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"And God said\"}", &err), 0);
    CHECK_EQ_INT(p.endpoint, API_COMPLETION);
    CHECK_EQ_STR(p.prompt_text, "And God said");
    CHECK_EQ_INT(p.prompt_text_len, 12);
    CHECK(p.prompt_tokens == NULL && p.messages == NULL);
    CHECK_EQ_INT(p.n_predict, -1);
    CHECK(p.temperature == 0.8f && p.top_p == 0.95f && p.min_p == 0.05f);
    CHECK_EQ_INT(p.top_k, 40);
    CHECK(p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f);
    CHECK_EQ_INT(p.repeat_last_n, 64);
    CHECK(p.seed_random);
    CHECK_EQ_INT(p.n_stop, 0);
    CHECK(!p.stream && !p.include_usage && !p.want_logprobs && !p.ignore_eos);
    CHECK(p.cache_prompt);
    CHECK_EQ_INT(p.n_probs, 0);
    CHECK_EQ_INT(p.n_logit_bias, 0);
    CHECK_EQ_INT(p.n, 1);
    CHECK(p.model == NULL);
    CHECK(p.cache_salt == NULL && p.cache_salt_len == 0);
    completion_params_free(&p);
    CHECK(p.prompt_text == NULL);
    completion_params_free(&p);   /* freeing twice (a zeroed struct) is a no-op */
}

TEST(params_defaults_match_an_empty_request) {
    struct completion_params d, p;
    struct api_error err;
    completion_params_defaults(&d, API_OAI_COMPLETION);
    CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, "{\"prompt\": \"x\"}", &err), 0);
    CHECK(d.n_predict == p.n_predict && d.temperature == p.temperature && d.top_k == p.top_k &&
          d.top_p == p.top_p && d.min_p == p.min_p && d.repeat_penalty == p.repeat_penalty &&
          d.repeat_last_n == p.repeat_last_n && d.seed_random == p.seed_random &&
          d.cache_prompt == p.cache_prompt && d.n == p.n && d.endpoint == p.endpoint);
    completion_params_free(&p);
}

TEST(params_native_every_field) {
    const char *body =
        "{\"prompt\": [1, 15043, 2], \"n_predict\": 32, \"temperature\": 0, \"top_k\": 5,"
        " \"top_p\": 0.5, \"min_p\": 0.1, \"repeat_penalty\": 1.1, \"repeat_last_n\": -1,"
        " \"presence_penalty\": 0.5, \"frequency_penalty\": -0.5, \"seed\": 42,"
        " \"stop\": [\"\\n\", \"Amen\"], \"stream\": true, \"n_probs\": 3, \"cache_prompt\": false,"
        " \"ignore_eos\": true, \"logit_bias\": [[15043, -1.5], [2, false]], \"n_cmpl\": 4,"
        " \"model\": \"kjv\", \"user\": {\"ignored\": true}, \"unknown_field\": 1,"
        " \"cache_salt\": \"tenant\\u0000a\"}";
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, body, &err), 0);
    CHECK_EQ_INT(p.cache_salt_len, 8);
    CHECK(memcmp(p.cache_salt, "tenant\0a", 9) == 0);
    CHECK(p.prompt_text == NULL);
    CHECK_EQ_INT(p.n_prompt_tokens, 3);
    CHECK(p.prompt_tokens[0] == 1 && p.prompt_tokens[1] == 15043 && p.prompt_tokens[2] == 2);
    CHECK_EQ_INT(p.n_predict, 32);
    CHECK(p.temperature == 0.0f && p.top_p == 0.5f && p.min_p == 0.1f);
    CHECK_EQ_INT(p.top_k, 5);
    CHECK(p.repeat_penalty == 1.1f && p.presence_penalty == 0.5f && p.frequency_penalty == -0.5f);
    CHECK_EQ_INT(p.repeat_last_n, -1);
    CHECK(!p.seed_random);
    CHECK_EQ_INT(p.seed, 42);
    CHECK_EQ_INT(p.n_stop, 2);
    CHECK_EQ_STR(p.stop[0], "\n");
    CHECK_EQ_STR(p.stop[1], "Amen");
    CHECK(p.stream && p.want_logprobs && !p.cache_prompt && p.ignore_eos);
    CHECK_EQ_INT(p.n_probs, 3);
    CHECK_EQ_INT(p.n_logit_bias, 2);
    /* in token order */
    CHECK(p.logit_bias[1].token == 15043 && p.logit_bias[1].bias == -1.5f);
    CHECK(p.logit_bias[0].token == 2 && isinf(p.logit_bias[0].bias) && p.logit_bias[0].bias < 0);
    CHECK_EQ_INT(p.n, 4);
    CHECK_EQ_STR(p.model, "kjv");
    completion_params_free(&p);
}

TEST(params_oai_completion_fields) {
    const char *body =
        "{\"model\": \"m\", \"prompt\": [\"Once upon\"], \"max_tokens\": 16, \"n\": 2,"
        " \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"logprobs\": 2,"
        " \"logit_bias\": {\"50256\": -100, \"13\": 5}, \"stop\": \"\\n\", \"seed\": null,"
        " \"user\": \"someone\", \"echo\": false, \"best_of\": 2, \"suffix\": null}";
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, body, &err), 0);
    CHECK_EQ_STR(p.prompt_text, "Once upon");
    CHECK_EQ_INT(p.n_predict, 16);
    CHECK_EQ_INT(p.n, 2);
    CHECK(p.stream && p.include_usage && p.want_logprobs && p.seed_random);
    CHECK_EQ_INT(p.n_probs, 2);
    CHECK_EQ_INT(p.n_logit_bias, 2);
    CHECK(p.logit_bias[1].token == 50256 && p.logit_bias[1].bias == -100.0f);
    CHECK(p.logit_bias[0].token == 13 && p.logit_bias[0].bias == 5.0f);
    CHECK_EQ_INT(p.n_stop, 1);
    CHECK_EQ_STR(p.stop[0], "\n");
    completion_params_free(&p);

    /* logprobs: 0 still asks for the chosen token's logprob (OpenAI). */
    CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, "{\"prompt\": [[5, 6]], \"logprobs\": 0}", &err), 0);
    CHECK(p.want_logprobs);
    CHECK_EQ_INT(p.n_probs, 0);
    CHECK_EQ_INT(p.n_prompt_tokens, 2);
    CHECK(p.prompt_tokens[0] == 5 && p.prompt_tokens[1] == 6);
    completion_params_free(&p);
}

TEST(params_chat_fields) {
    const char *body =
        "{\"model\": \"m\", \"messages\": ["
        "  {\"role\": \"system\", \"content\": \"Be brief.\"},"
        "  {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hello\"},"
        "                                    {\"type\": \"text\", \"text\": \" there\"}]},"
        "  {\"role\": \"assistant\", \"content\": null},"
        "  {\"role\": \"user\", \"content\": \"caf\\u00e9\"}],"
        " \"max_completion_tokens\": 7, \"max_tokens\": 99, \"logprobs\": true,"
        " \"top_logprobs\": 4, \"temperature\": 1.5, \"stream\": false}";
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_OAI_CHAT, body, &err), 0);
    CHECK(p.prompt_text == NULL && p.prompt_tokens == NULL);
    CHECK_EQ_INT(p.n_messages, 4);
    CHECK_EQ_STR(p.messages[0].role, "system");
    CHECK_EQ_STR(p.messages[0].content, "Be brief.");
    CHECK_EQ_STR(p.messages[1].role, "user");
    CHECK_EQ_STR(p.messages[1].content, "Hello\n there"); /* text parts joined with "\n" */
    CHECK_EQ_STR(p.messages[2].role, "assistant");
    CHECK_EQ_STR(p.messages[2].content, "");
    CHECK_EQ_STR(p.messages[3].content, "caf\xc3\xa9");
    CHECK_EQ_INT(p.n_predict, 7);                 /* max_completion_tokens wins */
    CHECK(p.want_logprobs);
    CHECK_EQ_INT(p.n_probs, 4);
    CHECK(p.temperature == 1.5f);
    completion_params_free(&p);
}

TEST(params_empty_constraints_accepted) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
                       " \"tools\": [], \"tool_choice\": \"none\", \"grammar\": \"\","
                       " \"json_schema\": {}, \"response_format\": {\"type\": \"text\"},"
                       " \"mirostat\": 2}", &err), 0);
    completion_params_free(&p);
}

TEST(params_constraints_become_grammar_text) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"grammar\": \"root ::= [a-z]+\"}", &err), 0);
    CHECK_EQ_STR(p.grammar, "root ::= [a-z]+");
    CHECK_EQ_STR(p.grammar_param, "grammar");
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
                       " \"response_format\": {\"type\": \"json_object\"}}", &err), 0);
    CHECK(p.grammar && strstr(p.grammar, "root ::= object"));
    CHECK_EQ_STR(p.grammar_param, "response_format");
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\","
                       " \"json_schema\": {\"name\": \"n\", \"strict\": true, \"schema\": {\"type\": \"boolean\"}}}}", &err), 0);
    CHECK(p.grammar && strstr(p.grammar, "root ::= boolean"));
    CHECK_EQ_STR(p.grammar_param, "response_format.json_schema.schema");
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"json_schema\": {\"type\": \"null\"}}", &err), 0);
    CHECK(p.grammar && strstr(p.grammar, "root ::= null"));
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"text\"}}", &err), 0);
    CHECK(p.grammar == NULL);
    completion_params_free(&p);
}

TEST(params_seed_forms) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"seed\": -1}", &err), 0);
    CHECK(p.seed_random);
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"seed\": 4294967295}", &err), 0);
    CHECK(p.seed_random);   /* llama.cpp's LLAMA_DEFAULT_SEED means random */
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"seed\": 0}", &err), 0);
    CHECK(!p.seed_random);
    CHECK_EQ_INT(p.seed, 0);
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"seed\": 4294967294.0}", &err), 0);
    CHECK(!p.seed_random);
    CHECK_EQ_INT(p.seed, 4294967294u);
    completion_params_free(&p);
}

TEST(params_server_defaults_fill_what_a_request_omits) {
    struct completion_params p;
    struct api_error err;
    struct params_defaults d = {.seed = 7, .temperature = 0.0f, .top_k = 1, .top_p = 0.5f, .n_predict = 5};
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    lim.defaults = &d;
    const char *body = "{\"prompt\": \"x\"}";
    CHECK_EQ_INT(completion_params_parse(&p, API_COMPLETION, body, strlen(body), &lim, &err), 0);
    CHECK(!p.seed_random && p.seed == 7 && p.temperature == 0.0f && p.top_k == 1 && p.top_p == 0.5f);
    CHECK_EQ_INT(p.n_predict, 5);
    CHECK(p.min_p == 0.05f); /* what the server does not set stays llama.cpp's */
    completion_params_free(&p);
    body = "{\"prompt\": \"x\", \"seed\": -1, \"temperature\": 1, \"max_tokens\": 9, \"top_k\": 3}";
    CHECK_EQ_INT(completion_params_parse(&p, API_OAI_COMPLETION, body, strlen(body), &lim, &err), 0);
    CHECK(p.seed_random && p.temperature == 1.0f && p.top_k == 3 && p.top_p == 0.5f);
    CHECK_EQ_INT(p.n_predict, 9);
    completion_params_free(&p);
    d.seed = -1;
    body = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
    CHECK_EQ_INT(completion_params_parse(&p, API_OAI_CHAT, body, strlen(body), &lim, &err), 0);
    CHECK(p.seed_random && p.n_predict == 5 && p.temperature == 0.0f);
    completion_params_free(&p);
}

TEST(params_batch_of_prompts) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": [\"ab\", [5, 6, 7], \"c\"], \"n\": 2}", &err), 0);
    CHECK_EQ_INT(p.n_prompts, 3);
    CHECK_EQ_STR(p.prompts[0].text, "ab");
    CHECK(p.prompts[1].text == NULL && p.prompts[1].n_tokens == 3 && p.prompts[1].tokens[2] == 7);
    CHECK_EQ_STR(p.prompts[2].text, "c");
    CHECK_EQ_STR(p.prompt_text, "ab"); /* the first, as a single prompt is */
    CHECK(completion_params_check_tokens(&p, 7, &err) < 0);
    CHECK_EQ_STR(err.param, "prompt[1][2]");
    CHECK_EQ_INT(completion_params_check_tokens(&p, 8, &err), 0);
    completion_params_free(&p);
    /* one prompt, in every form, is a batch of one */
    const char *ones[] = {"{\"prompt\": \"ab\"}", "{\"prompt\": [\"ab\"]}", "{\"prompt\": [1, 2]}",
                          "{\"prompt\": [[1, 2]]}"};
    for (size_t i = 0; i < sizeof ones / sizeof *ones; i++) {
        CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, ones[i], &err), 0);
        CHECK_EQ_INT(p.n_prompts, 1);
        CHECK(p.prompts[0].text == p.prompt_text && p.prompts[0].tokens == p.prompt_tokens);
        completion_params_free(&p);
    }
}

TEST(params_llama_cpp_native_fields) {
    struct completion_params p;
    struct api_error err;
    const char *body = "{\"prompt\": \"x\", \"return_tokens\": true, \"post_sampling_probs\": true,"
                       " \"response_fields\": [\"content\", \"generation_settings/n_predict\"],"
                       " \"logit_bias\": [[\" Hello\", -1.5], [3, 2], [\"x\", false]]}";
    CHECK_EQ_INT(parse(&p, API_COMPLETION, body, &err), 0);
    CHECK(p.return_tokens && p.post_sampling_probs);
    CHECK_EQ_INT(p.n_response_fields, 2);
    CHECK_EQ_STR(p.response_fields[1], "generation_settings/n_predict");
    CHECK_EQ_INT(p.n_logit_bias, 1);
    CHECK(p.logit_bias[0].token == 3 && p.logit_bias[0].bias == 2.0f);
    CHECK_EQ_INT(p.n_logit_bias_text, 2);
    CHECK_EQ_STR(p.logit_bias_text[0].text, " Hello");
    CHECK(p.logit_bias_text[0].bias == -1.5f && p.logit_bias_text[1].bias == -INFINITY);
    completion_params_free(&p);
    /* the object form: ids and texts side by side */
    CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"12\": 1, \"Hi\": -2}}", &err), 0);
    CHECK(p.n_logit_bias == 1 && p.n_logit_bias_text == 1 && p.logit_bias_text[0].len == 2);
    completion_params_free(&p);
    /* /v1/completions: echo, and the logprobs shape follows the field asked with */
    CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, "{\"prompt\": \"x\", \"echo\": true, \"logprobs\": 2}", &err), 0);
    CHECK(p.echo && p.want_logprobs && !p.logprobs_content && p.n_probs == 2);
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, "{\"prompt\": \"x\", \"n_probs\": 3}", &err), 0);
    CHECK(p.want_logprobs && p.logprobs_content && p.n_probs == 3);
    completion_params_free(&p);
    /* the native endpoint ignores echo, /v1/completions the native-only fields */
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"echo\": true}", &err), 0);
    CHECK(!p.echo);
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_OAI_COMPLETION, "{\"prompt\": \"x\", \"return_tokens\": true}", &err), 0);
    CHECK(!p.return_tokens);
    completion_params_free(&p);
}

TEST(params_integral_reals_accepted) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"x\", \"top_k\": 12.0, \"n_predict\": 3e1}",
                       &err), 0);
    CHECK_EQ_INT(p.top_k, 12);
    CHECK_EQ_INT(p.n_predict, 30);
    completion_params_free(&p);
}

/* Bad inputs: each must give 400 invalid_request_error naming exactly this param. */
struct reject_case {
    enum api_endpoint ep;
    const char *body;
    const char *param;
};

static const struct reject_case rejects[] = {
    /* prompt */
    {API_COMPLETION, "{}", "prompt"},
    {API_COMPLETION, "{\"prompt\": null}", "prompt"},
    {API_COMPLETION, "{\"prompt\": \"\"}", "prompt"},
    {API_COMPLETION, "{\"prompt\": []}", "prompt"},
    {API_COMPLETION, "{\"prompt\": 5}", "prompt"},
    {API_COMPLETION, "{\"prompt\": {\"a\": 1}}", "prompt"},
    {API_COMPLETION, "{\"prompt\": [1, -2]}", "prompt[1]"},
    {API_COMPLETION, "{\"prompt\": [1, 2.5]}", "prompt[1]"},
    {API_COMPLETION, "{\"prompt\": [1, 4294967296]}", "prompt[1]"},
    {API_COMPLETION, "{\"prompt\": [1, \"x\"]}", "prompt[1]"},
    {API_OAI_COMPLETION, "{\"prompt\": [[]]}", "prompt[0]"},
    {API_OAI_COMPLETION, "{\"prompt\": [\"\"]}", "prompt[0]"},
    {API_OAI_COMPLETION, "{\"prompt\": [[1, true]]}", "prompt[0][1]"},
    {API_OAI_COMPLETION, "{\"prompt\": [null]}", "prompt[0]"},
    /* numbers: types and ranges */
    {API_COMPLETION, "{\"prompt\": \"x\", \"n_predict\": \"5\"}", "n_predict"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"n_predict\": -2}", "n_predict"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"n_predict\": 1.5}", "n_predict"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"n_predict\": 3000000000}", "n_predict"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": -5}", "max_tokens"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": true}", "max_completion_tokens"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"temperature\": -0.1}", "temperature"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"temperature\": \"hot\"}", "temperature"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"top_k\": -1}", "top_k"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"top_k\": 0.5}", "top_k"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"top_p\": 1.01}", "top_p"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"top_p\": -0.5}", "top_p"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"min_p\": 2}", "min_p"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"min_p\": [0.1]}", "min_p"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"repeat_penalty\": 0}", "repeat_penalty"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"repeat_last_n\": -2}", "repeat_last_n"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"presence_penalty\": 2.5}", "presence_penalty"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"frequency_penalty\": -3}", "frequency_penalty"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"seed\": -2}", "seed"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"seed\": 4294967296}", "seed"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"seed\": \"42\"}", "seed"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"n_probs\": -1}", "n_probs"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"n_probs\": 21}", "n_probs"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"n\": 0}", "n"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"n\": 17}", "n"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"n_cmpl\": 17}", "n_cmpl"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"n\": 100}", "n"},
    /* booleans */
    {API_COMPLETION, "{\"prompt\": \"x\", \"stream\": 1}", "stream"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"stream\": \"true\"}", "stream"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"cache_prompt\": 0}", "cache_prompt"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"ignore_eos\": \"no\"}", "ignore_eos"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream_options\": true}", "stream_options"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream_options\": {\"include_usage\": 1}}", "stream_options.include_usage"},
    /* stop */
    {API_COMPLETION, "{\"prompt\": \"x\", \"stop\": 5}", "stop"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"stop\": \"\"}", "stop"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\", 5]}", "stop[1]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\", \"\"]}", "stop[1]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\\u0000b\"]}", "stop[0]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", "stop"},
    /* logit_bias */
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": 5}", "logit_bias"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [[1]]}", "logit_bias[0]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [[1, 2], 3]}", "logit_bias[1]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [[-1, 1]]}", "logit_bias[0]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [[1, true]]}", "logit_bias[0]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [[1, \"1\"]]}", "logit_bias[0]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"-3\": 1}}", "logit_bias.-3"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"99999999999\": 1}}", "logit_bias.99999999999"},
    /* duplicates are summed, and the sum must stay in range (two FLT_MAX entries: inf) */
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [[0, 3.4e38], [0, 3.4e38]]}", "logit_bias"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"7\": 3e38, \"007\": 3e38}}", "logit_bias"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logit_bias\": {\"7\": 60, \"07\": 60}}", "logit_bias"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"7\": null}}", "logit_bias.7"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"7\": 1e39}}", "logit_bias.7"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"7\": 101}}", "logit_bias.7"},
    /* logprobs */
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": true}", "logprobs"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 3}", "logprobs"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 3}", "top_logprobs"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, \"top_logprobs\": 30}", "top_logprobs"},
    /* unsupported on /v1/completions */
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"echo\": 1}", "echo"},
    /* batches, llama.cpp's fields */
    {API_COMPLETION, "{\"prompt\": [\"a\", 5]}", "prompt[1]"},
    {API_COMPLETION, "{\"prompt\": [5, \"a\"]}", "prompt[1]"},
    {API_COMPLETION, "{\"prompt\": [\"a\", [1, \"b\"]]}", "prompt[1][1]"},
    {API_COMPLETION, "{\"prompt\": [\"a\", []]}", "prompt[1]"},
    {API_COMPLETION, "{\"prompt\": [\"a\", \"\"]}", "prompt[1]"},
    {API_COMPLETION, "{\"prompt\": [\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"]}", "prompt"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"return_tokens\": 1}", "return_tokens"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"post_sampling_probs\": \"yes\"}", "post_sampling_probs"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"response_fields\": \"content\"}", "response_fields"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"response_fields\": [\"content\", 3]}", "response_fields[1]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [[\"\", -1]]}", "logit_bias[0]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [[\"Hello\", \"-1\"]]}", "logit_bias[0]"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"\": 1}}", "logit_bias."},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"n_probs\": 21}", "n_probs"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"suffix\": \"end\"}", "suffix"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"best_of\": 3}", "best_of"},
    /* output constraints */
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}", "tools[0].function"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"response_format\": \"json\"}", "response_format"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"xml\"}}", "response_format.type"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\"}}", "response_format.json_schema"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"a\"}}}", "response_format.json_schema.schema"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"object\", \"properties\": {\"a\": {\"not\": {}}}}}}}", "response_format.json_schema.schema.properties.a.not"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"object\"}, \"strict\": 1}}}", "response_format.json_schema.strict"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"grammar\": 5}", "grammar"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"json_schema\": [1]}", "json_schema"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"json_schema\": {\"type\": \"string\", \"format\": \"email\"}}", "json_schema.format"},
    {API_COMPLETION, "{\"prompt\": \"x\", \"grammar\": \"root ::= \\\"a\\\"\", \"json_schema\": {\"type\": \"object\"}}", "json_schema"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"json_schema\": {\"type\": \"object\"}, \"response_format\": {\"type\": \"json_object\"}}", "response_format"},
    /* model */
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"model\": 5}", "model"},
    /* cache_salt */
    {API_COMPLETION, "{\"prompt\": \"x\", \"cache_salt\": 5}", "cache_salt"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"cache_salt\": [\"a\"]}", "cache_salt"},
    {API_OAI_COMPLETION, "{\"prompt\": \"x\", \"cache_salt\": \"\"}", "cache_salt"},
    /* messages */
    {API_OAI_CHAT, "{}", "messages"},
    {API_OAI_CHAT, "{\"messages\": []}", "messages"},
    {API_OAI_CHAT, "{\"messages\": \"hi\"}", "messages"},
    {API_OAI_CHAT, "{\"messages\": [5]}", "messages[0]"},
    {API_OAI_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", "messages[0].role"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", "messages[0].role"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"user\"}]}", "messages[1].content"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0]"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}", "messages[0].content[0]"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "messages[0].content[0]"},
    {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [\"text\"]}]}", "messages[0].content[0]"},
    /* the body itself: no field */
    {API_COMPLETION, "", ""},
    {API_COMPLETION, "{\"prompt\": \"x\"", ""},
    {API_COMPLETION, "{\"prompt\": \"x\"} trailing", ""},
    {API_COMPLETION, "[\"prompt\"]", ""},
    {API_COMPLETION, "\"prompt\"", ""},
    {API_COMPLETION, "{\"prompt\": \"\\ud800\"}", ""},   /* a lone surrogate is invalid JSON text */
};

TEST(params_rejects_name_the_field) {
    for (size_t i = 0; i < sizeof rejects / sizeof rejects[0]; i++) {
        const struct reject_case *c = &rejects[i];
        struct completion_params p;
        struct api_error err;
        int rc = parse(&p, c->ep, c->body, &err);
        if (rc != -ERR_INVAL || err.status != 400 || !err.type ||
            strcmp(err.type, "invalid_request_error") != 0 || strcmp(err.param, c->param) != 0 ||
            !err.message[0] || p.arena_ != NULL || p.prompt_text != NULL) {
            fprintf(stderr, "  case %zu: %s\n    rc %d status %d param \"%s\" (want \"%s\"): %s\n",
                    i, c->body, rc, err.status, err.param, c->param, err.message);
            t->failed = 1;
            completion_params_free(&p);
            return;
        }
        /* The message starts with the field's name, so a human sees it too. */
        if (c->param[0]) CHECK(strncmp(err.message, c->param, strlen(c->param)) == 0);
    }
}

TEST(params_invalid_json_message_says_where) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\n\"prompt\": tru}", &err), -ERR_INVAL);
    CHECK(strstr(err.message, "invalid JSON at line 2") != NULL);
    CHECK_EQ_STR(err.param, "");
}

TEST(params_invalid_utf8_body_rejected) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"a\xff\"}", &err), -ERR_INVAL);
    CHECK_EQ_INT(err.status, 400);
}

TEST(params_body_need_not_be_terminated) {
    const char body[] = "{\"prompt\": \"abc\"}XXXX";
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(completion_params_parse(&p, API_COMPLETION, body, 17, NULL, &err), 0);
    CHECK_EQ_STR(p.prompt_text, "abc");
    completion_params_free(&p);
}

TEST(params_limits_apply) {
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    lim.max_n = 2;
    lim.max_prompt_bytes = 4;
    lim.max_prompt_tokens = 3;
    lim.max_stop = 1;
    lim.max_stop_bytes = 2;
    lim.max_logit_bias = 1;
    lim.max_messages = 1;
    lim.max_n_probs = 2;
    struct { enum api_endpoint ep; const char *body; const char *param; int ok; } cases[] = {
        {API_COMPLETION, "{\"prompt\": \"abcd\", \"n\": 2}", "", 1},
        {API_COMPLETION, "{\"prompt\": \"abcde\"}", "prompt", 0},
        {API_COMPLETION, "{\"prompt\": [1, 2, 3]}", "", 1},
        {API_COMPLETION, "{\"prompt\": [1, 2, 3, 4]}", "prompt", 0},
        {API_COMPLETION, "{\"prompt\": \"a\", \"n\": 3}", "n", 0},
        {API_COMPLETION, "{\"prompt\": \"a\", \"stop\": \"ab\"}", "", 1},
        {API_COMPLETION, "{\"prompt\": \"a\", \"stop\": \"abc\"}", "stop", 0},
        {API_COMPLETION, "{\"prompt\": \"a\", \"stop\": [\"a\", \"b\"]}", "stop", 0},
        {API_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": [[1, 1], [2, 2]]}", "logit_bias", 0},
        {API_COMPLETION, "{\"prompt\": \"a\", \"n_probs\": 2}", "", 1},
        {API_COMPLETION, "{\"prompt\": \"a\", \"n_probs\": 3}", "n_probs", 0},
        {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"abcd\"}]}", "", 1},
        {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"abcde\"}]}", "messages[0].content", 0},
        {API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}", "messages", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct completion_params p;
        struct api_error err;
        int rc = completion_params_parse(&p, cases[i].ep, cases[i].body, strlen(cases[i].body),
                                         &lim, &err);
        if ((rc == 0) != cases[i].ok || (!cases[i].ok && strcmp(err.param, cases[i].param) != 0)) {
            fprintf(stderr, "  case %zu: %s -> rc %d param \"%s\": %s\n", i, cases[i].body, rc,
                    err.param, err.message);
            t->failed = 1;
        }
        completion_params_free(&p);
    }
}

TEST(params_multi_part_content_counts_against_limit) {
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    lim.max_prompt_bytes = 9;
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"abcdef\"},"
                       " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"ghi\"},"
                       " {\"type\": \"text\", \"text\": \"j\"}]}]}";
    struct completion_params p;
    struct api_error err;
    /* 6 + 3 + 1 = 10 > 9 */
    CHECK_EQ_INT(completion_params_parse(&p, API_OAI_CHAT, body, strlen(body), &lim, &err),
                 -ERR_INVAL);
    CHECK_EQ_STR(err.param, "messages[1].content");
}

TEST(params_check_tokens_against_vocab) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": [0, 31999, 32000], "
                       "\"logit_bias\": {\"5\": 1}}", &err), 0);
    CHECK_EQ_INT(completion_params_check_tokens(&p, 32001, &err), 0);
    CHECK_EQ_INT(completion_params_check_tokens(&p, 32000, &err), -ERR_INVAL);
    CHECK_EQ_INT(err.status, 400);
    CHECK_EQ_STR(err.param, "prompt[2]");
    CHECK(strstr(err.message, "32000") != NULL);
    completion_params_free(&p);

    CHECK_EQ_INT(parse(&p, API_COMPLETION, "{\"prompt\": \"text\", "
                       "\"logit_bias\": [[5, 1], [100, false]]}", &err), 0);
    CHECK_EQ_INT(completion_params_check_tokens(&p, 101, &err), 0);
    CHECK_EQ_INT(completion_params_check_tokens(&p, 100, &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "logit_bias");
    completion_params_free(&p);
}

TEST(params_exceed_context_error) {
    struct api_error err;
    CHECK_EQ_INT(api_error_exceed_context(&err, 5000, 1024), -ERR_TOOBIG);
    CHECK_EQ_INT(err.status, 400);
    CHECK_EQ_STR(err.type, "exceed_context_size_error");
    CHECK_EQ_INT(err.n_prompt_tokens, 5000);
    CHECK_EQ_INT(err.n_ctx, 1024);
    CHECK(strstr(err.message, "5000") && strstr(err.message, "1024"));
}

TEST(params_tokenize_body) {
    struct tokenize_params p;
    struct api_error err;
    const char *b = "{\"content\": \"Hello world\", \"add_special\": true, \"with_pieces\": true}";
    CHECK_EQ_INT(tokenize_params_parse(&p, b, strlen(b), NULL, &err), 0);
    CHECK_EQ_STR(p.content, "Hello world");
    CHECK(p.add_special && p.with_pieces && p.parse_special);
    tokenize_params_free(&p);

    b = "{\"content\": \"\"}";
    CHECK_EQ_INT(tokenize_params_parse(&p, b, strlen(b), NULL, &err), 0);
    CHECK_EQ_INT(p.content_len, 0);
    CHECK(!p.add_special && !p.with_pieces);
    tokenize_params_free(&p);

    b = "{\"content\": 5}";
    CHECK_EQ_INT(tokenize_params_parse(&p, b, strlen(b), NULL, &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "content");
    b = "{}";
    CHECK_EQ_INT(tokenize_params_parse(&p, b, strlen(b), NULL, &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "content");
    b = "{\"content\": \"x\", \"with_pieces\": \"yes\"}";
    CHECK_EQ_INT(tokenize_params_parse(&p, b, strlen(b), NULL, &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "with_pieces");
}

TEST(params_detokenize_body) {
    struct detokenize_params p;
    struct api_error err;
    const char *b = "{\"tokens\": [1, 15043, 3186]}";
    CHECK_EQ_INT(detokenize_params_parse(&p, b, strlen(b), NULL, &err), 0);
    CHECK_EQ_INT(p.n_tokens, 3);
    CHECK(p.tokens[0] == 1 && p.tokens[2] == 3186);
    CHECK_EQ_INT(detokenize_params_check_tokens(&p, 32000, &err), 0);
    CHECK_EQ_INT(detokenize_params_check_tokens(&p, 3000, &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "tokens[1]");
    detokenize_params_free(&p);

    b = "{\"tokens\": []}";
    CHECK_EQ_INT(detokenize_params_parse(&p, b, strlen(b), NULL, &err), 0);
    CHECK_EQ_INT(p.n_tokens, 0);
    detokenize_params_free(&p);

    b = "{\"tokens\": [1, \"a\"]}";
    CHECK_EQ_INT(detokenize_params_parse(&p, b, strlen(b), NULL, &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "tokens[1]");
    b = "{\"tokens\": \"1 2\"}";
    CHECK_EQ_INT(detokenize_params_parse(&p, b, strlen(b), NULL, &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "tokens");
}

TEST(params_apply_template_body) {
    /* POST /apply-template parses its body as a chat request: only messages matter. */
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
                       &err), 0);
    CHECK_EQ_INT(p.n_messages, 1);
    CHECK_EQ_STR(p.messages[0].role, "user");
    CHECK_EQ_STR(p.messages[0].content, "Hi");
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, API_OAI_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", &err), -ERR_INVAL);
    CHECK_EQ_STR(err.param, "messages[0].content");
}

/* Out of memory at any point of a parse: -ERR_NOMEM and a 500 (except where jansson reports it
 * as a syntax error while loading), nothing leaked (checked by the ASan build), and a struct that is safe to free. */
static long alloc_budget;
static void *failing_malloc(size_t size) {
    return alloc_budget-- > 0 ? malloc(size) : NULL;
}

TEST(params_out_of_memory_is_500) {
    const char *body =
        "{\"prompt\": [1, 2, 3], \"stop\": [\"a\", \"bb\"], \"logit_bias\": {\"1\": false},"
        " \"model\": \"m\", \"n\": 2, \"stream_options\": {\"include_usage\": true}}";
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\","
                       " \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}]}";
    json_malloc_t saved_malloc;
    json_free_t saved_free;
    json_get_alloc_funcs(&saved_malloc, &saved_free);
    for (int which = 0; which < 2; which++) {
        int rc = -1, nomem = 0;
        for (long budget = 0; budget < 5000 && rc != 0; budget++) {
            struct completion_params p;
            struct api_error err;
            alloc_budget = budget;
            json_set_alloc_funcs(failing_malloc, free);
            rc = which ? parse(&p, API_OAI_CHAT, chat, &err) : parse(&p, API_COMPLETION, body, &err);
            json_set_alloc_funcs(saved_malloc, saved_free);
            if (rc == -ERR_INVAL) {
                /* jansson sometimes reports a failed allocation as a syntax error: only while
                 * loading the text, never in our own validation. */
                CHECK(strncmp(err.message, "invalid JSON", 12) == 0);
                CHECK(p.arena_ == NULL);
            } else if (rc != 0) {
                CHECK_EQ_INT(rc, -ERR_NOMEM);
                CHECK_EQ_INT(err.status, 500);
                CHECK(p.arena_ == NULL);
                nomem++;
            } else {
                CHECK_EQ_INT(which ? (long long)p.n_messages : (long long)p.n_stop, which ? 1 : 2);
            }
            completion_params_free(&p);
        }
        CHECK_EQ_INT(rc, 0);
        /* the arena's allocations failed at least twice (chat messages use chat_json's malloc) */
        CHECK(which == 1 || nomem >= 2);
    }
}
