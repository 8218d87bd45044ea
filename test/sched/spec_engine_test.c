/* Speculative decoding on the real engine and every shared model: greedy output with prompt
 * lookup and with a draft model (the served model as its own draft) is the plain greedy output,
 * token for token; a draft model with another vocabulary is refused at load. */
#include "test.h"

#include "common/err.h"
#include "sched/model_engine.h"
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

#define GEN 40

struct out {
    int32_t tokens[GEN];
    int32_t n;
    int done;
    struct sched_counts counts;
};

static bool on_token(void *owner, int32_t choice, int32_t token, const struct sched_token_probs *probs) {
    struct out *o = owner;
    if (o->n < GEN) o->tokens[o->n++] = token;
    return true;
}
static void on_done(void *owner, int32_t choice, enum sched_stop reason, const struct sched_counts *counts) {
    struct out *o = owner;
    o->done++;
    o->counts = *counts;
}
static void on_error(void *owner, int err) { ((struct out *)owner)->done = -1; }
static const struct sched_sink sink = {on_token, on_done, on_error, NULL};

/* Generate GEN greedy tokens after a prompt that quotes a passage twice (prompt lookup finds its
 * own continuation in it). mode 0: plain, 1: prompt lookup, 2: the engine's draft model. */
static int generate(struct model_engine *e, int mode, struct out *o, int64_t *steps) {
    struct sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_ctx = e->n_ctx;
    cfg.batch_tokens = 64;
    cfg.spec_lookup = mode == 1;
    struct sched *s;
    int rc = sched_create(&s, &cfg, e->mem, mode == 2 ? model_engine_sched_ops(e) : &model_engine_ops, e);
    if (rc) return rc;
    static const char passage[] = "In the beginning God created the heaven and the earth. And the earth was "
                                  "without form, and void; and darkness was upon the face of the deep. ";
    char text[2 * sizeof passage];
    snprintf(text, sizeof text, "%s%s", passage, passage);
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    rc = model_engine_tokenize(e, text, strlen(text) - 40, true, false, &prompt, &n_prompt);
    struct model_engine_sampling sp = {.temperature = 0, .repeat_penalty = 1.0f};
    struct sched_request req = {.prompt = prompt, .n_prompt = (int32_t)n_prompt, .n_predict = GEN, .n_choices = 1,
                                .ignore_eos = true, .sampler_params = &sp, .draft_max = mode ? 6 : 0,
                                .draft_p_min = 0.0f};
    memset(o, 0, sizeof *o);
    struct sched_req *h;
    if (!rc) rc = sched_submit(s, &req, &sink, o, 0, &h);
    double now = 0;
    struct sched_step *st;
    while (!rc && sched_build_step(s, now, &st) > 0) {
        sched_step_compute(s, st);
        now += 10;
        sched_step_complete(s, st, now);
    }
    struct sched_stats stats;
    sched_stats(s, now, &stats);
    *steps = stats.steps;
    sched_destroy(s);
    free(prompt);
    return rc;
}

