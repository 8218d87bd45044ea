/* jinja_test.c: the Jinja engine (jinja.h) construct by construct: whitespace control, statements,
 * expressions and their precedence, filters, tests, methods, globals, printing and tojson, and the
 * limits that keep any template from crashing or running forever. */
#include "test.h"

#include "api/jinja.h"
#include "common/err.h"

#include <jansson.h>
#include <stdlib.h>
#include <time.h>

/* Renders tmpl with the JSON object ctx (NULL: none): 0 and *out (freed by the next call), or the
 * error with its message in last_why. */
static char last_why[256];
static char *last_out;

static int render_full(const char *tmpl, const char *ctx, const struct jinja_render_opts *o, char **out) {
    free(last_out);
    last_out = NULL;
    *out = NULL;
    struct jinja_template *t;
    int rc = jinja_parse(tmpl, strlen(tmpl), &t, last_why, sizeof last_why);
    if (rc < 0) return rc;
    json_t *g = ctx ? json_loads(ctx, 0, NULL) : NULL;
    if (ctx && !g) {
        jinja_free(t);
        snprintf(last_why, sizeof last_why, "bad test context");
        return -ERR_FORMAT;
    }
    size_t len;
    rc = jinja_render(t, g, o, &last_out, &len, last_why, sizeof last_why);
    json_decref(g);
    jinja_free(t);
    *out = last_out;
    return rc;
}

/* The output, or "ERR: message". */
static const char *R(const char *tmpl, const char *ctx) {
    static char err[300];
    char *out;
    int rc = render_full(tmpl, ctx, NULL, &out);
    if (rc < 0) {
        snprintf(err, sizeof err, "ERR: %s", last_why);
        return err;
    }
    return out;
}

#define R_EQ(tmpl, ctx, want) CHECK_EQ_STR(R(tmpl, ctx), want)
#define R_ERR(tmpl, ctx, code) do { char *o_; CHECK_EQ_INT(render_full(tmpl, ctx, NULL, &o_), code); } while (0)

TEST(jinja_text_and_output) {
    R_EQ("", NULL, "");
    R_EQ("plain text", NULL, "plain text");
    R_EQ("a{{ 1 }}b", NULL, "a1b");
    R_EQ("{{ 'x' }}{# a comment #}{{ \"y\" }}", NULL, "xy");
    R_EQ("{{ name }}!", "{\"name\": \"Ada\"}", "Ada!");
    R_EQ("[{{ missing }}]", NULL, "[]");
    R_EQ("{{ none }} {{ None }} {{ true }} {{ False }}", NULL, "None None True False");
    R_EQ("{{ 7 }} {{ -3 }} {{ 2.5 }} {{ 1.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 1e-05 }}", NULL,
         "7 -3 2.5 1.0 1e+20 0.0001 1e-05");
    R_EQ("{{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': 1} }}", NULL, "[1, 'a', None, True] {'k': 'v', 'n': 1}");
    R_EQ("{{ [\"it's\"] }}", NULL, "[\"it's\"]");
    R_EQ("{{ 'a' 'b' }}", NULL, "ab"); /* adjacent literals join */
    R_EQ("{{ '\\n\\t\\\\\\'\\u00e9' }}", NULL, "\n\t\\'\xc3\xa9");
    R_EQ("{{ {'a': {'b': 1}} }}", NULL, "{'a': {'b': 1}}"); /* "}}" inside a dict literal */
    R_EQ("{% raw %}{{ not run }}{% endraw %}", NULL, "{{ not run }}");
}

