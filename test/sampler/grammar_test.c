/* grammar_test.c: the GBNF parser (errors with line:column), the matcher on strings (against POSIX
 * regular expressions for random regular grammars), UTF-8 across tokens, control and EOG tokens,
 * and masks against a brute force over the vocabulary. */
#include "test.h"

#include "common/err.h"
#include "sampler/grammar.h"

#include <pthread.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

/* A vocabulary of the 256 single bytes (ids 0..255) plus extra tokens. */
struct tvocab {
    struct grammar_vocab *v;
    int32_t n;
};

static struct grammar_vocab *make_vocab(const char *const *extra, const uint8_t *extra_kinds, int32_t n_extra) {
    int32_t n = 256 + n_extra;
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    uint32_t *lens = malloc((size_t)n * sizeof *lens);
    uint8_t *kinds = malloc((size_t)n);
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        pieces[i] = &bytes[i];
        lens[i] = 1;
        kinds[i] = GRAMMAR_TOKEN_TEXT;
    }
    for (int32_t i = 0; i < n_extra; i++) {
        pieces[256 + i] = extra[i];
        lens[256 + i] = (uint32_t)strlen(extra[i]);
        kinds[256 + i] = extra_kinds ? extra_kinds[i] : GRAMMAR_TOKEN_TEXT;
    }
    struct grammar_vocab *v = NULL;
    int rc = grammar_vocab_create(&v, n, pieces, lens, kinds);
    free(pieces);
    free(lens);
    free(kinds);
    return rc ? NULL : v;
}

static struct grammar_vocab *byte_vocab(void) { return make_vocab(NULL, NULL, 0); }

/* 1: s is in the language, 0: a viable prefix only, -1: rejected. */
static int match(struct grammar *g, const char *s, size_t n) {
    struct grammar_state *st;
    if (grammar_state_create(&st, g)) return -2;
    int r = grammar_state_accept_bytes(st, s, n);
    int res = r ? -1 : grammar_state_complete(st) ? 1 : 0;
    grammar_state_free(st);
    return res;
}
#define M(g, s) match(g, s, strlen(s))

static struct grammar *compile(struct grammar_vocab *v, const char *text) {
    struct grammar *g = NULL;
    char why[256];
    int rc = grammar_compile(&g, v, text, strlen(text), why, sizeof why);
    if (rc) fprintf(stderr, "  compile failed: %s\n", why);
    return g;
}

TEST(grammar_literals_classes_repetitions) {
    struct grammar_vocab *v = byte_vocab();
    CHECK(v);
    struct grammar *g = compile(v, "root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")? [^a-c]{2,3} tail\n"
                                   "tail ::= \".\"{0,2} # comment\n");
    CHECK(g);
    CHECK_EQ_INT(M(g, "ab1xdd"), 1);
    CHECK_EQ_INT(M(g, "ab12yzddd.."), 1);
    CHECK_EQ_INT(M(g, "ab12yzddd..."), -1);
    CHECK_EQ_INT(M(g, "ab12yzdd"), 1);
    CHECK_EQ_INT(M(g, "ab12yzd"), 1); /* the group empty, [^a-c] \"yzd\" */
    CHECK_EQ_INT(M(g, "ab1x"), 0);
    CHECK_EQ_INT(M(g, "abx"), -1);
    CHECK_EQ_INT(M(g, "ab1ad"), -1);
    CHECK_EQ_INT(M(g, "ab"), 0);
    CHECK_EQ_INT(M(g, ""), 0);
    CHECK_EQ_INT(M(g, "ab9dddd"), -1);
    grammar_unref(g);
    /* escapes, '.', exact counts, {,n} */
    g = compile(v, "root ::= \"\\n\\t\\\"\\\\\\x41\\u00e9\" . [\\]\\-]{2} \"q\"{,2}\n");
    CHECK(g);
    CHECK_EQ_INT(M(g, "\n\t\"\\A\xc3\xa9z]-"), 1);
    CHECK_EQ_INT(M(g, "\n\t\"\\A\xc3\xa9\xe2\x82\xac--qq"), 1);
    CHECK_EQ_INT(M(g, "\n\t\"\\A\xc3\xa9z]-qqq"), -1);
    CHECK_EQ_INT(M(g, "\n\t\"\\Aez]-"), -1);
    grammar_unref(g);
    grammar_vocab_free(v);
}