static void check_model(struct test_case *t, const char *rel) {
    SHARED(path, rel);
    struct model_engine_config ec = {.path = path, .kv_tokens = 512, .batch_tokens = 64, .n_seq_max = 4,
                                     .n_threads = 2, .draft_path = path};
    struct model_engine *e;
    char why[256] = "";
    int rc = model_engine_load(&e, &ec, why, sizeof why);
    bool recurrent = rc == -ERR_FORMAT && strstr(why, "cannot drop rejected drafts");
    if (recurrent) { /* a recurrent model cannot draft for itself: serve it without */
        ec.draft_path = NULL;
        rc = model_engine_load(&e, &ec, why, sizeof why);
    }
    if (rc) fprintf(stderr, "  %s: %s\n", rel, why);
    CHECK_EQ_INT(rc, 0);
    CHECK(!recurrent || !e->mem->ops->partial_removal);
    static struct out plain, lookup, drafted;
    int64_t steps_plain, steps_lookup, steps_draft;
    CHECK_EQ_INT(generate(e, 0, &plain, &steps_plain), 0);
    CHECK_EQ_INT(generate(e, 1, &lookup, &steps_lookup), 0);
    CHECK_EQ_INT(generate(e, 2, &drafted, &steps_draft), 0);
    CHECK_EQ_INT(plain.n, GEN);
    CHECK_EQ_INT(plain.done, 1);
    for (int k = 0; k < 2; k++) {
        const struct out *o = k ? &drafted : &lookup;
        int32_t at = 0;
        while (at < GEN && o->tokens[at] == plain.tokens[at]) at++;
        if (at < GEN || o->n != GEN) fprintf(stderr, "  %s, %s: differs at token %d of %d\n", rel, k ? "draft model" : "lookup", at, o->n);
        CHECK_EQ_INT(o->n, GEN);
        CHECK_EQ_INT(at, GEN);
        CHECK_EQ_INT(o->done, 1);
    }
    if (recurrent) { /* no speculation on a memory that cannot drop rejected drafts */
        CHECK_EQ_INT(drafted.counts.n_drafted, 0);
        CHECK_EQ_INT(lookup.counts.n_drafted, 0);
    } else {
        /* its own draft: nearly every draft accepted, so far fewer steps */
        CHECK(drafted.counts.n_drafted > 0);
        CHECK(drafted.counts.n_draft_accepted * 10 >= drafted.counts.n_drafted * 9);
        CHECK(steps_draft * 2 < steps_plain);
        CHECK(steps_lookup <= steps_plain);
    }
    model_engine_free(e);
}

TEST(spec_engine_greedy_identical_kjv_tiny) { check_model(t, "models/kjv-tiny-q8_0.gguf"); }
TEST(spec_engine_greedy_identical_llama_spm_q8_0) { check_model(t, "models/llama-spm-q8_0.gguf"); }
TEST(spec_engine_greedy_identical_llama_spm_q4_k_m) { check_model(t, "models/llama-spm-q4_k_m.gguf"); }
TEST(spec_engine_greedy_identical_llama_spm_f16) { check_model(t, "models/llama-spm-f16.gguf"); }
TEST(spec_engine_greedy_identical_llama_spm_q4_0) { check_model(t, "models/llama-spm-q4_0.gguf"); }
TEST(spec_engine_greedy_identical_llama_spm_kquants) { check_model(t, "models/llama-spm-kquants.gguf"); }
TEST(spec_engine_greedy_identical_llama3_bpe) { check_model(t, "models/llama3-bpe-q8_0.gguf"); }
TEST(spec_engine_greedy_identical_llama32_rope) { check_model(t, "models/llama32-rope-q8_0.gguf"); }
TEST(spec_engine_greedy_identical_gemma3) { check_model(t, "models/gemma3-q8_0.gguf"); }
TEST(spec_engine_greedy_identical_phi3) { check_model(t, "models/phi3-q8_0.gguf"); }
TEST(spec_engine_greedy_identical_qwen2) { check_model(t, "models/qwen2-q8_0.gguf"); }
TEST(spec_engine_greedy_identical_qwen3) { check_model(t, "models/qwen3-q8_0.gguf"); }
TEST(spec_engine_greedy_identical_mamba) { check_model(t, "models/mamba-spm-q8_0.gguf"); }

TEST(spec_engine_refuses_a_draft_model_with_another_vocabulary) {
    SHARED(target, "models/kjv-tiny-q8_0.gguf");
    char target_path[512];
    snprintf(target_path, sizeof target_path, "%s", target);
    SHARED(other, "models/qwen2-q8_0.gguf");
    struct model_engine_config ec = {.path = target_path, .kv_tokens = 128, .batch_tokens = 16, .n_seq_max = 2,
                                     .n_threads = 1, .draft_path = other};
    struct model_engine *e = NULL;
    char why[512] = "";
    CHECK(model_engine_load(&e, &ec, why, sizeof why) == -ERR_FORMAT);
    CHECK(e == NULL);
    CHECK(strstr(why, "draft model"));
    CHECK(strstr(why, "needs the same vocabulary"));
}