TEST(jinja_whitespace_control) {
    /* trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it */
    R_EQ("{% if true %}\nyes\n{% endif %}\n", NULL, "yes\n");
    R_EQ("<\n    {% if true %}\n    x\n    {% endif %}\n>", NULL, "<\n    x\n>");
    R_EQ("a  {{- ' b ' -}}  c", NULL, "a b c");
    R_EQ("a\n\n{%- if true -%}\n\n b {%- endif %}", NULL, "ab");
    R_EQ("a {# c #}\nb", NULL, "a b");
    R_EQ("a\n  {#- c -#}\n  b", NULL, "ab");
    R_EQ("{{ 'x' }}\n{{ 'y' }}", NULL, "x\ny"); /* not after {{ }} */
    R_EQ("line\r\nnext\r\n", NULL, "line\nnext"); /* CRLF read as LF; one trailing newline dropped */
    R_EQ("a\n\n", NULL, "a\n");
}

TEST(jinja_set_and_scopes) {
    R_EQ("{% set x = 3 %}{{ x }}", NULL, "3");
    R_EQ("{% set a, b = [1, 2] %}{{ b }}{{ a }}", NULL, "21");
    R_EQ("{% set t = 1, 2 %}{{ t }}", NULL, "[1, 2]");
    R_EQ("{% set x %}in {{ 'block' }}{% endset %}[{{ x }}]", NULL, "[in block]");
    R_EQ("{% set x | upper | trim %} hi {% endset %}[{{ x }}]", NULL, "[HI]");
    /* a set inside a loop stays in the loop; namespaces carry values out */
    R_EQ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}", NULL, "1");
    R_EQ("{% set ns = namespace(x=1) %}{% for i in [5, 6] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}",
         NULL, "12");
    R_EQ("{% if true %}{% set y = 'set in if' %}{% endif %}{{ y }}", NULL, "set in if");
    R_EQ("{% set messages = messages[1:] %}{{ messages|length }}", "{\"messages\": [1, 2, 3]}", "2");
}

TEST(jinja_if_elif_else) {
    R_EQ("{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}", "{\"x\": 2}", "two");
    R_EQ("{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}", "{\"x\": 9}", "many");
    R_EQ("{% if [] %}t{% else %}f{% endif %}{% if {} %}t{% else %}f{% endif %}{% if '' %}t{% else %}f{% endif %}",
         NULL, "fff");
    R_EQ("{% if undefined_name %}t{% else %}f{% endif %}{% if 0.0 %}t{% else %}f{% endif %}", NULL, "ff");
    R_EQ("{{ 'y' if 1 > 0 else 'n' }}{{ 'y' if 0 > 1 else 'n' }}[{{ 'y' if false }}]", NULL, "yn[]");
}

TEST(jinja_for_loops) {
    R_EQ("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
         "{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}", NULL,
         "1032TrueFalse3,2121FalseFalse3,3210FalseTrue3,");
    R_EQ("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", NULL, "2242");
    R_EQ("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    R_EQ("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", NULL, "a=1;b=2;");
    R_EQ("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}", NULL, "ab");
    R_EQ("{% for c in 'h\xc3\xa9' %}[{{ c }}]{% endfor %}", NULL, "[h][\xc3\xa9]");
    R_EQ("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
         "{{ x }}{% endfor %}", NULL, "13");
    R_EQ("{% for x in [1, 2] %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}", NULL, "|2;1|;");
    R_EQ("{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{% endfor %}", NULL,
         "113 123 ");
    R_EQ("{% for x in undefined_list %}x{% endfor %}{% for x in none %}x{% endfor %}.", NULL, ".");
    R_EQ("{% for m in messages[::-1] %}{{ m }}{% endfor %}", "{\"messages\": [1, 2, 3]}", "321");
    R_ERR("{% for x in 5 %}{% endfor %}", NULL, -ERR_INVAL);
}

TEST(jinja_macros) {
    R_EQ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} "
         "{{ greet('Bo', '?') }} {{ greet(punct='.', name='Cy') }}", NULL, "Hi Ann! Hi Bo? Hi Cy.");
    R_EQ("{% macro f(x) %}[{{ x }}]{% endmacro %}{{ f() }}", NULL, "[]");
    R_EQ("{% set g = 'global' %}{% macro f() %}{{ g }}{% endmacro %}{{ f() }}", NULL, "global");
    R_EQ("{% macro rec(n) %}{{ n }}{% if n > 0 %}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}", NULL,
         "3210");
    R_EQ("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inner{% endcall %}", NULL, "<inner>");
    R_EQ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", NULL, "SHOUT THIS");
    R_EQ("{% generation %}kept{% endgeneration %}", NULL, "kept");
}

