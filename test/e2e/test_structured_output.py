"""Structured output through the real server: grammar, json_schema and response_format.

Hundreds of seeded generations at temperature 1 on random-weight models (the shipped kjv-tiny,
and the shared qwen2 with its 151936-token vocabulary): every output ends by itself ("stop"),
parses, and validates against its schema (a validator for the keywords the schemas use, below).
Also: n choices each follow the grammar, streaming, max_tokens cutting a generation short
("length"), and 400s naming the field and where for bad grammars and schemas.
"""
import json
import re

from serving_helpers import post, shared_model, start, stream, wait_ready
from conftest import Server

# Bounded schemas: every generation must end within max_tokens.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "active": {"type": "boolean"},
        "role": {"enum": ["admin", "editor", "viewer"]},
        "nick": {"type": ["string", "null"], "maxLength": 5},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                           "city": {"type": "string", "maxLength": 6}},
            "required": ["zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "address"],
    "additionalProperties": False,
}
SCHEMAS = [
    PERSON,
    {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 1, "maxItems": 4},
    {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 999}, {"type": "string", "maxLength": 4},
               {"type": "null"}]},
    {"type": "object",
     "properties": {"day": {"type": "string", "format": "date"}, "id": {"type": "string", "format": "uuid"},
                    "ok": {"const": True}},
     "required": ["day", "id", "ok"]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9},
                                                       "y": {"type": "integer", "minimum": 0, "maximum": 9}},
                      "required": ["x", "y"]}},
     "type": "object", "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"},
                                      "label": {"type": "string", "pattern": "^[A-Z][a-z]{0,3}$"}},
     "required": ["from", "to", "label"]},
]

DATE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def resolve(schema, root):
    while "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/")
        node = root
        for part in ref[2:].split("/"):
            node = node[part]
        schema = node
    return schema


def type_ok(value, t):
    return {"string": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
            "null": value is None,
            "object": isinstance(value, dict),
            "array": isinstance(value, list)}[t]


def validate(value, schema, root, path="$"):
    """Raise AssertionError naming the path where value breaks the schema."""
    schema = resolve(schema, root)
    if schema is True or schema == {}:
        return
    if "anyOf" in schema:
        errors = []
        for sub in schema["anyOf"]:
            try:
                validate(value, sub, root, path)
                return
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError("%s matches no anyOf branch: %s" % (path, errors))
    if "const" in schema:
        assert value == schema["const"] and type(value) is type(schema["const"]), (path, value)
    if "enum" in schema:
        assert any(value == e and type(value) is type(e) for e in schema["enum"]), (path, value)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        assert any(type_ok(value, t) for t in types), (path, value, types)
    if isinstance(value, str):
        n = len(value)
        assert n >= schema.get("minLength", 0), (path, value)
        assert n <= schema.get("maxLength", n), (path, value)
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), (path, value, schema["pattern"])
        fmt = schema.get("format")
        assert fmt != "date" or DATE.match(value), (path, value)
        assert fmt != "uuid" or UUID.match(value), (path, value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        assert value >= schema.get("minimum", value), (path, value)
        assert value <= schema.get("maximum", value), (path, value)
    if isinstance(value, list):
        assert len(value) >= schema.get("minItems", 0), (path, value)
        assert len(value) <= schema.get("maxItems", len(value)), (path, value)
        for i, item in enumerate(value):
            validate(item, schema.get("items", True), root, "%s[%d]" % (path, i))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            assert key in value, (path, "missing", key)
        for key, item in value.items():
            if key in props:
                validate(item, props[key], root, "%s.%s" % (path, key))
            else:
                assert schema.get("additionalProperties", False) is not False, (path, "extra key", key)
        keys = [k for k in value if k in props]
        assert keys == [k for k in props if k in value], (path, "out of order", keys)


def check_generations(srv, schemas, seeds, path="/v1/chat/completions", n=1):
    count = 0
    for schema in schemas:
        for seed in seeds:
            body = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed, "max_tokens": 1500, "n": n,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema,
                                                                               "strict": True}}}
            if path == "/v1/chat/completions":
                body["messages"] = [{"role": "user", "content": "Answer in JSON."}]
            else:
                body["prompt"] = "And God said"
            status, out = post(srv, path, body)
            assert status == 200, out
            for choice in out["choices"]:
                text = choice["message"]["content"] if "message" in choice else choice["text"]
                assert choice["finish_reason"] == "stop", (seed, schema, text)
                value = json.loads(text)
                try:
                    validate(value, schema, schema)
                except AssertionError as e:
                    raise AssertionError("seed %d: %s\noutput: %s" % (seed, e, text))
                count += 1
    return count