TEST(grammar_recursion_and_nullable_loops) {
    struct grammar_vocab *v = byte_vocab();
    struct grammar *g = compile(v, "root ::= p\np ::= \"(\" p* \")\" | \"x\"\n");
    CHECK(g);
    CHECK_EQ_INT(M(g, "x"), 1);
    CHECK_EQ_INT(M(g, "(()(x))"), 1);
    CHECK_EQ_INT(M(g, "(()(x)"), 0);
    CHECK_EQ_INT(M(g, "(()(x)))"), -1);
    CHECK_EQ_INT(M(g, "(y"), -1);
    grammar_unref(g);
    /* a star over something that can be empty must not loop */
    g = compile(v, "root ::= (\"a\"? | \"\")* \"b\" (e)*\ne ::= \"c\"? \n");
    CHECK(g);
    CHECK_EQ_INT(M(g, "aab"), 1);
    CHECK_EQ_INT(M(g, "bcc"), 1);
    CHECK_EQ_INT(M(g, "ba"), -1);
    grammar_unref(g);
    /* right recursion does not grow the stack without bound */
    g = compile(v, "root ::= list\nlist ::= \"a\" list | \"\"\n");
    CHECK(g);
    char buf[5001];
    memset(buf, 'a', 5000);
    buf[5000] = 0;
    CHECK_EQ_INT(M(g, buf), 1);
    grammar_unref(g);
    grammar_vocab_free(v);
}

static void check_error(struct test_case *t, struct grammar_vocab *v, const char *text, int code, const char *want) {
    struct grammar *g = NULL;
    char why[256];
    int rc = grammar_compile(&g, v, text, strlen(text), why, sizeof why);
    if (rc != code || !strstr(why, want)) {
        fprintf(stderr, "  grammar %s: rc %d why \"%s\", expected %d \"%s\"\n", text, rc, why, code, want);
        t->failed = 1;
    }
    if (g) grammar_unref(g);
}

/* Every call stops at GRAMMAR_MAX_WORK closure steps: an ambiguous grammar whose stacks double
 * with each byte while each walks 33,000 empty positions fails within a few bytes, where the
 * stack bound alone let it run for seconds (on the compute thread, inside a shared step). */
TEST(grammar_work_per_call_is_bounded) {
    struct grammar_vocab *v = byte_vocab();
    struct grammar *g = compile(v, "root ::= p\np ::= . \"\"{0,6}{5517} p*? p*\n");
    CHECK(g);
    struct grammar_state *st;
    CHECK_EQ_INT(grammar_state_create(&st, g), 0);
    int rc = 0, n = 0;
    while (n < 12 && (rc = grammar_state_accept_bytes(st, "a", 1)) == 0) n++;
    CHECK_EQ_INT(rc, -ERR_TOOBIG);
    CHECK(n >= 1 && n <= 4);
    uint64_t *m = malloc(grammar_mask_words(v) * sizeof *m);
    CHECK(grammar_state_mask(st, m) < 0); /* the state is dead */
    free(m);
    grammar_state_free(st);
    grammar_unref(g);
    /* a start past the budget is refused when compiled */
    check_error(t, v, "root ::= \"\"{0,10000}{0,30} \"a\"\n", -ERR_TOOBIG, "ambiguous");
    /* a chain of 200,000 empty positions, below it, still matches */
    g = compile(v, "root ::= \"\"{0,10000}{0,20} \"b\"\n");
    CHECK(g);
    CHECK_EQ_INT(M(g, "b"), 1);
    CHECK_EQ_INT(M(g, "ab"), -1);
    grammar_unref(g);
    grammar_vocab_free(v);
}

