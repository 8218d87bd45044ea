/* params_spec_test.c: the speculative decoding fields, as llama.cpp's server names them. */
#include "test.h"

#include "api/params.h"
#include "common/err.h"

static int parse(struct completion_params *p, const char *body, struct api_error *err) {
    struct params_limits lim = PARAMS_LIMITS_DEFAULT;
    return completion_params_parse(p, API_COMPLETION, body, strlen(body), &lim, err);
}

TEST(params_speculative_fields) {
    struct completion_params p;
    struct api_error err;
    CHECK_EQ_INT(parse(&p, "{\"prompt\": \"x\"}", &err), 0);
    CHECK(p.spec_n_max == -1 && p.spec_n_min == -1 && p.spec_p_min < 0); /* the server's flags */
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, "{\"prompt\": \"x\", \"speculative.n_max\": 8, \"speculative.n_min\": 2, "
                           "\"speculative.p_min\": 0.5}", &err), 0);
    CHECK_EQ_INT(p.spec_n_max, 8);
    CHECK_EQ_INT(p.spec_n_min, 2);
    CHECK(p.spec_p_min == 0.5f);
    completion_params_free(&p);
    CHECK_EQ_INT(parse(&p, "{\"prompt\": \"x\", \"speculative.n_max\": 0}", &err), 0);
    CHECK_EQ_INT(p.spec_n_max, 0);
    completion_params_free(&p);
    static const struct { const char *body, *param; } bad[] = {
        {"{\"prompt\": \"x\", \"speculative.n_max\": -1}", "speculative.n_max"},
        {"{\"prompt\": \"x\", \"speculative.n_min\": \"2\"}", "speculative.n_min"},
        {"{\"prompt\": \"x\", \"speculative.p_min\": 1.5}", "speculative.p_min"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_EQ_INT(parse(&p, bad[i].body, &err), -ERR_INVAL);
        CHECK_EQ_INT(err.status, 400);
        CHECK_EQ_STR(err.param, bad[i].param);
        completion_params_free(&p);
    }
}