def test_seeded_generations_validate_kjv():
    srv = start()
    try:
        n = check_generations(srv, SCHEMAS, range(1, 41))
        n += check_generations(srv, SCHEMAS[:2], range(100, 115), path="/v1/completions", n=3)
        assert n == 5 * 40 + 2 * 15 * 3
    finally:
        srv.stop()


def test_seeded_generations_validate_qwen2():
    model = shared_model("qwen2-q8_0.gguf")
    srv = wait_ready(Server(["--model", model]))
    try:
        assert check_generations(srv, SCHEMAS, range(1, 13)) == 5 * 12
    finally:
        srv.stop()


def test_json_object_and_grammar():
    srv = start()
    try:
        for seed in range(1, 31):
            status, out = post(srv, "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "JSON please"}], "seed": seed, "temperature": 1.0,
                "max_tokens": 60, "response_format": {"type": "json_object"}})
            assert status == 200, out
            text = out["choices"][0]["message"]["content"]
            if out["choices"][0]["finish_reason"] == "stop":
                assert isinstance(json.loads(text), dict), text
            else:  # cut by max_tokens: a prefix of an object
                assert out["choices"][0]["finish_reason"] == "length"
                assert text.lstrip().startswith("{"), text
                assert out["usage"]["completion_tokens"] == 60
        # a GBNF grammar on the native endpoint
        status, out = post(srv, "/completion", {"prompt": "And God said", "seed": 7, "n_predict": 64, "temperature": 1.0,
                                                "grammar": 'root ::= ("yes" | "no") ", " [a-z]{2,5} "."\n'})
        assert status == 200, out
        assert re.fullmatch(r"(yes|no), [a-z]{2,5}\.", out["content"]), out["content"]
        assert out["stop_type"] == "eos"
        # json_schema on the native endpoint, streamed
        events = stream(srv, "/completion", {"prompt": "In the beginning", "seed": 3, "n_predict": 400, "temperature": 1.0,
                                             "json_schema": SCHEMAS[1]})
        text = "".join(json.loads(e)["content"] for e in events if e != "[DONE]")
        validate(json.loads(text), SCHEMAS[1], SCHEMAS[1])
    finally:
        srv.stop()


def test_max_tokens_ends_an_incomplete_output_with_length():
    srv = start()
    try:
        status, out = post(srv, "/v1/completions", {
            "prompt": "And God said", "seed": 1, "max_tokens": 3, "temperature": 1.0,
            "response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}})
        assert status == 200, out
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["choices"][0]["text"].lstrip().startswith("{")
        # a stop string still ends it
        status, out = post(srv, "/v1/completions", {
            "prompt": "And God said", "seed": 1, "max_tokens": 200, "temperature": 1.0, "stop": ["\"name\""],
            "response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}})
        assert status == 200, out
        assert out["choices"][0]["finish_reason"] == "stop"
        assert out["choices"][0]["text"].strip() == "{"
    finally:
        srv.stop()


def test_bad_grammars_and_schemas_are_400s_naming_the_field():
    srv = start()
    try:
        cases = [
            ("/completion", {"prompt": "x", "grammar": "root ::= \"a\" valu\n"}, "grammar", "1:14: undefined rule 'valu'"),
            ("/completion", {"prompt": "x", "grammar": "root ::= r\nr ::= r \"x\"\n"}, "grammar", "left recursion"),
            ("/completion", {"prompt": "x", "json_schema": {"type": "object", "properties": {"a": {"not": {}}}}},
             "json_schema.properties.a.not", "keyword 'not' is not supported"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                      "response_format": {"type": "json_schema", "json_schema": {
                                          "schema": {"type": "string", "pattern": "(?=x)"}}}},
             "response_format.json_schema.schema.pattern", "lookarounds"),
            ("/v1/completions", {"prompt": "x", "response_format": {"type": "yaml"}}, "response_format.type", "yaml"),
            ("/v1/completions", {"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {"type": "null"}},
             "json_schema", "only one of"),
        ]
        for path, body, param, message in cases:
            status, out = post(srv, path, body)
            assert status == 400, (body, out)
            assert out["error"]["param"] == param, out
            assert message in out["error"]["message"], out
    finally:
        srv.stop()