TEST(grammar_parse_errors_name_line_and_column) {
    struct grammar_vocab *v = byte_vocab();
    check_error(t, v, "root ::= \"a\" valu\n", -ERR_INVAL, "1:14: undefined rule 'valu'");
    check_error(t, v, "a ::= \"x\"\n", -ERR_INVAL, "no rule named 'root'");
    check_error(t, v, "root ::= \"abc\n", -ERR_INVAL, "1:10: unterminated string literal");
    check_error(t, v, "root ::= [ab\n", -ERR_INVAL, "unterminated character class");
    check_error(t, v, "root ::= [z-a]\n", -ERR_INVAL, "1:10: character range out of order");
    check_error(t, v, "root ::= (\"a\"\n", -ERR_INVAL, "1:10: unclosed '('");
    check_error(t, v, "root ::= \"a\"\nx = \"b\"\n", -ERR_INVAL, "2:3: expected '::=' after the rule name");
    check_error(t, v, "root ::= \"a\" )\n", -ERR_INVAL, "1:14: unexpected ')'");
    check_error(t, v, "root ::= \"\\q\"\n", -ERR_INVAL, "1:11: unknown escape '\\q'");
    check_error(t, v, "root ::= \"\\x4\"\n", -ERR_INVAL, "expected 2 hex digits");
    check_error(t, v, "root ::= \"\\uD800\"\n", -ERR_INVAL, "not a Unicode scalar value");
    check_error(t, v, "root ::= \"a\"{3,2}\n", -ERR_INVAL, "maximum is below the minimum");
    check_error(t, v, "root ::= \"a\"{99999}\n", -ERR_INVAL, "repetition count over");
    check_error(t, v, "root ::= \"a\"{2\n", -ERR_INVAL, "expected '}'");
    check_error(t, v, "root ::= r\nr ::= r \"x\" | \"y\"\n", -ERR_INVAL, "left recursion: rule 'r'");
    check_error(t, v, "root ::= a\na ::= b? a \"x\"\nb ::= \"y\"\n", -ERR_INVAL, "left recursion");
    check_error(t, v, "root ::= <|tok|>\n", -ERR_INVAL, "token references");
    check_error(t, v, "root ::= \"a\"\n::= \"b\"\n", -ERR_INVAL, "2:1: expected a rule name");
    check_error(t, v, "root ::= \"\xff\"\n", -ERR_INVAL, "invalid UTF-8");
    check_error(t, v, "root ::= [^\\x00-\\U0010FFFF]\n", -ERR_INVAL, "matches nothing");
    check_error(t, v, "root ::= ([a-z]{2000}){1000}\n", -ERR_TOOBIG, "more than");
    grammar_vocab_free(v);
}

/* Random regular grammars over {a, b, c}, written both as GBNF and as a POSIX extended regular
 * expression: the matcher agrees with regexec on random strings. */
struct gen {
    uint64_t rng;
    char gbnf[4096], re[4096];
    size_t gn, rn;
};

static unsigned rnd(struct gen *s, unsigned n) {
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (unsigned)(s->rng % n);
}

static void emit(struct gen *s, const char *g, const char *r) {
    size_t a = strlen(g), b = strlen(r);
    if (s->gn + a < sizeof s->gbnf) memcpy(s->gbnf + s->gn, g, a), s->gn += a;
    if (s->rn + b < sizeof s->re) memcpy(s->re + s->rn, r, b), s->rn += b;
}

