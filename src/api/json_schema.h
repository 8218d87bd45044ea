/* json_schema.h: JSON Schema -> GBNF (sampler/grammar.h's dialect), for response_format and
 * json_schema on the completion endpoints. The output is whitespace-flexible JSON (at most one
 * space, or a newline and up to 20 spaces or tabs, between tokens) whose values validate against
 * the schema.
 *
 * Honoured: type (one or a list; "null" in the list or "nullable": true makes a type nullable);
 * enum, const; objects: properties in the schema's order, required, additionalProperties
 * (false, true or a schema; absent: no properties beyond those listed, as llama.cpp does),
 * minProperties/maxProperties when the listed properties already satisfy them; arrays: items,
 * prefixItems (all present, in order; draft-7's items array too), additionalItems false,
 * minItems, maxItems (up to 10000); strings: minLength, maxLength, pattern (regular expressions:
 * literals, escapes \d \w \s \D \W \S, classes, '.', groups, '|', quantifiers; a pattern without
 * ^ or $ matches inside a longer string), format date, time, date-time, uuid; integers:
 * minimum, maximum, exclusiveMinimum, exclusiveMaximum (up to 15 digits); numbers: minimum 0 or
 * exclusiveMinimum 0; boolean; null; anyOf and oneOf (as alternatives); allOf of object schemas
 * (their properties and required merged); $ref to "#", "#/$defs/NAME" or "#/definitions/NAME",
 * recursion included; the schemas true and {} (any JSON value). Annotations are ignored: title,
 * description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly,
 * discriminator. Anything else (not, if/then/else, patternProperties, uniqueItems, multipleOf,
 * an unknown format or keyword, ...) is refused, naming it: never silently ignored.
 *
 * Integers and numbers have at most 16 digits before the point and 16 after; unbounded strings
 * and arrays stay unbounded (a request's max_tokens still ends the generation).
 *
 *   char *gbnf, where[96], why[160];
 *   if (json_schema_to_grammar(schema, &gbnf, where, sizeof where, why, sizeof why) < 0)
 *       ... 400: where is the schema location ("properties.tags.items"), why what failed ...
 *   ... model_engine_grammar_get(e, gbnf, strlen(gbnf), ...) ...; free(gbnf);
 */
#ifndef UVLM_API_JSON_SCHEMA_H
#define UVLM_API_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

/* GBNF of schema into *out (malloc'd, NUL-terminated; the caller frees it). 0, -ERR_INVAL with
 * where (the schema location, "" for its root) and why filled, or -ERR_NOMEM. */
int json_schema_to_grammar(const json_t *schema, char **out, char *where, size_t where_len, char *why, size_t why_len);

/* GBNF of any JSON object (response_format {"type": "json_object"}): *out malloc'd. 0, -ERR_NOMEM. */
int json_schema_object_grammar(char **out);

#endif