TEST(jinja_operators_and_precedence) {
    /* as in Jinja2: ** groups from the left and a leading minus binds tighter */
    R_EQ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}", NULL, "7 9 64 4");
    R_EQ("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 1.5 + 1 }}", NULL, "3.5 3 -4 1 2 2.5");
    R_EQ("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }}", NULL, "a1None abab [1, 2] ab");
    R_EQ("{{ 'x' + undefined_name }}|{{ undefined_name + 'y' }}", NULL, "x|y");
    R_EQ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'b' >= 'a' }}", NULL,
         "True False True True True");
    R_EQ("{{ 'el' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' in nothing }}", NULL,
         "True True True True False");
    R_EQ("{{ not true }} {{ not 1 == 2 }} {{ true and 'x' }} {{ 0 or 'y' }} {{ none or 0 }}", NULL,
         "False True x y 0");
    R_EQ("{{ 1 if not x is defined else 2 }}", NULL, "1"); /* not (x is defined) */
    R_EQ("{{ 'ab' + 'c' | upper }}", NULL, "abC");            /* filters bind tighter than + */
    R_EQ("{{ -x | abs }}", "{\"x\": 3}", "3");
    R_ERR("{{ [1] - 1 }}", NULL, -ERR_INVAL);
    R_ERR("{{ 1 / 0 }}", NULL, -ERR_INVAL);
}

TEST(jinja_access_and_slices) {
    const char *ctx = "{\"m\": {\"role\": \"user\", \"items\": 5, \"list\": [10, 20, 30, 40]}, \"s\": \"h\xc3\xa9llo\"}";
    R_EQ("{{ m.role }} {{ m['role'] }} {{ m.list[0] }} {{ m.list[-1] }} {{ m.list.1 }}", ctx, "user user 10 40 20");
    R_EQ("{{ m['items'] }}|{{ m.nope }}|{{ m.nope.deeper }}|{{ m.list[9] }}", ctx, "5|||");
    R_EQ("{{ m.list[1:3] }} {{ m.list[:2] }} {{ m.list[2:] }} {{ m.list[::2] }} {{ m.list[::-1] }} {{ m.list[-2:] }}",
         ctx, "[20, 30] [10, 20] [30, 40] [10, 30] [40, 30, 20, 10] [30, 40]");
    R_EQ("{{ m.list[3:0:-1] }} {{ m.list[5:1] }}", ctx, "[40, 30, 20] []");
    R_EQ("{{ s[1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }}", ctx, "\xc3\xa9 \xc3\xa9l oll\xc3\xa9h 5");
    R_EQ("{{ none.x }}|{{ (none)[0] }}", NULL, "|");
}

TEST(jinja_tests) {
    const char *ctx = "{\"s\": \"x\", \"n\": 3, \"f\": 1.5, \"l\": [1], \"d\": {\"a\": 1}, \"z\": null, \"b\": true}";
    R_EQ("{{ s is string }}{{ n is string }}{{ n is number }}{{ f is number }}{{ n is integer }}{{ f is float }}",
         ctx, "TrueFalseTrueTrueTrueTrue");
    R_EQ("{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}{{ s is iterable }}{{ l is sequence }}", ctx,
         "TrueFalseTrueTrueTrue");
    R_EQ("{{ z is none }}{{ s is none }}{{ q is defined }}{{ q is undefined }}{{ z is defined }}", ctx,
         "TrueFalseFalseTrueTrue");
    R_EQ("{{ b is boolean }}{{ b is true }}{{ b is false }}{{ n is odd }}{{ n is even }}{{ 9 is divisibleby 3 }}",
         ctx, "TrueTrueFalseTrueFalseTrue");
    R_EQ("{{ n is equalto 3 }}{{ n is eq(3) }}{{ n is ne 3 }}{{ n is gt 2 }}{{ n is lt 2 }}{{ s is in 'xyz' }}", ctx,
         "TrueTrueFalseTrueFalseTrue");
    R_EQ("{{ s is not string }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ range is callable }}", ctx,
         "FalseTrueTrueTrue");
    R_ERR("{{ 1 is nosuchtest }}", NULL, -ERR_INVAL);
}

