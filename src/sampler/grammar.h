/* grammar.h: constrained decoding. A GBNF grammar (llama.cpp's dialect) compiled against one
 * model's vocabulary; per sequence, the set of tokens the grammar can accept next.
 *
 * GBNF: rules `name ::= alternatives` (names of letters, digits, '-' and '_'), one per line
 * (newlines are allowed after `|` and inside parentheses), the start rule `root`. Alternatives
 * `a | b`, sequences `a b`, groups `( ... )`, postfix `*` `+` `?` `{m}` `{m,}` `{m,n}` `{,n}`
 * (stacked ones nest, as in llama.cpp; stacked `*` `+` `?` compile as the one repetition they
 * amount to: `x?+` as `x*`),
 * string literals "..." and character classes [a-z0-9_] / negated [^"\\] with the escapes
 * \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH (code points, written as UTF-8), `.` (any
 * character), `# comments` to the end of a line. A rule defined twice keeps its last definition.
 * Errors name the line and column: "3:14: undefined rule 'valu'". Refused: left recursion (a
 * rule that can reach itself before matching a byte), repetitions past GRAMMAR_MAX_REPEAT, and
 * grammars over GRAMMAR_MAX_STATES compiled states.
 *
 * Matching is on bytes: every character class is compiled to the UTF-8 byte sequences of its
 * code points (surrogates excluded), so a token that ends inside a character is accepted when some
 * continuation completes it, and the next token must complete it.
 *
 * How a step stays cheap (scripts/bench.d/25-grammar measures it on the 151936-token qwen2
 * vocabulary): the matcher's state is a set of stacks of compiled positions (a pushdown
 * automaton; non-recursive rules are inlined, so stacks only grow at recursive rules). Each
 * distinct set is interned once per grammar as a "configuration" with a lazily filled transition
 * per byte class, which makes the grammar a lazily built DFA over configurations. The vocabulary
 * is a byte trie of the token pieces; a configuration's mask is one walk of the trie that skips
 * every subtree whose prefix the grammar rejects. The walk is done for the configuration's top
 * positions alone (a "local" mask, shared by every stack those positions sit on); tokens that
 * run past the end of the top rule are then walked from the real stacks. Masks are kept (FIFO,
 * GRAMMAR_MAX_MASKS of each kind per grammar, and within the process's memory budget below; as
 * token ids when few tokens are allowed, as a bitset otherwise) for the next time any sequence
 * reaches that configuration. A configuration the grammar has not seen costs one walk: 1-5 ms
 * on a 151936-token vocabulary when most tokens are allowed (inside a string), microseconds
 * otherwise; a cached one the copy of its mask.
 * Counted repetitions: X{m,n} compiles to n copies of X, so a string's maxLength 40 is 40
 * positions, each with its own mask. The optional copies of an X without rule calls each have a
 * twin in an X* compiled beside them; a token of at most k bytes, k the iterations left, is
 * accepted in a copy exactly when it is in the twin. So a copy's mask is its twin's (one walk
 * for all the copies) cut to the tokens of at most k bytes (a kept bitset per length), plus a
 * walk of the trie's long tokens alone (the subtrees whose tokens are all short skipped).
 * Compiled grammars are shared through struct grammar_cache (keyed by the grammar text, least
 * recently used evicted).
 *
 * Work per call: an ambiguous grammar's stacks can multiply with every byte (`p ::= . ""{0,6}{5517}
 * p*? p*` doubles them while each walks 33,000 empty positions), and the server masks and accepts
 * on the compute thread, inside a step other sequences share. So every call (grammar_state_create,
 * _mask, _accept, _accept_bytes, and grammar_compile's check of the start) takes at most
 * GRAMMAR_MAX_WORK closure steps and otherwise fails with -ERR_TOOBIG. Real grammars take far
 * fewer: json_object's and a 26,000-state schema's masks on the 151936-token qwen2 vocabulary at
 * most 12,000 (scripts/bench.d/25-grammar).
 *
 * Tokens: text tokens match their bytes; control tokens are never allowed unless their text
 * appears inside one of the grammar's string literals (then they match that text); end-of-
 * generation tokens are allowed exactly when the grammar is complete (root matched whole);
 * tokens with no bytes are never allowed.
 *
 * Threads: a compiled grammar's caches are shared by every sequence using it and guarded by its
 * mutex, so states of one grammar may be used from different threads. One state is used by one
 * thread at a time. Refcounts are atomic.
 *
 *   struct grammar_vocab *v;                          // once per model
 *   grammar_vocab_create(&v, n_vocab, pieces, lens, kinds);
 *   struct grammar *g;  char why[256];
 *   if (grammar_compile(&g, v, text, len, why, sizeof why) < 0) ... 400 with why ...
 *   struct grammar_state *st;
 *   grammar_state_create(&st, g);                     // per sequence; grammar_state_clone to fork
 *   uint64_t *allow = malloc(grammar_mask_words(v) * 8);
 *   grammar_state_mask(st, allow);                    // bit i of allow[i / 64]: token i allowed
 *   ... pick tok among allowed ...
 *   grammar_state_accept(st, tok);                    // then mask again
 *   grammar_state_free(st); grammar_unref(g); grammar_vocab_free(v);
 */
