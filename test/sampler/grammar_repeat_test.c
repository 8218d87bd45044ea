/* grammar_repeat_test.c: counted repetitions X{m,n} (whose optional copies take their short
 * tokens' mask from an X* twin) at their edges, nested and over UTF-8 classes, their masks against
 * a brute force with tokens longer than the iterations left; and the memory budget filled: masks
 * evicted least recently used first, tables released, cached grammars dropped, results unchanged. */
#include "test.h"

#include "common/err.h"
#include "sampler/grammar.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The 256 single bytes (ids 0..255), then extra text tokens. */
static struct grammar_vocab *vocab_with(const char *const *extra, int32_t n_extra) {
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
        kinds[256 + i] = GRAMMAR_TOKEN_TEXT;
    }
    struct grammar_vocab *v = NULL;
    int rc = grammar_vocab_create(&v, n, pieces, lens, kinds);
    free(pieces);
    free(lens);
    free(kinds);
    return rc ? NULL : v;
}

static struct grammar *comp(struct grammar_vocab *v, const char *text) {
    struct grammar *g = NULL;
    char why[256];
    if (grammar_compile(&g, v, text, strlen(text), why, sizeof why)) fprintf(stderr, "  compile failed: %s\n", why);
    return g;
}

/* 1: in the language, 0: a viable prefix, -1: refused. */
static int in_lang(struct grammar *g, const char *s) {
    struct grammar_state *st;
    if (grammar_state_create(&st, g)) return -2;
    int r = grammar_state_accept_bytes(st, s, strlen(s));
    int res = r ? -1 : grammar_state_complete(st) ? 1 : 0;
    grammar_state_free(st);
    return res;
}

static bool has(const uint64_t *m, int32_t i) { return (m[i >> 6] >> (i & 63)) & 1; }

TEST(grammar_repeat_edges) {
    struct grammar_vocab *v = vocab_with(NULL, 0);
    CHECK(v);
    struct grammar *g = comp(v, "root ::= \"<\" [a-c]{2,5} \">\"\n");
    CHECK(g);
    CHECK_EQ_INT(in_lang(g, "<a>"), -1);      /* below m */
    CHECK_EQ_INT(in_lang(g, "<ab>"), 1);      /* exactly m */
    CHECK_EQ_INT(in_lang(g, "<abcab>"), 1);   /* exactly n */
    CHECK_EQ_INT(in_lang(g, "<abcabc"), -1);  /* n + 1 refused */
    CHECK_EQ_INT(in_lang(g, "<abca"), 0);
    grammar_unref(g);
    /* {0,n} and {n}: nothing, exactly n, n + 1 */
    g = comp(v, "root ::= [0-9]{0,3} \";\" [x]{3}\n");
    CHECK(g);
    CHECK_EQ_INT(in_lang(g, ";xxx"), 1);
    CHECK_EQ_INT(in_lang(g, "123;xxx"), 1);
    CHECK_EQ_INT(in_lang(g, "1234"), -1);
    CHECK_EQ_INT(in_lang(g, "12;xx"), 0);
    CHECK_EQ_INT(in_lang(g, "12;xxxx"), -1);
    grammar_unref(g);
    /* nested: groups of a letter and up to three digits, one to four of them */
    g = comp(v, "root ::= (\"x\" [0-9]{0,3}){1,4} \".\"\n");
    CHECK(g);
    CHECK_EQ_INT(in_lang(g, "x."), 1);
    CHECK_EQ_INT(in_lang(g, "x123x1xx."), 1);
    CHECK_EQ_INT(in_lang(g, "x1234"), -1);
    CHECK_EQ_INT(in_lang(g, "xxxx."), 1);
    CHECK_EQ_INT(in_lang(g, "xxxxx"), -1);
    CHECK_EQ_INT(in_lang(g, "."), -1);
    grammar_unref(g);
    /* UTF-8: a character of 2, 3 or 4 bytes is one iteration */
    g = comp(v, "root ::= \"'\" [^'\\x00-\\x1f]{1,3} \"'\"\n");
    CHECK(g);
    CHECK_EQ_INT(in_lang(g, "'\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80'"), 1); /* é € 😀: exactly 3 */
    CHECK_EQ_INT(in_lang(g, "'\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc3"), -1);
    CHECK_EQ_INT(in_lang(g, "'\xc3\xa9'"), 1);
    CHECK_EQ_INT(in_lang(g, "'\xc3"), 0);   /* inside a character */
    CHECK_EQ_INT(in_lang(g, "''"), -1);
    CHECK_EQ_INT(in_lang(g, "'\xc3'"), -1); /* a cut character is not one */
    grammar_unref(g);
    grammar_vocab_free(v);
}