TEST(jinja_filters) {
    const char *ctx = "{\"ms\": [{\"role\": \"user\", \"n\": 2}, {\"role\": \"system\", \"n\": 1},"
                      " {\"role\": \"user\", \"n\": 3}], \"d\": {\"b\": 1, \"A\": 2}}";
    R_EQ("{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}|{{ 'hello world'|title }}|"
         "{{ 'hELLO'|capitalize }}", NULL, "x|a|ABab|Hello World|Hello");
    R_EQ("{{ ms|length }}{{ 'h\xc3\xa9'|length }}{{ d|count }}{{ nothing|length }}", ctx, "3220");
    R_EQ("{{ ms|selectattr('role', 'equalto', 'user')|list|length }}"
         "{{ ms|rejectattr('role', 'equalto', 'user')|map(attribute='n')|list }}", ctx, "2[1]");
    R_EQ("{{ [0, 1, 2, '']|select|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2]|reject('odd')|list }}",
         NULL, "[1, 2] [1, 3] [2]");
    R_EQ("{{ ms|map(attribute='role')|join(', ') }}|{{ ['a', 'b']|join }}|{{ ms|join('-', attribute='n') }}", ctx,
         "user, system, user|ab|2-1-3");
    R_EQ("{{ ['a', 'b']|map('upper')|list }}", NULL, "['A', 'B']");
    R_EQ("{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(reverse=true) }}", ctx,
         "[['b', 1], ['A', 2]] [['A', 2], ['b', 1]] [['b', 1], ['A', 2]]");
    R_EQ("{{ x|default('dflt') }} {{ none|default('n') }} {{ ''|default('e') }} {{ ''|default('e', true) }} "
         "{{ 0|d(5) }}", NULL, "dflt n  e 0");
    R_EQ("{{ '42'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int(7) }} {{ 2|float }} {{ '2.5'|float }} {{ 3.9|int }}", NULL,
         "43 3 7 2.0 2.5 3");
    R_EQ("{{ 5|string ~ 'x' }} {{ [1]|string }} {{ 'a<b'|e }} {{ 'x'|safe }}", NULL, "5x [1] a&lt;b x");
    R_EQ("{{ 'aXbXc'|replace('X', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '.') }}", NULL,
         "a-b-c bba .a.b.");
    R_EQ("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ms|sort(attribute='n')|map(attribute='n')|list }}"
         " {{ [1, 2]|sort(reverse=true) }}", ctx, "[1, 2, 3] ['A', 'b', 'c'] [1, 2, 3] [2, 1]");
    R_EQ("{{ [1, 2, 1, 3]|unique|list }} {{ ['a', 'A']|unique|list }} {{ [1, 2]|first }}{{ [1, 2]|last }}"
         "{{ 'ab'|first }} {{ [2, 9, 4]|max }}{{ [2, 9, 4]|min }} {{ [1, 2]|sum }} {{ [1, 2]|reverse|list }}"
         " {{ 'ab'|reverse }}", NULL, "[1, 2, 3] ['a'] 12a 92 3 [2, 1] ba");
    R_EQ("{{ 'one two  three'|wordcount }} {{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }}", NULL,
         "3 3 2.57 2.0");
    R_EQ("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n'|indent }}", NULL,
         "a\n  b\n\n  c|  a\n  b|a\n");
    R_EQ("{{ '%s is %d'|format('x', 3) }} {{ 'v=%.1f'|format(2.25) }}", NULL, "x is 3 v=2.2");
    R_EQ("{{ ('{\"a\": [1, 2]}'|from_json).a[1] }}", NULL, "2");
    R_ERR("{{ 'x'|nosuchfilter }}", NULL, -ERR_INVAL);
    R_ERR("{{ '{bad'|from_json }}", NULL, -ERR_INVAL);
}