static void gen_expr(struct gen *s, int depth) {
    unsigned k = depth > 3 ? rnd(s, 3) : rnd(s, 7);
    static const char *lits[] = {"a", "b", "c", "ab", "ba", "cab"};
    static const char *cls_g[] = {"[ab]", "[^a]", "[a-c]", "[b]"};
    static const char *cls_r[] = {"[ab]", "[bc]", "[a-c]", "[b]"}; /* [^a] over {a,b,c} */
    char g[64];
    switch (k) {
    case 0: case 1: {
        const char *l = lits[rnd(s, 6)];
        snprintf(g, sizeof g, "\"%s\"", l);
        emit(s, g, l);
        break;
    }
    case 2: {
        unsigned c = rnd(s, 4);
        emit(s, cls_g[c], cls_r[c]);
        break;
    }
    case 3: case 4: { /* sequence of 2-3 */
        emit(s, "(", "(");
        unsigned n = 2 + rnd(s, 2);
        for (unsigned i = 0; i < n; i++) {
            if (i) emit(s, " ", "");
            gen_expr(s, depth + 1);
        }
        emit(s, ")", ")");
        break;
    }
    case 5: { /* alternatives */
        emit(s, "(", "(");
        unsigned n = 2 + rnd(s, 2);
        for (unsigned i = 0; i < n; i++) {
            if (i) emit(s, " | ", "|");
            gen_expr(s, depth + 1);
        }
        emit(s, ")", ")");
        break;
    }
    default: { /* repetition */
        emit(s, "(", "(");
        gen_expr(s, depth + 1);
        emit(s, ")", ")");
        static const char *ops[] = {"*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"};
        const char *op = ops[rnd(s, 7)];
        emit(s, op, op);
        break;
    }
    }
}

TEST(grammar_matches_regex_on_random_regular_grammars) {
    struct grammar_vocab *v = byte_vocab();
    struct gen s = {.rng = 0x1234567};
    int checked = 0, in_lang = 0;
    for (int round = 0; round < 300; round++) {
        s.gn = s.rn = 0;
        emit(&s, "root ::= ", "^(");
        gen_expr(&s, 0);
        emit(&s, "\n", ")$");
        s.gbnf[s.gn] = 0;
        s.re[s.rn] = 0;
        regex_t re;
        CHECK(regcomp(&re, s.re, REG_EXTENDED | REG_NOSUB) == 0);
        struct grammar *g = compile(v, s.gbnf);
        CHECK(g);
        for (int k = 0; k < 60; k++) {
            char str[12];
            unsigned n = rnd(&s, 9);
            for (unsigned i = 0; i < n; i++) str[i] = (char)('a' + rnd(&s, 3));
            str[n] = 0;
            bool want = regexec(&re, str, 0, NULL, 0) == 0;
            int got = M(g, str);
            if ((got == 1) != want) {
                fprintf(stderr, "  grammar %s regex %s string \"%s\": got %d\n", s.gbnf, s.re, str, got);
                t->failed = 1;
                return;
            }
            checked++;
            in_lang += want;
        }
        grammar_unref(g);
        regfree(&re);
    }
    CHECK(checked == 300 * 60);
    CHECK(in_lang > 500); /* the strings do hit the languages */
    grammar_vocab_free(v);
}

TEST(grammar_utf8_across_tokens) {
    /* "é" is C3 A9, "€" is E2 82 AC; tokens split them */
    const char *extra[] = {"\xc3", "\xa9", "\xe2\x82", "\xac!", "a\xc3"};
    struct grammar_vocab *v = make_vocab(extra, NULL, 5);
    struct grammar *g = compile(v, "root ::= [a-z\\u00e9\\u20ac]+ \"!\"\n");
    CHECK(g);
    struct grammar_state *st;
    CHECK(grammar_state_create(&st, g) == 0);
    CHECK(grammar_state_accept(st, 256 + 4) == 0); /* a + first byte of é */
    size_t words = grammar_mask_words(v);
    uint64_t *m = calloc(words, 8);
    CHECK(grammar_state_mask(st, m) > 0);
    CHECK(((m[0xa9 >> 6] >> (0xa9 & 63)) & 1) == 1);  /* the byte that completes é */
    CHECK(((m['a' >> 6] >> ('a' & 63)) & 1) == 0);    /* not a new character */
    CHECK(((m[(256 + 1) >> 6] >> ((256 + 1) & 63)) & 1) == 1);
    CHECK(grammar_state_accept(st, 'a') == -ERR_INVAL);
    CHECK(grammar_state_accept(st, 256 + 1) == 0);
    CHECK(grammar_state_accept(st, 256 + 2) == 0); /* E2 82 */
    CHECK(grammar_state_mask(st, m) > 0);
    CHECK(((m[(256 + 3) >> 6] >> ((256 + 3) & 63)) & 1) == 1); /* AC ! completes € and the grammar */
    CHECK(((m[0xbf >> 6] >> (0xbf & 63)) & 1) == 0);             /* E2 82 BF is not in the class */
    CHECK(grammar_state_accept(st, 256 + 3) == 0);
    CHECK(grammar_state_complete(st));
    free(m);
    grammar_state_free(st);
    grammar_unref(g);
    /* a negated class accepts every other character, never a broken one */
    g = compile(v, "root ::= [^\"]\n");
    CHECK_EQ_INT(M(g, "\xc3\xa9"), 1);
    CHECK_EQ_INT(M(g, "\xf0\x9f\x98\x80"), 1);
    CHECK_EQ_INT(M(g, "\xed\xa0\x80"), -1); /* a surrogate */
    CHECK_EQ_INT(M(g, "\xc0\x80"), -1);     /* overlong */
    CHECK_EQ_INT(M(g, "\xf4\x90\x80\x80"), -1); /* past U+10FFFF */
    CHECK_EQ_INT(M(g, "\""), -1);
    grammar_unref(g);
    grammar_vocab_free(v);
}