/* Masks against a brute force over a vocabulary whose tokens run past the iterations left. */
TEST(grammar_repeat_masks_match_brute_force) {
    static char a33[34], a36[37], a45[46];
    memset(a33, 'a', 33), memset(a36, 'a', 36), memset(a45, 'a', 45);
    const char *extra[] = {"aa", "aaa", "aaaa", "aaaaa", "aaaaaaaa", "ab\"", "abc\",", "\",\"", "\"}", "\xc3\xa9\xc3\xa9",
                           "\xc3\xa9", "a\xc3", "\xa9z", "\\u00", "\\n", "12", "1234", "123456", "x1", "x12x", "--",
                           "a-b", "ab-", "é-", a33, a36, a45, "zz\"", "\"a", "aaaaaaaaaaaa\"", "\\u00e9\\u00e9"};
    int32_t n_extra = (int32_t)(sizeof extra / sizeof *extra), n = 256 + n_extra;
    struct grammar_vocab *v = vocab_with(extra, n_extra);
    CHECK(v);
    const char *grammars[] = {
        /* a JSON string of at most 7 characters (escapes as json_schema writes them), then more */
        "root ::= \"{\" (\"\\\"\" char{0,7} \"\\\"\" (\",\" \"\\\"\" [a-z]{1,5} \"\\\"\")*) \"}\"\n"
        "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n",
        /* nested counts, and one of more than 32 iterations (the long-token path) */
        "root ::= ([a-z]{0,3} \"-\"){0,3} [a-z]{2,40} (\"\\\"\" | \"x\" [0-9]{0,5})*\n",
        /* optional copies holding a recursive rule: no twins there */
        "root ::= (p [0-9]{0,2}){0,4} \";\"\np ::= \"x\" | \"(\" p \")\"\n",
    };
    size_t words = grammar_mask_words(v);
    uint64_t *m = calloc(words, 8);
    uint64_t rng = 5;
    int steps = 0;
    for (size_t gi = 0; gi < sizeof grammars / sizeof *grammars; gi++) {
        struct grammar *g = comp(v, grammars[gi]);
        CHECK(g);
        for (int run = 0; run < 30; run++) {
            struct grammar_state *st;
            CHECK(grammar_state_create(&st, g) == 0);
            for (int k = 0; k < 80; k++) {
                int32_t count = grammar_state_mask(st, m);
                CHECK(count >= 0);
                int32_t brute = 0, pick = -1, seen = 0;
                for (int32_t tok = 0; tok < n; tok++) {
                    struct grammar_state *c;
                    CHECK(grammar_state_clone(&c, st) == 0);
                    bool ok = grammar_state_accept(c, tok) == 0;
                    grammar_state_free(c);
                    if (ok != has(m, tok)) {
                        fprintf(stderr, "  grammar %zu run %d step %d token %d: mask %d, brute force %d\n", gi, run, k, tok,
                                has(m, tok), ok);
                        t->failed = 1;
                        return;
                    }
                    if (ok) {
                        brute++;
                        if (test_urand(&rng) * (float)++seen < 1.0f || (tok >= 256 && test_urand(&rng) < 0.4f)) pick = tok;
                    }
                }
                CHECK_EQ_INT(count, brute);
                steps++;
                if (pick < 0) break;
                CHECK(grammar_state_accept(st, pick) == 0);
            }
            grammar_state_free(st);
        }
        grammar_unref(g);
    }
    CHECK(steps > 1000);
    free(m);
    grammar_vocab_free(v);
}