TEST(jinja_tojson) {
    const char *ctx = "{\"t\": {\"type\": \"function\", \"n\": 1, \"f\": 2.5, \"b\": false, \"z\": null,"
                      " \"l\": [1, \"x\"], \"e\": [], \"o\": {}, \"s\": \"a\\\"b\\n\\u00e9\\u0001<>\"}}";
    /* keys in insertion order, Python's separators, non-ASCII kept, no HTML escaping */
    R_EQ("{{ t|tojson }}", ctx,
         "{\"type\": \"function\", \"n\": 1, \"f\": 2.5, \"b\": false, \"z\": null, \"l\": [1, \"x\"], \"e\": [], "
         "\"o\": {}, \"s\": \"a\\\"b\\n\xc3\xa9\\u0001<>\"}");
    R_EQ("{{ {'a': [1, {'b': 2}], 'c': {}}|tojson(indent=2) }}", NULL,
         "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {}\n}");
    R_EQ("{{ {'a': 1, 'b': 2}|tojson(indent=1, separators=[',', ':']) }}", NULL, "{\n \"a\":1,\n \"b\":2\n}");
    R_EQ("{{ '\xc3\xa9\xf0\x9f\x98\x80'|tojson(ensure_ascii=true) }}", NULL, "\"\\u00e9\\ud83d\\ude00\"");
    R_EQ("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ 'x'|tojson }} {{ 1.0|tojson }} {{ none|tojson }}", NULL,
         "{\"a\": 2, \"b\": 1} \"x\" 1.0 null");
}

TEST(jinja_string_and_container_methods) {
    R_EQ("{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}", NULL, "a b|axx|xxa");
    R_EQ("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
         NULL, "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c']");
    R_EQ("{{ 'x<think>y</think>z'.split('</think>')[-1] }} {{ 'a\\nb\\r\\nc'.splitlines() }}", NULL,
         "z ['a', 'b', 'c']");
    R_EQ("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}", NULL,
         "TrueTrueTrue");
    R_EQ("{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'a b'.title() }}{{ 'aB'.capitalize() }}", NULL, "ABabA BAb");
    R_EQ("{{ 'aXa'.replace('a', 'b') }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }}",
         NULL, "bXb 2 3 2");
    R_EQ("{{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}{n}'.format('a', n='b') }}", NULL,
         "a-b 1 and x aab");
    R_EQ("{{ '12'.isdigit() }}{{ 'a1'.isalpha() }}{{ ' '.isspace() }}", NULL, "TrueFalseTrue");
    R_EQ("{% set l = [1] %}{% set _ = l.append(2) %}{% do l.extend([3, 4]) %}{{ l.pop() }}{{ l.pop(0) }}{{ l }}",
         NULL, "41[2, 3]");
    R_EQ("{% set l = [3, 1] %}{% do l.insert(1, 9) %}{{ l }} {{ l.index(9) }} {{ l.count(3) }}", NULL,
         "[3, 9, 1] 1 1");
    R_EQ("{% set d = {'a': 1} %}{{ d.get('a') }}{{ d.get('b') }}{{ d.get('b', 7) }} {{ d.keys() }} {{ d.values() }} "
         "{{ d.items() }}", NULL, "1None7 ['a'] [1] [['a', 1]]");
    R_EQ("{% set d = {'a': 1} %}{% do d.update(b=2) %}{{ d }} {{ d.pop('a') }} {{ d }}", NULL,
         "{'a': 1, 'b': 2} 1 {'b': 2}");
    /* a dict key named like a method: attribute access finds the method, [] the key */
    R_EQ("{{ d['items'] }} {{ d.items is callable }}", "{\"d\": {\"items\": 5}}", "5 True");
}

