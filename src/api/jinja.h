/* jinja.h: a Jinja template engine for chat templates: the text a model ships in
 * `tokenizer.chat_template`, run as a program.
 *
 * The language is the subset real chat templates use: {{ }} output, {% %} statements, {# #}
 * comments, whitespace control with '-' (and trim_blocks + lstrip_blocks always on, as chat
 * templates are written for); set (also `set ns.attr =`, tuple targets and block set), if / elif /
 * else, for (loop.index, index0, revindex, revindex0, first, last, length, previtem, nextitem;
 * `for x in xs if cond`; else; break / continue), macro (defaults, keyword arguments, call blocks),
 * filter blocks, raw, do; expressions with Jinja2's precedence: literals, lists, tuples, dicts,
 * attribute / item / slice access ([a:b:c], [::-1]), calls, filters, tests (`is [not] name`),
 * ~ + - * / // % **, comparisons (chained), in / not in, and / or / not, x if c else y.
 * Filters: abs attr capitalize count d default dictsort e escape first float format from_json
 * indent int items join last length list lower map max min reject rejectattr replace reverse round
 * safe select selectattr sort string sum title tojson trim unique upper wordcount. Tests: boolean
 * callable defined divisibleby eq equalto escaped even false float ge gt in integer iterable le
 * lower lt mapping ne none number odd sameas sequence string true undefined upper (and == != < <=
 * > >=). Methods of strings (strip lstrip rstrip split rsplit splitlines startswith endswith upper
 * lower title capitalize replace find rfind count join format isdigit isalpha isalnum isspace
 * islower isupper), lists (append pop insert extend index count remove reverse copy) and dicts
 * (get items keys values pop update copy setdefault). Globals: range, dict, namespace,
 * raise_exception(msg) (ends the render with msg), strftime_now(fmt) (the render's clock, local
 * time). Values print as Python prints them (None, True, ['a', 1], 1.0); tojson is Python's
 * json.dumps: keys in insertion order, ", " and ": " on one line, indent=N, non-ASCII kept
 * unless ensure_ascii=true. An undefined name, key or attribute is falsy, prints as "" and gives
 * undefined again when read further (lenient: a template probing optional fields never fails).
 *
 * Safety: any template text and any context may be given. Parsing and rendering never crash;
 * failures are return values with a message. Parse nesting is bounded (JINJA_MAX_PARSE_DEPTH),
 * and a render is bounded in memory, output bytes, steps (statements run and loop turns) and
 * macro call depth (struct jinja_limits), so a runaway loop or recursion ends with -ERR_TOOBIG.
 *
 * Threads: a parsed template is read-only while rendering: any number of threads may render one
 * template at once. Each render has its own memory.
 *
 *   struct jinja_template *t;
 *   char why[256];
 *   if (jinja_parse(text, len, &t, why, sizeof why) < 0) -> template unusable: why
 *   json_t *ctx = json_pack("{s:[{s:s,s:s}],s:b}", "messages", "role", "user", "content", "Hi",
 *                           "add_generation_prompt", 1);
 *   struct jinja_render_opts o = JINJA_RENDER_OPTS_DEFAULT;
 *   o.now = time(NULL);
 *   char *out; size_t len;
 *   int rc = jinja_render(t, ctx, &o, &out, &len, why, sizeof why);   // out: malloc'd, NUL-terminated
 *   ... free(out); json_decref(ctx); jinja_free(t);
 */
#ifndef UVLM_API_JINJA_H
#define UVLM_API_JINJA_H

#include <stddef.h>
#include <stdint.h>

struct jinja_template;
struct json_t; /* jansson's */

/* Parses a template (len bytes, need not be NUL-terminated). 0 and *out (free with jinja_free),
 * or -ERR_FORMAT (why: "line 3: expected 'in' in for"), -ERR_TOOBIG, -ERR_NOMEM. */
int jinja_parse(const char *text, size_t len, struct jinja_template **out, char *why, size_t why_cap);
void jinja_free(struct jinja_template *t);

struct jinja_limits {
    size_t max_memory;     /* bytes a render may allocate (values, text) */
    size_t max_output;     /* bytes of output, and of any one macro's or block's text */
    uint64_t max_steps;    /* statements run, loop turns and calls made */
    int max_call_depth;    /* nested macro calls */
};

struct jinja_render_opts {
    int64_t now;           /* strftime_now's time, seconds since the epoch (local time zone) */
    struct jinja_limits limits;
};

#define JINJA_RENDER_OPTS_DEFAULT {0, {256u << 20, 64u << 20, 20000000, 100}}

/* Renders t with globals (a JSON object whose members become the template's variables; NULL:
 * none) into *out (malloc'd, NUL-terminated, *len bytes; the caller frees it). Returns 0, or
 * -ERR_INVAL (the template raised, or did something invalid such as adding a list to a number:
 * why says what, with the line), -ERR_TOOBIG (a limit), -ERR_NOMEM. *out is NULL on error. */
int jinja_render(const struct jinja_template *t, const struct json_t *globals,
                 const struct jinja_render_opts *opts, char **out, size_t *len, char *why, size_t why_cap);

#endif