/* Random letter tokens, so that masks are bitsets worth keeping. */
static struct grammar_vocab *letter_vocab(int32_t n_extra, char **store) {
    const char **extra = malloc((size_t)n_extra * sizeof *extra);
    uint64_t rng = 11;
    for (int32_t i = 0; i < n_extra; i++) {
        int len = 2 + (int)(test_urand(&rng) * 6);
        char *p = store[i] = malloc((size_t)len + 1);
        for (int k = 0; k < len; k++) p[k] = (char)('a' + (int)(test_urand(&rng) * 26) % 26);
        p[len] = 0;
        extra[i] = p;
    }
    struct grammar_vocab *v = vocab_with(extra, n_extra);
    free(extra);
    return v;
}

/* Walks n_steps tokens of g (masks computed, a random allowed token taken; from the start again
 * where nothing is allowed); the budget's use checked after each mask. Returns the steps taken, -1 on an error. */
static int drive(struct test_case *t, struct grammar *g, size_t words, int n_steps, uint64_t *rng, int64_t limit) {
    uint64_t *m = calloc(words, 8);
    struct grammar_state *st = NULL;
    int done = 0;
    for (int k = 0; k < n_steps; k++) {
        if (!st && grammar_state_create(&st, g)) break;
        int32_t count = grammar_state_mask(st, m);
        struct grammar_budget_stats bs;
        grammar_budget_get(&bs);
        if (count < 0 || bs.used > limit) {
            fprintf(stderr, "  step %d: count %d, %lld bytes used of %lld\n", k, count, (long long)bs.used, (long long)limit);
            t->failed = 1;
            break;
        }
        int32_t pick = -1, seen = 0;
        for (size_t w = 0; w < words; w++)
            for (uint64_t b = m[w]; b; b &= b - 1)
                if (test_urand(rng) * (float)++seen < 1.0f) pick = (int32_t)(w * 64 + (size_t)__builtin_ctzll(b));
        if (pick >= 0 && grammar_state_accept(st, pick) < 0) {
            fprintf(stderr, "  step %d: allowed token %d refused\n", k, pick);
            t->failed = 1;
            break;
        }
        if (pick < 0) {
            grammar_state_free(st);
            st = NULL;
        }
        done++;
    }
    grammar_state_free(st);
    free(m);
    return done;
}