#ifndef UVLM_SAMPLER_GRAMMAR_H
#define UVLM_SAMPLER_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRAMMAR_MAX_STATES (1 << 20) /* compiled positions of one grammar */
#define GRAMMAR_MAX_REPEAT 10000     /* m and n of {m,n} */
#define GRAMMAR_MAX_MASKS 1024       /* kept masks per grammar, of each kind (n_vocab / 8 bytes each, allocated as used) */
#define GRAMMAR_MAX_DEPTH 1024       /* nesting of recursive rules a sequence may reach */
#define GRAMMAR_MAX_WORK (1 << 18)   /* closure steps one call may take: 20-40 ms (see "Work per call") */
#define GRAMMAR_BUDGET_DEFAULT (256ll << 20) /* bytes, until grammar_budget_set */

/* How a token takes part in matching (grammar_vocab_create's kinds). */
enum grammar_token_kind {
    GRAMMAR_TOKEN_NONE = 0, /* never allowed (no bytes, unused, unknown) */
    GRAMMAR_TOKEN_TEXT,     /* its bytes are text */
    GRAMMAR_TOKEN_CONTROL,  /* allowed only when the grammar's literals name its text */
    GRAMMAR_TOKEN_EOG,      /* end of generation: allowed when the grammar is complete */
};

struct grammar_vocab;
struct grammar;
struct grammar_state;
struct grammar_cache;

/* The vocabulary's trie. pieces[i][0..lens[i]) is token i's text (its bytes for TEXT, the text
 * a grammar literal must contain for CONTROL; ignored for NONE and EOG); everything is copied.
 * 0, -ERR_INVAL or -ERR_NOMEM. */
int grammar_vocab_create(struct grammar_vocab **out, int32_t n_vocab, const char *const *pieces,
                         const uint32_t *lens, const uint8_t *kinds);
void grammar_vocab_free(struct grammar_vocab *v);
/* uint64_t words of a mask: (n_vocab + 63) / 64. */
size_t grammar_mask_words(const struct grammar_vocab *v);
int32_t grammar_vocab_n_vocab(const struct grammar_vocab *v);
/* Trie nodes (for the benchmark's report). */
int32_t grammar_vocab_nodes(const struct grammar_vocab *v);

/* Compile text[0..len) for vocabulary v (which must outlive the grammar). 0 and *out (refcount
 * 1), or -ERR_INVAL with why = "LINE:COL: what" (or a whole-grammar reason), -ERR_TOOBIG (over
 * GRAMMAR_MAX_STATES; why says so), -ERR_NOMEM. */
int grammar_compile(struct grammar **out, const struct grammar_vocab *v, const char *text, size_t len,
                    char *why, size_t why_len);
void grammar_ref(struct grammar *g);
void grammar_unref(struct grammar *g);
/* Compiled positions (for the benchmark's report). */
int32_t grammar_n_states(const struct grammar *g);
/* Bytes g holds now (its program, matcher tables and kept masks), as the memory budget counts them. */
int64_t grammar_memory(struct grammar *g);