static bool bit(const uint64_t *m, int32_t i) { return (m[i >> 6] >> (i & 63)) & 1; }

TEST(grammar_control_and_eog_tokens) {
    const char *extra[] = {"<|im_end|>", "<tool>", "</s>", "hi"};
    uint8_t kinds[] = {GRAMMAR_TOKEN_CONTROL, GRAMMAR_TOKEN_CONTROL, GRAMMAR_TOKEN_EOG, GRAMMAR_TOKEN_TEXT};
    struct grammar_vocab *v = make_vocab(extra, kinds, 4);
    int32_t im_end = 256, tool = 257, eos = 258, hi = 259;
    size_t words = grammar_mask_words(v);
    uint64_t *m = calloc(words, 8);
    /* the literal names <tool>, so that control token may be used; <|im_end|> is not named */
    struct grammar *g = compile(v, "root ::= \"hi\" \"<tool>\"?\n");
    struct grammar_state *st;
    CHECK(grammar_state_create(&st, g) == 0);
    CHECK(grammar_state_mask(st, m) == 2); /* "h" and "hi" */
    CHECK(bit(m, hi) && bit(m, 'h') && !bit(m, eos));
    CHECK(grammar_state_accept(st, eos) == -ERR_INVAL);
    CHECK(grammar_state_accept(st, hi) == 0);
    CHECK(grammar_state_mask(st, m) > 0);
    CHECK(bit(m, tool) && bit(m, eos) && bit(m, '<') && !bit(m, im_end));
    CHECK(grammar_state_accept(st, im_end) == -ERR_INVAL);
    struct grammar_state *fork;
    CHECK(grammar_state_clone(&fork, st) == 0);
    CHECK(grammar_state_accept(st, tool) == 0);
    CHECK(grammar_state_mask(st, m) == 1 && bit(m, eos)); /* complete: only end of generation */
    CHECK(grammar_state_accept(st, eos) == 0);
    CHECK(grammar_state_accept(fork, eos) == 0); /* the fork is still after "hi" */
    CHECK(grammar_state_accept(fork, '<') == 0);
    CHECK(!grammar_state_complete(fork));
    grammar_state_free(fork);
    grammar_state_free(st);
    grammar_unref(g);
    free(m);
    grammar_vocab_free(v);
}