TEST(grammar_budget_fills_and_evicts) {
    enum { N_EXTRA = 6000 };
    char *store[N_EXTRA];
    struct grammar_vocab *v = letter_vocab(N_EXTRA, store);
    CHECK(v);
    size_t words = grammar_mask_words(v);
    /* every position of each a distinct broad mask */
    const char *ta = "root ::= ([a-m] [a-z]{0,6} \" \"){0,60}\n", *tb = "root ::= ([n-z] [a-z]{0,6} \".\"){0,60}\n";
    struct grammar *a = comp(v, ta), *b = comp(v, tb);
    CHECK(a && b);
    struct grammar_budget_stats s0, s1, s2;
    grammar_budget_get(&s0);
    int64_t limit = s0.used + (int64_t)(300 * words * 8); /* the programs plus about 300 masks */
    grammar_budget_set(limit);
    uint64_t rng = 3;
    CHECK(drive(t, a, words, 600, &rng, limit) == 600);
    int64_t a_full = grammar_memory(a);
    CHECK(drive(t, b, words, 600, &rng, limit) == 600);
    grammar_budget_get(&s1);
    CHECK(s1.evicted_masks > s0.evicted_masks); /* the budget filled */
    CHECK(s1.used <= limit);
    /* a was used least recently: its masks went first */
    CHECK(grammar_memory(a) < a_full);
    CHECK(grammar_memory(b) > grammar_memory(a));
    /* answers do not change: a's language still holds after its masks went */
    CHECK_EQ_INT(in_lang(a, "abc dz "), 1);
    CHECK_EQ_INT(in_lang(a, "nbc "), -1);
    CHECK_EQ_INT(in_lang(b, "nabcdef."), 1);
    CHECK_EQ_INT(in_lang(b, "nabcdefgh."), -1);

    /* a budget below the tables themselves: they are released, live states carry on */
    struct grammar_state *st;
    CHECK(grammar_state_create(&st, a) == 0);
    CHECK(grammar_state_accept_bytes(st, "abc d", 5) == 0);
    grammar_budget_set(s0.used / 2);
    uint64_t *m = calloc(words, 8);
    CHECK(grammar_state_mask(st, m) > 0);
    grammar_budget_get(&s2);
    CHECK(s2.released > s1.released);
    CHECK(has(m, 'e') && has(m, ' ') && !has(m, '.'));
    CHECK(grammar_state_accept_bytes(st, "ef ", 3) == 0);
    CHECK(grammar_state_complete(st));
    CHECK(grammar_state_accept_bytes(st, ".", 1) == -ERR_INVAL);
    grammar_state_free(st);
    free(m);

    /* the cache of compiled grammars drops the least recently used over the budget */
    struct grammar_cache *c;
    CHECK(grammar_cache_create(&c, v, 8) == 0);
    struct grammar *x1, *x2, *x3;
    char why[128];
    grammar_budget_set(GRAMMAR_BUDGET_DEFAULT);
    CHECK(grammar_cache_get(c, ta, strlen(ta), &x1, why, sizeof why) == 0);
    CHECK(grammar_cache_get(c, tb, strlen(tb), &x2, why, sizeof why) == 0);
    grammar_budget_set(1); /* every other entry goes with the next miss */
    CHECK(grammar_cache_get(c, "root ::= \"q\"\n", 13, &x3, why, sizeof why) == 0);
    grammar_budget_set(GRAMMAR_BUDGET_DEFAULT);
    struct grammar *y1;
    CHECK(grammar_cache_get(c, ta, strlen(ta), &y1, why, sizeof why) == 0);
    CHECK(y1 != x1); /* compiled again: it had been dropped */
    CHECK_EQ_INT(in_lang(x1, "a "), 1); /* the caller's reference kept it alive */
    grammar_unref(x1);
    grammar_unref(x2);
    grammar_unref(x3);
    grammar_unref(y1);
    grammar_cache_free(c);

    grammar_unref(a);
    grammar_unref(b);
    grammar_budget_get(&s2);
    CHECK_EQ_INT((int)s2.grammars, (int)s0.grammars - 2);
    grammar_vocab_free(v);
    for (int i = 0; i < N_EXTRA; i++) free(store[i]);
}

struct worker {
    struct test_case *t;
    struct grammar *g;
    size_t words;
    int done;
};

static void *work(void *p) {
    struct worker *w = p;
    uint64_t rng = (uint64_t)(uintptr_t)w->g;
    w->done = drive(w->t, w->g, w->words, 400, &rng, INT64_MAX);
    return NULL;
}

/* Two threads, two grammars, a budget they pass at every step: each evicts the other's masks
 * (when it is not in a call) and its own, and neither's answers change (drive checks that every
 * allowed token is accepted). */
TEST(grammar_budget_shared_by_threads) {
    enum { N_EXTRA = 3000 };
    char *store[N_EXTRA];
    struct grammar_vocab *v = letter_vocab(N_EXTRA, store);
    CHECK(v);
    size_t words = grammar_mask_words(v);
    struct grammar *a = comp(v, "root ::= ([a-m] [a-z]{0,6} \" \"){0,60}\n"), *b = comp(v, "root ::= ([n-z] [a-z]{0,6} \".\"){0,60}\n");
    CHECK(a && b);
    struct grammar_budget_stats s0, s1;
    grammar_budget_get(&s0);
    grammar_budget_set(s0.used + (int64_t)(20 * words * 8));
    struct worker wa = {t, a, words, 0}, wb = {t, b, words, 0};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, work, &wa) == 0);
    CHECK(pthread_create(&tb, NULL, work, &wb) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    grammar_budget_set(GRAMMAR_BUDGET_DEFAULT);
    grammar_budget_get(&s1);
    CHECK_EQ_INT(wa.done, 400);
    CHECK_EQ_INT(wb.done, 400);
    CHECK(s1.evicted_masks > s0.evicted_masks);
    CHECK_EQ_INT(in_lang(a, "abc dz "), 1);
    CHECK_EQ_INT(in_lang(b, "nabcdef."), 1);
    grammar_unref(a);
    grammar_unref(b);
    grammar_vocab_free(v);
    for (int i = 0; i < N_EXTRA; i++) free(store[i]);
}