/* A state at the grammar's start (holds a reference to g). 0, -ERR_NOMEM. */
int grammar_state_create(struct grammar_state **out, struct grammar *g);
/* An independent copy (an n-choice fork). 0, -ERR_NOMEM. */
int grammar_state_clone(struct grammar_state **out, const struct grammar_state *st);
void grammar_state_free(struct grammar_state *st);
/* Fill allow[grammar_mask_words] with the tokens the grammar accepts next (EOG ones when
 * complete). Returns the number of allowed tokens (0: nothing can follow, which a grammar
 * reaching a dead end by GRAMMAR_MAX_DEPTH can do), or -ERR_NOMEM / -ERR_TOOBIG (the state's
 * stacks outgrew the matcher's bounds, or the call its GRAMMAR_MAX_WORK: an ambiguous grammar;
 * the state is dead then, and every later call fails). */
int32_t grammar_state_mask(struct grammar_state *st, uint64_t *allow);
/* Advance by a token: 0, or -ERR_INVAL when the grammar does not accept it here (the state is
 * then unchanged), -ERR_NOMEM / -ERR_TOOBIG as above. An EOG token is accepted only when the
 * grammar is complete, and leaves the state as it was. */
int grammar_state_accept(struct grammar_state *st, int32_t token);
/* Advance by raw bytes (tests, and text a caller forces): 0 or -ERR_INVAL (unchanged),
 * -ERR_NOMEM / -ERR_TOOBIG as above. */
int grammar_state_accept_bytes(struct grammar_state *st, const char *bytes, size_t len);
/* Has root matched whole (may the sequence end here)? */
bool grammar_state_complete(const struct grammar_state *st);

/* The memory budget: one byte limit for everything the process's compiled grammars keep (their
 * programs, the matchers' tables, the kept masks). Each mask or accept call brings the count up to
 * date and, over the limit, drops kept masks down to three quarters of it: the least recently
 * used grammar's first, and in it the least recently used mask first; if the tables alone still
 * pass that, a grammar's tables are released too (its live states are saved and carry on). A
 * grammar another thread is in is passed over; a call may pass the limit by what it allocates
 * itself until it returns. grammar_cache_get also evicts compiled grammars while over the limit.
 * Set once at startup (the server sizes it from the available memory and logs it). */
struct grammar_budget_stats {
    int64_t limit, used;    /* bytes */
    uint64_t evicted_masks; /* masks dropped over the limit, since the start */
    uint64_t released;      /* grammars' tables released over the limit, since the start */
    int32_t grammars;       /* compiled grammars alive */
};
void grammar_budget_set(int64_t bytes);
void grammar_budget_get(struct grammar_budget_stats *out);

/* Compiled grammars by text, least recently used evicted beyond cap. Thread-safe (a mutex that
 * is never held while compiling): the server's loop thread looks up with grammar_cache_find,
 * which never compiles, and on a miss compiles on its thread pool with grammar_cache_get, so a
 * grammar slow to compile never stalls the loop.
 *
 *   struct grammar *g;
 *   if (grammar_cache_find(c, text, len, &g) == 0) ... use g at once ...
 *   else ... on another thread: grammar_cache_get(c, text, len, &g, why, sizeof why) ...
 *   grammar_unref(g);
 */
int grammar_cache_create(struct grammar_cache **out, const struct grammar_vocab *v, int32_t cap);
void grammar_cache_free(struct grammar_cache *c);
/* A reference to the compiled text (the caller unrefs it), never compiling: 0, or -ERR_NOTFOUND
 * when it is not in the cache. Cheap (a scan of at most cap texts). */
int grammar_cache_find(struct grammar_cache *c, const char *text, size_t len, struct grammar **out);
/* A reference to the compiled text (the caller unrefs it), compiled on a miss (then kept):
 * grammar_compile's returns. Two threads compiling the same text both return the one kept. Over
 * the memory budget, the least recently used other entries are dropped until it fits (or only
 * this one is left). */
int grammar_cache_get(struct grammar_cache *c, const char *text, size_t len, struct grammar **out, char *why,
                      size_t why_len);

#endif