TEST(jinja_globals) {
    R_EQ("{{ range(3)|list }} {{ range(1, 4) }} {{ range(5, 0, -2) }} {{ range(0) }}", NULL,
         "[0, 1, 2] [1, 2, 3] [5, 3, 1] []");
    R_EQ("{{ dict(a=1, b='x') }} {{ namespace(v=1).v }}", NULL, "{'a': 1, 'b': 'x'} 1");
    char *out;
    CHECK_EQ_INT(render_full("a{{ raise_exception('Roles must alternate') }}", NULL, NULL, &out), -ERR_INVAL);
    CHECK(strstr(last_why, "Roles must alternate"));
    /* an empty or undefined message still gives the error a message */
    CHECK_EQ_INT(render_full("{{ raise_exception('') }}", NULL, NULL, &out), -ERR_INVAL);
    CHECK(strstr(last_why, "raise_exception"));
    CHECK_EQ_INT(render_full("{{ raise_exception('x'.nothing) }}", NULL, NULL, &out), -ERR_INVAL);
    CHECK(strstr(last_why, "raise_exception"));
    /* strftime_now reads the render's clock (local time) */
    struct jinja_render_opts o = JINJA_RENDER_OPTS_DEFAULT;
    o.now = 1795694400; /* 2026-11-26 12:00 UTC */
    time_t now = (time_t)o.now;
    struct tm tm;
    char want[64];
    localtime_r(&now, &tm);
    strftime(want, sizeof want, "%Y-%m-%d|%d %b %Y", &tm);
    CHECK_EQ_INT(render_full("{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%d %b %Y') }}", NULL, &o, &out), 0);
    CHECK_EQ_STR(out, want);
    R_EQ("{% if strftime_now is defined %}d{% endif %}", NULL, "d");
}

TEST(jinja_parse_errors_name_the_line) {
    struct jinja_template *tp;
    char why[256];
    static const char *const bad[] = {
        "{% if x %}no end", "{% for x %}{% endfor %}", "{{ 1 + }}", "{{ (1 }}", "{% endif %}",
        "{% nosuch %}", "{# unclosed", "{{ 'unterminated }}", "{% for x in y %}{% else %}", "{{ a.1b }}",
        "{% macro m( %}{% endmacro %}", "{{ f(a=1, 2) }}", "{% set %}", "{{", "{% raw %}x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = jinja_parse(bad[i], strlen(bad[i]), &tp, why, sizeof why);
        if (rc != -ERR_FORMAT) fprintf(stderr, "  template %zu parsed: %s\n", i, bad[i]);
        CHECK_EQ_INT(rc, -ERR_FORMAT);
        CHECK(strstr(why, "line "));
    }
    CHECK_EQ_INT(jinja_parse("a\nb\n{{ ) }}", 11, &tp, why, sizeof why), -ERR_FORMAT);
    CHECK(strstr(why, "line 3"));
}