/* Masks against a brute force: every token tried on a copy of the state. */
TEST(grammar_mask_matches_brute_force) {
    const char *extra[] = {"{\"", "\":", "\",", "\"}", "true", "tr", "ue,", "12", "3.5", " {", "\"a\"",
                           "}}", "[]", "[1,", "null", "\xc3\xa9", "\xc3", "\"\xc3", "ab\"", "\"\n", "\\n", "\\u00"};
    int32_t n_extra = (int32_t)(sizeof extra / sizeof *extra);
    struct grammar_vocab *v = make_vocab(extra, NULL, n_extra);
    int32_t n = 256 + n_extra;
    const char *json =
        "root ::= (value \";\")*\n"
        "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
        "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n"
        "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n"
        "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))* \"\\\"\" ws\n"
        "number ::= \"-\"? [0-9]+ (\".\" [0-9]+)? ws\n"
        "ws ::= [ \\t\\n]{0,3}\n";
    struct grammar *g = compile(v, json);
    CHECK(g);
    size_t words = grammar_mask_words(v);
    uint64_t *m = calloc(words, 8);
    uint64_t rng = 77;
    int steps = 0;
    for (int run = 0; run < 20; run++) {
        struct grammar_state *st;
        CHECK(grammar_state_create(&st, g) == 0);
        for (int k = 0; k < 60; k++) {
            int32_t count = grammar_state_mask(st, m);
            CHECK(count >= 0);
            int32_t brute = 0, pick = -1, seen = 0;
            for (int32_t tok = 0; tok < n; tok++) {
                struct grammar_state *c;
                CHECK(grammar_state_clone(&c, st) == 0);
                bool ok = grammar_state_accept(c, tok) == 0;
                grammar_state_free(c);
                if (ok != bit(m, tok)) {
                    fprintf(stderr, "  run %d step %d token %d: mask %d, brute force %d\n", run, k, tok, bit(m, tok), ok);
                    t->failed = 1;
                    return;
                }
                if (ok) {
                    brute++;
                    /* prefer multi-byte tokens now and then so the runs go somewhere */
                    if (test_urand(&rng) * (float)++seen < 1.0f || (tok >= 256 && test_urand(&rng) < 0.3f)) pick = tok;
                }
            }
            CHECK_EQ_INT(count, brute);
            steps++;
            if (pick < 0) break;
            CHECK(grammar_state_accept(st, pick) == 0);
        }
        grammar_state_free(st);
    }
    CHECK(steps > 200);
    free(m);
    grammar_unref(g);
    grammar_vocab_free(v);
}

TEST(grammar_cache_shares_by_text_and_evicts) {
    struct grammar_vocab *v = byte_vocab();
    struct grammar_cache *c;
    CHECK(grammar_cache_create(&c, v, 2) == 0);
    struct grammar *a, *b, *a2, *x;
    char why[128];
    CHECK(grammar_cache_get(c, "root ::= \"a\"\n", 13, &a, why, sizeof why) == 0);
    CHECK(grammar_cache_get(c, "root ::= \"a\"\n", 13, &a2, why, sizeof why) == 0);
    CHECK(a == a2);
    CHECK(grammar_cache_get(c, "root ::= \"b\"\n", 13, &b, why, sizeof why) == 0);
    CHECK(a != b);
    CHECK(grammar_cache_get(c, "root ::= \"c\"\n", 13, &x, why, sizeof why) == 0); /* evicts "a" */
    CHECK_EQ_INT(M(a, "a"), 1); /* still alive: the caller's reference */
    CHECK(grammar_cache_get(c, "root ::= q\n", 10, &x, why, sizeof why) == -ERR_INVAL);
    CHECK(strstr(why, "undefined rule 'q'"));
    grammar_unref(a);
    grammar_unref(a2);
    grammar_unref(b);
    grammar_cache_free(c);
    grammar_unref(x);
    grammar_vocab_free(v);
}

/* grammar_cache_find never compiles (the loop's lookup); grammar_cache_get from several threads at
 * once compiles the text and all of them, and later finds, get the one grammar kept. */
struct cache_race {
    struct grammar_cache *c;
    const char *text;
    struct grammar *got;
    int rc;
};

static void *cache_race_get(void *arg) {
    struct cache_race *r = arg;
    char why[128];
    r->rc = grammar_cache_get(r->c, r->text, strlen(r->text), &r->got, why, sizeof why);
    return NULL;
}

TEST(grammar_cache_find_never_compiles_and_gets_share_across_threads) {
    struct grammar_vocab *v = byte_vocab();
    struct grammar_cache *c;
    CHECK(grammar_cache_create(&c, v, 4) == 0);
    static const char text[] = "root ::= [a-z]+ \"!\"\n";
    struct grammar_budget_stats before, after;
    grammar_budget_get(&before);
    struct grammar *g = NULL;
    CHECK_EQ_INT(grammar_cache_find(c, text, strlen(text), &g), -ERR_NOTFOUND);
    CHECK(g == NULL);
    CHECK_EQ_INT(grammar_cache_find(c, "root ::= q\n", 10, &g), -ERR_NOTFOUND); /* not even parsed */
    grammar_budget_get(&after);
    CHECK_EQ_INT(after.grammars, before.grammars); /* nothing compiled */

    enum { N = 4 };
    struct cache_race r[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        r[i] = (struct cache_race){.c = c, .text = text, .rc = -1};
        CHECK(pthread_create(&th[i], NULL, cache_race_get, &r[i]) == 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    CHECK_EQ_INT(grammar_cache_find(c, text, strlen(text), &g), 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(r[i].rc, 0);
        CHECK(r[i].got == g); /* the one kept, whichever thread compiled first */
    }
    CHECK_EQ_INT(M(g, "abc!"), 1);
    CHECK_EQ_INT(M(g, "abc"), 0);
    grammar_budget_get(&after);
    CHECK_EQ_INT(after.grammars, before.grammars + 1); /* the losers' compiles were freed */
    for (int i = 0; i < N; i++) grammar_unref(r[i].got);
    grammar_unref(g);
    grammar_cache_free(c);
    grammar_budget_get(&after);
    CHECK_EQ_INT(after.grammars, before.grammars);
    grammar_vocab_free(v);
}

/* Stacked `?` `*` `+` are the one repetition they amount to (llama.cpp nests them: the same
 * language), compiled as such: no more states than the single operator, whatever the stack. */
TEST(grammar_stacked_postfix_operators_merge) {
    struct grammar_vocab *v = byte_vocab();
    static const struct {
        const char *stacked, *single;
    } cases[] = {
        {"root ::= \"ab\"??\n", "root ::= \"ab\"?\n"},
        {"root ::= \"ab\"*+\n", "root ::= \"ab\"*\n"},
        {"root ::= \"ab\"+++\n", "root ::= \"ab\"+\n"},
        {"root ::= \"ab\"?+\n", "root ::= \"ab\"*\n"},
        {"root ::= \"ab\"+?\n", "root ::= \"ab\"*\n"},
        {"root ::= (\"ab\"?)?\n", "root ::= \"ab\"?\n"},
        {"root ::= \"ab\"{1}?\n", "root ::= \"ab\"?\n"},
        {"root ::= \"ab\"?*?+??*+?+*?++??*?+*?++*?+?*+?++*?*?+?*+?+\n", "root ::= \"ab\"*\n"},
    };
    static const char *const inputs[] = {"", "ab", "abab", "ababab", "a", "abx", "aba"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct grammar *a = compile(v, cases[i].stacked), *b = compile(v, cases[i].single);
        CHECK(a && b);
        if (!a || !b) continue;
        CHECK(grammar_n_states(a) <= grammar_n_states(b));
        for (size_t k = 0; k < sizeof inputs / sizeof *inputs; k++) {
            if (M(a, inputs[k]) != M(b, inputs[k])) fprintf(stderr, "  %s on \"%s\"\n", cases[i].stacked, inputs[k]);
            CHECK_EQ_INT(M(a, inputs[k]), M(b, inputs[k]));
        }
        grammar_unref(a);
        grammar_unref(b);
    }
    /* a counted repetition is not merged: ("ab"{2})? is "" or "abab" */
    struct grammar *g = compile(v, "root ::= \"ab\"{2}?\n");
    CHECK(g);
    CHECK_EQ_INT(M(g, ""), 1);
    CHECK_EQ_INT(M(g, "ab"), 0);
    CHECK_EQ_INT(M(g, "abab"), 1);
    CHECK_EQ_INT(M(g, "ababab"), -1);
    grammar_unref(g);
    grammar_vocab_free(v);
}