TEST(jinja_limits_end_runaway_templates) {
    struct jinja_render_opts o = JINJA_RENDER_OPTS_DEFAULT;
    char *out;
    /* a loop that would run for ages hits the step limit */
    o.limits.max_steps = 100000;
    CHECK_EQ_INT(render_full("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                             NULL, &o, &out), -ERR_TOOBIG);
    /* unbounded recursion hits the call depth */
    o = (struct jinja_render_opts)JINJA_RENDER_OPTS_DEFAULT;
    CHECK_EQ_INT(render_full("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, &o, &out), -ERR_TOOBIG);
    /* output past the cap */
    o.limits.max_output = 1000;
    CHECK_EQ_INT(render_full("{% for i in range(2000) %}x{% endfor %}", NULL, &o, &out), -ERR_TOOBIG);
    /* memory past the cap: a string doubling itself */
    o = (struct jinja_render_opts)JINJA_RENDER_OPTS_DEFAULT;
    o.limits.max_memory = 1 << 20;
    CHECK_EQ_INT(render_full("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                             "{% endfor %}", NULL, &o, &out), -ERR_TOOBIG);
    /* a list that holds itself cannot be printed forever */
    CHECK_EQ_INT(render_full("{% set l = [] %}{% do l.append(l) %}{{ l }}", NULL, NULL, &out), -ERR_TOOBIG);
    CHECK_EQ_INT(render_full("{% set l = [] %}{% do l.append(l) %}{{ l|tojson }}", NULL, NULL, &out), -ERR_TOOBIG);
    CHECK_EQ_INT(render_full("{{ range(10**12) }}", NULL, NULL, &out), -ERR_TOOBIG);
    /* nesting past the parser's depth is a parse error, not a stack overflow */
    char deep[4096];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int i = 0; i < 1000; i++) deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 1000; i++) deep[n++] = ')';
    n += (size_t)snprintf(deep + n, sizeof deep - n, " }}");
    CHECK_EQ_INT(render_full(deep, NULL, NULL, &out), -ERR_FORMAT);
    /* long chains build deep trees without nesting: rendering them stops, not the stack */
    static char chain[200000];
    n = (size_t)snprintf(chain, sizeof chain, "{{ 1");
    for (int i = 0; i < 20000; i++) n += (size_t)snprintf(chain + n, sizeof chain - n, " + 1");
    snprintf(chain + n, sizeof chain - n, " }}");
    CHECK_EQ_INT(render_full(chain, NULL, NULL, &out), -ERR_TOOBIG);
    n = (size_t)snprintf(chain, sizeof chain, "%s", "{% if false %}");
    for (int i = 0; i < 5000; i++) n += (size_t)snprintf(chain + n, sizeof chain - n, "%s", "{% elif false %}");
    snprintf(chain + n, sizeof chain - n, "%s", "{% endif %}");
    CHECK_EQ_INT(render_full(chain, NULL, NULL, &out), -ERR_FORMAT);
    n = (size_t)snprintf(chain, sizeof chain, "%s", "{% if false %}");
    for (int i = 0; i < 100; i++) n += (size_t)snprintf(chain + n, sizeof chain - n, "%s", "{% elif false %}");
    snprintf(chain + n, sizeof chain - n, "%s", "{% else %}ok{% endif %}");
    CHECK_EQ_INT(render_full(chain, NULL, NULL, &out), 0);
    CHECK_EQ_STR(out, "ok");
}

TEST(jinja_context_values_keep_json_types) {
    R_EQ("{{ n + 1 }} {{ f * 2 }} {{ b }} {{ z }} {{ s }} {{ a[1].k }}",
         "{\"n\": 41, \"f\": 1.25, \"b\": true, \"z\": null, \"s\": \"t\", \"a\": [0, {\"k\": \"v\"}]}",
         "42 2.5 True None t v");
    /* a template is read-only while rendering: the same one renders twice alike */
    struct jinja_template *tp;
    char why[128], *a, *b;
    size_t la, lb;
    const char *src = "{% set l = [] %}{% do l.append(1) %}{{ l }}";
    CHECK_EQ_INT(jinja_parse(src, strlen(src), &tp, why, sizeof why), 0);
    CHECK_EQ_INT(jinja_render(tp, NULL, NULL, &a, &la, why, sizeof why), 0);
    CHECK_EQ_INT(jinja_render(tp, NULL, NULL, &b, &lb, why, sizeof why), 0);
    CHECK_EQ_STR(a, "[1]");
    CHECK_EQ_STR(b, "[1]");
    free(a);
    free(b);
    jinja_free(tp);
}
